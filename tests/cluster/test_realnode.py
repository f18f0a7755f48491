"""The real node (localcluster.realnode): pods execute in containers, behind real Services and DNS, under
their securityContext, and nothing of the node outlives the cluster.

Each check reads what ran (a pod's own log, the node's status as its kubelet wrote it, the host's /proc,
devices, mounts and iptables), never the node's own account of itself."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kubernetes import client, config

from benchmarks.labs import g1
from components.gpu_pool import GPU_RESOURCE, GPU_TAINT
from localcluster import build, certs, images, nodes, realnode
from localcluster.build import MODULES
from localcluster.controlplane import ControlPlane
from stacks.mockrun import run_stack
from stacks.stackfile import load_config

NODE_MODULES = ("kube", "kwok", *realnode.BUILD_MODULES)
LAB = "g1"
TOLERATE_GPU = [{"key": GPU_TAINT["key"], "operator": "Exists", "effect": GPU_TAINT["effect"]}]
POD_TIMEOUT_S = 120


def _host_state() -> dict[str, object]:
    """What the node must not leave on the host: devices, mounts, iptables rules, listening ports, cgroups."""
    iptables = subprocess.run(["iptables-save"], capture_output=True, text=True, check=True).stdout
    return {
        "devices": sorted(p.name for p in Path("/sys/class/net").iterdir()),
        "mounts": sorted(line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()),
        "iptables": [ln for ln in iptables.splitlines() if not ln.startswith("#")],
        "cgroups": sorted(str(h) for h in Path("/sys/fs/cgroup").glob(f"*{realnode.CGROUP_ROOT}")),
    }


@pytest.fixture(scope="module")
def node_binaries() -> build.Built:
    return build.ensure(NODE_MODULES)


@pytest.fixture(scope="module")
def cluster(node_binaries: build.Built, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with ControlPlane(tmp_path_factory.mktemp("realnode"), node_binaries, load_config(LAB), real_node=True) as plane:
        yield plane


@pytest.fixture(scope="module")
def core(cluster: ControlPlane) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(cluster.kubeconfig)))


@pytest.fixture
def namespace(core: client.CoreV1Api) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    core.create_namespace({"metadata": {"name": name, "labels": labels}})
    yield name
    core.delete_namespace(name)


def _pod(name: str, image: str, command: list[str], **extra: object) -> dict:
    """A pod that Restricted Pod Security admits, placed on the GPU pool as the labs' GPU pods are."""
    container = {
        "name": name, "image": image, "command": command, "imagePullPolicy": "IfNotPresent",
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
        **extra.pop("container", {}),  # type: ignore[dict-item]
    }  # fmt: skip
    return {
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": dict(nodes.PLACEMENT.gpu.node_selector),
            "tolerations": TOLERATE_GPU,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [container],
            **extra,
        },
    }  # fmt: skip


def _finished(core: client.CoreV1Api, namespace: str, name: str) -> client.V1Pod:
    deadline = time.monotonic() + POD_TIMEOUT_S
    while time.monotonic() < deadline:
        pod = core.read_namespaced_pod(name, namespace)
        if pod.status.phase in ("Succeeded", "Failed"):
            return pod
        time.sleep(0.5)
    events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    pytest.fail(f"pod {name} still {pod.status.phase} after {POD_TIMEOUT_S} s: " + "; ".join(e.message or "" for e in events))


def test_the_node_runs_the_kubelet_and_containerd_built_here(cluster, core, node_binaries):
    node = core.read_node(nodes.REAL_NODE_NAME)
    kube = MODULES["kube"].versions()["k8s.io/kubernetes"]
    containerd = MODULES["containerd"].versions()["github.com/containerd/containerd/v2"]
    assert node.status.node_info.kubelet_version == kube
    assert node.status.node_info.container_runtime_version == f"containerd://{containerd.removeprefix('v')}"  # as CRI says it
    # The binaries' own build info names the modules they came from.
    assert f"k8s.io/kubernetes\t{kube}" in subprocess.run(
        ["go", "version", "-m", str(node_binaries.binary("kubelet"))], capture_output=True, text=True, check=True
    ).stdout
    assert f"github.com/containerd/containerd/v2\t{containerd}" in subprocess.run(
        ["go", "version", "-m", str(node_binaries.binary("containerd"))], capture_output=True, text=True, check=True
    ).stdout
    # Shaped like the GPU pool: its taint, its labels, the extended resource the GPU pods request.
    assert [t.key for t in node.spec.taints or []] == [GPU_TAINT["key"]]
    assert node.metadata.labels.items() >= nodes.PLACEMENT.gpu.node_selector.items()
    assert node.status.allocatable[GPU_RESOURCE] == "1"


