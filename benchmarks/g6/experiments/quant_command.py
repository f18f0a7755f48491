"""`--experiment quant` as a g6 run drives it: what quantized variants buy in memory and throughput and cost
in quality (benchmarks.g6.experiments.quant), its report and plots."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from benchmarks.g6.config import LAB, G6Params
from benchmarks.g6.errors import G6Error
from benchmarks.g6.experiment import Drive, Ending, Experiment, Written
from benchmarks.g6.experiments.prompts import PROMPTS
from benchmarks.g6.experiments.quant import (
    CHECKPOINTS,
    DEFAULT_CONCURRENCY,
    DEFAULT_VARIANTS,
    QuantOutcome,
    QuantParams,
    QuantResult,
    planned_specs,
    quant_result,
    run_quant,
)
from benchmarks.g6.experiments.quant_report import render_quant_plots, render_quant_report
from benchmarks.g6.flags import whole
from benchmarks.g6.invocation import Invocation
from benchmarks.g6.oracle import Check, figures
from benchmarks.loadgen import LoadSpec

QUALITY = QuantParams.model_fields


def _variants(text: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [n for n in names if n not in CHECKPOINTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown variant(s) {unknown or text!r}; allowed: {', '.join(CHECKPOINTS)}")
    return names


def _quality_prompts(text: str) -> int:
    count = whole(1)(text)
    if count > len(PROMPTS):
        raise argparse.ArgumentTypeError(f"the project's prompt set has {len(PROMPTS)} prompts, got {count}")
    return count


class Quant(Experiment[QuantParams, QuantOutcome]):
    name = "quant"
    folder = f"{LAB}-quant"
    result_model = QuantResult
    concurrency = DEFAULT_CONCURRENCY

    def add_flags(self, group: argparse._ArgumentGroup) -> None:
        group.add_argument("--variants", type=_variants, help=f"comma-separated, the first is the baseline "
                           f"(default {','.join(DEFAULT_VARIANTS)}; allowed: {', '.join(CHECKPOINTS)})")  # fmt: skip
        group.add_argument("--quality-prompts", type=_quality_prompts,
                           help=f"prompts of the quality score (default {QUALITY['quality_prompts'].default}, "
                           f"at most {len(PROMPTS)}: the project's own set)")  # fmt: skip
        group.add_argument("--quality-tokens", type=whole(1), help="most tokens sampled from the baseline per "
                           f"prompt (default {QUALITY['quality_tokens'].default})")  # fmt: skip

    def parameters(self, given: dict[str, Any], params: G6Params, inv: Invocation) -> QuantParams:
        return QuantParams(**{"variants": list(DEFAULT_VARIANTS), **given})

    def check(self, inv: Invocation) -> None:
        super().check(inv)
        variants = inv.given.get("variants")
        if not (inv.sim or inv.stack) and variants and len(variants) > 1:
            raise G6Error("--experiment quant with --target/--outputs measures the one variant that server runs: "
                          "give one --variants value, or --stack/--sim to switch between variants")  # fmt: skip

    def planned(self, params: G6Params, own: QuantParams, base_url: str) -> list[LoadSpec]:
        return planned_specs(params, own, base_url)

    def outcome(self, own: QuantParams) -> QuantOutcome:
        return QuantOutcome()

    def run(self, drive: Drive, own: QuantParams, outcome: QuantOutcome) -> None:
        run_quant(drive.params, own, drive.target, drive.how, outcome)

    def write(self, ending: Ending, own: QuantParams, outcome: QuantOutcome, folder: Path) -> Written:
        result = quant_result(ending.meta, ending.params, own, outcome, ending.price, ending.cost)
        result = result.model_copy(update={"waited": ending.waited})
        render_quant_plots(result, folder)
        return Written(result, render_quant_report(result), all(v.error is None for v in result.variants))

    def held(self, shipped: QuantResult, oracle: QuantResult) -> list[Check]:
        out: list[Check] = []
        for v, w in zip(shipped.variants, oracle.variants):
            theirs = {f.concurrency: f for f in w.across}
            for f in v.across:
                if (o := theirs.get(f.concurrency)) is not None:
                    out += figures(f"{v.variant} c={f.concurrency}", f, o)
        return out
