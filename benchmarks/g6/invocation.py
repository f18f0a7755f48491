"""The g6 command line, typed: what `python -m benchmarks g6` was asked, parsed once at the edge.

Field names are argparse's destinations (cli.parser), so a flag and its field cannot drift apart."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from benchmarks.g6.errors import G6Error
from benchmarks.loadgen.lengths import Lengths

Experiment = Literal["sweep", "kv", "quant", "cold-start", "saturation", "prefix"]
EXPERIMENTS: tuple[Experiment, ...] = ("sweep", "kv", "quant", "cold-start", "saturation", "prefix")


@dataclass(frozen=True, kw_only=True)
class Invocation:
    """Every flag of one run, as argparse typed and checked it."""

    # target
    sim: bool
    virtual: bool
    target: str | None
    stack: str | None
    outputs: Path | None
    # the in-cluster client
    client_manifest: Path | None
    client_cpus: int
    # load
    model: str | None
    api: Literal["completions", "chat"]
    concurrency: list[int] | None
    rate: list[float] | None
    max_num_seqs: list[int] | None
    input_len: Lengths
    output_len: Lengths
    eos: bool
    requests: int | None
    warmup: int | None
    duration: float | None
    seed: int
    prometheus: str | None
    scrape_interval: float | None
    slo_ttft_ms: float | None
    slo_tpot_ms: float | None
    slo_e2e_ms: float | None
    slo_itl_ms: float | None
    max_client_lag_ms: float
    timeout_connect: float
    timeout_first_token: float
    timeout_total: float
    health_timeout: float
    # simulator and sizing
    gpu: str | None
    speedup: float | None
    gpu_memory_utilization: float | None
    max_model_len: int | None
    quantization: Literal["fp8", "awq", "gptq"] | None
    # experiments
    experiment: Experiment
    context_len: list[int] | None
    variants: list[str] | None
    quality_prompts: int | None
    quality_tokens: int | None
    settings: list[str] | None
    repeats: int | None
    recording: Path | None
    prefix_len: int | None
    prefix_groups: int | None
    start_rate: float | None
    max_points: int | None
    point_seconds: float | None
    hold_seconds: float | None
    # results
    out: Path
    quiet: bool


# Flags only one experiment reads: given to another, they would be ignored without a word.
OWN_FLAGS: dict[str, Experiment] = {
    "context_len": "kv", "variants": "quant", "quality_prompts": "quant", "quality_tokens": "quant",
    "settings": "cold-start", "prefix_len": "prefix", "prefix_groups": "prefix", "start_rate": "saturation",
    "max_points": "saturation", "point_seconds": "saturation", "hold_seconds": "saturation",
}  # fmt: skip


def check(inv: Invocation) -> None:
    """Refuse, in one line, flags that contradict each other or that the run would ignore (before anything
    is read or started)."""
    for name, experiment in OWN_FLAGS.items():
        if getattr(inv, name) is not None and inv.experiment != experiment:
            flag = "--" + name.replace("_", "-")
            raise G6Error(f"{flag} applies to --experiment {experiment} only: this {inv.experiment} run would ignore it")
    if inv.experiment == "cold-start":
        _check_cold_start(inv)
        return
    if inv.recording is not None:
        raise G6Error("--recording measures a cold-start run again: add --experiment cold-start")
    if inv.virtual and not inv.sim:
        raise G6Error("--virtual replays the simulator's engine on its own clock: add --sim")
    if inv.sim and (inv.target or inv.stack or inv.outputs):
        raise G6Error("--sim starts its own server: drop --target/--stack/--outputs")
    if not (inv.sim or inv.target or inv.stack or inv.outputs):
        raise G6Error("say what to measure: --sim, --target URL, --stack STACK or --outputs FILE")
    if inv.rate and inv.concurrency:
        raise G6Error("give either --concurrency (closed loop) or --rate (open-loop Poisson), not both")
    if inv.experiment == "saturation" and (inv.rate or inv.concurrency):
        raise G6Error("--experiment saturation chooses its own open-loop rates: drop --rate/--concurrency "
                      "(--start-rate sets the first)")  # fmt: skip
    if inv.experiment == "prefix" and inv.concurrency:
        raise G6Error("--experiment prefix offers both arms one open-loop rate: give --rate R instead of --concurrency")
    if inv.experiment == "prefix" and inv.rate and len(inv.rate) > 1:
        raise G6Error(f"--experiment prefix offers both arms one rate: give one --rate value, not {len(inv.rate)}")
    if inv.experiment not in ("sweep", "saturation", "prefix") and inv.rate:
        raise G6Error(f"--experiment {inv.experiment} runs closed-loop points: drop --rate")
    if inv.experiment != "sweep" and inv.max_num_seqs and len(inv.max_num_seqs) > 1:
        raise G6Error(f"--experiment {inv.experiment} runs points on one server: "
                      "give at most one --max-num-seqs")  # fmt: skip
    if inv.experiment == "quant" and not (inv.sim or inv.stack) and inv.variants and len(inv.variants) > 1:
        raise G6Error("--experiment quant with --target/--outputs measures the one variant that server runs: "
                      "give one --variants value, or --stack/--sim to switch between variants")  # fmt: skip
    if inv.experiment != "sweep" and inv.max_num_seqs and not inv.sim:
        raise G6Error(f"--max-num-seqs with --experiment {inv.experiment} sets the simulator's; a stack or server "
                      "runs its own (set vllm.max_num_seqs in the stack to change it)")  # fmt: skip


def _check_cold_start(inv: Invocation) -> None:
    if inv.sim or inv.target:
        raise G6Error("--experiment cold-start scales the stack's vLLM and its GPU pool: give --stack STACK or "
                      "--outputs FILE (no --sim, no --target)")  # fmt: skip
    if not (inv.stack or inv.outputs):
        raise G6Error("--experiment cold-start needs --stack STACK or --outputs FILE (with --recording: the "
                      "outputs of the stack it was recorded on)")  # fmt: skip
    if inv.settings and set(inv.settings) != {"as-configured"} and not inv.stack and inv.recording is None:
        raise G6Error("--settings other than as-configured change the stack (`pulumi config set` + `pulumi up`): "
                      "give --stack STACK")  # fmt: skip


