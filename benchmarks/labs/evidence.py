"""Reading the evidence of a run from the live cluster, for every lab's report and g6's.

What benchmarks.harness.evidence turns into the report's first section needs objects only the live
cluster has when the run ends: its pods (the image digests the nodes pulled, restarts), the events of
the GPU nodes, and the output of nvidia-smi, which only a pod on the GPU node can run (GKE mounts the
driver's binaries, /usr/local/nvidia/bin, into containers that request a GPU). The nvidia-smi pod is
one-shot, restricted, and placed like every GPU workload; it runs only when a GPU node is up with a
GPU free, so reading the driver never scales the pool from zero or waits behind a busy server.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any, Callable

from benchmarks.cluster import Cluster, KubeApiError, RunScope, WaitTimeout, wait_until
from benchmarks.harness import evidence
from benchmarks.labs import images, objects
from benchmarks.labs.stack import gpu_placement
from benchmarks.labs.timeline import event_time, phase

GPU = "nvidia.com/gpu"
NVIDIA_SMI = "/usr/local/nvidia/bin/nvidia-smi"
# The pod's namespace: g1's probes run there too, and every lab's cluster has it.
NAMESPACE = "default"
# A small image already on the node when a lab's Python pods ran there; nvidia-smi needs glibc.
IMAGE = images.PYTHON
TIMEOUT_S = 180.0


def nvidia_smi_pod(outputs: dict[str, Any], run_id: str) -> dict[str, Any]:
    selector, tolerations = gpu_placement(outputs)
    return objects.pod(
        f"{outputs.get('lab') or 'lab'}-nvidia-smi-{run_id[-4:]}",
        NAMESPACE,
        objects.pod_spec(
            [objects.container("nvidia-smi", IMAGE, [NVIDIA_SMI], requests={"cpu": "10m", "memory": "32Mi"},
                               limits={GPU: "1", "cpu": "200m", "memory": "64Mi"})],  # fmt: skip
            node_selector=selector,
            tolerations=tolerations,
        ),
    )


def free_gpu_node(cluster: Cluster, outputs: dict[str, Any]) -> str | None:
    """A GPU node of the pool that is up with a GPU no pod holds, or None."""
    selector, _ = gpu_placement(outputs)
    held: dict[str, int] = {}
    for pod in cluster.list("v1", "Pod"):
        node = (pod.get("spec") or {}).get("nodeName")
        if node and phase(pod) in ("Pending", "Running"):
            held[node] = held.get(node, 0) + sum(
                int(((c.get("resources") or {}).get("limits") or {}).get(GPU, 0)) for c in pod["spec"]["containers"]
            )
    for node in cluster.list("v1", "Node", None, ",".join(f"{k}={v}" for k, v in selector.items())):
        allocatable = int(((node.get("status") or {}).get("allocatable") or {}).get(GPU, "0"))
        if allocatable > held.get(node["metadata"]["name"], 0):
            return node["metadata"]["name"]
    return None


def run_nvidia_smi(
    scope: RunScope, outputs: dict[str, Any], timeout_s: float = TIMEOUT_S, log: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep,
) -> str | None:
    """nvidia-smi's output from a one-shot pod on a free GPU node (deleted with the run's objects), or
    None when no GPU node is free or the pod did not finish in time (said in the log)."""
    cluster = scope.cluster
    name = nvidia_smi_pod(outputs, scope.run_id)["metadata"]["name"]

    def poll() -> str | None:
        found = [p for p in cluster.list("v1", "Pod", NAMESPACE) if p["metadata"]["name"] == name]
        return phase(found[0]) if found else None

    try:
        if free_gpu_node(cluster, outputs) is None:
            log("evidence: no GPU node with a free GPU; the driver and CUDA versions stay 'not known'")
            return None
        scope.create(nvidia_smi_pod(outputs, scope.run_id))
        wait_until(f"nvidia-smi pod {name}", poll, lambda p: p in ("Succeeded", "Failed"), timeout_s, 3.0, log,
                   sleep=sleep)  # fmt: skip
        return cluster.pod_log(NAMESPACE, name)
    except (WaitTimeout, KubeApiError) as e:
        log(f"evidence: nvidia-smi did not run ({e}); the driver and CUDA versions stay 'not known'")
        return None


def final_pods(cluster: Cluster, namespaces: list[str]) -> list[dict[str, Any]]:
    """Every pod of the run's namespaces as the run ends: what the nodes pulled and what restarted."""
    return [p for ns in dict.fromkeys(namespaces) for p in cluster.list("v1", "Pod", ns)]


def node_events(cluster: Cluster, started: datetime) -> list[dict[str, Any]]:
    """The Node events (kubelet, node controller, autoscaler: all in `default`) since the run started."""
    return [
        e for e in cluster.list("v1", "Event", NAMESPACE)
        if (e.get("involvedObject") or {}).get("kind") == "Node"
        and ((t := event_time(e)) is None or t >= started)
    ]  # fmt: skip


def collect(
    cluster: Cluster, outputs: dict[str, Any], namespaces: list[str], run_id: str, started: datetime,
    finished: datetime, log: Callable[[str], None] = print,
) -> evidence.Evidence:
    """The evidence of a run that keeps no recording (g6), read from the cluster as it ends; what cannot
    be read is "not known" and the reason is among its first-time problems."""
    try:
        with RunScope(cluster, run_id, outputs.get("lab") or "lab", log) as scope:
            smi = run_nvidia_smi(scope, outputs, log=log)
        return evidence.from_cluster(
            outputs=outputs, server_version=cluster.server_version(), nodes=cluster.list("v1", "Node"),
            pods=final_pods(cluster, namespaces),
            events=[e for ns in dict.fromkeys(namespaces) for e in cluster.list("v1", "Event", ns)]
            + node_events(cluster, started),
            nvidia_smi=smi, started=started, finished=finished,
        )  # fmt: skip
    except Exception as e:  # the evidence must never cost the measurement: it is then "not known", and why
        return evidence.Evidence.offline().model_copy(
            update={"first_time_problems": [f"evidence not read from the cluster: {e}"],
                    "make_cost": evidence.make_cost_line(str(outputs.get("lab") or "LAB"), started, finished)}
        )  # fmt: skip
