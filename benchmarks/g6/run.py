"""One g6 run from its typed command line (benchmarks.g6.invocation): its parameters and target
(benchmarks.g6.resolve), the client side (benchmarks.g6.client), the experiment (benchmarks.g6.experiment,
chosen from benchmarks.g6.experiments.table) and the results folder. benchmarks.g6.cli only parses and
hands over."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ValidationError

from benchmarks.cluster import KubeApiError, new_run_id
from benchmarks.errors import BenchmarkError
from benchmarks.g6.client import ClientSide, client_side, stack_cluster, vllm_endpoint
from benchmarks.g6.config import LAB, G6Params
from benchmarks.g6.experiment import Drive, Ending, Experiment
from benchmarks.g6.experiments.cold_start import FirstServing, vllm_where
from benchmarks.g6.experiments.table import EXPERIMENTS
from benchmarks.g6.incluster import ClusterRunner
from benchmarks.g6.invocation import Invocation
from benchmarks.g6.price import cost_section, stack_gpu_price
from benchmarks.g6.resolve import make_target, read_stack_outputs, resolve_params
from benchmarks.g6.result import GpuPrice
from benchmarks.g6.sweep import Measurement, Outcome
from benchmarks.g6.targets import SimTarget
from benchmarks.g6.virtual import VirtualRunner, VirtualTarget
from benchmarks.harness import RunMeta, RunProgress, new_run_folder, save_result, tool_version
from benchmarks.harness.outputs import problems
from benchmarks.harness.results import SIMULATOR, Evidence, Simulation, client_cpus
from benchmarks.harness.signals import Interrupted, shielded, sigterm_raises
from benchmarks.kube.evidence import cluster_statement, simulation_of
from benchmarks.kube.evidence import collect as collect_evidence
from benchmarks.kube.phases import ColdStartPhases
from facts.catalogue import ServingError
from stacks.loader import ConfigError
from stacks.output_folder import OutputFolderError, prepare

EXIT_CODES = {"Ctrl-C": 130, "SIGTERM": 143}  # 128 + the signal's number, as shells report them
# The kit's own root, and the roots of the layers below: the serving catalogue, the output folders, and
# Pulumi.g6.yaml (which --sim reads).
ERRORS = (BenchmarkError, ServingError, OutputFolderError, ConfigError)


class Chosen(NamedTuple):
    """What one run is, once its command line and the stack's outputs are read: the experiment with its own
    parameters, the resolved common ones, and the outputs (None without a stack)."""

    experiment: Experiment[Any, Any]
    own: Any
    params: G6Params
    outputs: dict[str, Any] | None


def choose(inv: Invocation) -> Chosen:
    """The run `inv` asks for, checked before anything starts."""
    outputs = read_stack_outputs(inv)
    experiment = EXPERIMENTS[inv.experiment]
    params = resolve_params(inv, outputs)
    own = experiment.parameters(inv.given, params, inv)
    experiment.ready(params, own)
    return Chosen(experiment, own, params, outputs)


def run_evidence(params: G6Params, outputs: dict[str, Any] | None, client: ClientSide, started: datetime,
                 log: Callable[[str], None]) -> tuple[Evidence, Simulation | None]:  # fmt: skip
    """What really ran, and what of the cluster was simulated in its own words (None on GKE): read from the
    stack's cluster wherever the load came from (a Job there, or this machine through --target); "simulator"
    or "not known" without a stack or a cluster this machine can read (never at the cost of the figures)."""
    if params.target_kind == "sim":
        return Evidence.offline(SIMULATOR), None
    if outputs is None or isinstance(client.runner, VirtualRunner):
        return Evidence.offline(), None
    runner = client.runner
    try:
        cluster = stack_cluster(client, outputs)
        if isinstance(runner, ClusterRunner):
            namespaces, run_id = [runner.namespace], runner.run_id
        else:
            namespaces, run_id = [vllm_endpoint(outputs).namespace], new_run_id(LAB)
        evidence = collect_evidence(cluster, outputs, namespaces, run_id, started, datetime.now(UTC), log)
        return evidence, simulation_of(cluster_statement(cluster), cluster.list("v1", "Node"))
    except KubeApiError as e:
        log(f"g6: what ran is 'not known': the stack's cluster could not be read ({e})")
        return Evidence.offline(), None


def execute(inv: Invocation, argv: list[str]) -> int:
    """The run `inv` asks for; `argv` as typed, for the record. The exit code."""
    started = datetime.now(UTC)
    with sigterm_raises():  # SIGTERM stops the run as Ctrl-C does: cleanup, restore and partial results
        try:
            return _run(inv, argv, started)
        except (KeyboardInterrupt, Interrupted) as exc:
            # Before a point started, or after the last: nothing measured is lost.
            print(f"g6: interrupted ({'SIGTERM' if isinstance(exc, Interrupted) else 'Ctrl-C'}) before any point "
                  "was measured", file=sys.stderr)  # fmt: skip
            return EXIT_CODES["SIGTERM" if isinstance(exc, Interrupted) else "Ctrl-C"]


def _run(inv: Invocation, argv: list[str], started: datetime) -> int:
    try:
        chosen = choose(inv)
        experiment, own, params, outputs = chosen
        if inv.client_manifest is not None:
            for path in experiment.write_plan(inv.client_manifest, params, own, outputs, inv.client_cpus):
                print(path)
            return 0
        prepare(inv.out, "--out")  # before any work: the results must have somewhere to go
        recorded = experiment.recorded(inv, own)
        if recorded is not None:
            # Measured again from a file: no cluster is read now, so what ran is not known here.
            folder, ok = write_results(inv, argv, started, chosen, recorded, stack_gpu_price(outputs, params),
                                       Evidence.offline())  # fmt: skip
            print(folder)
            return 0 if ok else 1
        progress = RunProgress(enabled=not inv.quiet)
        client = client_side(params, outputs, inv.client_cpus, progress.log)
        params, target = make_target(params, experiment.demand(params, own), inv.health_timeout, client.server,
                                     progress.log)  # fmt: skip
        chosen = chosen._replace(params=params)
        if params.virtual:
            assert isinstance(target, SimTarget)
            target = VirtualTarget(target)
            client = client._replace(runner=VirtualRunner(target, params.scrape_interval_s))
        price = stack_gpu_price(outputs, params)
        first = None
        if isinstance(client.runner, ClusterRunner) and not experiment.measures_cold_start:
            target = first = FirstServing(target, client.runner.cluster, vllm_where(outputs), progress.log)
    except ERRORS as exc:
        print(f"g6: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:
        print(f"g6: invalid parameters: {problems(exc, 'g6')}", file=sys.stderr)
        return 2
    how = Measurement(client.runner, client.prometheus, progress, price,
                      client.runner.server_metrics if isinstance(client.runner, VirtualRunner) else None)
    outcome = experiment.outcome(own)
    failure = None
    try:
        # Exits run inner first: the runner deletes what it created in the cluster before a stack
        # target's `pulumi up` puts the server's config back (minutes).
        with target.session(), client.runner, progress.running():
            experiment.run(Drive(params, target, how, client, outputs, progress.log), own, outcome)
    except ERRORS as exc:
        failure = str(exc)
    except (KeyboardInterrupt, Interrupted) as exc:  # outside a point: entering the runner, say
        outcome.interrupted = "SIGTERM" if isinstance(exc, Interrupted) else "Ctrl-C"
    if not outcome.measured and (failure or outcome.interrupted):  # nothing to report but why it stopped
        if outcome.interrupted:
            print(f"g6: interrupted ({outcome.interrupted}) before any point was measured", file=sys.stderr)
        if failure:
            print(f"g6: {failure}", file=sys.stderr)
        return 2 if failure else EXIT_CODES[outcome.interrupted or "Ctrl-C"]
    if failure:
        outcome.errors.append(f"the run stopped: {failure}")
    if outcome.interrupted:
        outcome.errors.append(f"interrupted ({outcome.interrupted}) after {outcome.done()}: the rest was not measured")
    try:
        evidence, simulation = run_evidence(params, outputs, client, started, progress.log)
    except (KeyboardInterrupt, Interrupted):  # what was measured matters more than the evidence
        evidence, simulation = Evidence.offline(), None
    # A second Ctrl-C must not lose what the first one kept.
    with shielded(lambda name: print(f"g6: {name} received; writing the results first", file=sys.stderr)):
        waited = first.waited(started) if first is not None else None
        folder, ok = write_results(inv, argv, started, chosen, outcome, price, evidence, waited, simulation)
    if outcome.interrupted:
        print(f"g6: interrupted after {outcome.done()}; partial results in {folder}", file=sys.stderr)
    if failure:
        print(f"g6: {failure}; results of {outcome.done()} in {folder}", file=sys.stderr)
        return 2
    if outcome.interrupted:
        return EXIT_CODES[outcome.interrupted]
    print(folder)
    return 0 if ok else 1


def write_results(
    inv: Invocation, argv: list[str], started: datetime, chosen: Chosen, outcome: Outcome, price: GpuPrice | None,
    evidence: Evidence, waited: ColdStartPhases | None = None, simulation: Simulation | None = None,
) -> tuple[Path, bool]:  # fmt: skip
    """result.json, report.md and the plots of what `outcome` holds; the folder, and whether every part of
    the run completed. `waited`: the GPU node the run brought up, phase by phase, which opens the report;
    `simulation`: what of the cluster was simulated (a local cluster's), said before any figure."""
    experiment, own, params, outputs = chosen
    meta = RunMeta(
        lab=LAB,
        target=params.target,
        model=params.model,
        started_at=started,
        finished_at=datetime.now(UTC),
        client_host_cpus=client_cpus(),
        tool_version=tool_version(),
        command=["python", "-m", "benchmarks", LAB, *argv],
        server_versions=outcome.server_versions,
        errors=outcome.errors,
        evidence=evidence,
        simulation=simulation,
    )
    seconds = (datetime.now(UTC) - started).total_seconds()
    cost = cost_section(outputs, params, seconds, price, session=not experiment.measures_cold_start)
    folder = new_run_folder(inv.out, experiment.folder, started)
    written = experiment.write(Ending(meta, params, price, cost, waited), own, outcome, folder)
    save_result(written.result, folder)
    (folder / "report.md").write_text(written.report)
    return folder, written.complete
