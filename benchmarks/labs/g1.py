"""g1: the GPU is visible to the scheduler, only GPU workloads land on GPU nodes, DCGM is scraped.

Two pods: a GPU probe (requests one `nvidia.com/gpu`, tolerates the taint, selects the pool) that
makes the pool scale from zero, and a pod that selects the GPU pool but has no toleration. From the
Node objects, the pods and the events we time node created -> Ready -> GPU allocatable -> probe
scheduled, show the untolerated pod is never placed (with the scheduler's FailedScheduling text as
evidence), and ask Prometheus for the DCGM series of the GPU node.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.cluster import KubeApiError, wait_until
from benchmarks.harness import ServiceRef
from benchmarks.kube import evidence, images, objects
from benchmarks.kube.errors import LabError
from benchmarks.kube.objects import GPU, allocatable_gpus
from benchmarks.kube.record import Recording, Snapshot
from benchmarks.kube.stack import LabParams, gpu_placement, lab_params, require_output
from benchmarks.kube.timeline import condition_time, event_time, parse_time, phase, seconds_between
from benchmarks.labs import live
from benchmarks.labs.live import LabSession, now
from benchmarks.labs.plotting import timeline_plot
from benchmarks.labs.result import Check, Frozen, LabResult, common_fields
from benchmarks.metrics import MetricsError, PrometheusClient, vector

LAB = "g1"
TITLE = "GPU scheduling and DCGM"
DEFAULT_TIMEOUT_S = 1200.0  # a GPU node from zero can take ~15 min before the GPU is allocatable
SECTION = "observability"
DCGM_QUERY = "count by (Hostname, hostname, DCGM_FI_DRIVER_VERSION, modelName) (DCGM_FI_DEV_GPU_UTIL)"


class Params(LabParams):
    """outputs.benchmark.observability; the probe pods go to `namespace` (the lab has no own one)."""

    dcgm_exporter: str
    namespace: str = "default"


class Stage(Frozen):
    name: str
    at: datetime | None
    after_s: float | None  # seconds after the probe pod was created


class G1Result(LabResult):
    gpu_node: str | None
    scaled_from_zero: bool
    stages: list[Stage]
    gpu_allocatable: int
    untolerated_pod_node: str | None
    failed_scheduling: list[str]
    dcgm_series: list[dict[str, str]]
    nvidia_smi: str | None = None  # what the probe's nvidia-smi printed on the GPU node


def probe_name(run_id: str) -> str:
    return f"g1-gpu-probe-{run_id[-4:]}"


def untolerated_name(run_id: str) -> str:
    return f"g1-no-toleration-{run_id[-4:]}"


def build_workloads(outputs: dict[str, Any], run_id: str = "manual") -> list[dict[str, Any]]:
    params = lab_params(outputs, LAB, Params, SECTION)
    selector, tolerations = gpu_placement(outputs)
    probe = objects.pod(
        probe_name(run_id),
        params.namespace,
        objects.pod_spec(
            # It prints nvidia-smi first (the driver and CUDA versions of the report's evidence), then
            # holds the GPU; an image with glibc, since GKE mounts the driver's own nvidia-smi.
            [objects.container("probe", evidence.IMAGE, ["sh", "-c", f"{evidence.NVIDIA_SMI}; exec sleep 900"],
                               requests={"cpu": "10m", "memory": "32Mi"},
                               limits={GPU: "1", "cpu": "100m", "memory": "64Mi"})],
            node_selector=selector,
            tolerations=tolerations,
        ),
    )
    # It asks for the GPU pool by selector but lacks the toleration: the sharpest test of the taint,
    # since it wants exactly the node it must never get (a pod with no selector proves nothing).
    untolerated = objects.pod(
        untolerated_name(run_id),
        params.namespace,
        objects.pod_spec(
            [objects.container("idle", images.BUSYBOX, ["sleep", "900"], requests={"cpu": "10m", "memory": "16Mi"},
                               limits={"cpu": "100m", "memory": "32Mi"})],
            node_selector=selector,
        ),
    )
    return [untolerated, probe]


def check_outputs(outputs: dict[str, Any]) -> None:
    lab_params(outputs, LAB, Params, SECTION)
    ServiceRef.model_validate(require_output(outputs, "prometheus", LAB))
    gpu_placement(outputs)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dcgm-timeout", type=float, default=300.0, help="seconds to wait for DCGM series")


def record(session: LabSession, args: argparse.Namespace) -> Recording:
    params = lab_params(session.outputs, LAB, Params, SECTION)
    selector, _ = gpu_placement(session.outputs)
    node_selector = ",".join(f"{k}={v}" for k, v in selector.items())
    cluster, run_id = session.cluster, session.run_id
    session.namespaces = [params.namespace, "default"]
    session.client.update({"probe_pod": probe_name(run_id), "untolerated_pod": untolerated_name(run_id)})
    snapshots = session.snapshots
    nodes_before = cluster.list("v1", "Node", None, node_selector)
    for obj in build_workloads(session.outputs, run_id):
        session.scope.create(obj)

    def poll() -> Snapshot:
        snap = Snapshot(
            at=now(),
            objects={
                "nodes": cluster.list("v1", "Node", None, node_selector),
                "pods": cluster.list("v1", "Pod", params.namespace, f"gke-ml-labs/benchmark-run={run_id}"),
            },
        )
        snapshots.append(snap)
        return snap

    def probe_running(snap: Snapshot) -> bool:
        pod = _pod(snap.objects["pods"], probe_name(run_id))
        return bool(pod) and phase(pod) == "Running"

    wait_until(
        "GPU probe pod running (scale from zero takes minutes)",
        poll,
        probe_running,
        args.timeout,
        interval_s=args.poll,
        progress=session.log,
        describe=lambda s: _describe(s, run_id),
    )
    node = (_pod(snapshots[-1].objects["pods"], probe_name(run_id)) or {}).get("spec", {}).get("nodeName")
    target = ServiceRef.model_validate(session.outputs["prometheus"])
    prometheus = PrometheusClient.through_service_proxy(cluster, target)
    answers: list[dict[str, Any]] = session.client.setdefault("dcgm", [])

    def ask() -> dict[str, Any]:
        answers.append(prometheus.answer(DCGM_QUERY))
        return answers[-1]

    try:
        wait_until(
            f"DCGM series for {node} in Prometheus",
            ask,
            lambda a: bool(dcgm_series_for(vector(a), node)),
            args.dcgm_timeout,
            interval_s=3 * args.poll,
            progress=session.log,
        )
    except MetricsError as e:
        session.notes.append(f"DCGM query: {e}")
    except Exception as e:  # keep the scheduling evidence even if Prometheus is unreachable
        session.notes.append(f"DCGM wait ended: {e}")
    poll()  # the untolerated pod's final state, after the GPU node has long been there
    try:  # read after the DCGM wait: by now the probe's nvidia-smi has long finished writing
        session.nvidia_smi = cluster.pod_log(params.namespace, probe_name(run_id))
    except KubeApiError as e:
        session.notes.append(f"nvidia-smi output of the probe not read: {e}")
    return session.recording(objects={"gpu_nodes_before": nodes_before})


def _pod(pods: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((p for p in pods if p["metadata"]["name"] == name), None)


def _describe(snap: Snapshot, run_id: str) -> str:
    pod = _pod(snap.objects["pods"], probe_name(run_id)) or {}
    nodes = snap.objects["nodes"]
    alloc = [allocatable_gpus(n) or 0 for n in nodes]
    return f"probe {phase(pod) or '?'}; GPU nodes {len(nodes)}; allocatable GPUs {sum(alloc)}"


def dcgm_series_for(samples: list[Any], node: str | None) -> list[dict[str, str]]:
    """The DCGM series whose Hostname (dcgm-exporter < 4.6) or hostname (>= 4.6) label is `node`."""
    return [s.labels for s in samples if node and node in (s.labels.get("Hostname"), s.labels.get("hostname"))]


def measure(rec: Recording, source: str = "live") -> G1Result:
    probe, untol = rec.client["probe_pod"], rec.client["untolerated_pod"]
    pods_seen = [p for s in rec.snapshots for p in s.objects.get("pods", [])]
    probe_pods = [p for p in pods_seen if p["metadata"]["name"] == probe]
    if not probe_pods:
        raise LabError(f"recording of run {rec.run_id} never saw the probe pod {probe}")
    final_probe = probe_pods[-1]
    node_name = final_probe.get("spec", {}).get("nodeName")
    node = _node_seen(rec.snapshots, node_name) or next((n for n in rec.nodes if n["metadata"]["name"] == node_name), None)
    if node is None:
        raise LabError(f"the probe pod was never placed on a node in run {rec.run_id}; nothing to time")

    created = parse_time(final_probe["metadata"].get("creationTimestamp"))
    scale_up = next(
        (event_time(e) for e in rec.events if e.get("reason") == "TriggeredScaleUp" and _about(e, "Pod", probe)), None
    )
    alloc_seen = next(
        (
            s.at
            for s in rec.snapshots
            for n in s.objects.get("nodes", [])
            if n["metadata"]["name"] == node_name and (allocatable_gpus(n) or 0) > 0
        ),
        None,
    )
    scheduled = condition_time(final_probe, "PodScheduled")
    # The scheduler placed the probe only once the GPU was allocatable: the earlier of the two
    # bounds the allocatable time from above (polls alone are only as fine as the poll interval).
    alloc_at = min((t for t in (alloc_seen, scheduled) if t is not None), default=None)
    marks = [
        ("probe pod created", created),
        ("scale-up triggered", scale_up),
        ("node created", parse_time(node["metadata"].get("creationTimestamp"))),
        ("node Ready", condition_time(node, "Ready")),
        ("GPU allocatable", alloc_at),
        ("probe scheduled", scheduled),
        ("probe running", condition_time(final_probe, "Ready")),
    ]
    stages = [Stage(name=n, at=t, after_s=seconds_between(created, t)) for n, t in marks]
    allocatable = allocatable_gpus(node) or 0
    from_zero = not rec.objects.get("gpu_nodes_before")

    untol_pods = [p for p in pods_seen if p["metadata"]["name"] == untol]
    untol_nodes = sorted({p.get("spec", {}).get("nodeName") for p in untol_pods if p.get("spec", {}).get("nodeName")})
    gpu_nodes = {n["metadata"]["name"] for s in rec.snapshots for n in s.objects.get("nodes", [])}
    failed = [e.get("message", "") for e in rec.events if e.get("reason") == "FailedScheduling" and _about(e, "Pod", untol)]
    taint_named = [m for m in failed if names_gpu_taint(m)]
    series: list[dict[str, str]] = []
    for answer in rec.client.get("dcgm", []):
        if answer.get("status") == "success":
            series = dcgm_series_for(vector(answer), node_name) or series
    drivers = sorted({s["DCGM_FI_DRIVER_VERSION"] for s in series if s.get("DCGM_FI_DRIVER_VERSION")})

    checks = [
        Check(
            name="GPU node reports nvidia.com/gpu allocatable",
            passed=allocatable >= 1,
            evidence=f"node {node_name}: allocatable {GPU}={allocatable}"
            + (f", {stages[4].after_s:.0f}s after the probe pod was created" if stages[4].after_s is not None else ""),
        ),
        Check(
            name="pod without the toleration never placed on a GPU node",
            passed=not (set(untol_nodes) & gpu_nodes) and bool(taint_named),
            evidence=(f"placed on {', '.join(untol_nodes)}; " if untol_nodes else "never placed; ")
            + (f"scheduler: \"{taint_named[-1]}\"" if taint_named else "no FailedScheduling event naming the GPU taint"),
        ),
        Check(
            name="DCGM series for the GPU node in Prometheus",
            passed=bool(series),
            evidence=f"{len(series)} series for {node_name} from `{DCGM_QUERY}`" if series else "no series for the node",
        ),
    ]
    return G1Result(
        **common_fields(rec, source, checks, gpu_driver=drivers[0] if drivers else None),
        gpu_node=node_name,
        scaled_from_zero=from_zero,
        stages=stages,
        gpu_allocatable=allocatable,
        untolerated_pod_node=untol_nodes[0] if untol_nodes else None,
        failed_scheduling=failed,
        dcgm_series=series,
        nvidia_smi=rec.nvidia_smi,
    )


def names_gpu_taint(message: str) -> bool:
    """Whether a FailedScheduling message blames the GPU node's taint. Older kube-schedulers name it
    ("untolerated taint {nvidia.com/gpu: present}"); newer ones (seen on 1.34 clusters) write only
    "untolerated taint(s)", which still points at a GPU node: the system pool carries no taint."""
    return "untolerated taint(s)" in message or ("untolerated taint {" in message and GPU in message)


def _about(event: dict[str, Any], kind: str, name: str) -> bool:
    obj = event.get("involvedObject") or {}
    return obj.get("kind") == kind and obj.get("name") == name


def _node_seen(snapshots: list[Snapshot], name: str | None) -> dict[str, Any] | None:
    seen = [n for s in snapshots for n in s.objects.get("nodes", []) if n["metadata"]["name"] == name]
    return seen[-1] if seen else None


def report_body(result: G1Result) -> str:
    lines = [
        "## GPU node timeline",
        "",
        "The probe pod requests one `nvidia.com/gpu`; the pool "
        + ("started at zero, so this is a scale-from-zero timing." if result.scaled_from_zero
           else "already had a node, so this is NOT a scale-from-zero timing."),
        "",
        "| stage | time (UTC) | seconds after the probe pod was created |",
        "|---|---|---|",
        *(
            f"| {s.name} | {s.at:%H:%M:%S} | {s.after_s:.0f} |" if s.at and s.after_s is not None else f"| {s.name} | not seen | |"
            for s in result.stages
        ),
        "",
        "GPU allocatable is the first poll that saw it, or the probe's scheduling time if earlier "
        "(the scheduler binds a GPU pod only once the GPU is allocatable).",
        "",
        "## The taint keeps other pods off the GPU node",
        "",
        "A second pod selects the GPU pool but has no toleration. "
        + (f"It was placed on {result.untolerated_pod_node}." if result.untolerated_pod_node else "It was never placed.")
        + " The scheduler said:",
        "",
        *(f"> {m}" for m in result.failed_scheduling[-2:]),
        "",
        "## DCGM",
        "",
        f"`{DCGM_QUERY}` returned {len(result.dcgm_series)} series for the node"
        + (f" (GPU {result.dcgm_series[0].get('modelName', '?')})." if result.dcgm_series else "."),
        "",
        "## nvidia-smi in a pod on the GPU node",
        "",
        *(["The probe ran the driver's own nvidia-smi before holding the GPU:", "", "```", result.nvidia_smi.rstrip(), "```"]
          if result.nvidia_smi else ["Not read: the probe's log was not available (see What failed first time)."]),
    ]
    return "\n".join(lines)


def plots(result: G1Result, folder: Path) -> list[str]:
    points = [(s.name, s.after_s) for s in result.stages if s.after_s is not None]
    if len(points) < 2:
        return []
    timeline_plot(points, "GPU node from request to running pod", folder / "timeline.png")
    return ["timeline.png"]


def run(args: argparse.Namespace) -> int:
    return live.run(sys.modules[__name__], args)


def main(argv: list[str] | None = None) -> int:
    return live.main(sys.modules[__name__], argv)
