"""The lab's nodes as kwok simulates them, and the Stages that play their pods' lifecycle.

A lab's config (read through the project's typed loader) decides the nodes: `system_min_nodes`
system nodes of `system_machine_type`, and `gpu_max_nodes` L4 nodes of `gpu_machine_type` (the pool
at its maximum: no cluster autoscaler runs here). Each carries what GKE puts on a node of that pool:
the pool's labels and taint, `cloud.google.com/gke-*` labels, capacity of the machine type and
allocatable after GKE's reservations, `nvidia.com/gpu` = GPUs per node x time-slicing replicas.

kwok makes the nodes Ready and keeps their leases; its Stages (below) make a pod bound to them
Running, a Job's pod Succeeded after the delay its annotation declares, and a deleted pod gone. No
container runs: scheduling, admission and controllers are real, pods are not.
"""

from __future__ import annotations

from typing import Any

from components.cluster import POOL_LABEL, SYSTEM_DISK_GB, SYSTEM_NODE_SELECTOR, SYSTEM_POOL_NAME
from components.gpu_pool import GPU_POOL_NAME, GPU_RESOURCE, GPU_TAINT, POOL_PLACEMENT
from components.placement import Placement
from facts.machines import (
    GKE_CPU_RESERVED,
    GKE_EVICTION_THRESHOLD_MIB,
    GKE_MEMORY_RESERVED,
    MACHINE_SHAPES,
)
from facts.simulation import KWOK_NODE_ANNOTATION
from stacks.config import LabConfig

KWOK_ANNOTATION = KWOK_NODE_ANNOTATION  # the nodes kwok manages
# Where a lab's pods land on these nodes: as on GKE's pools, whose labels and taint each node carries.
PLACEMENT = Placement(system_node_selector=dict(SYSTEM_NODE_SELECTOR), gpu=POOL_PLACEMENT)
MAX_PODS = 110  # GKE Standard's default maximum pods per node
# A Job's pod succeeds this long after it runs (the control plane's `job_seconds`) unless it declares
# its own delay in the annotation kwok's own Stages read (pod-complete.stage.kwok.x-k8s.io/delay).
JOB_DELAY_ANNOTATION = "pod-complete.stage.kwok.x-k8s.io/delay"
DEFAULT_JOB_S = 1.0
NODE_LEASE_SECONDS = 40  # as a kubelet's default lease; kwok renews it
KUBELET_ADDRESS = "127.0.0.1"
# With a real node (localcluster.realnode), the first node of the GPU pool is it; kwok simulates the rest.
REAL_NODE_NAME = f"{GPU_POOL_NAME}-0"


def _reserved(amount: float, tiers: tuple[tuple[float, float], ...]) -> float:
    reserved, left = 0.0, amount
    for size, share in tiers:
        step = min(left, size)
        reserved, left = reserved + step * share, left - step
    return reserved


def resources(machine_type: str, disk_gb: int) -> tuple[dict[str, str], dict[str, str]]:
    """(capacity, allocatable) of a GKE node of this machine type, as the kubelet reports them."""
    vcpus, memory_gib = MACHINE_SHAPES[machine_type]
    memory_mib = memory_gib * 1024
    cpu_m = vcpus * 1000 - round(_reserved(vcpus, GKE_CPU_RESERVED) * 1000)
    memory_alloc_mib = memory_mib - _reserved(memory_gib, GKE_MEMORY_RESERVED) * 1024 - GKE_EVICTION_THRESHOLD_MIB
    capacity = {"cpu": str(vcpus), "memory": f"{memory_mib}Mi", "pods": str(MAX_PODS), "ephemeral-storage": f"{disk_gb}Gi"}
    allocatable = {**capacity, "cpu": f"{cpu_m}m", "memory": f"{int(memory_alloc_mib * 1024)}Ki"}
    return capacity, allocatable


def _node(name: str, cfg: LabConfig, *, pool: str, machine_type: str, spot: bool, disk_gb: int, kubelet_port: int) -> dict[str, Any]:
    capacity, allocatable = resources(machine_type, disk_gb)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": dict(KWOK_ANNOTATION),
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": machine_type,
                "topology.kubernetes.io/region": cfg.region,
                "topology.kubernetes.io/zone": cfg.cluster_zone,
                "cloud.google.com/gke-nodepool": pool,
                POOL_LABEL: pool,
                **({"cloud.google.com/gke-spot": "true"} if spot else {}),
            },
        },
        "spec": {},
        # A node registers with its status, as a kubelet does; kwok adds conditions. Its one address is
        # loopback and its kubelet endpoint kwok's own server: what the API server dials for a pod's log
        # (kwok answers) never leaves this machine, as a private node address or a host name would.
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "addresses": [{"type": "InternalIP", "address": KUBELET_ADDRESS}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
        },
    }


