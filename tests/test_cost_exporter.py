"""The cost exporter: its allocation of node prices to pods and namespaces on real-shaped nodes and
pods, the gauges it publishes (the ones its dashboard reads), and what it deploys."""

from __future__ import annotations

import json

import pytest
from prometheus_client import CollectorRegistry, generate_latest

import schemas
from promql import syntax_errors
from components import cost_exporter as component
from components.cluster import SYSTEM_NODE_SELECTOR
from components.dashboards.cost import COST_METRICS, cost_dashboard
from components.scripts import cost_exporter as exporter
from facts.prices import exporter_table, hourly
from stacks.compose_cost import cost_exporter_args
from stacks.loader import ConfigError, parse
from stacks.mockrun import run_stack

PRICES = exporter_table("us-central1")


def node(name: str, machine: str, spot: bool, cpu: str, memory: str, gpus: str | None = None) -> dict:
    labels = {
        "kubernetes.io/hostname": name,
        "node.kubernetes.io/instance-type": machine,
        "topology.kubernetes.io/zone": "us-central1-a",
        "cloud.google.com/gke-nodepool": "gpu" if gpus else "system",
        "gke-ml-labs/pool": "gpu" if gpus else "system",
    }
    if spot:
        labels |= {"cloud.google.com/gke-spot": "true", "cloud.google.com/gke-provisioning": "spot"}
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "47093746742"}
    if gpus:
        labels["cloud.google.com/gke-accelerator"] = "nvidia-l4"
        allocatable["nvidia.com/gpu"] = gpus
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": allocatable, "capacity": dict(allocatable)}}


def pod(name: str, ns: str, node_name: str, cpu: str, memory: str, gpus: str | None = None, phase: str = "Running",
        init_cpu: str | None = None) -> dict:
    resources = {"requests": {"cpu": cpu, "memory": memory}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": gpus}  # a GPU limit alone is the request
    spec = {"nodeName": node_name, "containers": [{"name": "main", "image": "x", "resources": resources}]}
    if init_cpu:
        spec["initContainers"] = [{"name": "init", "image": "x", "resources": {"requests": {"cpu": init_cpu}}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": spec,
            "status": {"phase": phase}}


GPU_NODE = node("gke-gml-g6-gpu-1a2b", "g2-standard-4", True, "3920m", "13365960Ki", gpus="1")
SYSTEM_NODE = node("gke-gml-g6-system-9z", "e2-standard-4", False, "3920m", "13365960Ki")


def test_a_gpu_pod_pays_its_nodes_gpu_share_and_its_requests():
    vllm = pod("vllm-7d9c5b6f8-x2k4p", "serving", GPU_NODE["metadata"]["name"], "1960m", "6682980Ki", gpus="1")
    snap = exporter.allocate([GPU_NODE, SYSTEM_NODE], [vllm], PRICES)
    price = hourly("us-central1", "g2-standard-4", spot=True)
    gpu_part = price * PRICES["machines"]["g2-standard-4"]["gpu_share"]
    key = ("serving", "vllm-7d9c5b6f8-x2k4p", GPU_NODE["metadata"]["name"])
    assert snap.pods[(*key, "gpu")] == pytest.approx(gpu_part)
    assert snap.pods[(*key, "cpu")] == pytest.approx((price - gpu_part) * PRICES["cpu_share_of_vm"] / 2)
    assert snap.pods[(*key, "memory")] == pytest.approx((price - gpu_part) * (1 - PRICES["cpu_share_of_vm"]) / 2)
    assert snap.namespaces() == {"serving": pytest.approx(gpu_part + (price - gpu_part) / 2)}
    idle = snap.idle()
    assert idle[GPU_NODE["metadata"]["name"]] == pytest.approx((price - gpu_part) / 2)
    assert idle[SYSTEM_NODE["metadata"]["name"]] == pytest.approx(hourly("us-central1", "e2-standard-4", spot=False))


def test_time_shared_gpu_is_split_between_pods():
    shared = node("gke-gml-g2-gpu-1", "g2-standard-4", True, "3920m", "13365960Ki", gpus="4")  # 1 L4 x 4 clients
    pods = [pod(f"bench-{i}", "sharing", "gke-gml-g2-gpu-1", "100m", "256Mi", gpus="1") for i in range(2)]
    snap = exporter.allocate([shared], pods, PRICES)
    gpu_part = hourly("us-central1", "g2-standard-4", spot=True) * PRICES["machines"]["g2-standard-4"]["gpu_share"]
    assert snap.pods[("sharing", "bench-0", "gke-gml-g2-gpu-1", "gpu")] == pytest.approx(gpu_part / 4)


def test_finished_unscheduled_and_unpriced_are_left_out():
    odd = node("gke-other-n1", "n1-standard-4", False, "3920m", "13Gi")
    pods = [
        pod("done", "training", GPU_NODE["metadata"]["name"], "1", "1Gi", gpus="1", phase="Succeeded"),
        pod("pending", "training", "", "1", "1Gi", gpus="1", phase="Pending"),
        pod("on-odd", "x", "gke-other-n1", "1", "1Gi"),
    ]
    snap = exporter.allocate([GPU_NODE, odd], pods, PRICES)
    assert snap.pods == {} and snap.unpriced == ["gke-other-n1"]


def test_init_container_larger_than_the_app_counts():
    p = pod("p", "ns", SYSTEM_NODE["metadata"]["name"], "100m", "128Mi", init_cpu="1960m")
    assert exporter.pod_requests(p)["cpu"] == pytest.approx(1.96)


@pytest.mark.parametrize("text, value", [("250m", 0.25), ("2", 2), ("1Gi", 2**30), ("13365960Ki", 13365960 * 1024), ("1e3", 1000), ("128M", 128e6)])
def test_quantities(text, value):
    assert exporter.quantity(text) == pytest.approx(value)


def test_quantity_rejects_garbage():
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        exporter.quantity("1 GiB")


def test_published_gauges_are_what_the_dashboard_reads():
    registry = CollectorRegistry()
    gauges = exporter.Gauges(registry)
    vllm = pod("vllm-0", "serving", GPU_NODE["metadata"]["name"], "1", "1Gi", gpus="1")
    gauges.publish(exporter.allocate([GPU_NODE, SYSTEM_NODE], [vllm], PRICES))
    text = generate_latest(registry).decode()
    for metric in COST_METRICS:
        assert f"\n{metric}" in text or text.startswith(metric), f"{metric} not exported"
    gauges.publish(exporter.allocate([SYSTEM_NODE], [], PRICES))
    assert "vllm-0" not in generate_latest(registry).decode(), "a gone pod must not keep its last value"


def test_dashboard_queries_parse():
    exprs = [t["expr"] for p in cost_dashboard()["panels"] for t in p.get("targets", [])]
    concrete = [e.replace("$__range_s", "3600").replace("$__range", "1h").replace("$namespace", ".*").replace("$node", ".*") for e in exprs]
    assert concrete and syntax_errors(concrete) == []


# --- what gets deployed ---


def g6(observability: bool = True):
    return parse({"lab": "g6", "observability": {"enabled": observability}, "cost_exporter": {"enabled": True}},
                 stack="g6", project="p", region=None)


def test_objects_validate_and_run_on_the_system_pool():
    args = cost_exporter_args(g6(), SYSTEM_NODE_SELECTOR)
    objects = component.objects(args) + [component.service_monitor(args)]
    for obj in objects:
        schemas.validate_object(obj)
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"gke-ml-labs/pool": "system"} and "tolerations" not in spec
    app = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "cost-exporter-app")
    assert json.loads(app["data"]["prices.json"]) == PRICES
    assert app["data"]["cost_exporter.py"] == open(exporter.__file__).read()
    role = next(o for o in objects if o["kind"] == "ClusterRole")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list"]}]


