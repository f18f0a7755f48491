"""The idle guard: stops GPU workloads of gke-ml-labs that have run longer than a TTL, so the
autoscaler can take the GPU pool back to zero. Runs as a CronJob; one log line per action.

A workload is stopped when all of these hold:
- it carries the label app.kubernetes.io/part-of=gke-ml-labs and is not annotated
  gke-ml-labs/idle-guard=skip;
- it is a top-level Deployment, StatefulSet or Job (one owned by another controller, e.g. a
  Knative revision or a JobSet, would be recreated by its owner);
- its pod template requests nvidia.com/gpu;
- it is active (replicas > 0; a Job with active pods);
- its oldest live pod (not Succeeded/Failed) was created more than TTL minutes ago.
Deployments and StatefulSets are scaled to 0 (their definition stays: scale up again to resume);
Jobs are deleted with their pods.

A Deployment that a KEDA ScaledObject scales (the `autoscaling` feature, KEDA=true) would be put back to
the ScaledObject's floor by KEDA within one polling interval, GPU node and all: its ScaledObject is
paused at zero first (the annotation autoscaling.keda.sh/paused-replicas: "0", which KEDA v2.20.2 honours
by holding the target at that count); removing the annotation resumes autoscaling.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal

from components.scripts.kube_api import KubeApi, KubeApiError

PART_OF = ("app.kubernetes.io/part-of", "gke-ml-labs")
SKIP_ANNOTATION = ("gke-ml-labs/idle-guard", "skip")
GPU = "nvidia.com/gpu"
Kind = Literal["Deployment", "StatefulSet", "Job"]
LIST_PATHS: dict[str, str] = {
    "Deployment": "/apis/apps/v1/deployments",
    "StatefulSet": "/apis/apps/v1/statefulsets",
    "Job": "/apis/batch/v1/jobs",
}
SCALED_OBJECTS = "/apis/keda.sh/v1alpha1/scaledobjects"
# KEDA's apis/keda/v1alpha1/scaledobject_types.go (PausedReplicasAnnotation).
PAUSED_REPLICAS = "autoscaling.keda.sh/paused-replicas"


@dataclass(frozen=True)
class Action:
    kind: Kind
    namespace: str
    name: str
    verb: Literal["scale-to-zero", "delete"]
    gpus: int
    age_minutes: float
    ttl_minutes: int
    scaled_object: str | None = None  # the KEDA ScaledObject (same namespace) that scales this Deployment

    def log_line(self, dry_run: bool) -> str:
        did = {"scale-to-zero": ("would scale", "scaled"), "delete": ("would delete", "deleted")}[self.verb][not dry_run]
        to = " to 0 replicas" if self.verb == "scale-to-zero" else ""
        paused = ""
        if self.scaled_object is not None:
            paused = (f" and {'would pause' if dry_run else 'paused'} its ScaledObject {self.scaled_object} at 0 "
                      f"({PAUSED_REPLICAS}; remove the annotation to resume autoscaling)")  # fmt: skip
        return (
            f"idle-guard: {did} {self.kind} {self.namespace}/{self.name}{to}{paused}: it requests {self.gpus} {GPU} "
            f"per pod and its oldest pod has run {self.age_minutes:.0f} min (TTL {self.ttl_minutes} min)"
        )


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def gpus_requested(pod_spec: dict) -> int:
    """GPUs one pod of this spec asks for (limits or requests; init containers run before, not beside)."""
    def count(container: dict) -> int:
        resources = container.get("resources") or {}
        return max(int((resources.get(k) or {}).get(GPU, 0)) for k in ("limits", "requests"))

    main = sum(count(c) for c in pod_spec.get("containers") or [])
    init = max((count(c) for c in pod_spec.get("initContainers") or []), default=0)
    return max(main, init)


def _active(kind: str, workload: dict) -> bool:
    if kind == "Job":
        return int((workload.get("status") or {}).get("active") or 0) > 0
    replicas = (workload.get("spec") or {}).get("replicas")
    return (1 if replicas is None else int(replicas)) > 0


def _owner(pod: dict) -> tuple[str, str] | None:
    """(kind, name) of the workload a pod belongs to: a ReplicaSet stands for its Deployment."""
    meta = pod["metadata"]
    for ref in meta.get("ownerReferences") or []:
        if not ref.get("controller"):
            continue
        if ref["kind"] == "ReplicaSet":
            suffix = f"-{(meta.get('labels') or {}).get('pod-template-hash', '')}"
            if ref["name"].endswith(suffix) and suffix != "-":
                return "Deployment", ref["name"][: -len(suffix)]
            return None
        return ref["kind"], ref["name"]
    return None


def oldest_pod_start(pods: list[dict]) -> dict[tuple[str, str, str], datetime]:
    """(kind, namespace, name) of each workload -> creation time of its oldest live pod."""
    oldest: dict[tuple[str, str, str], datetime] = {}
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        owner = _owner(pod)
        if owner is None:
            continue
        key = (owner[0], pod["metadata"]["namespace"], owner[1])
        created = _time(pod["metadata"]["creationTimestamp"])
        oldest[key] = min(created, oldest.get(key, created))
    return oldest


def scalers(scaled_objects: Sequence[dict]) -> dict[tuple[str, str], str]:
    """(namespace, Deployment) -> the name of the ScaledObject scaling it."""
    found = {}
    for obj in scaled_objects:
        ref = (obj.get("spec") or {}).get("scaleTargetRef") or {}
        if ref.get("kind", "Deployment") == "Deployment" and ref.get("apiVersion", "apps/v1") == "apps/v1":
            found[(obj["metadata"]["namespace"], ref["name"])] = obj["metadata"]["name"]
    return found


def select(
    workloads: dict[str, list[dict]], pods: list[dict], now: datetime, ttl_minutes: int,
    scaled_objects: Sequence[dict] = (),
) -> list[Action]:
    """What to stop now. `workloads`: kind -> objects as the API lists them; pure, for tests."""
    started = oldest_pod_start(pods)
    scaled = scalers(scaled_objects)
    actions = []
    for kind, objects in workloads.items():
        for obj in objects:
            meta = obj["metadata"]
            if (meta.get("labels") or {}).get(PART_OF[0]) != PART_OF[1]:
                continue
            if (meta.get("annotations") or {}).get(SKIP_ANNOTATION[0]) == SKIP_ANNOTATION[1]:
                continue
            if any(ref.get("controller") for ref in meta.get("ownerReferences") or []):
                continue
            gpus = gpus_requested(((obj.get("spec") or {}).get("template") or {}).get("spec") or {})
            if not gpus or not _active(kind, obj):
                continue
            since = started.get((kind, meta["namespace"], meta["name"]))
            if since is None:
                continue  # no live pod: nothing holds a GPU
            age = (now - since).total_seconds() / 60
            if age > ttl_minutes:
                verb = "delete" if kind == "Job" else "scale-to-zero"
                scaler = scaled.get((meta["namespace"], meta["name"])) if kind == "Deployment" else None
                actions.append(Action(kind, meta["namespace"], meta["name"], verb, gpus, age, ttl_minutes, scaler))
    return sorted(actions, key=lambda a: (a.namespace, a.kind, a.name))


def apply(api: KubeApi, action: Action) -> None:
    ns, name = action.namespace, action.name
    if action.kind == "Job":
        # Background propagation: the Job's pods go too, so the GPU is released.
        api.delete(f"/apis/batch/v1/namespaces/{ns}/jobs/{name}", {"propagationPolicy": "Background"})
    else:
        if action.scaled_object is not None:
            # First, or KEDA would scale the Deployment straight back up to the ScaledObject's floor.
            api.merge_patch(f"/apis/keda.sh/v1alpha1/namespaces/{ns}/scaledobjects/{action.scaled_object}",
                            {"metadata": {"annotations": {PAUSED_REPLICAS: "0"}}})  # fmt: skip
        plural = "deployments" if action.kind == "Deployment" else "statefulsets"
        api.merge_patch(f"/apis/apps/v1/namespaces/{ns}/{plural}/{name}/scale", {"spec": {"replicas": 0}})


def run(api: KubeApi, ttl_minutes: int, dry_run: bool, now: datetime | None = None, keda: bool = False) -> int:
    workloads = {kind: api.list(path) for kind, path in LIST_PATHS.items()}
    pods = api.list("/api/v1/pods")
    scaled_objects = api.list(SCALED_OBJECTS) if keda else []
    actions = select(workloads, pods, now or datetime.now(timezone.utc), ttl_minutes, scaled_objects)
    failures = 0
    for action in actions:
        try:
            if not dry_run:
                apply(api, action)
            print(action.log_line(dry_run), flush=True)
        except KubeApiError as e:
            failures += 1
            print(f"idle-guard: FAILED to stop {action.kind} {action.namespace}/{action.name}: {e}", flush=True)
    if not actions:
        print(f"idle-guard: nothing to stop (no GPU workload of gke-ml-labs older than {ttl_minutes} min)", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(run(KubeApi.in_cluster(), int(os.environ["TTL_MINUTES"]), os.environ.get("DRY_RUN") == "true",
                 keda=os.environ.get("KEDA") == "true"))
