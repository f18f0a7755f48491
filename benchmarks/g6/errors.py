"""Lab g6's exception class."""

from benchmarks.errors import BenchmarkError


class G6Error(BenchmarkError):
    """A g6 run that cannot go ahead as asked: conflicting options, or a stack that lacks g6 outputs."""
