"""The metrics package's exception class."""

from benchmarks.errors import BenchmarkError


class MetricsError(BenchmarkError):
    """A Prometheus or /metrics endpoint that cannot be read or answers something unusable."""
