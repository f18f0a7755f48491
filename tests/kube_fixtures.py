"""Kubernetes objects as a real GKE cluster returns them: the one helper every lab fixture
(tests/data/labs/<lab>/recording.json) goes through, and builders for tests that make their own.

What a hand-made fixture gets wrong, and this module makes right or refuses (`problems`):
- one identity per object: the same uid wherever an object (or a reference to it) appears;
- nodes of their own: each node its InternalIP, podCIDR, bootID, machine ID and provider ID, and
  its pods' hostIP/podIP from those;
- L4 GPUs only on G2 machines, as many as the machine type carries (times the time-sharing clients);
- events from the controller that really emits them (a Job's from `job-controller`, a Workload's
  from `kueue-admission`, a pod's scheduling from `default-scheduler`, ...), named as client-go names them;
- a server version whose gitCommit is a commit hash, not a placeholder;
- Kueue Workload conditions in the order and at the times Kueue sets them: QuotaReserved first;
  Admitted with it when the ClusterQueue has no admission checks, else when the last check turns
  Ready; PodsReady and Finished after admission; no pod of a Job or JobSet before its Workload is
  admitted;
- no node ever holding pods that request more nvidia.com/gpu than it allocates.

    python -m tests.kube_fixtures          # rewrite every lab fixture through `realistic`
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data" / "labs"

# L4 GPUs per G2 machine type as Google publishes them (Compute Engine docs, "GPU machine types",
# accelerator-optimized G2 table; transcribed in the project's facts sheet, 2026-08). Typed here, not
# imported: the tests check stacks/config.py's machine table against it.
G2_L4 = {
    "g2-standard-4": 1, "g2-standard-8": 1, "g2-standard-12": 1, "g2-standard-16": 1,
    "g2-standard-24": 2, "g2-standard-32": 1, "g2-standard-48": 4, "g2-standard-96": 8,
}  # fmt: skip

# (involved kind, reason) -> the component that emits that event, read from each controller's source:
# kube-scheduler, kubelet, the node lifecycle and Job controllers of kube-controller-manager, the
# cluster autoscaler, Kueue (pkg/constants: kueue-admission, kueue-job-controller), the Kubeflow
# training operator, JobSet (its recorder is named "jobset" in main.go) and Argo's workflow controller.
EVENT_SOURCES = {
    **{("Pod", r): "default-scheduler" for r in ("Scheduled", "FailedScheduling", "Preempted")},
    **{("Pod", r): "cluster-autoscaler" for r in ("TriggeredScaleUp", "NotTriggerScaleUp", "FailedScaleUp",
                                                                   "ScaleDown")},
    **{("Pod", r): "kubelet" for r in ("Pulling", "Pulled", "Created", "Started", "Killing", "BackOff", "Unhealthy",
                                       "FailedMount", "Failed", "Evicted")},
    **{("Job", r): "job-controller" for r in ("SuccessfulCreate", "SuccessfulDelete", "Completed", "Suspended",
                                              "Resumed", "BackoffLimitExceeded", "DeadlineExceeded")},
    **{("Job", r): "kueue-job-controller" for r in ("CreatedWorkload", "Started", "Stopped")},
    **{("Workload", r): "kueue-admission" for r in ("QuotaReserved", "Admitted", "Pending")},
    **{("JobSet", r): "jobset" for r in ("AllJobsCompleted", "FailedJobs", "SuspendedJobs", "ResumeJobs")},
    **{("Node", r): "kubelet" for r in ("Starting", "NodeReady", "NodeNotReady", "Rebooted", "NodeHasSufficientMemory")},
    **{("Node", r): "node-controller" for r in ("RegisteredNode", "RemovingNode", "NodeNotReady")},
    **{("PyTorchJob", r): "pytorchjob-controller" for r in ("SuccessfulCreatePod", "SuccessfulCreateService",
                                                            "PyTorchJobSucceeded", "PyTorchJobFailed")},
    **{("Workflow", r): "workflow-controller" for r in ("WorkflowRunning", "WorkflowSucceeded", "WorkflowFailed",
                                                        "WorkflowNodeFailed", "WorkflowNodeSucceeded")},
}  # fmt: skip
# A node-controller NodeNotReady carries no host; the kubelet's own events do.
_KUBELET_HOSTED = {"kubelet"}

JOBSET_NAME, JOBSET_UID = "jobset.sigs.k8s.io/jobset-name", "jobset.sigs.k8s.io/jobset-uid"
_NODE_NETWORK, _POD_NETWORK = "10.10.0", "10.20"  # the lab's subnet and pods range (stacks/config.py defaults)
# As Kueue 0.19.2 leaves a finished Workload's conditions (read on the local cluster, examples/g3-local):
# its status patches put Finished before PodsReady.
KUEUE_CONDITION_ORDER = ("QuotaReserved", "Admitted", "Finished", "PodsReady")


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\0".join(parts).encode()).digest()


def uid(kind: str, namespace: str | None, name: str) -> str:
    """A stable UUID (version 4, as the API server makes them) for one object."""
    return str(uuid.UUID(bytes=_digest("uid", kind, namespace or "", name)[:16], version=4))


def server_version(git_version: str = "v1.35.7-gke.1219000") -> dict[str, Any]:
    """GET /version of a GKE control plane."""
    minor = git_version.split(".")[1]
    return {
        "major": "1", "minor": minor, "gitVersion": git_version,
        "gitCommit": hashlib.sha1(git_version.encode()).hexdigest(), "gitTreeState": "clean",
        "buildDate": "2026-10-21T09:14:37Z", "goVersion": "go1.25.3 X:boringcrypto", "compiler": "gc",
        "platform": "linux/amd64",
    }  # fmt: skip


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def api_time(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------------------------------------
# Kueue


def kueue_conditions(
    quota_reserved: datetime | None,
    *,
    pending_since: datetime | None = None,
    pending_reason: str = "Pending",
    pending_message: str = "",
    cluster_queue: str = "",
    checks: dict[str, datetime] | None = None,
    pods_ready: datetime | None = None,
    finished: datetime | None = None,
    finished_message: str = "Job finished successfully",
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(status.conditions, status.admissionChecks) of a Workload as Kueue v1beta2 writes them.

    Without admission checks Kueue sets Admitted in the same update as QuotaReserved; with checks,
    Admitted follows once every check is Ready (`checks`: name -> when it turned Ready). While it waits,
    Kueue 0.19 (default feature gates) writes reason Pending when the quota is short and Waiting when
    waitForPodsReady.blockAdmission holds it. PodsReady turns True with reason Started; Finished copies
    the job's own message (`finished_message`: a JobSet's is "jobset completed successfully") and goes
    before PodsReady, as Kueue 0.19.2 wrote them on the local cluster (examples/g3-local). Once finished,
    PodsReady reads reason Recovered since the finish: a kubelet marks a completed pod not Ready, Kueue
    turns PodsReady False (WaitForRecovery), then True again as Recovered once the job counts its
    finished pods (pkg/controller/jobframework/reconciler.go; examples/g3-real-node, a real kubelet).
    """
    if quota_reserved is None:
        waiting = {"type": "QuotaReserved", "status": "False", "reason": pending_reason, "message": pending_message,
                   "lastTransitionTime": api_time(pending_since)}  # fmt: skip
        return [waiting], []
    checks = checks or {}
    if any(t < quota_reserved for t in checks.values()):
        raise ValueError("an admission check runs only after quota is reserved")
    admitted = max(checks.values(), default=quota_reserved)
    if (pods_ready and pods_ready < admitted) or (finished and finished < (pods_ready or admitted)):
        raise ValueError("PodsReady and Finished follow admission, in that order")
    conditions = [
        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
         "message": f"Quota reserved in ClusterQueue {cluster_queue}", "lastTransitionTime": api_time(quota_reserved)},
        {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "The workload is admitted",
         "lastTransitionTime": api_time(admitted)},
    ]  # fmt: skip
    if finished:
        conditions.append({"type": "Finished", "status": "True", "reason": "Succeeded",
                           "message": finished_message, "lastTransitionTime": api_time(finished)})  # fmt: skip
    if pods_ready:
        conditions.append({"type": "PodsReady", "status": "True", "reason": "Recovered" if finished else "Started",
                           "message": "All pods reached readiness and the workload is running",
                           "lastTransitionTime": api_time(finished or pods_ready)})  # fmt: skip
    else:
        conditions.append({"type": "PodsReady", "status": "False", "reason": "WaitForStart",
                           "message": "Not all pods are ready or succeeded",
                           "lastTransitionTime": api_time(admitted)})  # fmt: skip
    states = [{"name": name, "state": "Ready", "message": "", "lastTransitionTime": api_time(at)}
              for name, at in sorted(checks.items())]  # fmt: skip
    return conditions, states


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def _true_at(obj: dict[str, Any], kind: str) -> datetime | None:
    c = _condition(obj, kind)
    return parse_time(c["lastTransitionTime"]) if c and c.get("status") == "True" else None


