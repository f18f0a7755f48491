"""`--experiment prefix` as a g6 run drives it: requests sharing a system prompt, with vLLM's prefix cache
on and off (benchmarks.g6.experiments.prefix), its report and plots."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from benchmarks.g6.config import LAB, G6Params
from benchmarks.g6.errors import G6Error
from benchmarks.g6.experiment import Drive, Ending, Experiment, Written, one_server
from benchmarks.g6.experiments.prefix import (
    PrefixOutcome,
    PrefixParams,
    PrefixResult,
    prefix_result,
    prefix_spec,
    run_prefix,
)
from benchmarks.g6.experiments.prefix_report import render_prefix_plots, render_prefix_report
from benchmarks.g6.flags import whole
from benchmarks.g6.invocation import Invocation
from benchmarks.g6.oracle import HOST_BANDS, Check, figure, figures
from benchmarks.g6.targets import Demand
from benchmarks.loadgen import LoadSpec

DEFAULTS = PrefixParams()


class Prefix(Experiment[PrefixParams, PrefixOutcome]):
    name = "prefix"
    folder = f"{LAB}-prefix"
    result_model = PrefixResult
    own_rate = True

    def add_flags(self, group: argparse._ArgumentGroup) -> None:
        group.add_argument("--prefix-len", type=whole(16),
                           help=f"tokens of the prefix every prompt of a group starts with, before its "
                           f"--input-len (default {DEFAULTS.prefix_len})")  # fmt: skip
        group.add_argument("--prefix-groups", type=whole(1),
                           help=f"groups of requests, each with its own prefix (default {DEFAULTS.groups})")

    def parameters(self, given: dict[str, Any], params: G6Params, inv: Invocation) -> PrefixParams:
        fields = {"prefix_len": given.get("prefix_len"), "groups": given.get("prefix_groups"),
                  "rate": inv.rate[0] if inv.rate else None}  # fmt: skip
        return PrefixParams(**{name: value for name, value in fields.items() if value is not None})

    def check(self, inv: Invocation) -> None:
        if inv.concurrency:
            raise G6Error("--experiment prefix offers both arms one open-loop rate: give --rate R instead of --concurrency")
        if inv.rate and len(inv.rate) > 1:
            raise G6Error(f"--experiment prefix offers both arms one rate: give one --rate value, not {len(inv.rate)}")
        one_server(self.name, inv)

    def demand(self, params: G6Params, own: PrefixParams) -> Demand:
        need = super().demand(params, own)
        return Demand(need.model, own.prefix_len + need.tokens, f"--prefix-len {own.prefix_len} + {need.asked}")

    def planned(self, params: G6Params, own: PrefixParams, base_url: str) -> list[LoadSpec]:
        return [prefix_spec(params, own, base_url, run) for _ in own.arms for run in range(params.repeats)]

    def outcome(self, own: PrefixParams) -> PrefixOutcome:
        return PrefixOutcome()

    def run(self, drive: Drive, own: PrefixParams, outcome: PrefixOutcome) -> None:
        run_prefix(drive.params, own, drive.target, drive.how, outcome)

    def write(self, ending: Ending, own: PrefixParams, outcome: PrefixOutcome, folder: Path) -> Written:
        result = prefix_result(ending.meta, ending.params, own, outcome, ending.price, ending.cost)
        result = result.model_copy(update={"waited": ending.waited})
        render_prefix_plots(result, folder)
        complete = all(run.point.completed for arm in result.arms for run in arm.runs)
        return Written(result, render_prefix_report(result), complete)

    def held(self, shipped: PrefixResult, oracle: PrefixResult) -> list[Check]:
        out: list[Check] = []
        for a in shipped.arms:
            b = None if a.prefix_caching is None else oracle.arm(a.prefix_caching)
            if b is not None:
                name = f"caching {'on' if a.prefix_caching else 'off'}"
                out += figures(name, a.figures, b.figures)
                out += figure(f"{name} hit rate", a.prefix_cache_hit_rate, b.prefix_cache_hit_rate)
        out += figure("TTFT p50 saved ms", shipped.ttft_p50_saved_ms, oracle.ttft_p50_saved_ms,
                      HOST_BANDS["ttft_p50_saved_ms"])  # fmt: skip
        return out