def lab_nodes(cfg: LabConfig, kubelet_port: int) -> list[dict[str, Any]]:
    """The Node objects of the lab's system pool and GPU pool, their kubelet API served by kwok on
    127.0.0.1:`kubelet_port`."""
    nodes = [
        _node(
            f"{SYSTEM_POOL_NAME}-{i}", cfg, pool=SYSTEM_POOL_NAME, machine_type=cfg.system_machine_type,
            spot=cfg.system_spot, disk_gb=SYSTEM_DISK_GB, kubelet_port=kubelet_port,
        )
        for i in range(cfg.system_min_nodes)
    ]
    capacity = cfg.pool_capacity
    gpus = str(capacity.per_node)
    for i in range(cfg.gpu_max_nodes):
        node = _node(
            f"{GPU_POOL_NAME}-{i}", cfg, pool=GPU_POOL_NAME, machine_type=cfg.gpu_machine_type,
            spot=cfg.gpu_spot, disk_gb=cfg.gpu_disk_gb, kubelet_port=kubelet_port,
        )
        node["metadata"]["labels"]["cloud.google.com/gke-accelerator"] = cfg.gpu_accelerator
        if cfg.gpu_sharing.enabled and cfg.gpu_sharing.mode == "gke":
            # The labels GKE puts on a time-sharing pool's nodes (GPU time-sharing how-to).
            node["metadata"]["labels"] |= {
                "cloud.google.com/gke-gpu-sharing-strategy": "time-sharing",
                "cloud.google.com/gke-max-shared-clients-per-gpu": str(capacity.sharing_replicas),
            }
        node["spec"]["taints"] = [dict(GPU_TAINT)]
        for field in ("capacity", "allocatable"):
            node["status"][field][GPU_RESOURCE] = gpus
        nodes.append(node)
    return nodes


def in_gpu_pool(node: dict[str, Any]) -> bool:
    return node["metadata"]["labels"].get(POOL_LABEL) == GPU_POOL_NAME


def not_schedulable(declared: list[dict[str, Any]], listed: list[dict[str, Any]]) -> list[str]:
    """Why each declared node cannot take a pod yet, as the API server lists them (empty once all can).

    Ready is not enough: the TaintNodesByCondition admission plugin creates every node with the
    node.kubernetes.io/not-ready taint, which the node lifecycle controller lifts only after it has
    seen the node Ready; a pod created in between is refused for that taint."""
    by_name = {n["metadata"]["name"]: n for n in listed}
    reasons = []
    for want in declared:
        name, node = want["metadata"]["name"], by_name.get(want["metadata"]["name"])
        if node is None:
            reasons.append(f"{name} not registered")
        elif not any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", [])):
            reasons.append(f"{name} not Ready")
        elif extra := [t["key"] for t in node["spec"].get("taints", []) if t not in want["spec"].get("taints", [])]:
            reasons.append(f"{name} still tainted {', '.join(extra)}")
    return reasons


def simulated(node_list: list[dict[str, Any]], kwok_version: str, job_seconds: float) -> dict[str, str]:
    """What of the cluster kwok plays, as the cluster's statement says it (facts.simulation)."""
    shapes = []
    for n in node_list:
        labels, gpus = n["metadata"]["labels"], n["status"]["allocatable"].get(GPU_RESOURCE)
        shapes.append(f"{n['metadata']['name']} ({labels['node.kubernetes.io/instance-type']}"
                      + (f", {gpus} {GPU_RESOURCE}" if gpus else "") + ")")  # fmt: skip
    return {
        "nodes": f"{len(node_list)} nodes by kwok {kwok_version} (sigs.k8s.io/kwok), shaped like the lab's pools: "
        f"{', '.join(shapes)}; no VM, no kubelet, no GPU",
        "pods": "no container runs and no image is pulled: kwok marks a bound pod Running at once, a Job's pod "
        f"Succeeded {job_seconds:g} s later (or after its {JOB_DELAY_ANNOTATION} annotation) and a deleted pod gone; "
        "no pod writes a log",
    }


