"""Load generator: OpenAI-compatible streaming backend, send-time schedules, asyncio runner, statistics.

Stages: backend (HTTP/SSE) -> timers (when to send) -> runner (stop conditions) -> stats (collector).
"""

from benchmarks.loadgen.errors import LoadgenError
from benchmarks.loadgen.runner import LoadRun, run_load
from benchmarks.loadgen.spec import LoadSpec, Slo, Timeouts
from benchmarks.loadgen.stats import Goodput, LagSummary, PointStats, Summary, summarize

__all__ = [
    "Goodput",
    "LagSummary",
    "LoadRun",
    "LoadSpec",
    "LoadgenError",
    "PointStats",
    "Slo",
    "Summary",
    "Timeouts",
    "run_load",
    "summarize",
]
