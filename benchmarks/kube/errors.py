"""The lab benchmarks' exception class."""

from benchmarks.errors import BenchmarkError


class LabError(BenchmarkError):
    """The stack, its outputs or a recording cannot support this lab's measurement; says what and why."""
