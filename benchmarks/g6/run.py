"""One g6 run from its typed command line (benchmarks.g6.invocation): the target, the client side,
the experiment, and the results folder. benchmarks.g6.cli only parses and hands over."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from pydantic import ValidationError

from benchmarks.cluster import RUN_LABEL, ClusterError, KubeCluster
from benchmarks.g6.analysis import predict, sizing_gap
from benchmarks.g6.config import LAB, G6Outputs, G6Params
from benchmarks.g6.errors import G6Error
from benchmarks.g6.experiments import cold_start
from benchmarks.g6.experiments.cold_start import (
    ColdStartOutcome,
    ColdStartParams,
    ColdStartRecording,
    FirstServing,
    cold_start_result,
)
from benchmarks.g6.experiments.cold_start_report import render_cold_start_plots, render_cold_start_report
from benchmarks.g6.experiments.kv import (
    DEFAULT_CONTEXT_LENS,
    KvOutcome,
    KvParams,
    check_lengths,
    first_waves,
    kv_result,
    run_kv,
)
from benchmarks.g6.experiments.kv import DEFAULT_GPU_MEMORY_UTILIZATION as KV_GPU_MEMORY_UTILIZATION
from benchmarks.g6.experiments.kv_report import render_kv_plots, render_kv_report
from benchmarks.g6.experiments.prefix import PrefixOutcome, PrefixParams, prefix_result, prefix_spec, run_prefix
from benchmarks.g6.experiments.prefix_report import render_prefix_plots, render_prefix_report
from benchmarks.g6.experiments.quant import (
    DEFAULT_CONCURRENCY,
    DEFAULT_VARIANTS,
    QuantOutcome,
    QuantParams,
    quant_result,
    run_quant,
)
from benchmarks.g6.experiments.quant import planned_specs as quant_specs
from benchmarks.g6.experiments.quant_report import render_quant_plots, render_quant_report
from benchmarks.g6.experiments.saturation import (
    SaturationOutcome,
    SaturationParams,
    point_spec,
    run_saturation,
    saturation_result,
)
from benchmarks.g6.experiments.saturation_report import render_saturation_plots, render_saturation_report
from benchmarks.g6.incluster import ClusterRunner, manifests, proxy_server
from benchmarks.g6.invocation import Invocation, check
from benchmarks.g6.plots import render_plots
from benchmarks.g6.price import gpu_price, session_cost
from benchmarks.g6.report import render_report
from benchmarks.g6.result import G6Result, GpuPrice, sweep_figures
from benchmarks.g6.sweep import Measurement, Outcome, SweepOutcome, Target, load_specs, run_sweep
from benchmarks.g6.targets import Demand, ServerSettings, SimTarget, StackTarget, UrlTarget
from benchmarks.g6.virtual import VirtualRunner, VirtualTarget
from benchmarks.harness import (
    Endpoint,
    HarnessError,
    PrometheusRef,
    PulumiStack,
    RunMeta,
    RunProgress,
    endpoint,
    new_run_folder,
    read_outputs,
    save_result,
    section,
    tool_version,
)
from benchmarks.harness.evidence import SIMULATOR, Evidence
from benchmarks.harness.outputs import problems
from benchmarks.harness.results import client_cpus
from benchmarks.harness.server import Server, http_server, only_model
from benchmarks.harness.signals import Interrupted, shielded, sigterm_raises
from benchmarks.labs.errors import LabError
from benchmarks.labs.evidence import collect as collect_evidence
from benchmarks.labs.live import new_run_id
from benchmarks.labs.phases import ColdStartPhases
from benchmarks.labs.stack import require_lab, system_selector
from benchmarks.loadgen import LoadgenError, LoadSpec, LocalRunner, Slo, Timeouts
from benchmarks.metrics import MetricsError, PrometheusClient
from facts.catalogue import ServingError
from stacks.cost_estimate import CostEstimate, estimate_or_none, estimate_section, markdown
from stacks.loader import ConfigError
from stacks.output_folder import OutputFolderError, prepare
from stacks.stackfile import load_config

# --sim runs in real time by default: there it agrees with its virtual-clock oracle within the bands
# docs/testing.md measured (throughput 0.93-1.02 of it on this project's busy 2-core machine), while at x4
# its TTFT read 1.4-4.0 times the oracle's: the host's figure, not the simulated L4's. --virtual gives the
# simulated L4's answer without waiting; --speedup compresses time for quick tests.
SIM_SPEEDUP = 1.0
SIM_SCRAPE_S = 0.5
# Runs of every point (each with its own seed) unless --repeats says otherwise: the fewest whose spread
# gives a rerun interval at all (Student's t with 2 degrees of freedom).
DEFAULT_REPEATS = 3



def read_stack_outputs(inv: Invocation) -> dict[str, Any] | None:
    """The stack's outputs when the run names a stack (--stack/--outputs), read once."""
    check(inv)
    if not (inv.stack or inv.outputs):
        return None
    outputs = read_outputs(inv.stack, inv.outputs)
    require_lab(outputs, LAB)
    return outputs


