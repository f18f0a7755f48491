"""The metrics package's exception class."""


class MetricsError(Exception):
    """A Prometheus or /metrics endpoint that cannot be read or answers something unusable."""
