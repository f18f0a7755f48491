"""One g6 cold start as the API server and vLLM would show it, built for the tests and the example
(not recorded on a cluster): the vLLM pod (core/v1, conditions and container statuses as the kubelet
writes them), the GPU node it woke, the core/v1 Events about the pod from the components that emit
them (cluster-autoscaler, default-scheduler, kubelet, with their real reasons and message formats:
cluster-autoscaler's pkg/processors/status/eventing_scale_up_processor.go and GKE's FailedScaleUp
template, the kubelet's pull messages), and vLLM v0.11.2's start-up log (its logger format, the
process prefix in ANSI cyan, the messages of its source). Identities go through kube_fixtures.

Timings (seconds after the request): the pod is created at once; the autoscaler triggers ~12 s later;
the node object appears ~35 s after that and is Ready ~30 s later; nvidia.com/gpu is allocatable (the
pod is scheduled) ~95 s after Ready (driver install); the vLLM image (9.8 GB) pulls in ~2.5 min;
vLLM downloads Qwen2.5-1.5B-Instruct (3.1 GB) in ~32 s, loads it, profiles and captures CUDA graphs
in ~37 s; /health passes ~10 s later (the readiness probe's period); the first token ~1 s after.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone
from typing import Any

from tests import kube_fixtures as kf

NS, POD, NODE = "llm", "vllm-6d8f7b9c5-x2k4q", "gke-gml-g6-gpu-7c2e9a1f-z9kd"
IMAGE = "docker.io/vllm/vllm-openai:v0.11.2"
MODEL = "Qwen/Qwen2.5-1.5B-Instruct"
IMAGE_BYTES = 9834711221
SENT = datetime(2026, 12, 1, 10, 0, 0, 400000, tzinfo=timezone.utc)
MIG = ("https://www.googleapis.com/compute/v1/projects/ml-labs-demo/zones/us-central1-a/instanceGroups/"
       "gke-gml-g6-gpu-7c2e9a1f-grp")  # fmt: skip
CYAN, RESET = "\x1b[1;36m", "\x1b[0;0m"

# Moments, seconds after SENT (API times are then cut to whole seconds).
T = {
    "created": 0.6, "failed_scheduling": 0.9, "triggered": 12.2, "node_created": 47.0, "node_ready": 77.0,
    "scheduled": 172.0, "pulling": 175.0, "pulled": 326.0, "started": 329.0, "load": 345.0,
    "downloaded": 377.0, "loaded": 379.0, "warm": 416.0, "api": 418.0, "ready": 428.0, "first_token": 429.3,
}  # fmt: skip


# On a warm node that holds the image: scheduled at once, no pull, the rest as from zero.
WARM = {k: v if v < T["scheduled"] else 1.0 if v < T["pulled"] else round(v - T["pulled"] + 2.0, 1) for k, v in T.items()}


def at(s: float) -> datetime:
    return SENT + timedelta(seconds=s)


def ts(s: float) -> str:
    return kf.api_time(at(s))


def node(created: float = T["node_created"], ready: float = T["node_ready"]) -> dict[str, Any]:
    labels = {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "kubernetes.io/hostname": NODE,
              "cloud.google.com/gke-nodepool": "gpu", "gke-ml-labs/pool": "gpu",
              "cloud.google.com/gke-accelerator": "nvidia-l4", "cloud.google.com/gke-gpu": "true",
              "cloud.google.com/gke-gpu-driver-version": "default", "cloud.google.com/gke-spot": "true",
              "topology.kubernetes.io/zone": "us-central1-a", "node.kubernetes.io/instance-type": "g2-standard-4"}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": NODE, "uid": "set-by-kube-fixtures", "resourceVersion": "7301944",
                     "creationTimestamp": ts(created), "labels": labels,
                     "annotations": {"container.googleapis.com/instance_id": "0"}},
        "spec": {"providerID": f"gce://ml-labs-demo/us-central1-a/{NODE}", "podCIDR": "10.20.3.0/24",
                 "podCIDRs": ["10.20.3.0/24"],
                 "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "4", "memory": "16393240Ki", "nvidia.com/gpu": "1", "pods": "110"},
            "allocatable": {"cpu": "3920m", "memory": "12899352Ki", "nvidia.com/gpu": "1", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status", "lastHeartbeatTime": ts(T["first_token"]),
                            "lastTransitionTime": ts(ready)}],
            "addresses": [{"type": "InternalIP", "address": "10.10.0.3"}, {"type": "Hostname", "address": NODE}],
            "nodeInfo": {"architecture": "amd64", "bootID": "x", "containerRuntimeVersion": "containerd://2.0.6",
                         "kernelVersion": "6.6.97+", "kubeProxyVersion": "", "kubeletVersion": "v1.35.7-gke.1219000",
                         "machineID": "x", "operatingSystem": "linux",
                         "osImage": "Container-Optimized OS from Google", "systemUUID": "x"},
        },
    }  # fmt: skip


def pod(waiting: dict[str, str] | None = None, ready: bool = True, scheduled: bool = True,
        t: dict[str, float] = T, image: str = IMAGE) -> dict[str, Any]:
    """The vLLM pod; `waiting` replaces its running container with a waiting one (a failed start)."""
    conditions = [
        {"type": "PodReadyToStartContainers", "status": "True", "lastProbeTime": None,
         "lastTransitionTime": ts(t["pulling"] - 1)},
        {"type": "Initialized", "status": "True", "lastProbeTime": None, "lastTransitionTime": ts(t["scheduled"])},
        {"type": "Ready", "status": "True" if ready else "False", "lastProbeTime": None,
         "lastTransitionTime": ts(t["ready"] if ready else t["scheduled"]),
         **({} if ready else {"reason": "ContainersNotReady", "message": "containers with unready status: [vllm]"})},
        {"type": "ContainersReady", "status": "True" if ready else "False", "lastProbeTime": None,
         "lastTransitionTime": ts(t["ready"] if ready else t["scheduled"])},
        {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": ts(t["scheduled"])},
    ]  # fmt: skip
    if not scheduled:
        conditions = [{"type": "PodScheduled", "status": "False", "lastProbeTime": None,
                       "lastTransitionTime": ts(t["created"]), "reason": "Unschedulable",
                       "message": "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. "
                       "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."}]  # fmt: skip
    container = {"name": "vllm", "image": image, "imageID": "", "ready": ready, "restartCount": 0,
                 "started": ready, "state": {"running": {"startedAt": ts(t["started"])}},
                 "containerID": "containerd://" + "4f" * 32}  # fmt: skip
    if ready:
        container["imageID"] = "docker.io/vllm/vllm-openai@sha256:" + "9c" * 32
    if waiting is not None:
        container |= {"state": {"waiting": waiting}, "started": False, "ready": False}
        container.pop("containerID")
    status: dict[str, Any] = {"phase": "Running" if ready else "Pending", "qosClass": "Burstable",
                              "conditions": conditions}  # fmt: skip
    if scheduled:
        status |= {"hostIP": "10.10.0.3", "podIP": "10.20.3.5", "startTime": ts(t["scheduled"]),
                   "containerStatuses": [container]}  # fmt: skip
    spec = {"containers": [{"name": "vllm", "image": image, "args": [MODEL, "--port=8000"],
                            "resources": {"limits": {"memory": "12Gi", "nvidia.com/gpu": "1"},
                                          "requests": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"}}}],
            "nodeSelector": {"gke-ml-labs/pool": "gpu"}, "enableServiceLinks": False,
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}]}
    if scheduled:
        spec["nodeName"] = NODE
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": POD, "namespace": NS, "uid": "set-by-kube-fixtures", "resourceVersion": "7302215",
                     "creationTimestamp": ts(t["created"]), "generateName": "vllm-6d8f7b9c5-",
                     "labels": {"app.kubernetes.io/name": "vllm", "pod-template-hash": "6d8f7b9c5"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "vllm-6d8f7b9c5",
                                          "uid": "set-by-kube-fixtures", "controller": True,
                                          "blockOwnerDeletion": True}]},
        "spec": spec,
        "status": status,
    }  # fmt: skip


def event(s: float, reason: str, kind: str, message: str, count: int = 1, last: float | None = None) -> dict[str, Any]:
    """A core/v1 Event about the vLLM pod; kube_fixtures names it and sets its source."""
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "set-by-kube-fixtures", "namespace": NS, "uid": "set-by-kube-fixtures",
                     "resourceVersion": "7302000", "creationTimestamp": ts(s)},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": POD, "namespace": NS,
                           "uid": "set-by-kube-fixtures", "resourceVersion": "7301001"},
        "reason": reason, "type": kind, "count": count, "message": message,
        "firstTimestamp": ts(s), "lastTimestamp": ts(last if last is not None else s), "eventTime": None,
    }  # fmt: skip


FAILED_SCHEDULING = ("0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. preemption: 0/1 "
                     "nodes are available: 1 Preemption is not helpful for scheduling.")  # fmt: skip


def go_duration(seconds: float) -> str:
    """A duration as Go's time.Duration prints it (the kubelet's pull messages): 2m30.871s, 4.2s."""
    minutes, rest = divmod(round(seconds, 3), 60)
    text = f"{rest:.3f}".rstrip("0").rstrip(".")
    return f"{int(minutes)}m{text}s" if minutes else f"{text}s"


def from_zero_events(t: dict[str, float] = T, image: str = IMAGE) -> list[dict[str, Any]]:
    pull = go_duration(t["pulled"] - t["pulling"] - 0.129)
    return [
        event(t["failed_scheduling"], "FailedScheduling", "Warning", FAILED_SCHEDULING),
        event(t["triggered"], "TriggeredScaleUp", "Normal", f"pod triggered scale-up: [{{{MIG} 0->1 (max: 1)}}]"),
        event(t["scheduled"], "Scheduled", "Normal", f"Successfully assigned {NS}/{POD} to {NODE}"),
        event(t["pulling"], "Pulling", "Normal", f'Pulling image "{image}"'),
        event(t["pulled"], "Pulled", "Normal", f'Successfully pulled image "{image}" in {pull} ({pull} including '
              f"waiting). Image size: {IMAGE_BYTES} bytes."),
        event(t["started"] - 1, "Created", "Normal", "Created container: vllm"),
        event(t["started"], "Started", "Normal", "Started container vllm"),
        event(t["ready"] - 12, "Unhealthy", "Warning", "Startup probe failed: Get \"http://10.20.3.5:8000/health\": "
              "dial tcp 10.20.3.5:8000: connect: connection refused", count=8, last=t["ready"] - 12),
    ]  # fmt: skip


def _line(s: float, process: str, source: str, message: str) -> str:
    return f"{CYAN}({process}){RESET} INFO {at(s):%m-%d %H:%M:%S} [{source}] {message}"


def vllm_log(download: bool = True, t: dict[str, float] = T) -> str:
    """vLLM v0.11.2's start-up as the container prints it; without the download line when the weights
    were local (it logs one only above 0.5 s)."""
    api, core = "APIServer pid=1", "EngineCore_DP0 pid=245"
    lines = [
        f"INFO {at(t['started'] + 4):%m-%d %H:%M:%S} [__init__.py:216] Automatically detected platform cuda.",
        _line(t["started"] + 7, api, "api_server.py:1977", "vLLM API server version 0.11.2"),
        _line(t["started"] + 7, api, "utils.py:253", f"non-default args: {{'model': '{MODEL}', 'max_model_len': 4096}}"),
        _line(t["load"], core, "gpu_model_runner.py:3260", f"Starting to load model {MODEL}..."),
        *([_line(t["downloaded"], core, "weight_utils.py:442",
                 f"Time spent downloading weights for {MODEL}: 31.842163 seconds")] if download else []),
        _line(t["loaded"], core, "default_loader.py:315", "Loading weights took 1.21 seconds"),
        _line(t["loaded"], core, "gpu_model_runner.py:3339", "Model loading took 2.8876 GiB memory and 34.512345 seconds"),
        _line(t["warm"] - 20, core, "gpu_worker.py:360", "Available KV cache memory: 16.93 GiB"),
        _line(t["warm"], core, "core.py:251", "init engine (profile, create kv cache, warmup model) took 36.52 seconds"),
        _line(t["api"], api, "api_server.py:2053", "Starting vLLM API server 0 on http://0.0.0.0:8000"),
        f"{CYAN}({api}){RESET} INFO:     Application startup complete.",
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def _realistic(pod_obj: dict[str, Any], node_obj: dict[str, Any] | None, events: list[dict[str, Any]]) -> dict[str, Any]:
    rec = kf.realistic({"pods": [pod_obj], "nodes": [node_obj] if node_obj else [], "events": events})
    return {"pod": rec["pods"][0], "node": rec["nodes"][0] if node_obj else None, "events": rec["events"]}


def from_zero(t: dict[str, float] = T, image: str = IMAGE, download: bool = True) -> dict[str, Any]:
    """The whole cold start: node from zero, image pulled, weights downloaded (unless not), first token."""
    return {**_realistic(pod(t=t, image=image), node(t["node_created"], t["node_ready"]), from_zero_events(t, image)),
            "log": vllm_log(download, t), "sent": SENT, "first_token": at(t["first_token"])}  # fmt: skip


def later(t: dict[str, float], after: str, seconds: float) -> dict[str, float]:
    """The timeline `t` with every moment from `after` on `seconds` later (a slower phase)."""
    return {k: round(v + seconds, 1) if v >= t[after] else v for k, v in t.items()}


def pull_in(t: dict[str, float], seconds: float) -> dict[str, float]:
    """The timeline `t` with a pull of `seconds` as the kubelet times it (a streamed image: seconds)."""
    return later(t, "pulled", round(t["pulling"] + 0.129 + seconds - t["pulled"], 3))


def out_of_order() -> dict[str, Any]:
    """The same, listed as the API may list them: not in time order, a retried pull, repeats counted."""
    case = from_zero()
    events = list(reversed(case["events"]))
    retry = copy.deepcopy(next(e for e in events if e["reason"] == "Pulling"))
    events.insert(1, retry | {"firstTimestamp": ts(T["pulling"] + 40), "lastTimestamp": ts(T["pulling"] + 40)})
    scale = next(e for e in events if e["reason"] == "TriggeredScaleUp")
    scale["count"], scale["lastTimestamp"] = 3, ts(T["triggered"] + 30)
    return case | {"events": events}


def image_present() -> dict[str, Any]:
    """A warm node (created an hour before) that already holds the image; weights cached on it."""
    warm = node(created=-3600.0, ready=-3570.0)
    skip = ("FailedScheduling", "TriggeredScaleUp", "Pulling", "Pulled")
    events = [e for e in from_zero_events(WARM) if e["reason"] not in skip]
    events.append(event(WARM["started"] - 2, "Pulled", "Normal", f'Container image "{IMAGE}" already present on machine'))
    return {**_realistic(pod(t=WARM), warm, events), "log": vllm_log(download=False, t=WARM), "sent": SENT,
            "first_token": at(WARM["first_token"])}  # fmt: skip


def pull_backoff() -> dict[str, Any]:
    """The node came up but the image never pulled (a mistyped tag): ErrImagePull, then back-off."""
    bad = IMAGE.replace("v0.11.2", "v0.11.20")
    events = [e for e in from_zero_events() if e["reason"] in ("FailedScheduling", "TriggeredScaleUp", "Scheduled")]
    events += [
        event(T["pulling"], "Pulling", "Normal", f'Pulling image "{bad}"', count=4, last=T["pulling"] + 90),
        event(T["pulling"] + 2, "Failed", "Warning", f'Failed to pull image "{bad}": rpc error: code = NotFound desc = '
              f'failed to pull and unpack image "{bad}": failed to resolve reference "{bad}": {bad}: not found',
              count=4, last=T["pulling"] + 92),
        event(T["pulling"] + 2, "Failed", "Warning", "Error: ErrImagePull", count=4, last=T["pulling"] + 92),
        event(T["pulling"] + 3, "BackOff", "Normal", f'Back-off pulling image "{bad}"', count=9, last=T["pulling"] + 150),
        event(T["pulling"] + 3, "Failed", "Warning", "Error: ImagePullBackOff", count=9, last=T["pulling"] + 150),
    ]  # fmt: skip
    waiting = {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{bad}": ErrImagePull: failed to '
               f'pull and unpack image "{bad}"'}  # fmt: skip
    return {**_realistic(pod(waiting=waiting, ready=False), node(), events), "log": "", "sent": SENT, "first_token": None}


def stock_out() -> dict[str, Any]:
    """No spot L4 in the zone: the scale-up is triggered and fails; the pod stays Pending, no node."""
    events = [
        event(T["failed_scheduling"], "FailedScheduling", "Warning", FAILED_SCHEDULING, count=5, last=300.0),
        event(T["triggered"], "TriggeredScaleUp", "Normal", f"pod triggered scale-up: [{{{MIG} 0->1 (max: 1)}}]"),
        event(T["triggered"] + 68, "FailedScaleUp", "Warning", "Node scale up in zones us-central1-a associated with "
              "this pod failed: GCE out of resources. Pod is at risk of not being scheduled."),
        event(T["triggered"] + 80, "NotTriggerScaleUp", "Normal", "pod didn't trigger scale-up (it wouldn't fit if a "
              "new node is added): 1 in backoff after failed scale-up", count=12, last=300.0),
    ]  # fmt: skip
    return {**_realistic(pod(ready=False, scheduled=False), None, events), "log": "", "sent": SENT, "first_token": None}
