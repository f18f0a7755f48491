"""What really ran: the evidence block of every report (result.json `meta.evidence`, the report's first
section), built from API objects the benchmark read from the live cluster, and how they are read.

The block is a pure function of those objects (nodes, pods, events, the log of a one-shot nvidia-smi pod),
so a recording or a fixture gives the same block as the live run did. A fact the objects do not carry is
"not known"; a run against the simulator says "simulator": never a value made up to fill the table.

Reading them (`collect`) needs objects only the live cluster has when the run ends: its pods (the image
digests the nodes pulled, restarts), the events of the GPU nodes, and the output of nvidia-smi, which only
a pod on the GPU node can run (GKE mounts the driver's binaries, /usr/local/nvidia/bin, into containers that
request a GPU). The nvidia-smi pod is one-shot, restricted, and placed like every GPU workload; it runs only
when a GPU node is up with a GPU free, so reading the driver never scales the pool from zero or waits behind
a busy server.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from benchmarks.cluster import Cluster, KubeApiError, RunScope, WaitTimeout, wait_until
from benchmarks.harness.results import UNKNOWN, Evidence, Simulation
from benchmarks.kube import images, objects
from benchmarks.kube.objects import GPU, allocatable_gpus
from benchmarks.kube.record import warning_summary
from benchmarks.kube.stack import gpu_placement
from benchmarks.kube.timeline import event_time, phase
from facts.simulation import KWOK_NODE_ANNOTATION, REAL, SIMULATED, STATEMENT_NAME, STATEMENT_NAMESPACE

# GKE's node labels (cloud.google.com/kubernetes-engine/docs: node labels) and the well-known ones.
ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
SPOT_LABEL = "cloud.google.com/gke-spot"
PREEMPTIBLE_LABEL = "cloud.google.com/gke-preemptible"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
# The banner line of nvidia-smi's default output: "| NVIDIA-SMI 570.172.08   Driver Version: 570.172.08
# CUDA Version: 12.8 |". The CUDA version there is the newest the driver supports, not a toolkit's.
_DRIVER = re.compile(r"Driver Version:\s*([0-9][0-9.]*)")
_CUDA = re.compile(r"CUDA Version:\s*([0-9][0-9.]*)")
# Events Kubernetes files as Normal that still say something went wrong: a node lost under the run (the
# node controller's NodeNotReady and RemovingNode, pkg/controller/nodelifecycle; the kubelet's Rebooted)
# and a pod the scheduler preempted for a higher-priority one.
_NORMAL_TROUBLE = {("Node", "NodeNotReady"), ("Node", "RemovingNode"), ("Node", "Rebooted"), ("Pod", "Preempted")}
# The billing export lags the usage by hours and the GPU node bills until the autoscaler removes it
# (about 10 minutes after its last pod): the cost window runs an hour past the run.
_COST_TAIL = timedelta(hours=1)


def cluster_statement(cluster: Cluster) -> dict[str, str]:
    """The cluster's own statement of what it simulates (the local control plane writes one; GKE none)."""
    try:
        found = cluster.list("v1", "ConfigMap", STATEMENT_NAMESPACE)
    except Exception:  # a user who may not list ConfigMaps there: a real cluster says nothing anyway
        return {}
    return next((dict(c.get("data") or {}) for c in found if c["metadata"]["name"] == STATEMENT_NAME), {})


def simulation_of(statement: dict[str, str], nodes: list[dict[str, Any]]) -> Simulation | None:
    """From the cluster's statement (facts.simulation) and the nodes it showed: None for a cluster that
    states nothing and has no kwok node (GKE)."""
    kwok = sorted(n["metadata"]["name"] for n in nodes
                  if ((n.get("metadata") or {}).get("annotations") or {}).items() >= KWOK_NODE_ANNOTATION.items())  # fmt: skip
    simulated = [v for k, v in sorted(statement.items()) if k.startswith(SIMULATED)]
    if kwok:
        label = ", ".join(f"{k}={v}" for k, v in KWOK_NODE_ANNOTATION.items())
        simulated.append(f"the run saw {len(kwok)} node(s) carrying kwok's annotation {label}: {', '.join(kwok)}")
    if not simulated:
        return None
    return Simulation(real=[v for k, v in sorted(statement.items()) if k.startswith(REAL)], simulated=simulated)


def simulation_markdown(s: Simulation) -> str:
    """## What was real and what was simulated: the report's section right after the verdict."""
    return "\n".join([
        "## What was real and what was simulated", "",
        "This run was not on GKE: part of its cluster was simulated. Every figure below that depends on a "
        "simulated part (a pod's run time, its logs, a GPU) is the simulation's, not a measurement.", "",
        "Real:", "", *([f"- {_cell(x)}" for x in s.real] or ["- nothing the cluster stated"]), "",
        "Simulated:", "", *[f"- {_cell(x)}" for x in s.simulated], "",
    ])  # fmt: skip


