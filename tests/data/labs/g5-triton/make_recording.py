"""Writes recording.json beside this file: a g5 run on a Triton stack (Pulumi.g5.yaml with
`kserve.runtime: triton`), as `python -m benchmarks g5 --stack g5 --repeats 1` records it, built for the
tests and the example report, not recorded on a cluster.

    python tests/data/labs/g5-triton/make_recording.py

Shapes: every object as the API returns it, identities through tests/kube_fixtures.py as every lab
fixture (Pods and Nodes as core/v1, Deployments as apps/v1, the
PodAutoscaler as Knative Serving 1.21.1's pkg/apis/autoscaling/v1alpha1/pa_types.go with the labels
its pkg/reconciler/revision/resources/meta.go copies from the revision), the client's log as
benchmarks/labs/scripts/ramp_client.py prints it, Triton's start-up and metrics lines as Triton 23.05
prints them, managedFields dropped as the benchmark drops them.

Timings (seconds): a GPU node from zero is created ~40 s after the pod asks for a GPU, Ready ~40 s
later, and offers nvidia.com/gpu ~2 min after that (driver install); Triton's image pull then takes
~2 min. During the ramp (1,4,8,12,8,4,1 requests/s, 60 s steps, target 4 rps per replica, max 3)
the replica counts change at the times Knative's autoscaler would change them (decisions every 2 s,
desired = ceil(rate / (4 x 0.7)) over a 60 s stable window, the 6 s panic window doubling the pods at
once): 1 -> 2 about 4 s into step 2 (panic), 2 -> 3 about 24 s into step 3 (stable window), 3 -> 2 about
36 s into step 6, 2 -> 1 about 24 s into step 7, 1 -> 0 60 s after the last request, the Deployment at
0 one grace period (60 s) later. A new replica on the (time-shared) GPU node is ready ~13 s after it
is created; its first inference takes ~0.6 s (CUDA warm-up).
"""

from __future__ import annotations

import json
import random
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]
sys.path.insert(0, str(REPO))
from tests import kube_fixtures as kf  # noqa: E402
START = datetime(2026, 11, 30, 9, 0, 0, tzinfo=timezone.utc)
NS, ISVC, REV = "models", "cifar10", "cifar10-predictor-00001"
RUN = "g5-11300900-7e2a"
LOAD_JOB, COLD_JOB = f"g5-load-{RUN[-4:]}", f"g5-cold-0-{RUN[-4:]}"
SYSTEM_NODE, GPU_NODE = "gke-gml-g5-system-0b4d7e21-m2c8", "gke-gml-g5-gpu-5c1f9a3e-q7zt"
TRITON_IMAGE = "nvcr.io/nvidia/tritonserver:23.05-py3"
RATES, STEP_S, TARGET, MAX_REPLICAS = [1.0, 4.0, 8.0, 12.0, 8.0, 4.0, 1.0], 60.0, 4, 3
REVISION_UID = kf.uid("Revision", NS, REV)


def at(s: float) -> datetime:
    return START + timedelta(seconds=s)


def ts(s: float) -> str:
    """An API server timestamp: whole seconds."""
    return at(s).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def uid() -> str:
    """A stand-in: kube_fixtures.realistic gives every object its one uid."""
    return "set-by-kube-fixtures"


def isvc_labels() -> dict[str, str]:
    return {
        "serving.kserve.io/inferenceservice": ISVC,
        "component": "predictor",
        "serving.knative.dev/configuration": f"{ISVC}-predictor",
        "serving.knative.dev/configurationGeneration": "1",
        "serving.knative.dev/service": f"{ISVC}-predictor",
        "serving.knative.dev/revision": REV,
        "serving.knative.dev/revisionUID": REVISION_UID,
        "app": REV,
    }


