"""The harness's exception class."""

from benchmarks.errors import BenchmarkError


class HarnessError(BenchmarkError):
    """Stack outputs, results folders or pulumi calls the harness cannot work with."""
