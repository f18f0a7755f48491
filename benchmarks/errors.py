"""The measurement kit's one exception root. Every error the kit raises on purpose derives from it, so a
command line catches this one class and prints its one line. Errors of the layers below (the stack's
config, its output folders, the serving catalogue) keep their own roots and are caught beside it. The load
generator's core (benchmarks/loadgen/core/) runs alone in a pod with the standard library only: its own
errors are translated into LoadgenError where its output is read (benchmarks.loadgen.runner)."""


class BenchmarkError(Exception):
    """What the kit could not do as asked; the message says what, where and why."""