def resolve_params(inv: Invocation, outputs: dict[str, Any] | None) -> G6Params:
    """The run's parameters: flags first, then the stack's outputs (--stack/--outputs), then defaults."""
    bench, prometheus, base_url = G6Outputs(model=""), inv.prometheus, inv.target
    if outputs is not None:
        bench = section(outputs, "benchmark", G6Outputs, LAB)
        if base_url is None:
            # The client adds the OpenAI routes (/v1/...) itself: it wants the server's root.
            base_url = endpoint(outputs, bench.endpoint, LAB).server_url()
            # A client without a URL override runs in-cluster: the stack's Prometheus holds the GPU series.
            if prometheus is None and "prometheus" in outputs:
                prometheus = section(outputs, "prometheus", PrometheusRef, LAB).in_cluster_url()
    if inv.sim:
        # --sim stands in for the g6 stack as Pulumi.g6.yaml configures vLLM (flags still win).
        vllm = load_config(LAB).vllm
        bench = bench.model_copy(update={"model": vllm.model, "max_model_len": vllm.max_model_len,
                                         "gpu_memory_utilization": vllm.gpu_memory_utilization})  # fmt: skip
    if not (inv.model or bench.model):
        # A server of one's own: the model it serves, when it serves exactly one.
        bench = bench.model_copy(update={"model": only_model(http_server(base_url))})
    experiment = inv.experiment
    # The kv experiment runs a server it can change (the simulator, a stack) at its own memory setting.
    changeable = inv.sim or inv.stack
    utilization = inv.gpu_memory_utilization or (
        KV_GPU_MEMORY_UTILIZATION if experiment == "kv" and changeable else bench.gpu_memory_utilization or 0.9
    )
    max_model_len = inv.max_model_len or bench.max_model_len
    concurrency = {"sweep": bench.sweep.concurrency or [1, 8, 32], "quant": list(DEFAULT_CONCURRENCY), "kv": [],
                   "cold-start": [1], "saturation": [], "prefix": []}  # fmt: skip
    sweep_grid = experiment == "sweep" and inv.stack and bench.sweep.max_num_seqs
    return G6Params(
        experiment=experiment,
        target_kind="sim" if inv.sim else "stack" if inv.stack else "url",
        target="sim" if inv.sim else base_url,
        stack=inv.stack,
        client="in-cluster" if outputs is not None and inv.target is None else "local",
        model=inv.model or bench.model,
        api=inv.api,
        concurrency=[] if inv.rate else inv.concurrency or concurrency[experiment],
        rate=[] if experiment == "prefix" else inv.rate or [],
        # Only a stack can change the server between points; saved outputs describe the one running.
        max_num_seqs=inv.max_num_seqs or sweep_grid or [bench.max_num_seqs],
        input_len=inv.input_len,
        output_len=inv.output_len,
        eos=inv.eos,
        requests=inv.requests,
        duration_s=inv.duration,
        warmup=inv.warmup,
        seed=inv.seed,
        repeats=inv.repeats or DEFAULT_REPEATS,
        timeouts=Timeouts(
            connect_s=inv.timeout_connect, first_token_s=inv.timeout_first_token, total_s=inv.timeout_total
        ),
        slo=Slo(ttft_ms=inv.slo_ttft_ms, tpot_ms=inv.slo_tpot_ms, e2e_ms=inv.slo_e2e_ms),
        slo_itl_ms=inv.slo_itl_ms,
        max_client_lag_ms=inv.max_client_lag_ms,
        prometheus=prometheus,
        scrape_interval_s=inv.scrape_interval or (SIM_SCRAPE_S if inv.sim else 1.0),
        gpu=inv.gpu or bench.gpu or ("l4" if inv.sim else None),
        gpu_memory_utilization=utilization,
        max_model_len=max_model_len,
        quantization=inv.quantization or bench.quantization,
        speedup=inv.speedup or (SIM_SPEEDUP if inv.sim else 1.0),
        virtual=inv.virtual,
    )


