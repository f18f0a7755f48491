"""`--experiment saturation` as a g6 run drives it: the open-loop rate the server holds within the SLOs,
searched for (benchmarks.g6.experiments.saturation), its report and plots."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from benchmarks.g6.config import LAB, G6Params
from benchmarks.g6.errors import G6Error
from benchmarks.g6.experiment import Drive, Ending, Experiment, Written, one_server
from benchmarks.g6.experiments.saturation import (
    DEFAULT_START_RATE,
    SaturationOutcome,
    SaturationParams,
    SaturationResult,
    point_spec,
    run_saturation,
    saturation_result,
)
from benchmarks.g6.experiments.saturation_report import render_saturation_plots, render_saturation_report
from benchmarks.g6.flags import positive, whole
from benchmarks.g6.invocation import Invocation
from benchmarks.g6.oracle import HOST_BANDS, Check, figure, search
from benchmarks.loadgen import LoadSpec

DEFAULTS = SaturationParams()


class Saturation(Experiment[SaturationParams, SaturationOutcome]):
    name = "saturation"
    folder = f"{LAB}-saturation"
    result_model = SaturationResult

    def add_flags(self, group: argparse._ArgumentGroup) -> None:
        group.add_argument("--start-rate", type=positive,
                           help=f"the first offered rate, requests/s of the GPU (default "
                           f"{DEFAULT_START_RATE:g}); then doubling until a rate fails, and a bisection")  # fmt: skip
        group.add_argument("--max-points", type=whole(2),
                           help=f"at most this many runs, located and held (default {DEFAULTS.max_points})")
        group.add_argument("--point-seconds", type=positive,
                           help=f"seconds of arrivals each located run sends at least (default "
                           f"{DEFAULTS.point_seconds:g}; and at least {DEFAULTS.e2e_multiple:g} E2E p99 of the rate "
                           "below it)")  # fmt: skip
        group.add_argument("--hold-seconds", type=positive,
                           help=f"seconds of arrivals each held run sends at least (default "
                           f"{DEFAULTS.hold_seconds:g}: --repeats of them pooled hold about 20,000 requests at 30 "
                           "requests/s, 200 above the p99)")  # fmt: skip

    def parameters(self, given: dict[str, Any], params: G6Params, inv: Invocation) -> SaturationParams:
        return SaturationParams(seeds=params.repeats, **given)

    def check(self, inv: Invocation) -> None:
        if inv.rate or inv.concurrency:
            raise G6Error("--experiment saturation chooses its own open-loop rates: drop --rate/--concurrency "
                          "(--start-rate sets the first)")  # fmt: skip
        one_server(self.name, inv)

    def planned(self, params: G6Params, own: SaturationParams, base_url: str) -> list[LoadSpec]:
        return [point_spec(params, base_url, own.start_rate, own.point_seconds)]

    def outcome(self, own: SaturationParams) -> SaturationOutcome:
        return SaturationOutcome()

    def run(self, drive: Drive, own: SaturationParams, outcome: SaturationOutcome) -> None:
        run_saturation(drive.params, own, drive.target, drive.how, outcome)

    def write(self, ending: Ending, own: SaturationParams, outcome: SaturationOutcome, folder: Path) -> Written:
        result = saturation_result(ending.meta, ending.params, own, outcome, ending.price, ending.cost)
        result = result.model_copy(update={"waited": ending.waited})
        render_saturation_plots(result, folder)
        complete = all(run.point.completed for x in result.points for run in x.runs)
        return Written(result, render_saturation_report(result), complete)

    def held(self, shipped: SaturationResult, oracle: SaturationResult) -> list[Check]:
        out = list(search("saturation rate (offered req/s)", shipped.saturation_rate, oracle.saturation_rate,
                          shipped.saturation.tolerance))  # fmt: skip
        theirs = {(p.stage, p.rate): p for p in oracle.points}
        for p in shipped.points:
            if (o := theirs.get((p.stage, p.rate))) is not None:
                for name in ("served", "output_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms"):
                    out += figure(f"{p.stage} {p.rate:g} req/s {name}", getattr(p, name), getattr(o, name),
                                  HOST_BANDS.get(name))  # fmt: skip
        return out
