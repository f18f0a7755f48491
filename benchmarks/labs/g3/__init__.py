"""g3: gang scheduling for real. Three multi-worker jobs (JobSets) that each need all their workers
before any work starts, run twice on the same GPU node: with Kueue (two admitted whole, the third with
no pod until one finishes) and without it (the default scheduler places pods, not jobs: partly placed
jobs holding GPUs they cannot use, a deadlock until the workers' rendezvous timeout).

Stages: workloads (outputs -> objects) -> runs (live: both runs, recorded) -> placement and admission
(pure functions of the recording) -> result (checks) -> report (Markdown and one plot).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from benchmarks.kube.stack import gpu_placement
from benchmarks.labs import live
from benchmarks.labs.g3.report import plots, report_body
from benchmarks.labs.g3.result import G3Result, measure
from benchmarks.labs.g3.runs import record
from benchmarks.labs.g3.workloads import LAB, build_workloads, check_sizes, params, pool_gpus

TITLE = "Gang scheduling: Kueue against the default scheduler"
# Run A waits for a GPU node from zero, then the third job runs after the first two.
DEFAULT_TIMEOUT_S = 1800.0

__all__ = ["LAB", "TITLE", "DEFAULT_TIMEOUT_S", "G3Result", "add_arguments", "build_workloads", "check_outputs", "main",
           "measure", "plots", "record", "report_body", "run"]  # fmt: skip


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rendezvous-timeout", type=_seconds, default=90.0,
                        help="seconds a worker waits at the barrier before it gives up (default %(default)s)")  # fmt: skip
    parser.add_argument("--work-seconds", type=_seconds, default=20.0,
                        help="seconds each worker holds its GPU once its job started (default %(default)s)")  # fmt: skip


def check_outputs(outputs: dict[str, Any]) -> None:
    gpu_placement(outputs)
    check_sizes(params(outputs), pool_gpus(outputs))


def run(args: argparse.Namespace) -> int:
    return live.run(sys.modules[__name__], args)


def main(argv: list[str] | None = None) -> int:
    return live.main(sys.modules[__name__], argv)