def demand(params: G6Params, ex: Experiments) -> Demand:
    """What the run asks of every server: its model, and the longest requests it sends."""
    if params.experiment == "kv":
        return Demand(params.model, max(ex.kv.context_lens), f"--context-len {max(ex.kv.context_lens)}")
    asked = f"--input-len {params.input_len.describe()} + --output-len {params.output_len.describe()}"
    prefix = ex.prefix.prefix_len if params.experiment == "prefix" else 0
    if prefix:
        asked = f"--prefix-len {prefix} + {asked}"
    # Unbounded lengths (lognormal) are clipped to the server's context: the shortest request then asks.
    return Demand(params.model, prefix + (params.longest or 2), asked)


def make_target(
    params: G6Params, need: Demand, health_timeout_s: float, server: Server | None = None,
    log: Callable[[str], None] = print,
) -> tuple[G6Params, Target]:  # fmt: skip
    """The target for `params`; `server` is how this process reads a stack's vLLM (default: plain HTTP
    at the target URL). With --sim, an unset max-num-seqs is named as the simulator's default."""
    if params.target_kind != "sim":
        server = server or http_server(params.target)
    if params.target_kind == "stack":
        return params, StackTarget(PulumiStack(params.stack or ""), server, need, health_timeout_s, log)
    if params.target_kind == "url":
        return params, UrlTarget(server, need)
    if params.max_num_seqs == [None]:
        default = predict(params, None)
        params = params.model_copy(update={"max_num_seqs": [default.max_num_seqs if default else None]})
    single = params.max_num_seqs[0] if len(params.max_num_seqs) == 1 else None
    server = {"model": params.model, "gpu_memory_utilization": params.gpu_memory_utilization,
              "max_model_len": params.max_model_len, "quantization": params.quantization, "max_num_seqs": single}  # fmt: skip
    base = ServerSettings(**{name: value for name, value in server.items() if value is not None})
    return params, SimTarget(gpu=params.gpu or "l4", speedup=params.speedup, seed=params.seed, base=base, demand=need)


def stack_gpu_price(outputs: dict[str, Any] | None, params: G6Params) -> GpuPrice | None:
    """The prices the stack's cost estimate uses; for the simulator, Pulumi.g6.yaml's."""
    if outputs is not None:
        saved, pool = outputs.get("cost_estimate"), outputs.get("gpu_pool")
        if not isinstance(saved, dict) or not isinstance(pool, dict) or "machine_type" not in pool:
            return None
        return gpu_price(CostEstimate.model_validate(saved), pool["machine_type"], bool(pool.get("spot", True)),
                         "from the stack's outputs")  # fmt: skip
    if params.target_kind != "sim":
        return None
    cfg = load_config(LAB)
    est = estimate_or_none(cfg)
    if est is None:
        return None
    return gpu_price(est, cfg.gpu_machine_type, cfg.gpu_spot, "as Pulumi.g6.yaml configures the g6 stack")


def _vllm_endpoint(outputs: dict[str, Any]) -> Endpoint:
    return endpoint(outputs, section(outputs, "benchmark", G6Outputs, LAB).endpoint, LAB)


def planned_specs(params: G6Params, ex: Experiments, base_url: str) -> list[LoadSpec]:
    """The load points the run's experiment sends, as far as they are known before it starts (a search's
    first point: the later ones follow from what it finds)."""
    if params.experiment == "kv":
        return first_waves(params, ex.kv, base_url)
    if params.experiment == "quant":
        return quant_specs(params, ex.quant, base_url)
    if params.experiment == "saturation":
        return [point_spec(params, base_url, ex.saturation.start_rate, ex.saturation.point_seconds)]
    if params.experiment == "prefix":
        return [prefix_spec(params, ex.prefix, base_url, run) for _ in ex.prefix.arms for run in range(params.repeats)]
    return [spec for mns in params.max_num_seqs for repeat in range(params.repeats)
            for spec in load_specs(params, base_url, "max-num-seqs", mns, "repeat", repeat)]  # fmt: skip