def pod_spec(node: str | None) -> dict:
    script = (REPO / "components" / "scripts" / "triton_start.sh").read_text()
    spec = {
        "containers": [
            {
                "name": "kserve-container",
                "image": TRITON_IMAGE,
                "command": ["/bin/sh", "-c", script],
                "args": ["tritonserver", "--model-store=/mnt/models", "--grpc-port=9000", "--http-port=8080",
                         "--allow-grpc=true", "--allow-http=true"],
                "env": [{"name": "HOME", "value": "/tmp"}, {"name": "PORT", "value": "8080"}],
                "ports": [{"containerPort": 8080, "name": "user-port", "protocol": "TCP"}],
                "resources": {"limits": {"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "1"},
                              "requests": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"}},
                "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "allowPrivilegeEscalation": False,
                                    "capabilities": {"drop": ["ALL"]}, "privileged": False,
                                    "seccompProfile": {"type": "RuntimeDefault"}, "readOnlyRootFilesystem": True},
                "volumeMounts": [{"name": "scratch", "mountPath": "/tmp"},
                                 {"name": "kserve-provision-location", "mountPath": "/mnt/models", "readOnly": True}],
            },
            {
                "name": "queue-proxy",
                "image": "gcr.io/knative-releases/knative.dev/serving/cmd/queue@sha256:" + "a1" * 32,
                "ports": [{"containerPort": 8012, "name": "http1", "protocol": "TCP"}],
                "resources": {"requests": {"cpu": "25m"}},
            },
        ],
        "initContainers": [
            {"name": "storage-initializer", "image": "kserve/storage-initializer:v0.20.0",
             "args": ["gs://kfserving-examples/models/torchscript", "/mnt/models"],
             "volumeMounts": [{"name": "kserve-provision-location", "mountPath": "/mnt/models"}]},
        ],
        "volumes": [{"name": "scratch", "emptyDir": {}}, {"name": "kserve-provision-location", "emptyDir": {}}],
        "nodeSelector": {"gke-ml-labs/pool": "gpu"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}],
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 300,
    }
    if node:
        spec["nodeName"] = node
    return spec


class Pod:
    def __init__(self, suffix: str, created: float):
        self.name = f"{REV}-deployment-7f9c6d5b8-{suffix}"
        self.created, self.uid = created, uid()
        self.scheduled: float | None = None
        self.ready: float | None = None
        self.deleted: float | None = None

    def at(self, s: float) -> dict:
        conditions = []
        if self.scheduled is not None and s >= self.scheduled:
            conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                               "lastTransitionTime": ts(self.scheduled)})
        else:
            conditions.append({"type": "PodScheduled", "status": "False", "lastProbeTime": None,
                               "lastTransitionTime": ts(self.created), "reason": "Unschedulable",
                               "message": "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. "
                               "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."})
        ready = self.ready is not None and s >= self.ready and not (self.deleted is not None and s >= self.deleted)
        if self.scheduled is not None and s >= self.scheduled:
            conditions.append({"type": "Ready", "status": "True" if ready else "False", "lastProbeTime": None,
                               "lastTransitionTime": ts(self.ready if ready else self.scheduled)})
        meta = {"name": self.name, "namespace": NS, "labels": {**isvc_labels(), "pod-template-hash": "7f9c6d5b8"},
                "uid": self.uid, "resourceVersion": str(5_100_000 + int(s * 10)), "creationTimestamp": ts(self.created)}
        if self.deleted is not None and s >= self.deleted:
            meta["deletionTimestamp"] = ts(self.deleted + 300)
            meta["deletionGracePeriodSeconds"] = 300
        scheduled = self.scheduled is not None and s >= self.scheduled
        status = {"phase": "Running" if scheduled else "Pending", "qosClass": "Burstable", "conditions": conditions}
        if scheduled:
            status |= {"hostIP": "10.10.0.9", "podIP": f"10.20.4.{10 + int(self.created) % 200}",
                       "startTime": ts(self.scheduled)}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                "spec": pod_spec(GPU_NODE if scheduled else None), "status": status}

    def exists(self, s: float) -> bool:
        # Knative's queue-proxy drains for ~30 s before the pod is gone.
        return s >= self.created and (self.deleted is None or s < self.deleted + 30)


