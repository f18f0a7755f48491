"""Lab g6: vLLM serving measured as TTFT against throughput over max-num-seqs x concurrency.

Stages: config (parameters and stack outputs) -> targets (sim, URL or stack) -> sweep (points with
server metrics) -> analysis (what bounds each point) -> result.json -> report.md and plots.
"""

from benchmarks.g6.cli import run as main

__all__ = ["main"]