def client_manifest(
    outputs: dict[str, Any] | None, params: G6Params, ex: Experiments, cpus: int
) -> list[dict[str, Any]]:
    """The ConfigMap and one Job per point, as the in-cluster runner would create them."""
    if outputs is None or params.client != "in-cluster":
        raise G6Error("--client-manifest shows the in-cluster client: give --stack or --outputs, and no --target")
    ep = _vllm_endpoint(outputs)
    return manifests(ep.namespace, system_selector(outputs), planned_specs(params, ex, ep.server_url()), cpus)


def write_client_manifest(
    folder: Path, outputs: dict[str, Any] | None, params: G6Params, ex: Experiments, cpus: int
) -> list[Path]:
    """client_manifest as YAML files, in place of those an earlier --client-manifest left in the folder
    (fewer points now would otherwise leave its extra Jobs beside the new ones)."""
    objects = client_manifest(outputs, params, ex, cpus)
    prepare(folder, "--client-manifest")
    for old in folder.glob("*.yaml"):
        if _benchmark_object(old):
            old.unlink()
    paths = []
    for obj in objects:
        path = folder / f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump(obj, sort_keys=False))
        paths.append(path)
    return paths


def _benchmark_object(path: Path) -> bool:
    """A file holding one object labelled as a benchmark run's (benchmarks.cluster.RUN_LABEL)."""
    try:
        obj = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    labels = (obj.get("metadata") or {}).get("labels") if isinstance(obj, dict) else None
    return isinstance(labels, dict) and RUN_LABEL in labels


class ClientSide(NamedTuple):
    """Where the load generator runs and how this process reads the server and its Prometheus."""

    runner: LocalRunner | ClusterRunner | VirtualRunner
    server: Server | None  # None: plain HTTP at the target URL
    prometheus: PrometheusClient | None


def client_side(params: G6Params, outputs: dict[str, Any] | None, cpus: int, log: Callable[[str], None]) -> ClientSide:
    """In the cluster (a Job per point; vLLM and Prometheus through the API server's service proxy)
    when the run names a stack and no --target; this machine and plain HTTP otherwise. Nothing is
    created until the runner is entered."""
    over_http = PrometheusClient.over_http(params.prometheus) if params.prometheus else None
    if params.client == "local" or outputs is None:
        if over_http is not None:
            over_http.check()  # a --prometheus URL that does not answer fails the run now, in one line
        return ClientSide(LocalRunner(), None, over_http)
    ep = _vllm_endpoint(outputs)
    cluster = KubeCluster.from_kubeconfig(outputs.get("kubeconfig") or "")
    run_id = new_run_id(LAB)
    log(f"g6: run {run_id}; the load generator runs as Jobs in {ep.namespace}, labelled with it and deleted at the end")
    runner = ClusterRunner(cluster, run_id, ep.namespace, system_selector(outputs), cpus=cpus, log=log)
    # The stack's own Prometheus through the API server; a --prometheus URL of the user's, as given.
    ref = section(outputs, "prometheus", PrometheusRef, LAB) if "prometheus" in outputs else None
    prometheus = over_http
    if ref is not None and params.prometheus == ref.in_cluster_url():
        prometheus = PrometheusClient.through_service_proxy(cluster, ref)
    elif prometheus is not None:
        prometheus.check()
    return ClientSide(runner, proxy_server(cluster, ep), prometheus)


