"""The cost exporter: Prometheus gauges of what each node, namespace and pod costs per hour at list
price, so idle spend is visible while a lab runs.

Each node's hourly price (its machine type from node.kubernetes.io/instance-type, spot from
cloud.google.com/gke-spot) comes from the price table rendered into prices.json at deploy time
(facts/prices.py). The price is split into a GPU part (the machine's `gpu_share`), and the rest
into CPU (`cpu_share_of_vm`) and memory. A pod pays for what it requests, as a fraction of the
node's allocatable amount of each; what no pod requests is the node's idle cost.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field

from components.scripts.kube_api import KubeApi, KubeApiError

GPU = "nvidia.com/gpu"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
SPOT_LABELS = ("cloud.google.com/gke-spot", "cloud.google.com/gke-preemptible")
_QUANTITY = re.compile(r"^([0-9.eE+-]+)([a-zA-Z]*)$")
_SUFFIX = {
    "": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}


def quantity(text: str | int | float | None) -> float:
    """A Kubernetes quantity ("250m", "1Gi", "2") as a number (cores, bytes, devices)."""
    if text is None:
        return 0.0
    match = _QUANTITY.match(str(text))
    if not match or match.group(2) not in _SUFFIX:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    return float(match.group(1)) * _SUFFIX[match.group(2)]


@dataclass(frozen=True)
class NodeCost:
    name: str
    machine_type: str
    spot: bool
    per_hour: float
    gpu_per_hour: float
    cpu_per_hour: float
    memory_per_hour: float
    cpu: float  # allocatable cores
    memory: float  # allocatable bytes
    gpus: float  # allocatable GPUs (time-sharing: GPUs x clients per GPU)


@dataclass
class Snapshot:
    nodes: dict[str, NodeCost] = field(default_factory=dict)
    unpriced: list[str] = field(default_factory=list)  # nodes whose machine type has no price
    # (namespace, pod, node, resource) -> USD per hour
    pods: dict[tuple[str, str, str, str], float] = field(default_factory=dict)

    def namespaces(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for (namespace, _, _, _), cost in self.pods.items():
            totals[namespace] = totals.get(namespace, 0.0) + cost
        return totals

    def idle(self) -> dict[str, float]:
        used = {name: 0.0 for name in self.nodes}
        for (_, _, node, _), cost in self.pods.items():
            used[node] = used.get(node, 0.0) + cost
        return {name: max(node.per_hour - used[name], 0.0) for name, node in self.nodes.items()}


def node_cost(node: dict, prices: dict) -> NodeCost | None:
    labels = node["metadata"].get("labels") or {}
    machine = labels.get(INSTANCE_TYPE, "")
    price = prices["machines"].get(machine)
    if price is None:
        return None
    spot = any(labels.get(label) == "true" for label in SPOT_LABELS)
    per_hour = price["spot" if spot else "on_demand"]
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    gpus = quantity(allocatable.get(GPU))
    gpu_part = per_hour * price["gpu_share"] if gpus else 0.0
    rest = per_hour - gpu_part
    return NodeCost(
        name=node["metadata"]["name"],
        machine_type=machine,
        spot=spot,
        per_hour=per_hour,
        gpu_per_hour=gpu_part,
        cpu_per_hour=rest * prices["cpu_share_of_vm"],
        memory_per_hour=rest * (1 - prices["cpu_share_of_vm"]),
        cpu=quantity(allocatable.get("cpu")),
        memory=quantity(allocatable.get("memory")),
        gpus=gpus,
    )


def pod_requests(pod: dict) -> dict[str, float]:
    """cpu, memory and GPUs a pod holds: its containers' requests (a limit alone counts as the
    request, as Kubernetes defaults it), or its largest init container's when that is larger."""
    def one(container: dict) -> dict[str, float]:
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        return {r: quantity(requests.get(r, limits.get(r))) for r in ("cpu", "memory", GPU)}

    spec = pod.get("spec") or {}
    main = [one(c) for c in spec.get("containers") or []]
    init = [one(c) for c in spec.get("initContainers") or []]
    return {r: max(sum(c[r] for c in main), max((c[r] for c in init), default=0.0)) for r in ("cpu", "memory", GPU)}


