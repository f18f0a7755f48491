"""The load generator's exception class."""

from benchmarks.errors import BenchmarkError


class LoadgenError(BenchmarkError):
    """A load specification or a target the load generator cannot work with."""