def cost_section(outputs: dict[str, Any] | None, params: G6Params, seconds: float, price: GpuPrice | None) -> str | None:
    """What the stack costs per hour and what this session cost (Markdown); for a simulated run, what
    the same session would cost on the g6 stack as Pulumi.g6.yaml configures it, the GPU up for the
    run's length in GPU time."""
    # The cold-start experiment measures the scale-up and the idle tail itself (and prices them in its report).
    # A virtual run's wall time is its engine's, not the GPU's: no session to price.
    assumed = price is not None and params.experiment != "cold-start" and not params.virtual
    session = "\n" + session_cost(price, seconds * params.speedup) if assumed else ""
    if outputs is not None:
        return (estimate_section(outputs) + session) or None
    if params.target_kind != "sim":
        return None
    est = estimate_or_none(load_config(LAB))
    if est is None:
        return None
    if params.virtual:
        return markdown(est) + "\nThis run replayed its points on the simulator's virtual clock: no GPU time to price.\n"
    return markdown(est) + (
        f"\nThis run took {seconds / 60:.1f} min against the simulator at x{params.speedup:g}: "
        f"{seconds * params.speedup / 60:.1f} min of GPU time on the real L4 (server starts and the gaps between "
        "points included, priced as measurements below).\n"
    ) + session


def run_evidence(params: G6Params, outputs: dict[str, Any] | None, client: ClientSide, started: datetime) -> Evidence:
    """What really ran: read from the cluster for an in-cluster run; "simulator" or "not known" otherwise."""
    if params.target_kind == "sim":
        return Evidence.offline(SIMULATOR)
    if outputs is None or not isinstance(client.runner, ClusterRunner):
        return Evidence.offline()
    runner = client.runner
    return collect_evidence(runner.cluster, outputs, [runner.namespace], runner.run_id, started, datetime.now(UTC))


def _meta(
    params: G6Params, argv: list[str], started: datetime, versions: dict[str, str], errors: list[str], evidence: Evidence
) -> RunMeta:
    return RunMeta(
        lab=LAB,
        target=params.target,
        model=params.model,
        started_at=started,
        finished_at=datetime.now(UTC),
        client_host_cpus=client_cpus(),
        tool_version=tool_version(),
        command=["python", "-m", "benchmarks", LAB, *argv],
        server_versions=versions,
        errors=errors,
        evidence=evidence,
    )


class Experiments(NamedTuple):
    """Every experiment's own settings, from the command line (the run uses its experiment's)."""

    kv: KvParams
    quant: QuantParams
    saturation: SaturationParams
    prefix: PrefixParams


def experiment_params(inv: Invocation, params: G6Params) -> Experiments:
    """The experiments' settings from the command line (a flag not given: the experiment's default)."""

    def given(**flags: object) -> dict[str, object]:
        return {name: value for name, value in flags.items() if value is not None}

    kv = KvParams(context_lens=inv.context_len or list(DEFAULT_CONTEXT_LENS), concurrency=params.concurrency,
                  seeds=params.repeats)  # fmt: skip
    quant = QuantParams(variants=inv.variants or list(DEFAULT_VARIANTS),
                        **given(quality_prompts=inv.quality_prompts, quality_tokens=inv.quality_tokens))  # fmt: skip
    saturation = SaturationParams(seeds=params.repeats, **given(start_rate=inv.start_rate, max_points=inv.max_points,
                                                                 point_seconds=inv.point_seconds,
                                                                 hold_seconds=inv.hold_seconds))  # fmt: skip
    rate = inv.rate[0] if params.experiment == "prefix" and inv.rate else None
    prefix = PrefixParams(**given(prefix_len=inv.prefix_len, groups=inv.prefix_groups, rate=rate))
    return Experiments(kv, quant, saturation, prefix)


def cold_start_params(inv: Invocation) -> ColdStartParams:
    """The cold-start experiment's settings from the command line; each wait is bounded by --health-timeout."""
    return ColdStartParams(settings=inv.settings or ["as-configured"], repeats=inv.repeats or 3,
                           timeout_s=inv.health_timeout)  # fmt: skip


def _vllm_where(outputs: dict[str, Any] | None) -> cold_start.Where:
    assert outputs is not None
    return cold_start.where(outputs, _vllm_endpoint(outputs).namespace)


def write_cold_start_plan(folder: Path, outputs: dict[str, Any] | None, params: G6Params, cs: ColdStartParams) -> Path:
    """What the cold-start experiment will do and restore, as YAML (--client-manifest), touching nothing."""
    prepare(folder, "--client-manifest")
    path = folder / "cold-start-plan.yaml"
    path.write_text(yaml.safe_dump(cold_start.plan(outputs or {}, _vllm_where(outputs), cs, params.stack), sort_keys=False))
    return path


