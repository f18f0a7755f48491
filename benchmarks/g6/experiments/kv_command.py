"""`--experiment kv` as a g6 run drives it: how many sequences of each context length fit in the KV cache,
and what paging buys (benchmarks.g6.experiments.kv), its report and plots."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from benchmarks.g6.config import LAB, G6Params
from benchmarks.g6.experiment import Drive, Ending, Experiment, Written
from benchmarks.g6.experiments.kv import (
    DEFAULT_CONTEXT_LENS,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    KvOutcome,
    KvParams,
    KvResult,
    check_lengths,
    first_waves,
    kv_result,
    run_kv,
)
from benchmarks.g6.experiments.kv_report import render_kv_plots, render_kv_report
from benchmarks.g6.flags import wholes
from benchmarks.g6.invocation import Invocation
from benchmarks.g6.oracle import HOST_BANDS, Check, figure, search
from benchmarks.g6.targets import Demand
from benchmarks.loadgen import LoadSpec


class Kv(Experiment[KvParams, KvOutcome]):
    name = "kv"
    folder = f"{LAB}-kv"
    result_model = KvResult
    gpu_memory_utilization = DEFAULT_GPU_MEMORY_UTILIZATION

    def add_flags(self, group: argparse._ArgumentGroup) -> None:
        group.add_argument("--context-len", type=wholes(2), help="tokens per sequence, half prompt and half output "
                           f"(default {','.join(map(str, DEFAULT_CONTEXT_LENS))}, at most max-model-len)")  # fmt: skip

    def parameters(self, given: dict[str, Any], params: G6Params, inv: Invocation) -> KvParams:
        return KvParams(context_lens=given.get("context_len") or list(DEFAULT_CONTEXT_LENS),
                        concurrency=params.concurrency, seeds=params.repeats)  # fmt: skip

    def ready(self, params: G6Params, own: KvParams) -> None:
        check_lengths(params, own)

    def demand(self, params: G6Params, own: KvParams) -> Demand:
        longest = max(own.context_lens)
        return Demand(params.model, longest, f"--context-len {longest}")

    def planned(self, params: G6Params, own: KvParams, base_url: str) -> list[LoadSpec]:
        return first_waves(params, own, base_url)

    def outcome(self, own: KvParams) -> KvOutcome:
        return KvOutcome()

    def run(self, drive: Drive, own: KvParams, outcome: KvOutcome) -> None:
        run_kv(drive.params, own, drive.target, drive.how, outcome)

    def write(self, ending: Ending, own: KvParams, outcome: KvOutcome, folder: Path) -> Written:
        result = kv_result(ending.meta, ending.params, own, outcome, ending.price, ending.cost)
        result = result.model_copy(update={"waited": ending.waited})
        render_kv_plots(result, folder)
        return Written(result, render_kv_report(result), all(p.point.completed for p in result.probes))

    def held(self, shipped: KvResult, oracle: KvResult) -> list[Check]:
        out: list[Check] = []
        theirs = {x.context_len: x for x in oracle.lengths}
        for x in shipped.lengths:
            if (o := theirs.get(x.context_len)) is None:
                continue
            tolerance = max(1, round(shipped.kv.tolerance * x.predicted_max_batch)) / max(1, x.measured_max_batch or 1)
            out += search(f"L={x.context_len} largest batch", x.measured_max_batch, o.measured_max_batch, tolerance)
            if x.measured_max_batch == o.measured_max_batch:
                out += figure(f"L={x.context_len} output tok/s", x.output_tokens_per_s, o.output_tokens_per_s,
                              HOST_BANDS["output_tokens_per_s"])  # fmt: skip
            for b, c in zip(x.baselines, o.baselines):
                out += figure(f"L={x.context_len} {b.reserves} baseline output tok/s", b.output_tokens_per_s,
                              c.output_tokens_per_s, HOST_BANDS["output_tokens_per_s"])  # fmt: skip
        return out