def node(name: str, pool: str, created: float, ready: float | None, s: float, gpu: bool) -> dict:
    labels = {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "kubernetes.io/hostname": name,
              "cloud.google.com/gke-nodepool": pool, "gke-ml-labs/pool": pool,
              "topology.kubernetes.io/zone": "us-central1-a",
              "node.kubernetes.io/instance-type": "g2-standard-4" if gpu else "e2-standard-4"}
    capacity = {"cpu": "4", "memory": "16393248Ki", "pods": "110"}
    allocatable = {"cpu": "3920m", "memory": "12899360Ki", "pods": "110"}
    if gpu:
        labels |= {"cloud.google.com/gke-accelerator": "nvidia-l4", "cloud.google.com/gke-gpu": "true",
                   "cloud.google.com/gke-gpu-driver-version": "latest",
                   "cloud.google.com/gke-gpu-sharing-strategy": "time-sharing",
                   "cloud.google.com/gke-max-shared-clients-per-gpu": "6", "cloud.google.com/gke-spot": "true"}
        if s >= created + 195:  # the device plugin advertises the GPU once the driver is installed
            capacity["nvidia.com/gpu"] = allocatable["nvidia.com/gpu"] = "6"
    is_ready = ready is not None and s >= ready
    out = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": uid(), "resourceVersion": str(5_000_000 + int(s)),
                     "creationTimestamp": ts(created), "labels": labels},
        "spec": {"providerID": f"gce://ml-labs-demo/us-central1-a/{name}", "podCIDR": "10.20.4.0/24",
                 "podCIDRs": ["10.20.4.0/24"]},
        "status": {
            "capacity": capacity, "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if is_ready else "False",
                            "reason": "KubeletReady" if is_ready else "KubeletNotReady",
                            "message": "kubelet is posting ready status" if is_ready else "container runtime network not ready",
                            "lastHeartbeatTime": ts(s), "lastTransitionTime": ts(ready if is_ready else created)}],
            "nodeInfo": {"architecture": "amd64", "bootID": "3f0c1a8e-5b2d-4e4f-9a77-0d1c2b3a4e5f",
                         "containerRuntimeVersion": "containerd://2.0.6", "kernelVersion": "6.6.97+",
                         "kubeProxyVersion": "", "kubeletVersion": "v1.35.7-gke.1219000",
                         "machineID": "9a7e0f6b2c1d4e3f8a5b6c7d8e9f0a1b",
                         "operatingSystem": "linux", "osImage": "Container-Optimized OS from Google",
                         "systemUUID": "9a7e0f6b-2c1d-4e3f-8a5b-6c7d8e9f0a1b"},
        },
    }
    if gpu:
        out["spec"]["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    return out


def pod_autoscaler(s: float, desired: int, actual: int, active: str, reason: str | None, since: float) -> dict:
    active_cond = {"type": "Active", "status": active, "lastTransitionTime": ts(since)}
    if reason:
        active_cond |= {"reason": reason, "message": "The target is not receiving traffic." if reason == "NoTraffic"
                        else "Requests to the target are being buffered as resources are provisioned."}
    return {
        "apiVersion": "autoscaling.internal.knative.dev/v1alpha1", "kind": "PodAutoscaler",
        "metadata": {"name": REV, "namespace": NS, "uid": uid(),
                     "resourceVersion": str(5_100_000 + int(s * 10)), "generation": 2,
                     "creationTimestamp": "2026-11-30T08:41:07Z", "labels": isvc_labels(),
                     "annotations": {"autoscaling.knative.dev/class": "kpa.autoscaling.knative.dev",
                                     "autoscaling.knative.dev/metric": "rps", "autoscaling.knative.dev/target": str(TARGET),
                                     "autoscaling.knative.dev/min-scale": "0",
                                     "autoscaling.knative.dev/max-scale": str(MAX_REPLICAS),
                                     "autoscaling.knative.dev/scale-to-zero-pod-retention-period": "0s",
                                     "serving.knative.dev/progress-deadline": "30m"},
                     "ownerReferences": [{"apiVersion": "serving.knative.dev/v1", "kind": "Revision", "name": REV,
                                          "uid": REVISION_UID, "controller": True,
                                          "blockOwnerDeletion": True}]},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": f"{REV}-deployment"},
                 "reachability": "Reachable", "protocolType": "http1"},
        "status": {"observedGeneration": 2, "serviceName": REV, "metricsServiceName": f"{REV}-private",
                   "desiredScale": desired, "actualScale": actual,
                   "conditions": [active_cond,
                                  {"type": "Ready", "status": active, "lastTransitionTime": ts(since)},
                                  {"type": "SKSReady", "status": "True", "lastTransitionTime": "2026-11-30T08:41:09Z"},
                                  {"type": "ScaleTargetInitialized", "status": "True",
                                   "lastTransitionTime": "2026-11-30T08:44:52Z"}]},
    }


