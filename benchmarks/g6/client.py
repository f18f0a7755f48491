"""Where a g6 run's load generator runs, and how this process reads the server and its Prometheus: in the
cluster (a Job per point; vLLM and Prometheus through the API server's service proxy) when the run names
a stack and no --target; this machine and plain HTTP otherwise."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from benchmarks.cluster import KubeCluster, new_run_id
from benchmarks.g6.config import LAB, G6Outputs, G6Params
from benchmarks.g6.incluster import ClusterRunner, proxy_server
from benchmarks.g6.virtual import VirtualRunner
from benchmarks.harness import Endpoint, ServiceRef, endpoint, section
from benchmarks.harness.server import Server
from benchmarks.kube.stack import system_selector
from benchmarks.loadgen import LocalRunner
from benchmarks.metrics import PrometheusClient


class ClientSide(NamedTuple):
    """Where the load generator runs and how this process reads the server and its Prometheus."""

    runner: LocalRunner | ClusterRunner | VirtualRunner
    server: Server | None  # None: plain HTTP at the target URL
    prometheus: PrometheusClient | None


def vllm_endpoint(outputs: dict[str, Any]) -> Endpoint:
    """The stack's vLLM, as its benchmark outputs name it."""
    return endpoint(outputs, section(outputs, "benchmark", G6Outputs, LAB).endpoint, LAB)


def stack_cluster(client: ClientSide, outputs: dict[str, Any]) -> KubeCluster:
    """The stack's cluster, wherever the load generator runs: the in-cluster runner's, else one from the
    outputs' kubeconfig (the load sent from this machine through --target)."""
    runner = client.runner
    return runner.cluster if isinstance(runner, ClusterRunner) else KubeCluster.from_kubeconfig(outputs.get("kubeconfig") or "")


def client_side(params: G6Params, outputs: dict[str, Any] | None, cpus: int, log: Callable[[str], None]) -> ClientSide:
    """The client side of a run of `params`. Nothing is created until the runner is entered."""
    over_http = PrometheusClient.over_http(params.prometheus) if params.prometheus else None
    if params.client == "local" or outputs is None:
        if over_http is not None:
            over_http.check()  # a --prometheus URL that does not answer fails the run now, in one line
        return ClientSide(LocalRunner(), None, over_http)
    ep = vllm_endpoint(outputs)
    cluster = KubeCluster.from_kubeconfig(outputs.get("kubeconfig") or "")
    run_id = new_run_id(LAB)
    log(f"g6: run {run_id}; the load generator runs as Jobs in {ep.namespace}, labelled with it and deleted at the end")
    runner = ClusterRunner(cluster, run_id, ep.namespace, system_selector(outputs), cpus=cpus, log=log)
    # The stack's own Prometheus through the API server; a --prometheus URL of the user's, as given.
    ref = section(outputs, "prometheus", ServiceRef, LAB) if "prometheus" in outputs else None
    prometheus = over_http
    if ref is not None and params.prometheus == ref.in_cluster_url():
        prometheus = PrometheusClient.through_service_proxy(cluster, ref)
    elif prometheus is not None:
        prometheus.check()
    return ClientSide(runner, proxy_server(cluster, ep), prometheus)
