"""The seam between a g6 run and its experiment: what benchmarks.g6.run asks of every experiment, with the
answers most of them share. An experiment is one object in benchmarks.g6.experiments.table: its own flags
and their typed parameters, the checks of its command line, the load it plans, how it runs, and what it
writes. run.py composes target, client, experiment and writers and never asks which experiment it holds.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Generic, NamedTuple, TypeVar

from pydantic import BaseModel

from benchmarks.g6.client import ClientSide, vllm_endpoint
from benchmarks.g6.config import G6Outputs, G6Params
from benchmarks.g6.errors import G6Error
from benchmarks.g6.incluster import manifests, write_manifests
from benchmarks.g6.invocation import Invocation
from benchmarks.g6.oracle import Check
from benchmarks.g6.result import GpuPrice
from benchmarks.g6.sweep import Measurement, Outcome, Target
from benchmarks.g6.targets import Demand
from benchmarks.harness import RunMeta
from benchmarks.kube.phases import ColdStartPhases
from benchmarks.kube.stack import system_selector
from benchmarks.loadgen import LoadSpec

P = TypeVar("P")  # the experiment's own parameters, typed from its own flags
O = TypeVar("O", bound=Outcome)  # what it has measured so far  # noqa: E741


class Drive(NamedTuple):
    """What a run hands its experiment: the resolved parameters, the target (its session held), how points
    are measured, where the client runs, the stack's outputs (None without a stack) and the progress log."""

    params: G6Params
    target: Target
    how: Measurement
    client: ClientSide
    outputs: dict[str, Any] | None
    log: Callable[[str], None]


class Ending(NamedTuple):
    """What every result of a run carries besides the experiment's own figures."""

    meta: RunMeta
    params: G6Params
    price: GpuPrice | None
    cost: str | None  # Markdown cost section
    waited: ColdStartPhases | None  # the GPU node the run brought up, phase by phase


class Written(NamedTuple):
    """An experiment's result (saved as result.json), its report (report.md) and whether every part of
    it (point, variant, cold start) completed."""

    result: BaseModel
    report: str
    complete: bool


class Experiment(Generic[P, O]):
    """One g6 experiment. Subclasses set the class attributes and implement `parameters`, `planned` (unless
    `write_plan` is their own), `outcome`, `run` and `write`; the other methods are the answers most
    experiments share."""

    name: ClassVar[str]  # --experiment NAME, recorded in G6Params.experiment
    folder: ClassVar[str]  # results go to OUT/<folder>-<UTC time>/
    result_model: ClassVar[type[BaseModel]]  # its result.json, as benchmarks.g6.agreement reads it back
    # The closed-loop points when neither --concurrency nor --rate is given.
    concurrency: ClassVar[tuple[int, ...]] = ()
    # --rate is the experiment's own parameter (one rate for all its arms), not a list of points.
    own_rate: ClassVar[bool] = False
    # The server's memory share when the run can set it (--sim, --stack) and no flag does.
    gpu_memory_utilization: ClassVar[float | None] = None
    # Brings the GPU node up itself and prices its scale-ups and idle tail: no first-serving wait measured
    # around it, no session priced at the GPU's hourly rate.
    measures_cold_start: ClassVar[bool] = False
    # A stack's sweep grid (its benchmark outputs' sweep.max_num_seqs) applies when no flag sets one.
    grid: ClassVar[bool] = False

    def add_flags(self, group: argparse._ArgumentGroup) -> None:
        """Its own flags (each defaulting to None: given or not), in its own group of `--help`."""

    def parameters(self, given: dict[str, Any], inv: Invocation) -> P:
        """Its typed parameters from its own flags (`given`: those on the command line) and the common ones."""
        raise NotImplementedError

    def check(self, inv: Invocation) -> None:
        """Refuse, in one line, common flags this experiment would ignore or cannot honour. By default: its
        points run on one server, closed loop."""
        if inv.rate:
            raise G6Error(f"--experiment {self.name} runs closed-loop points: drop --rate")
        one_server(self.name, inv)

    def default_concurrency(self, bench: G6Outputs) -> list[int]:
        return list(self.concurrency)

    def ready(self, params: G6Params, own: P) -> None:
        """Refuse what the resolved parameters cannot do, before anything starts."""

    def demand(self, params: G6Params, own: P) -> Demand:
        """What the run asks of every server: its model, and the longest requests it sends."""
        asked = f"--input-len {params.input_len.describe()} + --output-len {params.output_len.describe()}"
        # Unbounded lengths (lognormal) are clipped to the server's context: the shortest request then asks.
        return Demand(params.model, params.longest or 2, asked)

    def planned(self, params: G6Params, own: P, base_url: str) -> list[LoadSpec]:
        """The load points it sends, as far as they are known before it starts (a search's first point)."""
        raise NotImplementedError

    def client_objects(self, params: G6Params, own: P, outputs: dict[str, Any] | None, cpus: int) -> list[dict[str, Any]]:
        """The ConfigMap and one Job per planned point, as the in-cluster runner would create them."""
        if outputs is None or params.client != "in-cluster":
            raise G6Error("--client-manifest shows the in-cluster client: give --stack or --outputs, and no --target")
        ep = vllm_endpoint(outputs)
        return manifests(ep.namespace, system_selector(outputs), self.planned(params, own, ep.server_url()), cpus)

    def write_plan(self, folder: Path, params: G6Params, own: P, outputs: dict[str, Any] | None, cpus: int) -> list[Path]:
        """--client-manifest: what the run would create or do, as YAML files in `folder`, touching nothing."""
        return write_manifests(folder, self.client_objects(params, own, outputs, cpus))

    def recorded(self, inv: Invocation, own: P) -> O | None:
        """What a saved recording holds, measured again without a cluster (None: this run measures live)."""
        return None

    def outcome(self, own: P) -> O:
        raise NotImplementedError

    def run(self, drive: Drive, own: P, outcome: O) -> None:
        """Everything it measures into `outcome`; stops at Ctrl-C or SIGTERM with what it has. The caller
        holds the target's session and the runner around it."""
        raise NotImplementedError

    def write(self, ending: Ending, own: P, outcome: O, folder: Path) -> Written:
        """Its result and report; its plots (and any file of its own) into `folder`."""
        raise NotImplementedError

    def held(self, shipped: Any, oracle: Any) -> list[Check]:
        """The figures of a saved --sim run (`result_model`) held against the virtual-clock oracle's rerun of
        its command (benchmarks.g6.agreement, through benchmarks.g6.oracle). None held: the check refuses
        the folder rather than call it in agreement."""
        return []


def one_server(name: str, inv: Invocation) -> None:
    """An experiment's points run on one server: one max-num-seqs at most, and only the simulator's."""
    if inv.max_num_seqs and len(inv.max_num_seqs) > 1:
        raise G6Error(f"--experiment {name} runs points on one server: give at most one --max-num-seqs")
    if inv.max_num_seqs and not inv.sim:
        raise G6Error(f"--max-num-seqs with --experiment {name} sets the simulator's; a stack or server "
                      "runs its own (set vllm.max_num_seqs in the stack to change it)")  # fmt: skip
