"""The harness's exception class."""


class HarnessError(Exception):
    """Stack outputs, results folders or pulumi calls the harness cannot work with."""
