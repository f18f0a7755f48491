"""A g6 run's parameters and its target, resolved once from the typed command line (benchmarks.g6.invocation)
and the stack's outputs: flags first, then the outputs, then the defaults (the experiment's own among them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.g6.analysis import predict
from benchmarks.g6.config import LAB, G6Outputs, G6Params
from benchmarks.g6.experiments.table import EXPERIMENTS
from benchmarks.g6.invocation import Invocation, check
from benchmarks.g6.sweep import Target
from benchmarks.g6.targets import Demand, ServerSettings, SimTarget, StackTarget, UrlTarget
from benchmarks.harness import ServiceRef, PulumiStack, endpoint, read_outputs, section
from benchmarks.harness.server import Server, http_server, only_model
from benchmarks.kube.stack import require_lab
from benchmarks.loadgen import Slo, Timeouts
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
    check(inv, EXPERIMENTS[inv.experiment].check)
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
                prometheus = section(outputs, "prometheus", ServiceRef, LAB).in_cluster_url()
    if inv.sim:
        # --sim stands in for the g6 stack as Pulumi.g6.yaml configures vLLM (flags still win).
        vllm = load_config(LAB).vllm
        bench = bench.model_copy(update={"model": vllm.model, "max_model_len": vllm.max_model_len,
                                         "gpu_memory_utilization": vllm.gpu_memory_utilization})  # fmt: skip
    if not (inv.model or bench.model):
        # A server of one's own: the model it serves, when it serves exactly one.
        bench = bench.model_copy(update={"model": only_model(http_server(base_url))})
    experiment = EXPERIMENTS[inv.experiment]
    # An experiment that sets the server's memory share does so where it can change the server.
    own_memory = experiment.gpu_memory_utilization if inv.sim or inv.stack else None
    # Only a stack can change the server between points; saved outputs describe the one running.
    grid = experiment.grid and inv.stack and bench.sweep.max_num_seqs
    return G6Params(
        experiment=experiment.name,
        target_kind="sim" if inv.sim else "stack" if inv.stack else "url",
        target="sim" if inv.sim else base_url,
        stack=inv.stack,
        client="in-cluster" if outputs is not None and inv.target is None else "local",
        model=inv.model or bench.model,
        api=inv.api,
        concurrency=[] if inv.rate else inv.concurrency or experiment.default_concurrency(bench),
        rate=[] if experiment.own_rate else inv.rate or [],
        max_num_seqs=inv.max_num_seqs or grid or [bench.max_num_seqs],
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
        gpu_memory_utilization=inv.gpu_memory_utilization or own_memory or bench.gpu_memory_utilization or 0.9,
        max_model_len=inv.max_model_len or bench.max_model_len,
        quantization=inv.quantization or bench.quantization,
        speedup=inv.speedup or (SIM_SPEEDUP if inv.sim else 1.0),
        virtual=inv.virtual,
    )


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