def deployment(s: float, replicas: int, ready: int, current: int, generation: int) -> dict:
    status = {"observedGeneration": generation, "replicas": current, "updatedReplicas": current,
              "conditions": [{"type": "Available", "status": "True" if ready else "False",
                              "reason": "MinimumReplicasAvailable" if ready else "MinimumReplicasUnavailable",
                              "message": "Deployment has minimum availability." if ready
                              else "Deployment does not have minimum availability.",
                              "lastUpdateTime": ts(s), "lastTransitionTime": ts(s)}]}
    if ready:
        status |= {"readyReplicas": ready, "availableReplicas": ready}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": f"{REV}-deployment", "namespace": NS, "uid": uid(),
                     "resourceVersion": str(5_100_000 + int(s * 10)), "generation": generation,
                     "creationTimestamp": "2026-11-30T08:41:07Z", "labels": isvc_labels()},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"serving.knative.dev/revisionUID": REVISION_UID}},
                 "template": {"metadata": {"labels": isvc_labels()}, "spec": pod_spec(None)},
                 "progressDeadlineSeconds": 1800},
        "status": status,
    }


def event(pod: Pod, suffix: str, s: float, reason: str, kind: str, component: str, message: str, instance: str = "") -> dict:
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{pod.name}.{suffix}", "namespace": NS, "uid": uid(),
                     "resourceVersion": str(5_100_000 + int(s * 10)), "creationTimestamp": ts(s)},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "namespace": NS, "uid": pod.uid},
        "reason": reason, "type": kind, "count": 1, "message": message, "source": {"component": component},
        "firstTimestamp": ts(s), "lastTimestamp": ts(s), "reportingComponent": component, "reportingInstance": instance,
    }


