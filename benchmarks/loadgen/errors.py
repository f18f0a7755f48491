"""The load generator's exception class."""


class LoadgenError(Exception):
    """A load specification or a target the load generator cannot work with."""