def _workload_problems(w: dict[str, Any]) -> Iterator[str]:
    name = w["metadata"]["name"]
    types = [c["type"] for c in (w.get("status") or {}).get("conditions") or []]
    known = [t for t in types if t in KUEUE_CONDITION_ORDER]
    if known != sorted(known, key=KUEUE_CONDITION_ORDER.index):
        yield f"Workload {name}: conditions {types} out of Kueue's order {list(KUEUE_CONDITION_ORDER)}"
    reserved, admitted = _true_at(w, "QuotaReserved"), _true_at(w, "Admitted")
    if admitted and not reserved:
        yield f"Workload {name}: Admitted without QuotaReserved"
    if reserved and admitted:
        checks = [parse_time(c["lastTransitionTime"]) for c in (w.get("status") or {}).get("admissionChecks") or []]
        expected = max(checks, default=reserved)
        if admitted != expected or any(t < reserved for t in checks):
            yield (f"Workload {name}: Admitted at {api_time(admitted)}, but Kueue admits "
                   f"{'when its last check is Ready' if checks else 'with QuotaReserved when there are no checks'}"
                   f" ({api_time(expected)})")  # fmt: skip
    for later in ("PodsReady", "Finished"):
        at = _true_at(w, later)
        if at and (not admitted or at < admitted):
            yield f"Workload {name}: {later} at {api_time(at)} before admission"