def nvidia_smi_versions(log: str | None) -> tuple[str, str]:
    """(driver, CUDA) from nvidia-smi's banner, each "not known" when the log does not carry it."""
    driver, cuda = _DRIVER.search(log or ""), _CUDA.search(log or "")
    return (driver.group(1) if driver else UNKNOWN), (cuda.group(1) if cuda else UNKNOWN)


def gpu_nodes(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [n for n in nodes if _labels(n).get(ACCELERATOR_LABEL)]


def image_digests(pods: list[dict[str, Any]]) -> dict[str, str]:
    """Image as the pod spec named it -> the imageID the kubelet reports (the digest actually pulled)."""
    out: dict[str, str] = {}
    for pod in pods:
        status = pod.get("status") or {}
        for c in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
            if c.get("image") and c.get("imageID"):
                out[c["image"]] = c["imageID"]
    return dict(sorted(out.items()))


def first_time_problems(
    events: list[dict[str, Any]], pods: list[dict[str, Any]], started: datetime, finished: datetime
) -> list[str]:
    """What did not work first time in [started, finished]: every Warning event (FailedScheduling with
    the scheduler's reason, image pull back-offs, evictions, Job back-off limits), pods preempted, nodes
    that went away, then pods that failed and containers that restarted or were OOM-killed, one line each."""
    in_window = [e for e in events if (t := event_time(e)) is None or started <= t <= finished]
    trouble = [
        {**e, "type": "Warning"}
        for e in in_window
        if e.get("type") != "Warning" and ((e.get("involvedObject") or {}).get("kind"), e.get("reason")) in _NORMAL_TROUBLE
    ]  # fmt: skip
    lines = warning_summary([e for e in in_window if e.get("type") == "Warning"] + trouble)
    seen: set[tuple[str, str]] = set()
    for pod in reversed(pods):  # the last state of each pod counts
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        name = f"{meta.get('namespace')}/{meta.get('name')}"
        for c in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
            last = (c.get("lastState") or {}).get("terminated") or {}
            now = (c.get("state") or {}).get("terminated") or {}
            reason = last.get("reason") if c.get("restartCount") else now.get("reason")
            if (name, c.get("name", "")) in seen or not (c.get("restartCount") or reason == "OOMKilled"):
                continue
            seen.add((name, c.get("name", "")))
            lines.append(
                f"pod {name} container {c.get('name')}: restarted {c.get('restartCount') or 0} time(s)"
                + (f", last ended {reason} (exit {last.get('exitCode', now.get('exitCode'))})" if reason else "")
            )
        if status.get("phase") == "Failed" and status.get("reason") and (name, "") not in seen:
            seen.add((name, ""))
            lines.append(f"pod {name} failed: {status['reason']}: {status.get('message', '').strip()}")
    return lines


# The billing export attributes cost by the `lab` label of the resources a stack creates; a stack on an
# existing cluster creates none, so no `make cost` line could give its run's cost.
NOT_BILLED = ("none: the run was on an existing cluster (cluster.target existing), whose nodes carry no billing "
              "label of this stack; where the lab runs the cost exporter, its list-price figures stand in")


def make_cost_line(lab: str, started: datetime, finished: datetime) -> str:
    """The `make cost` command that gives the billed cost of this run's window once the export caught up."""
    since = started.replace(minute=0, second=0, microsecond=0)
    until = (finished + _COST_TAIL).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    return (f"make cost LAB={lab} SINCE={since:%Y-%m-%dT%H:%M} UNTIL={until:%Y-%m-%dT%H:%M} "
            "BILLING_TABLE=PROJECT_ID.DATASET.TABLE")  # fmt: skip


def from_cluster(
    *,
    outputs: dict[str, Any],
    server_version: dict[str, Any],
    nodes: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    events: list[dict[str, Any]],
    nvidia_smi: str | None,
    started: datetime,
    finished: datetime,
) -> Evidence:
    """The evidence of a run on a cluster, from what it read there (GPU node facts from the GPU nodes
    seen; several distinct values are listed, comma-separated)."""
    gpu = gpu_nodes(nodes)
    driver, cuda = nvidia_smi_versions(nvidia_smi)

    def of_gpu_nodes(value) -> str:
        found = sorted({v for n in gpu if (v := value(n))})
        return ", ".join(found) or UNKNOWN

    def image(node: dict[str, Any]) -> str | None:
        info = (node.get("status") or {}).get("nodeInfo") or {}
        if not info.get("osImage"):
            return None
        return (f"{info['osImage']} (kernel {info.get('kernelVersion', '?')}, kubelet {info.get('kubeletVersion', '?')}, "
                f"{info.get('containerRuntimeVersion', '?')})")  # fmt: skip

    def spot(node: dict[str, Any]) -> str:
        labels = _labels(node)
        return "spot" if labels.get(SPOT_LABEL) == "true" or labels.get(PREEMPTIBLE_LABEL) == "true" else "on-demand"

    lab = str((outputs.get("labels") or {}).get("lab") or outputs.get("lab") or "LAB")
    return Evidence(
        gke_version=server_version.get("gitVersion") or server_version.get("git_version") or UNKNOWN,
        node_image=of_gpu_nodes(image),
        driver_version=driver,
        cuda_version=cuda,
        image_digests=image_digests(pods) or UNKNOWN,
        machine_type=of_gpu_nodes(lambda n: _labels(n).get(INSTANCE_TYPE_LABEL)),
        zone=of_gpu_nodes(lambda n: _labels(n).get(ZONE_LABEL)),
        spot=of_gpu_nodes(spot),
        config_sha256=str(outputs.get("config_sha256") or UNKNOWN),
        make_cost=NOT_BILLED if outputs.get("cluster_target") == "existing" else make_cost_line(lab, started, finished),
        first_time_problems=first_time_problems(events, pods, started, finished),
    )


def pods_in(tree: Any) -> list[dict[str, Any]]:
    """Every pod object anywhere in `tree` (a recording's snapshots and final objects), in the order seen."""
    found: list[dict[str, Any]] = []
    stack = [tree]
    while stack:
        node = stack.pop(0)
        if isinstance(node, dict):
            if "containerStatuses" in (node.get("status") or {}) and "metadata" in node:
                found.append(node)
                continue
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


_LABELS = {
    "gke_version": "GKE version (API server)",
    "node_image": "node image (GPU node)",
    "driver_version": "NVIDIA driver (nvidia-smi)",
    "cuda_version": "CUDA version the driver supports (nvidia-smi)",
    "machine_type": "GPU node machine type",
    "zone": "GPU node zone",
    "spot": "spot or on-demand",
    "config_sha256": "stack config sha256",
    "make_cost": "billed cost, once the export has caught up",
}


def markdown(e: Evidence) -> str:
    """## Evidence: the report's first section."""
    rows = [f"| {label} | {_cell(getattr(e, key))} |" for key, label in _LABELS.items()]
    digests = (
        [f"- `{image}`: `{pulled}`" for image, pulled in e.image_digests.items()]
        if isinstance(e.image_digests, dict) else [f"- {e.image_digests}"]
    )  # fmt: skip
    problems = (
        [f"- {_cell(p)}" for p in e.first_time_problems] or ["- nothing: no warning events, restarts or node losses"]
        if isinstance(e.first_time_problems, list) else [f"- {e.first_time_problems}"]
    )  # fmt: skip
    return "\n".join([
        "## Evidence: what really ran", "", "| | |", "|---|---|", *rows, "",
        "Images pulled (as asked -> the digest the node pulled):", "", *digests, "",
        "What did not work first time (events, restarts and node losses of the run window):", "", *problems, "",
    ])  # fmt: skip


def _cell(value: object) -> str:
    text = f"`{value}`" if isinstance(value, str) and value.startswith("make cost") else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _labels(node: dict[str, Any]) -> dict[str, str]:
    return (node.get("metadata") or {}).get("labels") or {}


# --- reading it from the live cluster ---------------------------------------------------------------

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
        if (allocatable_gpus(node) or 0) > held.get(node["metadata"]["name"], 0):
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
) -> Evidence:
    """The evidence of a run that keeps no recording (g6), read from the cluster as it ends; what cannot
    be read is "not known" and the reason is among its first-time problems."""
    try:
        with RunScope(cluster, run_id, outputs.get("lab") or "lab", log) as scope:
            smi = run_nvidia_smi(scope, outputs, log=log)
        return from_cluster(
            outputs=outputs, server_version=cluster.server_version(), nodes=cluster.list("v1", "Node"),
            pods=final_pods(cluster, namespaces),
            events=[e for ns in dict.fromkeys(namespaces) for e in cluster.list("v1", "Event", ns)]
            + node_events(cluster, started),
            nvidia_smi=smi, started=started, finished=finished,
        )  # fmt: skip
    except Exception as e:  # the evidence must never cost the measurement: it is then "not known", and why
        return Evidence.offline().model_copy(
            update={"first_time_problems": [f"evidence not read from the cluster: {e}"],
                    "make_cost": make_cost_line(str(outputs.get("lab") or "LAB"), started, finished)}
        )  # fmt: skip
