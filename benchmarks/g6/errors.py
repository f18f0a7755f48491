"""Lab g6's exception class."""


class G6Error(Exception):
    """A g6 run that cannot go ahead as asked: conflicting options, or a stack that lacks g6 outputs."""