# ---------------------------------------------------------------------------------------------
# Whole recordings


def api_objects(tree: Any) -> Iterator[dict[str, Any]]:
    """Every API object (apiVersion, kind, metadata.name) anywhere in a recording, outermost first."""
    if isinstance(tree, dict):
        if "apiVersion" in tree and "kind" in tree and isinstance(tree.get("metadata"), dict) and "name" in tree["metadata"]:
            yield tree
        for value in tree.values():
            yield from api_objects(value)
    elif isinstance(tree, list):
        for value in tree:
            yield from api_objects(value)


def _nodes(raw: dict[str, Any]) -> list[str]:
    return sorted({o["metadata"]["name"] for o in api_objects(raw) if o["kind"] == "Node"})


def _node_identity(names: list[str]) -> dict[str, dict[str, str]]:
    """Per node: its own InternalIP and podCIDR (distinct within the recording), bootID, machine ID."""
    taken: set[int] = set()
    identity = {}
    for name in names:
        n = 2 + _digest("ip", name)[0] % 250
        while n in taken:
            n = 2 + (n - 1) % 250
        taken.add(n)
        machine = uuid.UUID(bytes=_digest("machine", name)[:16], version=4)
        identity[name] = {
            "ip": f"{_NODE_NETWORK}.{n}",
            "pod_prefix": f"{_POD_NETWORK}.{n}",
            "boot_id": str(uuid.UUID(bytes=_digest("boot", name)[:16], version=4)),
            "machine_id": machine.hex,
            "system_uuid": str(machine),
            "instance_id": str(int.from_bytes(_digest("instance", name)[:8]) % 10**19),
        }
    return identity