def _stage(name: str, kind: str, match: list[tuple[str, str, list[str] | None]], next_: dict, delay: dict | None = None) -> dict:
    spec: dict[str, Any] = {
        "resourceRef": {"apiGroup": "v1", "kind": kind},
        "selector": {
            "matchExpressions": [
                {"key": key, "operator": op, **({"values": values} if values else {})} for key, op, values in match
            ]
        },
        "next": next_,
    }
    if delay:
        spec["delay"] = delay
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name}, "spec": spec}


_NOT_DELETED = (".metadata.deletionTimestamp", "DoesNotExist", None)
_NODE_READY = """\
{{ $now := Now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
nodeInfo:
  architecture: amd64
  operatingSystem: linux
  kubeletVersion: {{ printf "kwok-%s" Version | Quote }}
  kubeProxyVersion: {{ printf "kwok-%s" Version | Quote }}
  containerRuntimeVersion: {{ printf "kwok-%s" Version | Quote }}
phase: Running
"""
# Every container running (init containers done), the pod Ready, an IP from kwok's range.
_POD_RUNNING = """\
{{ $now := Now }}
conditions:
{{ range list "Initialized" "Ready" "ContainersReady" }}
- type: {{ . }}
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
{{ end }}
initContainerStatuses:
{{ range .spec.initContainers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: true
  restartCount: 0
  state:
    terminated:
      exitCode: 0
      reason: Completed
      startedAt: {{ $now | Quote }}
      finishedAt: {{ $now | Quote }}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: true
  started: true
  restartCount: 0
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
podIP: {{ PodIPWith .spec.nodeName (or .spec.hostNetwork false) .metadata.uid .metadata.name .metadata.namespace | Quote }}
phase: Running
startTime: {{ $now | Quote }}
"""
_POD_SUCCEEDED = """\
{{ $now := Now }}
conditions:
{{ range list "Ready" "ContainersReady" }}
- type: {{ . }}
  status: "False"
  reason: PodCompleted
  lastTransitionTime: {{ $now | Quote }}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: false
  started: false
  restartCount: 0
  state:
    terminated:
      exitCode: 0
      reason: Completed
      finishedAt: {{ $now | Quote }}
{{ end }}
phase: Succeeded
"""


def stages(job_seconds: float = DEFAULT_JOB_S) -> list[dict[str, Any]]:
    """kwok's Stages: node ready; pod running, a Job's pod succeeded after its delay (`job_seconds`
    unless it declares one); deleted pod gone."""
    return [
        _stage(
            "node-ready",
            "Node",
            [('.status.conditions.[] | select( .type == "Ready" ) | .status', "NotIn", ["True"])],
            {"statusTemplate": _NODE_READY},
        ),
        _stage(
            "pod-running",
            "Pod",
            [_NOT_DELETED, (".status.phase", "In", ["Pending"]), (".status.podIP", "DoesNotExist", None)],
            {"statusTemplate": _POD_RUNNING},
        ),
        _stage(
            "job-pod-succeeded",
            "Pod",
            [_NOT_DELETED, (".status.phase", "In", ["Running"]), (".metadata.ownerReferences.[].kind", "In", ["Job"])],
            {"statusTemplate": _POD_SUCCEEDED},
            delay={
                "durationMilliseconds": round(job_seconds * 1000),
                "durationFrom": {"expressionFrom": f'.metadata.annotations["{JOB_DELAY_ANNOTATION}"]'},
            },
        ),
        # No kubelet: a deleted pod is removed at once, finalizers cleared, or it would stay Terminating.
        _stage(
            "pod-gone",
            "Pod",
            [(".metadata.deletionTimestamp", "Exists", None)],
            {"finalizers": {"empty": True}, "delete": True},
        ),
    ]


def kwok_flags(pods_cidr: str) -> list[str]:
    """kwok's options, as flags: with a KwokConfiguration in its file kwok would skip its own defaults."""
    selector = ",".join(f"{k}={v}" for k, v in KWOK_ANNOTATION.items())
    return [
        f"--manage-nodes-with-annotation-selector={selector}",
        f"--cidr={pods_cidr}",
        f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
    ]
