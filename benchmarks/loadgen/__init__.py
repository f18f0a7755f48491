"""Load generator: a stdlib-only core (core/: plan and arrivals, HTTP framing, workers, decoding, its output
format, running a point; shipped as one zip archive) run in
its own process, here or in the cluster (runner.py), and the statistics of its records (stats.py).

Stages: spec (what one point is) -> runner (where the core runs) -> core (timers, HTTP/SSE, records)
-> stats (collector).
"""

from benchmarks.loadgen.core import LoadRun, Record
from benchmarks.loadgen.errors import LoadgenError
from benchmarks.loadgen.runner import LocalRunner, PointRunner, run_load
from benchmarks.loadgen.spec import LoadSpec, Slo, Timeouts
from benchmarks.loadgen.stats import Goodput, LagSummary, PointStats, Summary, summarize

__all__ = [
    "Goodput",
    "LagSummary",
    "LoadRun",
    "LoadSpec",
    "LoadgenError",
    "LocalRunner",
    "PointRunner",
    "PointStats",
    "Record",
    "Slo",
    "Summary",
    "Timeouts",
    "run_load",
    "summarize",
]