def _fix_node(node: dict[str, Any], ident: dict[str, str]) -> None:
    status, spec = node.setdefault("status", {}), node.setdefault("spec", {})
    for address in status.get("addresses") or []:
        if address["type"] == "InternalIP":
            address["address"] = ident["ip"]
    info = status.get("nodeInfo")
    if info is not None:
        info.update(bootID=ident["boot_id"], machineID=ident["machine_id"], systemUUID=ident["system_uuid"])
    if "podCIDR" in spec:
        spec["podCIDR"] = f"{ident['pod_prefix']}.0/24"
        spec["podCIDRs"] = [spec["podCIDR"]]
    annotations = node["metadata"].get("annotations")
    if annotations is not None and "container.googleapis.com/instance_id" in annotations:
        annotations["container.googleapis.com/instance_id"] = ident["instance_id"]


def _fix_pod_addresses(pod: dict[str, Any], ident: dict[str, str]) -> None:
    status = pod.get("status") or {}
    if "hostIP" in status:
        status["hostIP"] = ident["ip"]
        status["hostIPs"] = [{"ip": ident["ip"]}]
    if "podIP" in status and not (pod.get("spec") or {}).get("hostNetwork"):
        last = status["podIP"].rsplit(".", 1)[1]
        status["podIP"] = f"{ident['pod_prefix']}.{last}"
        status["podIPs"] = [{"ip": status["podIP"]}]


def _job_of_pod(pod: dict[str, Any]) -> str | None:
    labels = pod["metadata"].get("labels") or {}
    return labels.get("batch.kubernetes.io/job-name") or labels.get("job-name")


def _owner_of_pod(pod: dict[str, Any]) -> tuple[str, str] | None:
    """(kind, name) of the object Kueue admits for this pod: its JobSet, else its Job."""
    labels = pod["metadata"].get("labels") or {}
    if JOBSET_NAME in labels:
        return "JobSet", labels[JOBSET_NAME]
    job = _job_of_pod(pod)
    return ("Job", job) if job else None


