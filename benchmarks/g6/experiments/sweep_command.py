"""`--experiment sweep` (the default) as a g6 run drives it: max-num-seqs x load, TTFT against throughput
(benchmarks.g6.sweep), its report and plots."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.g6.analysis import predict, sizing_gap
from benchmarks.g6.config import LAB, G6Outputs, G6Params
from benchmarks.g6.experiment import Drive, Ending, Experiment, Written
from benchmarks.g6.invocation import Invocation
from benchmarks.g6.oracle import Check, figures
from benchmarks.g6.plots import render_plots
from benchmarks.g6.report import render_report
from benchmarks.g6.result import G6Result, sweep_figures
from benchmarks.g6.sweep import SweepOutcome, load_specs, run_sweep
from benchmarks.loadgen import LoadSpec

DEFAULT_CONCURRENCY = (1, 8, 32)


class Sweep(Experiment[None, SweepOutcome]):
    name = "sweep"
    folder = LAB
    result_model = G6Result
    grid = True

    def parameters(self, given: dict[str, Any], params: G6Params, inv: Invocation) -> None:
        return None

    def check(self, inv: Invocation) -> None:
        """Any load, closed or open loop; several max-num-seqs where the server can change (G6Params)."""

    def default_concurrency(self, bench: G6Outputs) -> list[int]:
        return bench.sweep.concurrency or list(DEFAULT_CONCURRENCY)

    def planned(self, params: G6Params, own: None, base_url: str) -> list[LoadSpec]:
        return [spec for mns in params.max_num_seqs for repeat in range(params.repeats)
                for spec in load_specs(params, base_url, "max-num-seqs", mns, "repeat", repeat)]  # fmt: skip

    def outcome(self, own: None) -> SweepOutcome:
        return SweepOutcome()

    def run(self, drive: Drive, own: None, outcome: SweepOutcome) -> None:
        run_sweep(drive.params, drive.target, partial(predict, drive.params), drive.how, outcome)

    def write(self, ending: Ending, own: None, outcome: SweepOutcome, folder: Path) -> Written:
        params = ending.params
        result = G6Result(
            meta=ending.meta,
            params=params,
            sizing=[s for mns in params.max_num_seqs if (s := predict(params, mns)) is not None],
            sizing_gap=sizing_gap(params),
            points=outcome.points,
            across=sweep_figures(outcome.points),
            cost=ending.cost,
            gpu_price=ending.price,
            waited=ending.waited,
        )
        render_plots(result, folder)
        return Written(result, render_report(result), all(p.completed for p in outcome.points))

    def held(self, shipped: G6Result, oracle: G6Result) -> list[Check]:
        theirs = {(f.max_num_seqs, f.concurrency, f.rate): f for f in oracle.across}
        out: list[Check] = []
        for f in shipped.across:
            if (o := theirs.get((f.max_num_seqs, f.concurrency, f.rate))) is not None:
                load = f"c={f.concurrency}" if f.concurrency is not None else f"{f.rate:g}/s"
                out += figures(f"max-num-seqs {f.max_num_seqs} {load}", f, o)
        return out