def _measure_again(inv: Invocation, argv: list[str], started: datetime, params: G6Params,
                   outputs: dict[str, Any] | None) -> int:  # fmt: skip
    """A saved cold-start recording measured again: the same phases, report and plot, no cluster."""
    try:
        recording = ColdStartRecording.model_validate_json(inv.recording.read_text())
    except (OSError, ValueError) as exc:
        print(f"g6: cannot read recording {inv.recording}: {exc}", file=sys.stderr)
        return 2
    ex = experiment_params(inv, params)
    outcome = cold_start.recorded(recording, cold_start_params(inv).poll_s)
    # Measured again from a file: no cluster is read now, so what ran is not known here.
    folder, ok = write_results(inv, argv, started, params, ex, outputs, outcome, stack_gpu_price(outputs, params),
                               Evidence.offline())  # fmt: skip
    print(folder)
    return 0 if ok else 1


EXIT_CODES = {"Ctrl-C": 130, "SIGTERM": 143}  # 128 + the signal's number, as shells report them
ERRORS = (
    G6Error, HarnessError, LoadgenError, MetricsError, ServingError, ClusterError, LabError, OutputFolderError,
    ConfigError,  # Pulumi.g6.yaml, which --sim reads
)


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
        outputs = read_stack_outputs(inv)
        params = resolve_params(inv, outputs)
        ex = experiment_params(inv, params)
        if params.experiment == "kv":
            check_lengths(params, ex.kv)  # before anything starts
        if inv.client_manifest is not None and params.experiment == "cold-start":
            print(write_cold_start_plan(inv.client_manifest, outputs, params, cold_start_params(inv)))
            return 0
        if inv.client_manifest is not None:
            for path in write_client_manifest(inv.client_manifest, outputs, params, ex, inv.client_cpus):
                print(path)
            return 0
        prepare(inv.out, "--out")  # before any work: the results must have somewhere to go
        if inv.recording is not None:
            return _measure_again(inv, argv, started, params, outputs)
        progress = RunProgress(enabled=not inv.quiet)
        client = client_side(params, outputs, inv.client_cpus, progress.log)
        params, target = make_target(params, demand(params, ex), inv.health_timeout, client.server, progress.log)
        if params.virtual:
            assert isinstance(target, SimTarget)
            target = VirtualTarget(target)
            client = client._replace(runner=VirtualRunner(target, params.scrape_interval_s))
        price = stack_gpu_price(outputs, params)
        first = None
        if isinstance(client.runner, ClusterRunner) and params.experiment != "cold-start":
            target = first = FirstServing(target, client.runner.cluster, _vllm_where(outputs), progress.log)
    except ERRORS as exc:
        print(f"g6: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:
        print(f"g6: invalid parameters: {problems(exc, 'g6')}", file=sys.stderr)
        return 2
    how = Measurement(client.runner, client.prometheus, progress, price,
                      client.runner.server_metrics if isinstance(client.runner, VirtualRunner) else None)
    outcomes = {"kv": KvOutcome, "quant": QuantOutcome, "saturation": SaturationOutcome, "prefix": PrefixOutcome}
    outcome = outcomes.get(params.experiment, SweepOutcome)()
    if params.experiment == "cold-start":
        outcome = ColdStartOutcome(params=cold_start_params(inv))
    failure = None
    try:
        # Exits run inner first: the runner deletes what it created in the cluster before a stack
        # target's `pulumi up` puts the server's config back (minutes).
        with target.session(), client.runner, progress.running():
            if isinstance(outcome, KvOutcome):
                run_kv(params, ex.kv, target, how, outcome)
            elif isinstance(outcome, QuantOutcome):
                run_quant(params, ex.quant, target, how, outcome)
            elif isinstance(outcome, SaturationOutcome):
                run_saturation(params, ex.saturation, target, how, outcome)
            elif isinstance(outcome, PrefixOutcome):
                run_prefix(params, ex.prefix, target, how, outcome)
            elif isinstance(outcome, ColdStartOutcome):
                # A cold start names a stack, never --target: the client side is the cluster's.
                assert isinstance(client.runner, ClusterRunner) and client.server is not None
                cold_start.run_cold_start(params, target, client.server, client.runner.cluster, _vllm_where(outputs),
                                          outcome, progress.log)  # fmt: skip
            else:
                run_sweep(params, target, partial(predict, params), how, outcome)
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
        evidence = run_evidence(params, outputs, client, started)
    except (KeyboardInterrupt, Interrupted):  # what was measured matters more than the evidence
        evidence = Evidence.offline()
    # A second Ctrl-C must not lose what the first one kept.
    with shielded(lambda name: print(f"g6: {name} received; writing the results first", file=sys.stderr)):
        waited = first.waited(started) if first is not None else None
        folder, ok = write_results(inv, argv, started, params, ex, outputs, outcome, price, evidence, waited)
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
    inv: Invocation, argv: list[str], started: datetime, params: G6Params, ex: Experiments,
    outputs: dict[str, Any] | None, outcome: Outcome, price: GpuPrice | None, evidence: Evidence,
    waited: ColdStartPhases | None = None,
) -> tuple[Path, bool]:  # fmt: skip
    """result.json, report.md and the plots of what `outcome` holds; the folder, and whether every
    point (variant, cold start) completed. `waited`: the GPU node the run brought up, phase by phase,
    which opens the report."""
    meta = _meta(params, argv, started, outcome.server_versions, outcome.errors, evidence)
    cost = cost_section(outputs, params, (datetime.now(UTC) - started).total_seconds(), price)
    if isinstance(outcome, ColdStartOutcome):
        result = cold_start_result(meta, params, outcome, price, cost)
        folder = new_run_folder(inv.out, f"{LAB}-cold-start", started)
        # The raw objects, events and logs, so the run can be measured again (--recording).
        recording = ColdStartRecording(source=outcome.source, records=outcome.records)
        (folder / "recording.json").write_text(recording.model_dump_json(indent=1))
        render_cold_start_plots(result, folder)
        report, ok = render_cold_start_report(result), all(run.failure is None for run in result.runs)
    elif isinstance(outcome, KvOutcome):
        result = kv_result(meta, params, ex.kv, outcome, price, cost).model_copy(update={"waited": waited})
        folder = new_run_folder(inv.out, f"{LAB}-kv", started)
        render_kv_plots(result, folder)
        report, ok = render_kv_report(result), all(p.point.completed for p in result.probes)
    elif isinstance(outcome, QuantOutcome):
        result = quant_result(meta, params, ex.quant, outcome, price, cost).model_copy(update={"waited": waited})
        folder = new_run_folder(inv.out, f"{LAB}-quant", started)
        render_quant_plots(result, folder)
        report, ok = render_quant_report(result), all(v.error is None for v in result.variants)
    elif isinstance(outcome, SaturationOutcome):
        result = saturation_result(meta, params, ex.saturation, outcome, price, cost).model_copy(update={"waited": waited})
        folder = new_run_folder(inv.out, f"{LAB}-saturation", started)
        render_saturation_plots(result, folder)
        report, ok = render_saturation_report(result), all(run.point.completed for x in result.points for run in x.runs)
    elif isinstance(outcome, PrefixOutcome):
        result = prefix_result(meta, params, ex.prefix, outcome, price, cost).model_copy(update={"waited": waited})
        folder = new_run_folder(inv.out, f"{LAB}-prefix", started)
        render_prefix_plots(result, folder)
        report, ok = render_prefix_report(result), all(run.point.completed for a in result.arms for run in a.runs)
    else:
        assert isinstance(outcome, SweepOutcome)
        result = G6Result(
            meta=meta,
            params=params,
            sizing=[s for mns in params.max_num_seqs if (s := predict(params, mns)) is not None],
            sizing_gap=sizing_gap(params),
            points=outcome.points,
            across=sweep_figures(outcome.points),
            cost=cost,
            gpu_price=price,
            waited=waited,
        )
        folder = new_run_folder(inv.out, LAB, started)
        render_plots(result, folder)
        report, ok = render_report(result), all(p.completed for p in outcome.points)
    save_result(result, folder)
    (folder / "report.md").write_text(report)
    return folder, ok
