"""The lab benchmarks' exception class."""


class LabError(Exception):
    """The stack, its outputs or a recording cannot support this lab's measurement; says what and why."""