def _controller(obj: dict[str, Any]) -> tuple[str, str] | None:
    ref = next((r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
    return (ref["kind"], ref["name"]) if ref else None


def _fix_uids(obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    namespace = meta.get("namespace")
    if "uid" in meta:
        meta["uid"] = uid(obj["kind"], namespace, meta["name"])
    for ref in meta.get("ownerReferences") or []:
        ref["uid"] = uid(ref["kind"], namespace, ref["name"])
    labels = meta.get("labels") or {}
    job = _job_of_pod(obj) if obj["kind"] == "Pod" else next(
        (r["name"] for r in meta.get("ownerReferences") or [] if r["kind"] == "Job"), None)  # fmt: skip
    for key in ("controller-uid", "batch.kubernetes.io/controller-uid"):
        if key in labels and job:
            labels[key] = uid("Job", namespace, job)
    owner = _controller(obj)
    if "kueue.x-k8s.io/job-uid" in labels and owner:  # a Workload names the job object it admits
        labels["kueue.x-k8s.io/job-uid"] = uid(owner[0], namespace, owner[1])
    for where in (labels, meta.get("annotations") or {}):
        if JOBSET_UID in where and JOBSET_NAME in where:
            where[JOBSET_UID] = uid("JobSet", namespace, where[JOBSET_NAME])
    selector = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    if obj["kind"] == "Job" and "batch.kubernetes.io/controller-uid" in selector:
        selector["batch.kubernetes.io/controller-uid"] = uid("Job", namespace, meta["name"])
    template = (((obj.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}
    for key in ("controller-uid", "batch.kubernetes.io/controller-uid"):
        if obj["kind"] == "Job" and key in template:
            template[key] = uid("Job", namespace, meta["name"])
    if JOBSET_UID in template and JOBSET_NAME in template:
        template[JOBSET_UID] = uid("JobSet", namespace, template[JOBSET_NAME])


def _fix_event(event: dict[str, Any], pod_nodes: dict[tuple[str, str], str], seen: set[str]) -> None:
    involved = event["involvedObject"]
    kind, namespace, name = involved["kind"], involved.get("namespace"), involved["name"]
    involved["uid"] = uid(kind, namespace, name)
    component = EVENT_SOURCES.get((kind, event["reason"]))
    if component is None:
        raise ValueError(f"no known source for a {kind} event {event['reason']!r}: add it to EVENT_SOURCES with the emitter")
    if (kind, event["reason"]) == ("Node", "NodeNotReady") and event.get("source", {}).get("component") == "kubelet":
        component = "kubelet"  # both the kubelet and the node controller report it
    host = None
    if component in _KUBELET_HOSTED:
        host = name if kind == "Node" else pod_nodes.get((namespace or "", name))
    event["source"] = {"component": component, **({"host": host} if host else {})}
    event["reportingComponent"] = component
    event["reportingInstance"] = host or ""
    # client-go names an event <object>.<first timestamp in unix nanoseconds, hex>.
    nanos = int(parse_time(event["firstTimestamp"]).timestamp()) * 10**9 + int.from_bytes(_digest("ev", json.dumps(
        [kind, name, event["reason"], event.get("message", "")]))[:4]) % 10**9  # fmt: skip
    event_name = f"{name}.{nanos:x}"
    while event_name in seen:
        nanos += 1
        event_name = f"{name}.{nanos:x}"
    seen.add(event_name)
    event["metadata"]["name"] = event_name
    event["metadata"]["uid"] = uid("Event", event["metadata"].get("namespace"), event_name)


def realistic(raw: dict[str, Any]) -> dict[str, Any]:
    """The recording with identities as the API server and real controllers would have made them."""
    rec = copy.deepcopy(raw)
    rec["server_version"] = server_version(rec["server_version"]["gitVersion"]) if rec.get("server_version") else {}
    identity = _node_identity(_nodes(rec))
    pod_nodes: dict[tuple[str, str], str] = {}
    for obj in api_objects(rec):
        if obj["kind"] == "Event":
            continue
        _fix_uids(obj)
        if obj["kind"] == "Node":
            _fix_node(obj, identity[obj["metadata"]["name"]])
        elif obj["kind"] == "Pod":
            node = (obj.get("spec") or {}).get("nodeName")
            if node in identity:
                _fix_pod_addresses(obj, identity[node])
                pod_nodes[(obj["metadata"].get("namespace") or "", obj["metadata"]["name"])] = node
    seen: set[str] = set()
    for event in rec.get("events", []):
        _fix_event(event, pod_nodes, seen)
    return rec


def problems(rec: dict[str, Any]) -> list[str]:
    """What in a recording a real cluster would never have returned; [] when nothing."""
    found: list[str] = []
    commit = (rec.get("server_version") or {}).get("gitCommit")
    if commit is not None and (len(commit) != 40 or commit != hashlib.sha1(rec["server_version"]["gitVersion"].encode()).hexdigest()):
        found.append(f"server_version.gitCommit {commit!r} is a placeholder (use kube_fixtures.server_version)")
    uids: dict[str, tuple[str, str | None, str]] = {}
    nodes: dict[str, dict[str, Any]] = {}
    for obj in api_objects(rec):
        meta = obj["metadata"]
        key = (obj["kind"], meta.get("namespace"), meta["name"])
        if "uid" in meta and uids.setdefault(meta["uid"], key) != key:
            found.append(f"uid {meta['uid']} is shared by {uids[meta['uid']]} and {key}")
        if "uid" in meta and meta["uid"] != uid(*key):
            found.append(f"{key}: uid is not kube_fixtures.uid of it (one uid per object, the same wherever it appears)")
        if obj["kind"] == "Node":
            nodes[meta["name"]] = obj
            found.extend(_gpu_problems(obj))
        if obj["kind"] == "Workload":
            found.extend(_workload_problems(obj))
    seen: dict[tuple[str, str], str] = {}
    for name, node in sorted(nodes.items()):
        info = (node.get("status") or {}).get("nodeInfo") or {}
        ips = [a["address"] for a in (node.get("status") or {}).get("addresses") or [] if a["type"] == "InternalIP"]
        for field, value in (("InternalIP", ips[0] if ips else None), ("bootID", info.get("bootID")),
                             ("podCIDR", (node.get("spec") or {}).get("podCIDR"))):  # fmt: skip
            if value is None:
                continue
            other = seen.setdefault((field, value), name)
            if other != name:
                found.append(f"nodes {other} and {name} share {field} {value}")
    for event in rec.get("events", []):
        involved = event["involvedObject"]
        want = EVENT_SOURCES.get((involved["kind"], event["reason"]))
        got = (event.get("source") or {}).get("component")
        if got != want and not (event["reason"] == "NodeNotReady" and got in ("kubelet", "node-controller")):
            found.append(f"{involved['kind']} {involved['name']} event {event['reason']} comes from {want}, not {got}")
    found.extend(_admission_problems(rec))
    found.extend(_capacity_problems(rec))
    return found


def _gpu_problems(node: dict[str, Any]) -> Iterator[str]:
    labels = node["metadata"].get("labels") or {}
    machine = labels.get("node.kubernetes.io/instance-type")
    gpus = int(((node.get("status") or {}).get("capacity") or {}).get("nvidia.com/gpu") or 0)
    if labels.get("cloud.google.com/gke-accelerator") == "nvidia-l4" or gpus:
        if machine not in G2_L4:
            yield f"node {node['metadata']['name']}: {machine} carries no L4 (only G2 machines do)"
            return
        clients = int(labels.get("cloud.google.com/gke-max-shared-clients-per-gpu") or 1)
        if gpus not in (0, G2_L4[machine] * clients):
            yield (f"node {node['metadata']['name']}: {machine} has {G2_L4[machine]} L4 x {clients} client(s), "
                   f"not nvidia.com/gpu {gpus}")  # fmt: skip


def _admission_problems(rec: dict[str, Any]) -> Iterator[str]:
    """No pod of a Kueue-managed Job or JobSet exists before its Workload is admitted (it stays suspended)."""
    admitted: dict[tuple[str, str], datetime] = {}
    for obj in api_objects(rec):
        if obj["kind"] == "Workload" and (at := _true_at(obj, "Admitted")):
            owner = _controller(obj)
            if owner:
                admitted[owner] = min(at, admitted.get(owner, at))
    reported = set()
    for obj in api_objects(rec):
        if obj["kind"] == "Pod" and (owner := _owner_of_pod(obj)) in admitted:
            created = parse_time(obj["metadata"]["creationTimestamp"])
            if created < admitted[owner] and obj["metadata"]["name"] not in reported:
                reported.add(obj["metadata"]["name"])
                yield f"pod {obj['metadata']['name']} created {api_time(created)}, before its {owner[0]} was admitted"


def _gpu_request(pod: dict[str, Any]) -> int:
    return sum(int(((c.get("resources") or {}).get("requests") or {}).get("nvidia.com/gpu") or 0)
               for c in (pod.get("spec") or {}).get("containers") or [])  # fmt: skip


def _capacity_problems(rec: dict[str, Any]) -> Iterator[str]:
    """The scheduler never binds more GPU requests to a node than it allocates: per snapshot, the
    pods on a node that have not ended request at most its allocatable nvidia.com/gpu."""
    allocatable = {n["metadata"]["name"]: int(((n.get("status") or {}).get("allocatable") or {}).get("nvidia.com/gpu") or 0)
                   for n in rec.get("nodes") or []}  # fmt: skip
    for snap in rec.get("snapshots") or []:
        held: dict[str, int] = {}
        for pod in api_objects(snap["objects"]):
            node = (pod.get("spec") or {}).get("nodeName") if pod["kind"] == "Pod" else None
            if node and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                held[node] = held.get(node, 0) + _gpu_request(pod)
        for node, n in held.items():
            if node in allocatable and n > allocatable[node]:
                yield f"snapshot {snap['at']}: pods on {node} request {n} nvidia.com/gpu, it allocates {allocatable[node]}"


def recording_paths() -> list[Path]:
    return sorted(DATA.glob("*/recording.json"))


def main(argv: list[str] | None = None) -> int:
    """Rewrite the lab fixtures through `realistic`; exit 1 naming what it cannot make real."""
    failed = False
    for path in recording_paths():
        rec = realistic(json.loads(path.read_text()))
        for problem in problems(rec):
            print(f"{path.parent.name}: {problem}", file=sys.stderr)
            failed = True
        path.write_text(json.dumps(rec, separators=(",", ":"), ensure_ascii=False))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