def test_a_pod_runs_its_command_and_its_log_holds_the_output(core, namespace):
    core.create_namespaced_pod(namespace, _pod("hello", images.normalise("busybox:1.37.0"), ["sh", "-c", "echo ran as $(id -u) on $(hostname)"]))
    pod = _finished(core, namespace, "hello")
    assert pod.status.phase == "Succeeded"
    assert pod.spec.node_name == nodes.REAL_NODE_NAME
    assert core.read_namespaced_pod_log("hello", namespace).strip() == "ran as 65532 on hello"


WRITES = """
import os
for path in ("/root-fs-file", "/scratch/file"):
    try:
        open(path, "w").write("x")
        print(path, "written")
    except OSError as e:
        print(path, "refused:", e.strerror)
print("uid", os.getuid())
"""


def test_a_restricted_pod_cannot_write_its_root_filesystem_but_can_write_its_empty_dir(core, namespace):
    pod = _pod("writes", "python:3.12.8-slim", ["python", "-c", WRITES],
               container={"volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]},
               volumes=[{"name": "scratch", "emptyDir": {}}])  # fmt: skip
    core.create_namespaced_pod(namespace, pod)
    assert _finished(core, namespace, "writes").status.phase == "Succeeded"
    assert core.read_namespaced_pod_log("writes", namespace).splitlines() == [
        "/root-fs-file refused: Read-only file system",
        "/scratch/file written",
        "uid 65532",
    ]


CLIENT = """
import json, socket, sys, urllib.request
ns = sys.argv[1]
answer = {
    "service": socket.gethostbyname(f"web.{ns}.svc.cluster.local"),
    "headless": sorted({a[4][0] for a in socket.getaddrinfo(f"web-pods.{ns}.svc.cluster.local", 8080)}),
    "short": urllib.request.urlopen("http://web/", timeout=10).status,
}
print(json.dumps(answer))
"""


def test_a_service_and_a_headless_name_resolve_and_carry_traffic_between_pods(core, namespace):
    probe = {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1}
    server = _pod("web", "python:3.12.8-slim", ["python", "-m", "http.server", "8080", "--directory", "/srv"],
                  container={"readinessProbe": probe, "ports": [{"containerPort": 8080}],
                             "volumeMounts": [{"name": "srv", "mountPath": "/srv"}]},
                  volumes=[{"name": "srv", "emptyDir": {}}])  # fmt: skip
    core.create_namespaced_pod(namespace, server)
    ports = [{"port": 80, "targetPort": 8080}]
    service = core.create_namespaced_service(namespace, {"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}, "ports": ports}})
    core.create_namespaced_service(namespace, {"metadata": {"name": "web-pods"},
                                               "spec": {"clusterIP": "None", "selector": {"app": "web"}, "ports": ports}})  # fmt: skip
    deadline = time.monotonic() + POD_TIMEOUT_S
    while not any(c.type == "Ready" and c.status == "True" for c in core.read_namespaced_pod("web", namespace).status.conditions or []):
        assert time.monotonic() < deadline, "the server's readiness probe never passed"
        time.sleep(0.5)
    core.create_namespaced_pod(namespace, _pod("client", "python:3.12.8-slim", ["python", "-c", CLIENT, namespace]))
    pod = _finished(core, namespace, "client")
    log = core.read_namespaced_pod_log("client", namespace)
    assert pod.status.phase == "Succeeded", log
    answer = json.loads(log)
    server_ip = core.read_namespaced_pod("web", namespace).status.pod_ip
    assert answer == {"service": service.spec.cluster_ip, "headless": [server_ip], "short": 200}


def test_the_node_s_mounts_and_devices_never_show_on_the_host(cluster, core, namespace):
    core.create_namespaced_pod(namespace, _pod("idle", images.normalise("busybox:1.37.0"), ["sleep", "30"]))
    deadline = time.monotonic() + POD_TIMEOUT_S
    while core.read_namespaced_pod("idle", namespace).status.phase != "Running":
        assert time.monotonic() < deadline
        time.sleep(0.5)
    host = _host_state()
    assert [m for m in host["mounts"] if str(cluster.state) in m] == []  # overlay, volumes, /run: the node's only
    assert "cni0" not in host["devices"] and realnode.HOST_LINK in host["devices"]


def test_g1_probe_runs_on_the_gpu_node_and_the_untolerated_pod_never_lands(core):
    """g1's own pods, from the stack outputs the program exports: the probe's container really starts on the
    GPU-shaped node (its shell's answer to nvidia-smi, which no stand-in has, in its own log); the pod that
    selects the pool without the toleration is refused for the taint."""
    run_id = "g1-real-0001"
    outputs = run_stack(LAB).outputs
    for obj in g1.build_workloads(outputs, run_id):
        core.create_namespaced_pod(obj["metadata"]["namespace"], obj)
    namespace = obj["metadata"]["namespace"]
    probe, untolerated = g1.probe_name(run_id), g1.untolerated_name(run_id)
    try:
        deadline = time.monotonic() + POD_TIMEOUT_S
        while core.read_namespaced_pod(probe, namespace).status.phase != "Running":
            assert time.monotonic() < deadline, "the probe never ran"
            time.sleep(0.5)
        pod = core.read_namespaced_pod(probe, namespace)
        assert pod.spec.node_name == nodes.REAL_NODE_NAME
        assert pod.status.container_statuses[0].container_id.startswith("containerd://")
        while "nvidia-smi" not in (log := core.read_namespaced_pod_log(probe, namespace)):
            assert time.monotonic() < deadline, log
            time.sleep(0.5)
        assert "not found" in log  # the stand-in has no driver: g1's report says so
        refused = core.read_namespaced_pod(untolerated, namespace)
        assert refused.spec.node_name is None
        scheduled = next(c for c in refused.status.conditions if c.type == "PodScheduled")
        assert g1.names_gpu_taint(scheduled.message), scheduled.message
    finally:
        for name in (probe, untolerated):
            core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)


def _integers(value: object) -> object:
    """A manifest as the program wrote it: the mocks hand numbers back as floats (protobuf's Struct)."""
    if isinstance(value, dict):
        return {k: _integers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integers(v) for v in value]
    return int(value) if isinstance(value, float) and value.is_integer() else value


def test_g6_vllm_deployment_serves_from_its_stand_in_through_its_service(cluster, core):
    """g6's own namespace, vLLM Deployment and Service, as the program declares them: the stand-in's `vllm
    serve` takes the manifest's arguments, its probes pass, and a completion and /metrics come back through
    the Service (from this host, routed to the node) and through the API server's service proxy, which is
    how the g6 benchmark reads a stack's server."""
    declared = run_stack("g6")
    objs = [_integers(declared.one(f"kubernetes:{t}", n).inputs) for t, n in (
        ("core/v1:Namespace", "vllm-ns"), ("apps/v1:Deployment", "vllm-deployment"), ("core/v1:Service", "vllm-service"))]  # fmt: skip
    api = client.ApiClient(config.new_client_from_config(config_file=str(cluster.kubeconfig)).configuration)
    apps = client.AppsV1Api(api)
    namespace_obj, deployment, service = objs
    namespace = namespace_obj["metadata"]["name"]
    core.create_namespace(namespace_obj)
    try:
        apps.create_namespaced_deployment(namespace, deployment)
        core.create_namespaced_service(namespace, service)
        deadline = time.monotonic() + POD_TIMEOUT_S
        while not (apps.read_namespaced_deployment(deployment["metadata"]["name"], namespace).status.ready_replicas or 0):
            assert time.monotonic() < deadline, [p.status.container_statuses for p in core.list_namespaced_pod(namespace).items]
            time.sleep(1)
        pod = core.list_namespaced_pod(namespace).items[0]
        assert pod.spec.node_name == nodes.REAL_NODE_NAME
        assert "vllm stand-in: python -m benchmarks.sim --model Qwen/Qwen2.5-1.5B-Instruct" in core.read_namespaced_pod_log(pod.metadata.name, namespace)
        endpoint = declared.outputs["endpoints"]["vllm"]
        cluster_ip = core.read_namespaced_service(endpoint["service"], namespace).spec.cluster_ip
        model = deployment["spec"]["template"]["spec"]["containers"][0]["args"][0]
        body = {"model": model, "prompt": "hello", "max_tokens": 4, "ignore_eos": True}  # vLLM's own extension
        direct = httpx.post(f"http://{cluster_ip}:{endpoint['port']}/v1/completions", json=body, timeout=30).json()
        assert direct["usage"]["completion_tokens"] == 4
        proxy = f"/api/v1/namespaces/{namespace}/services/{endpoint['service']}:{endpoint['port']}/proxy"
        with cluster.admin_client(certs.Pki(cluster.state / "pki")) as admin:
            metrics = admin.get(f"{proxy}/metrics", timeout=30).text
        assert "vllm:num_requests_running" in metrics and "vllm:e2e_request_latency_seconds_count" in metrics
    finally:
        core.delete_namespace(namespace)
