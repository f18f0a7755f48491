"""The idle guard: its selection on real-shaped Kubernetes objects, a run against a local server
answering like the Kubernetes API, and the CronJob and RBAC it deploys (under Pulumi mocks)."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import schemas
from components import idle_guard as component
from components.cluster import POOL_LABEL
from components.scripts import idle_guard
from components.scripts.kube_api import KubeApi
from conftest import STACKS
from stacks.compose_cost import idle_guard_args
from stacks.loader import ConfigError, parse
from stacks.mockrun import run_stack

NOW = datetime(2026, 11, 29, 18, 0, tzinfo=timezone.utc)
TTL = 180
PART_OF = {"app.kubernetes.io/part-of": "gke-ml-labs", "app.kubernetes.io/managed-by": "pulumi", "gke-ml-labs/lab": "g6"}
GPU_TOLERATION = [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}]


def ts(minutes_ago: float) -> str:
    return (NOW - timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_spec(gpus: int) -> dict:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {
        "containers": [{
            "name": "server",
            "image": "docker.io/vllm/vllm-openai:v0.11.2",
            "resources": {"requests": {"cpu": "3", "memory": "12Gi", **limits}, "limits": {"memory": "14Gi", **limits}},
        }],
        "nodeSelector": {POOL_LABEL: "gpu"} if gpus else {},
        "tolerations": GPU_TOLERATION if gpus else [],
        "enableServiceLinks": False,
    }


def workload(kind: str, name: str, ns: str = "serving", *, gpus: int = 1, labels: dict | None = None,
             replicas: int = 1, annotations: dict | None = None, owner: dict | None = None, active: int = 1) -> dict:
    api = "batch/v1" if kind == "Job" else "apps/v1"
    meta = {"name": name, "namespace": ns, "uid": f"uid-{name}", "creationTimestamp": ts(600), "generation": 1,
            "labels": PART_OF if labels is None else labels, "annotations": annotations or {}}
    if owner:
        meta["ownerReferences"] = [owner]
    spec = {"template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec(gpus)}}
    if kind == "Job":
        spec |= {"backoffLimit": 0, "completions": 1, "parallelism": 1}
        status = {"active": active, "startTime": ts(600)} if active else {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    else:
        spec |= {"replicas": replicas, "selector": {"matchLabels": {"app": name}}}
        status = {"replicas": replicas, "readyReplicas": replicas}
    return {"apiVersion": api, "kind": kind, "metadata": meta, "spec": spec, "status": status}


def pod(owner_kind: str, owner_name: str, minutes_ago: float, ns: str = "serving", phase: str = "Running",
        replica: int = 0) -> dict:
    labels = {"app": owner_name}
    if owner_kind == "Deployment":
        labels["pod-template-hash"] = "7d9c5b6f8"
        ref_kind, ref_name = "ReplicaSet", f"{owner_name}-7d9c5b6f8"
        name = f"{ref_name}-{('x2k4p', 'm8q9z', 'b7v3n')[replica]}"
    else:
        ref_kind, ref_name, name = owner_kind, owner_name, f"{owner_name}-{replica}"
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels, "creationTimestamp": ts(minutes_ago),
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": ref_kind, "name": ref_name,
                                          "uid": "uid-x", "controller": True, "blockOwnerDeletion": True}]},
        "spec": {**pod_spec(1), "nodeName": "gke-gml-g6-gpu-1a2b"},
        "status": {"phase": phase, "startTime": ts(minutes_ago)},
    }


def select(workloads: list[dict], pods: list[dict]) -> list[idle_guard.Action]:
    by_kind: dict[str, list[dict]] = {}
    for w in workloads:
        by_kind.setdefault(w["kind"], []).append(w)
    return idle_guard.select(by_kind, pods, NOW, TTL)


def test_old_gpu_deployment_is_scaled_to_zero_with_a_reason():
    (action,) = select([workload("Deployment", "vllm")], [pod("Deployment", "vllm", 240)])
    assert (action.kind, action.namespace, action.name, action.verb) == ("Deployment", "serving", "vllm", "scale-to-zero")
    assert action.log_line(dry_run=False) == (
        "idle-guard: scaled Deployment serving/vllm to 0 replicas: it requests 1 nvidia.com/gpu per pod "
        "and its oldest pod has run 240 min (TTL 180 min)"
    )


def test_age_is_that_of_the_oldest_live_pod_not_of_the_workload():
    deploy = workload("Deployment", "vllm")  # created 600 min ago, scaled up again 30 min ago
    assert select([deploy], [pod("Deployment", "vllm", 30)]) == []
    assert select([deploy], [pod("Deployment", "vllm", 300, phase="Failed"), pod("Deployment", "vllm", 30)]) == []
    assert select([deploy], [pod("Deployment", "vllm", 181)])


def test_age_is_that_of_the_oldest_of_several_live_pods():
    # Two replicas: one up for 240 min, one added 30 min ago. The GPU has been held for 240 min.
    deploy = workload("Deployment", "vllm", replicas=2)
    pods = [pod("Deployment", "vllm", 30, replica=0), pod("Deployment", "vllm", 240, replica=1)]
    (action,) = select([deploy], pods)
    assert action.age_minutes == pytest.approx(240)
    assert "its oldest pod has run 240 min" in action.log_line(dry_run=False)
    sts = workload("StatefulSet", "notebook", "lab", replicas=2)
    young = [pod("StatefulSet", "notebook", 100, "lab", replica=0), pod("StatefulSet", "notebook", 20, "lab", replica=1)]
    assert select([sts], young) == [], "neither pod is past the 180 min TTL"


def test_jobs_are_deleted_and_statefulsets_scaled():
    actions = select(
        [workload("Job", "train", "training"), workload("StatefulSet", "notebook", "lab")],
        [pod("Job", "train", 200, "training"), pod("StatefulSet", "notebook", 500, "lab")],
    )
    assert [(a.kind, a.verb) for a in actions] == [("StatefulSet", "scale-to-zero"), ("Job", "delete")]
    assert actions[1].log_line(dry_run=True).startswith("idle-guard: would delete Job training/train: ")


@pytest.mark.parametrize(
    "obj, why",
    [
        (workload("Deployment", "vllm", labels={"app": "someone-elses"}), "not part of gke-ml-labs"),
        (workload("Deployment", "vllm", gpus=0), "no GPU requested"),
        (workload("Deployment", "vllm", replicas=0), "already at zero"),
        (workload("Deployment", "vllm", annotations={"gke-ml-labs/idle-guard": "skip"}), "opted out"),
        (workload("Deployment", "vllm", owner={"apiVersion": "serving.knative.dev/v1", "kind": "Revision",
                                               "name": "isvc-predictor-00001", "uid": "r", "controller": True}),
         "its owner (Knative) would undo a scale"),
        (workload("Job", "vllm", active=0), "a finished Job holds no GPU"),
    ],
)
def test_left_alone(obj, why):
    assert select([obj], [pod(obj["kind"], "vllm", 999)]) == [], why


def test_no_live_pod_means_nothing_to_stop():
    assert select([workload("Deployment", "vllm")], []) == []


class FakeKube:
    """A loopback server answering the list, scale and delete calls like the Kubernetes API."""

    def __init__(self, lists: dict[str, list[dict]], fail_patch: bool = False):
        self.lists, self.calls = lists, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _answer(self, code: int, body: dict):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _any(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                path = self.path.split("?")[0]
                outer.calls.append((self.command, path, self.headers.get("Content-Type"), body))
                if self.headers.get("Authorization") != "Bearer sa-token":
                    return self._answer(401, {"kind": "Status", "status": "Failure", "code": 401})
                if self.command == "GET" and path in outer.lists:
                    kind = path.rsplit("/", 1)[-1]
                    return self._answer(200, {"kind": f"{kind}List", "metadata": {"resourceVersion": "1"}, "items": outer.lists[path]})
                if self.command == "PATCH" and fail_patch:
                    return self._answer(403, {"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403})
                return self._answer(200, {"kind": "Status", "status": "Success"})

            do_GET = do_PATCH = do_DELETE = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.api = KubeApi(f"http://127.0.0.1:{self.server.server_address[1]}", "sa-token")

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def cluster_lists() -> dict[str, list[dict]]:
    return {
        "/apis/apps/v1/deployments": [workload("Deployment", "vllm"), workload("Deployment", "grafana", "monitoring", gpus=0)],
        "/apis/apps/v1/statefulsets": [],
        "/apis/batch/v1/jobs": [workload("Job", "train", "training")],
        "/api/v1/pods": [pod("Deployment", "vllm", 400), pod("Job", "train", 60, "training")],
    }


def test_run_scales_through_the_scale_subresource_and_logs(capsys):
    kube = FakeKube(cluster_lists())
    try:
        assert idle_guard.run(kube.api, TTL, dry_run=False, now=NOW) == 0
    finally:
        kube.close()
    writes = [c for c in kube.calls if c[0] != "GET"]
    assert writes == [("PATCH", "/apis/apps/v1/namespaces/serving/deployments/vllm/scale",
                       "application/merge-patch+json", {"spec": {"replicas": 0}})]
    assert capsys.readouterr().out.strip() == (
        "idle-guard: scaled Deployment serving/vllm to 0 replicas: it requests 1 nvidia.com/gpu per pod "
        "and its oldest pod has run 400 min (TTL 180 min)"
    )


def test_dry_run_writes_nothing_and_a_refused_patch_fails_the_run(capsys):
    kube = FakeKube(cluster_lists())
    try:
        assert idle_guard.run(kube.api, TTL, dry_run=True, now=NOW) == 0
        assert all(c[0] == "GET" for c in kube.calls)
        assert "would scale Deployment serving/vllm" in capsys.readouterr().out
    finally:
        kube.close()
    refusing = FakeKube(cluster_lists(), fail_patch=True)
    try:
        assert idle_guard.run(refusing.api, TTL, dry_run=False, now=NOW) == 1
    finally:
        refusing.close()
    assert "FAILED to stop Deployment serving/vllm: PATCH" in capsys.readouterr().out


def test_an_autoscaled_deployment_is_held_at_zero_by_pausing_its_scaled_object(capsys):
    # KEDA would put a Deployment scaled to 0 straight back to its ScaledObject's floor (minReplicaCount).
    lists = cluster_lists()
    target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"}
    lists[idle_guard.SCALED_OBJECTS] = [
        {"metadata": {"name": "vllm", "namespace": "serving"}, "spec": {"scaleTargetRef": target, "minReplicaCount": 1}},
        # The same Deployment name in another namespace is another server.
        {"metadata": {"name": "other", "namespace": "team-a"}, "spec": {"scaleTargetRef": target}},
    ]
    kube = FakeKube(lists)
    try:
        assert idle_guard.run(kube.api, TTL, dry_run=False, now=NOW, keda=True) == 0
    finally:
        kube.close()
    writes = [c[:2] + (c[3],) for c in kube.calls if c[0] != "GET"]
    assert writes == [
        ("PATCH", "/apis/keda.sh/v1alpha1/namespaces/serving/scaledobjects/vllm",
         {"metadata": {"annotations": {"autoscaling.keda.sh/paused-replicas": "0"}}}),
        ("PATCH", "/apis/apps/v1/namespaces/serving/deployments/vllm/scale", {"spec": {"replicas": 0}}),
    ]
    assert "scaled Deployment serving/vllm to 0 replicas and paused its ScaledObject vllm at 0" in capsys.readouterr().out
    # Without KEDA the guard never asks for ScaledObjects (it has no right to list them).
    kube = FakeKube(lists)
    try:
        idle_guard.run(kube.api, TTL, dry_run=False, now=NOW)
    finally:
        kube.close()
    assert all(path != idle_guard.SCALED_OBJECTS for _, path, *_ in kube.calls)


# --- what gets deployed ---


def g6(**guard) -> component.IdleGuardArgs:
    cfg = parse({"lab": "g6", "idle_guard": {"enabled": True, **guard}}, stack="g6", project="p", region=None)
    return idle_guard_args(cfg, {POOL_LABEL: "system"})


def test_objects_validate_and_rbac_is_least_privilege():
    objects = component.objects(g6(ttl_minutes=45, dry_run=True))
    for obj in objects:
        schemas.validate_object(obj)
    role = next(o for o in objects if o["kind"] == "ClusterRole")
    grants = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    assert grants == {
        ("", "pods", "list"),
        ("apps", "deployments", "list"), ("apps", "statefulsets", "list"),
        ("apps", "deployments/scale", "patch"), ("apps", "statefulsets/scale", "patch"),
        ("batch", "jobs", "list"), ("batch", "jobs", "delete"),
    }
    cron = next(o for o in objects if o["kind"] == "CronJob")
    spec = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert cron["spec"]["schedule"] == "*/10 * * * *"
    assert spec["nodeSelector"] == {POOL_LABEL: "system"} and "tolerations" not in spec
    env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
    assert env["TTL_MINUTES"] == "45" and env["DRY_RUN"] == "true" and env["KEDA"] == "false"


def test_with_autoscaling_the_guard_may_list_and_pause_scaled_objects_and_does():
    cfg = parse({"lab": "g6", "gpu_max_nodes": 2, "idle_guard": {"enabled": True}, "autoscaling": {"enabled": True}},
                stack="g6", project="p", region=None)  # fmt: skip
    objects = component.objects(idle_guard_args(cfg, {POOL_LABEL: "system"}))
    role = next(o for o in objects if o["kind"] == "ClusterRole")
    assert {"apiGroups": ["keda.sh"], "resources": ["scaledobjects"], "verbs": ["list", "patch"]} in role["rules"]
    cron = next(o for o in objects if o["kind"] == "CronJob")
    env = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "KEDA", "value": "true"} in env


def test_mounted_scripts_are_the_repository_files():
    cm = component.scripts_config_map(g6().stack_id)
    assert cm["data"]["idle_guard.py"] == open(idle_guard.__file__).read()
    paths = {item["path"] for item in component.cron_job(g6())["spec"]["jobTemplate"]["spec"]["template"]["spec"]["volumes"][0]["configMap"]["items"]}
    assert paths == {"components/__init__.py", "components/scripts/__init__.py",
                     "components/scripts/kube_api.py", "components/scripts/idle_guard.py"}


def test_guard_under_mocks_uses_the_cluster_provider():
    run = run_stack("dev", overrides={"gke-ml-labs:idle_guard": {"enabled": True, "ttl_minutes": 30}})
    cron = run.one("kubernetes:batch/v1:CronJob")
    provider = run.one("pulumi:providers:kubernetes")
    assert cron.provider.startswith(provider.urn)
    assert "idle-guard" in run.outputs["namespaces"]
    container = cron.inputs["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "TTL_MINUTES", "value": "30"} in container["env"]


@pytest.mark.parametrize("ttl", [0, -5])
def test_ttl_of_zero_is_rejected_before_anything_exists(ttl):
    with pytest.raises(ConfigError, match=r"gke-ml-labs:idle_guard.ttl_minutes: ttl_minutes -?\d+: must be at least 1"):
        run_stack("dev", overrides={"gke-ml-labs:idle_guard": {"enabled": True, "ttl_minutes": ttl}})


@pytest.mark.parametrize("stack", STACKS)
def test_guard_is_on_exactly_for_labs_whose_workloads_never_finish(stack, stack_runs):
    run = stack_runs[(stack, False)]
    lab = run.outputs["lab"]
    assert bool(run.of_type("kubernetes:batch/v1:CronJob") and
                [r for r in run.of_type("kubernetes:batch/v1:CronJob") if r.name == "idle-guard-cronjob"]) == (lab in ("g5", "g6"))