def build() -> dict:
    rnd = random.Random(16)
    snapshots: list[dict] = []

    def snap(s: float, objects: dict) -> None:
        snapshots.append({"at": at(s).isoformat().replace("+00:00", "Z"), "objects": objects})

    # --- the load phase -------------------------------------------------------------------------
    cold_sched = 14.2  # the cold request leaves the client pod 8 s after the Job was created
    gpu_created, gpu_ready = cold_sched + 40.8, cold_sched + 79.0
    p1 = Pod("x7k2p", cold_sched + 1.6)
    p1.scheduled, p1.ready = cold_sched + 196.0, cold_sched + 331.0
    cold_done = cold_sched + 331.66
    t0 = cold_done + 0.04  # the ramp starts as the cold request returns

    def r(x: float) -> float:  # ramp time -> run time
        return t0 + x

    p2, p3 = Pod("m4q8w", r(64.6)), Pod("c9v3n", r(144.7))
    p2.scheduled, p2.ready = r(64.7), r(77.6)
    p3.scheduled, p3.ready = r(144.8), r(157.9)
    p3.deleted, p2.deleted, p1.deleted = r(336.6), r(384.6), r(540.5)
    pods = [p1, p2, p3]
    # (time, desired, actual, PA Active status, reason, Deployment spec.replicas, readyReplicas, replicas)
    scale = [
        (6.0, 0, 0, "False", "NoTraffic", 0, 0, 0),
        (cold_sched + 1.3, 1, 0, "Unknown", "Queued", 1, 0, 1),
        (cold_sched + 331.4, 1, 1, "True", None, 1, 1, 1),
        (r(64.3), 2, 1, "True", None, 2, 1, 2),
        (r(78.1), 2, 2, "True", None, 2, 2, 2),
        (r(144.3), 3, 2, "True", None, 3, 2, 3),
        (r(158.4), 3, 3, "True", None, 3, 3, 3),
        (r(336.3), 2, 3, "True", None, 2, 2, 2),
        (r(338.4), 2, 2, "True", None, 2, 2, 2),
        (r(384.3), 1, 2, "True", None, 1, 1, 1),
        (r(386.2), 1, 1, "True", None, 1, 1, 1),
        (r(480.3), 0, 1, "False", "NoTraffic", 1, 1, 1),
        (r(540.4), 0, 1, "False", "NoTraffic", 0, 0, 1),
        (r(542.2), 0, 0, "False", "NoTraffic", 0, 0, 0),
    ]
    # What the watcher keeps: the autoscaler's objects when they change ...
    active_since, generation, last = 6.0, 1, None
    for t, desired, actual, active, reason, replicas, ready, current in scale:
        if last is not None and active != last[3]:
            active_since = t
        if last is not None and replicas != last[5]:
            generation += 1
        snap(t, {"podautoscalers": [pod_autoscaler(t, desired, actual, active, reason, active_since)],
                 "deployments": [deployment(t, replicas, ready, current, generation)]})
        last = (t, desired, actual, active, reason, replicas, ready, current)
    # ... and the pods and GPU nodes when they change (its first poll, just before the client starts, included).
    changes = sorted({p.created for p in pods} | {p.scheduled for p in pods} | {p.ready for p in pods}
                     | {p.deleted for p in pods} | {p.deleted + 30 for p in pods} | {gpu_created, gpu_ready, gpu_created + 195})
    snap(5.0, {"pods": []})  # the wait for zero replicas
    last_pods = last_nodes = None
    for s in [6.0] + [t + 0.2 for t in changes]:
        live = [p.at(s) for p in pods if p.exists(s)]
        key = [(p["metadata"]["name"], p["status"]["phase"], [c["status"] for c in p["status"]["conditions"]],
                "deletionTimestamp" in p["metadata"]) for p in live]
        if key != last_pods:
            snap(s, {"pods": live})
            last_pods = key
        nodes = [node(GPU_NODE, "gpu", gpu_created, gpu_ready, s, True)] if s >= gpu_created else []
        node_key = [(n["metadata"]["name"], n["status"]["conditions"][0]["status"]) for n in nodes]
        if node_key != last_nodes:
            snap(s, {"gpu_nodes": nodes})
            last_nodes = node_key
    snapshots.sort(key=lambda x: x["at"])

    # The client's log: the cold request, the ramp, the end.
    lines = [{"i": 0, "step": -1, "t_sched": cold_sched, "t_send": cold_sched + 0.0004,
              "t_first_byte": cold_sched + 331.62, "t_done": cold_done, "status": 200, "error": None}]
    lines.append({"event": "ramp", "t0": t0, "rates": RATES, "step_s": STEP_S})
    warm_ups = [p2.ready, p3.ready]  # a new replica's first inference pays the CUDA warm-up
    i = 1
    for k, rate in enumerate(RATES):
        for j in range(int(rate * STEP_S)):
            sched = t0 + k * STEP_S + j / rate
            latency = 0.0062 + rnd.lognormvariate(-5.6, 0.35) + 0.00025 * rate
            if warm_ups and sched >= warm_ups[0]:
                latency += 0.58
                warm_ups.pop(0)
            send = sched + 0.0002 + rnd.random() * 0.0004
            lines.append({"i": i, "step": k, "t_sched": sched, "t_send": send, "t_first_byte": sched + latency - 0.0003,
                          "t_done": sched + latency, "status": 200, "error": None})
            i += 1
    lines.append({"event": "end", "t": t0 + len(RATES) * STEP_S + 0.02})
    epoch = START.timestamp()

    def client_line(obj: dict) -> str:
        out = {}
        for key, value in obj.items():
            out[key] = round(epoch + value, 4) if key.startswith("t") and isinstance(value, float) else value
        return json.dumps(out, separators=(",", ":"))

    load_log = "\n".join(client_line(x) for x in lines) + "\n"
    triton_log = "\n".join([
        '/tmp/models/cifar10/config.pbtxt:        kind: KIND_GPU',
        "I1130 09:05:41.518712 1 pinned_memory_manager.cc:241] Pinned memory pool is created at '0x7f2b5a000000' "
        "with size 268435456",
        "I1130 09:05:41.519263 1 cuda_memory_manager.cc:107] CUDA memory pool is created on device 0 with size 67108864",
        "I1130 09:05:41.902117 1 model_lifecycle.cc:462] loading: cifar10:1",
        "I1130 09:05:42.633871 1 libtorch.cc:2253] TRITONBACKEND_Initialize: pytorch",
        "I1130 09:05:42.651002 1 libtorch.cc:2316] TRITONBACKEND_ModelInitialize: cifar10 (version 1)",
        "I1130 09:05:42.655147 1 libtorch.cc:2360] TRITONBACKEND_ModelInstanceInitialize: cifar10_0 (GPU device 0)",
        "I1130 09:05:44.108820 1 model_lifecycle.cc:815] successfully loaded 'cifar10'",
        "I1130 09:05:44.109431 1 grpc_server.cc:2450] Started GRPCInferenceService at 0.0.0.0:9000",
        "I1130 09:05:44.109710 1 http_server.cc:3555] Started HTTPService at 0.0.0.0:8080",
        "I1130 09:05:44.151201 1 http_server.cc:185] Started Metrics Service at 0.0.0.0:8002",
    ]) + "\n"

    # --- one cold start after the load phase: the GPU node is still up ----------------------------
    c0 = r(572.0) + 8.2
    p4 = Pod("h2d6r", c0 + 1.1)
    p4.scheduled, p4.ready = c0 + 1.2, c0 + 13.6
    snap(r(572.0), {"pods": []})
    snap(c0 + 16.0, {"pods": [p4.at(c0 + 16.0)]})
    cold_log = json.dumps({"i": 0, "t_send": round(epoch + c0, 4), "t_first_byte": round(epoch + c0 + 14.12, 4),
                           "t_done": round(epoch + c0 + 14.13, 4), "status": 200, "error": None,
                           "headers": {"content-type": "application/json", "content-length": "183"},
                           "body": '{"model_name":"cifar10","model_version":"1","outputs":[{"name":"OUTPUT__0",'
                                   '"datatype":"FP32","shape":[1,10],"data":[-0.52,0.81,-0.12,0.44,-0.61,0.30,'
                                   '0.17,-0.38,0.95,0.27]}]}'}) + "\n"
    finished = c0 + 17.0

    events = [
        event(p1, "187c4a", p1.created + 0.2, "FailedScheduling", "Warning", "default-scheduler",
              "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. preemption: 0/1 "
              "nodes are available: 1 Preemption is not helpful for scheduling."),
        event(p1, "187c4b", p1.created + 10.0, "TriggeredScaleUp", "Normal", "cluster-autoscaler",
              "pod triggered scale-up: [{https://www.googleapis.com/compute/v1/projects/ml-labs-demo/zones/"
              "us-central1-a/instanceGroups/gke-gml-g5-gpu-5c1f9a3e-grp 0->1 (max: 1)}]"),
        event(p1, "187c5f", p1.scheduled + 118.0, "Pulled", "Normal", "kubelet",
              f'Successfully pulled image "{TRITON_IMAGE}" in 1m57.6s (1m57.6s including waiting). '
              "Image size: 6823471392 bytes.", GPU_NODE),
    ]
    isvc = {
        "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": ISVC, "namespace": NS, "uid": uid(),
                     "resourceVersion": "5101977", "generation": 1, "creationTimestamp": "2026-11-30T08:41:05Z",
                     "labels": {"app.kubernetes.io/part-of": "gke-ml-labs", "gke-ml-labs/lab": "g5"},
                     "annotations": {"serving.kserve.io/deploymentMode": "Knative",
                                     "serving.knative.dev/progress-deadline": "30m",
                                     "autoscaling.knative.dev/scale-to-zero-pod-retention-period": "0s"}},
        "spec": {"predictor": {
            "minReplicas": 0, "maxReplicas": MAX_REPLICAS, "scaleMetric": "rps", "scaleTarget": TARGET,
            "automountServiceAccountToken": False,
            "nodeSelector": {"gke-ml-labs/pool": "gpu"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}],
            "volumes": [{"name": "scratch", "emptyDir": {}}],
            "model": {"runtime": "kserve-tritonserver", "modelFormat": {"name": "triton", "version": "2"},
                      "protocolVersion": "v2", "storageUri": "gs://kfserving-examples/models/torchscript",
                      "resources": {"limits": {"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "1"},
                                    "requests": {"cpu": "500m", "memory": "1Gi"}}},
        }},
        "status": {
            "url": f"http://{ISVC}.{NS}.example.com", "address": {"url": f"http://{ISVC}.{NS}.svc.cluster.local"},
            "observedGeneration": 1, "deploymentMode": "Knative", "clusterServingRuntimeName": "kserve-tritonserver",
            "modelStatus": {"states": {"activeModelState": "Loaded", "targetModelState": "Loaded"},
                            "transitionStatus": "UpToDate"},
            "components": {"predictor": {
                "latestCreatedRevision": REV, "latestReadyRevision": REV, "latestRolledoutRevision": REV,
                "url": f"http://{ISVC}-predictor.{NS}.example.com",
                "traffic": [{"revisionName": REV, "percent": 100, "latestRevision": True}]}},
            "conditions": [{"type": t, "status": "True", "lastTransitionTime": "2026-11-30T08:49:31Z"}
                           for t in ("IngressReady", "PredictorReady", "Ready")],
        },
    }
    outputs = json.loads((REPO / "tests" / "data" / "labs" / "g5" / "recording.json").read_text())["outputs"]
    outputs["endpoints"]["kserve"] |= {"service": f"{ISVC}-predictor", "path": "/v2/models/cifar10/infer",
                                       "protocol": "kserve-v2", "route_host": f"{ISVC}-predictor.{NS}.example.com",
                                       "url": f"http://{ISVC}-predictor.{NS}.svc.cluster.local"}
    outputs["gpu_pool"]["sharing"] = {"strategy": "TIME_SHARING", "max_shared_clients_per_gpu": 6}
    outputs["versions"]["triton"] = "23.05-py3"
    outputs["benchmark"] = {
        "inference_service": ISVC, "inference_namespace": NS,
        "model_versions": {"v1": "gs://kfserving-examples/models/torchscript",
                           "v2": "gs://kfserving-examples/models/torchscript/cifar10"},
        "serving_version": "v1", "canary_version": None, "canary_traffic_percent": 0, "min_replicas": 0,
        "gpu_predictor": True, "runtime": "triton", "served_model": "cifar10", "max_replicas": MAX_REPLICAS,
        "scale_metric": "rps", "scale_target": TARGET, "scale_to_zero_grace_s": 60, "scale_to_zero_retention_s": 0,
        "request_timeout_s": 1800,
    }
    finished_node = node(GPU_NODE, "gpu", gpu_created, gpu_ready, finished, True)
    system = json.loads((REPO / "tests" / "data" / "labs" / "g5" / "recording.json").read_text())["nodes"]
    return {
        "lab": "g5", "run_id": RUN, "stack": "g5",
        "started_at": "2026-11-30T09:00:00Z", "finished_at": at(finished).isoformat().replace("+00:00", "Z"),
        "outputs": outputs,
        "server_version": kf.server_version(),
        "nodes": system + [finished_node],
        "events": events,
        "charts": {"cert-manager": "cert-manager-v1.17.0", "kserve-crd": "kserve-crd-v0.20.0",
                   "kserve": "kserve-resources-v0.20.0", "kserve-runtimes": "kserve-runtime-configs-v0.20.0"},
        "snapshots": snapshots,
        "objects": {"inferenceservice": [isvc]},
        # Triton's log of the one predictor still up when the ramp ended (the others had scaled away).
        "logs": {f"{LOAD_JOB}-q2w8x": load_log, p1.name: triton_log, f"{COLD_JOB}-z5n1c": cold_log},
        "client": {"cold_jobs": [COLD_JOB], "load_job": LOAD_JOB, "canary_job": None},
        "notes": [],
    }


if __name__ == "__main__":
    target = HERE / "recording.json"
    rec = kf.realistic(build())
    assert not kf.problems(rec), kf.problems(rec)
    # As `python -m tests.kube_fixtures` writes every lab fixture.
    target.write_text(json.dumps(rec, separators=(",", ":"), ensure_ascii=False))
    print(f"wrote {target} ({target.stat().st_size // 1024} KiB)")