def allocate(nodes: list[dict], pods: list[dict], prices: dict) -> Snapshot:
    """Each scheduled, running pod's hourly cost per resource; pure, for tests."""
    snapshot = Snapshot()
    for node in nodes:
        cost = node_cost(node, prices)
        if cost is None:
            snapshot.unpriced.append(node["metadata"]["name"])
        else:
            snapshot.nodes[cost.name] = cost
    for pod in pods:
        node = snapshot.nodes.get((pod.get("spec") or {}).get("nodeName", ""))
        if node is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        requested = pod_requests(pod)
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"], node.name)
        for resource, share_of, cost in (
            ("gpu", requested[GPU] / node.gpus if node.gpus else 0.0, node.gpu_per_hour),
            ("cpu", requested["cpu"] / node.cpu if node.cpu else 0.0, node.cpu_per_hour),
            ("memory", requested["memory"] / node.memory if node.memory else 0.0, node.memory_per_hour),
        ):
            if share_of:
                snapshot.pods[(*key, resource)] = min(share_of, 1.0) * cost
    return snapshot


class Gauges:
    """The exported gauges; `publish` replaces every value with a new snapshot's."""

    def __init__(self, registry=None):
        from prometheus_client import REGISTRY, Gauge

        registry = registry or REGISTRY
        self.node = Gauge("gke_ml_labs_node_cost_usd_per_hour", "List price of the node per hour",
                          ["node", "machine_type", "spot"], registry=registry)
        self.idle = Gauge("gke_ml_labs_node_idle_cost_usd_per_hour", "Part of the node's price no pod requests",
                          ["node"], registry=registry)
        self.pod = Gauge("gke_ml_labs_pod_cost_usd_per_hour", "A pod's share of its node's price per hour",
                         ["namespace", "pod", "node", "resource"], registry=registry)
        self.namespace = Gauge("gke_ml_labs_namespace_cost_usd_per_hour", "Sum of the pods' costs per namespace",
                               ["namespace"], registry=registry)
        self.unpriced = Gauge("gke_ml_labs_unpriced_nodes", "Nodes whose machine type has no price in the table",
                              registry=registry)

    def publish(self, snap: Snapshot) -> None:
        for gauge in (self.node, self.idle, self.pod, self.namespace):
            gauge.clear()  # pods and nodes that are gone must not keep their last value
        for node in snap.nodes.values():
            self.node.labels(node.name, node.machine_type, str(node.spot).lower()).set(node.per_hour)
        for name, cost in snap.idle().items():
            self.idle.labels(name).set(cost)
        for labels, cost in snap.pods.items():
            self.pod.labels(*labels).set(cost)
        for namespace, cost in snap.namespaces().items():
            self.namespace.labels(namespace).set(cost)
        self.unpriced.set(len(snap.unpriced))


def serve(api: KubeApi, prices: dict, port: int, refresh_s: int) -> None:
    """Re-read nodes and pods every `refresh_s` seconds and publish; runs until the pod stops."""
    from prometheus_client import start_http_server

    gauges = Gauges()
    start_http_server(port)
    while True:
        try:
            gauges.publish(allocate(api.list("/api/v1/nodes"), api.list("/api/v1/pods"), prices))
        except KubeApiError as e:
            print(f"cost-exporter: cannot read nodes/pods: {e}", flush=True)
        time.sleep(refresh_s)


if __name__ == "__main__":
    with open(os.environ["PRICES_FILE"]) as f:
        table = json.load(f)
    serve(KubeApi.in_cluster(), table, int(os.environ.get("PORT", "8080")), int(os.environ.get("REFRESH_SECONDS", "60")))
