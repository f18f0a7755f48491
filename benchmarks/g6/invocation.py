"""The g6 command line, typed: what `python -m benchmarks g6` was asked, parsed once at the edge.

Field names are argparse's destinations (cli.parser), so a flag and its field cannot drift apart. The
experiment's own flags stay with it (benchmarks.g6.experiment): given to another experiment, they are
refused by name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from benchmarks.g6.errors import G6Error
from benchmarks.loadgen.lengths import Lengths


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
    # the experiment
    experiment: str  # a name in benchmarks.g6.experiments.table
    repeats: int | None
    given: dict[str, Any]  # the experiment's own flags on the command line, by destination
    foreign: dict[str, str]  # other experiments' flags on the command line: destination -> their experiment
    # results
    out: Path
    quiet: bool


def check(inv: Invocation, experiments_own: Callable[[Invocation], None]) -> None:
    """Refuse, in one line, flags that contradict each other or that the run would ignore (before anything
    is read or started): another experiment's flags, then the experiment's own checks (`experiments_own`,
    benchmarks.g6.experiment), then the target's."""
    for name, owner in inv.foreign.items():
        flag = "--" + name.replace("_", "-")
        raise G6Error(f"{flag} applies to --experiment {owner} only: this {inv.experiment} run would ignore it")
    experiments_own(inv)
    if inv.virtual and not inv.sim:
        raise G6Error("--virtual replays the simulator's engine on its own clock: add --sim")
    if inv.sim and (inv.target or inv.stack or inv.outputs):
        raise G6Error("--sim starts its own server: drop --target/--stack/--outputs")
    if not (inv.sim or inv.target or inv.stack or inv.outputs):
        raise G6Error("say what to measure: --sim, --target URL, --stack STACK or --outputs FILE")
    if inv.rate and inv.concurrency:
        raise G6Error("give either --concurrency (closed loop) or --rate (open-loop Poisson), not both")