def test_no_probe_of_the_exporter_times_out_at_the_kubelets_one_second():
    """The exporter requests 10m of CPU: on a busy system node /metrics can take seconds, and a probe with the
    kubelet's default timeout (1 s) would take it out of the Service (readiness) or restart it (liveness)."""
    pod = component.pod_spec(cost_exporter_args(g6(), SYSTEM_NODE_SELECTOR))
    (container,) = pod["containers"]
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        probe = container[kind]
        assert 5 <= probe.get("timeoutSeconds", 1) <= probe["periodSeconds"], kind
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300  # the pip install on a cold node


def test_only_prometheus_reaches_the_exporter_and_its_dependency_lands_in_an_empty_dir():
    args = cost_exporter_args(g6(), SYSTEM_NODE_SELECTOR)
    objects = component.objects(args)
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    policy = next(o for o in objects if o["kind"] == "NetworkPolicy")
    pod = deployment["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    assert rule["ports"] == [{"protocol": "TCP", "port": component.PORT}]
    # The root filesystem is read-only: pip installs into the deps emptyDir, which is on PYTHONPATH.
    spec = deployment["spec"]["template"]["spec"]
    (app,) = spec["containers"]
    env = {e["name"]: e["value"] for e in app["env"]}
    assert app["securityContext"]["readOnlyRootFilesystem"] is True
    assert f"--target {component.DEPS.path} " in app["command"][-1]
    assert component.DEPS.path in env["PYTHONPATH"].split(":")
    assert {m["mountPath"] for m in app["volumeMounts"]} >= {component.DEPS.path, "/tmp"}
    assert spec["automountServiceAccountToken"] is True, "it lists nodes and pods through the API"


def test_service_monitor_waits_for_prometheus_under_mocks():
    run = run_stack("g6", overrides={"gke-ml-labs:cost_exporter": {"enabled": True}})
    monitor = run.one("kubernetes:monitoring.coreos.com/v1:ServiceMonitor", "cost-exporter-servicemonitor")
    release = run.one("kubernetes:helm.sh/v3:Release", "kps")
    assert run.depends_on(monitor, release)
    assert run.outputs["endpoints"]["cost_exporter"] == {
        "namespace": "cost-exporter", "service": "cost-exporter", "port": 8080, "path": "/metrics", "protocol": "http"}
    assert run.outputs["grafana"]["dashboards"]["Cost (list price)"] == "gke-ml-labs-cost"


def test_exporter_without_observability_is_rejected():
    with pytest.raises(ConfigError, match="gke-ml-labs:cost_exporter.enabled: needs gke-ml-labs:observability.enabled"):
        g6(observability=False)
