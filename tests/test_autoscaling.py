"""The vLLM server autoscaled by its queue (the `autoscaling` feature on g6): KEDA's pinned
chart, and a ScaledObject on the server's own Deployment whose Prometheus trigger reads a gauge the pinned
vLLM exports, summed over exactly that server's pods, bounded by the GPUs the pool can hold."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import schemas
import test_teardown
from test_dashboards import run_promql_tests

from components import keda, versions, vllm
from components.cluster import SYSTEM_NODE_SELECTOR
from stacks.mockrun import MockRun, run_stack

DATA = Path(__file__).parent / "data"
RELEASE = "kubernetes:helm.sh/v3:Release"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
SCALED_OBJECT = "kubernetes:keda.sh/v1alpha1:ScaledObject"
# What Pulumi.g6.yaml's header tells a user to set for the autoscaled variant.
AUTOSCALED = {"gke-ml-labs:gpu_max_nodes": 2, "gke-ml-labs:autoscaling": {"enabled": True, "max_replicas": 2}}


@pytest.fixture(scope="module")
def fixed() -> MockRun:
    """g6 as its stack file has it: one fixed replica."""
    return run_stack("g6")


@pytest.fixture(scope="module", params=[False, True], ids=["update", "preview"])
def run(request) -> MockRun:
    return run_stack("g6", preview=request.param, overrides=AUTOSCALED)


def scaled(run: MockRun) -> dict:
    return run.one(SCALED_OBJECT, "vllm-scaledobject").inputs


def exported_vllm_metrics() -> set[str]:
    """Every metric name on the pinned vLLM's own /metrics page (recorded from its wheel)."""
    text = (DATA / "vllm" / versions.VLLM_VERSION / "metrics.txt").read_text()
    return set(re.findall(r"^# TYPE (\S+) ", text, flags=re.M))


def test_the_scaled_object_scales_the_deployment_the_stack_creates(run):
    body, deployment = scaled(run), run.one(DEPLOYMENT, "vllm-deployment").inputs
    schemas.validate_object({"apiVersion": keda.API_VERSION, "kind": "ScaledObject", **body})
    target = body["spec"]["scaleTargetRef"]
    assert (target["apiVersion"], target["kind"]) == ("apps/v1", "Deployment")
    assert (target["name"], body["metadata"]["namespace"]) == (
        deployment["metadata"]["name"], deployment["metadata"]["namespace"])  # fmt: skip
    (trigger,) = body["spec"]["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    assert trigger["metadata"]["threshold"] == "10"
    # Between the floor and the two L4s the stack's pool may hold (gpu_max_nodes 2 x 1).
    assert (body["spec"]["minReplicaCount"], body["spec"]["maxReplicaCount"]) == (1, 2)


def test_the_scaled_object_waits_for_keda_and_the_server(run):
    chart = [r for r in run.of_type(RELEASE) if r.inputs["chart"] == versions.KEDA.name]
    (release,) = chart
    assert release.inputs["version"] == versions.KEDA.version and release.inputs["namespace"] == keda.NAMESPACE
    obj = run.one(SCALED_OBJECT, "vllm-scaledobject")
    assert run.depends_on(obj, release) and run.depends_on(obj, run.one(DEPLOYMENT, "vllm-deployment"))
    assert release.inputs["values"]["nodeSelector"] == SYSTEM_NODE_SELECTOR


def test_destroy_removes_the_scaled_object_while_keda_still_clears_its_finalizer(run):
    # KEDA's operator puts a finalizer on each ScaledObject: it must outlive the object on destroy.
    assert run.of_type(SCALED_OBJECT)
    test_teardown.test_custom_resources_wait_for_the_release_serving_their_crd(run)


def test_the_autoscaled_deployment_leaves_its_replicas_to_the_hpa_and_never_surges(run, fixed):
    spec = run.one(DEPLOYMENT, "vllm-deployment").inputs["spec"]
    # A `replicas` would put the count back at every `pulumi up`; a surge pod would need a GPU nobody has.
    assert "replicas" not in spec
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    one = fixed.one(DEPLOYMENT, "vllm-deployment").inputs["spec"]
    assert one["replicas"] == 1 and one["strategy"] == {"type": "Recreate"}
    assert not fixed.of_type(SCALED_OBJECT)


def test_the_stack_exports_the_policy_the_experiment_reads(run, fixed):
    out = run.outputs
    assert out["versions"]["keda"] == versions.KEDA.version and keda.NAMESPACE in out["namespaces"]
    policy = out["benchmark"]["autoscaling"]
    (trigger,) = scaled(run)["spec"]["triggers"]
    assert policy["query"] == trigger["metadata"]["query"] and policy["metric"] == "vllm:num_requests_waiting"
    assert (policy["target"], policy["min_replicas"], policy["max_replicas"]) == (10, 1, 2)
    assert fixed.outputs["benchmark"]["autoscaling"] is None


@pytest.mark.parametrize("metric", ["num_requests_waiting", "num_requests_running"])
def test_the_trigger_reads_a_gauge_the_pinned_vllm_exports(metric):
    scaling = {**AUTOSCALED["gke-ml-labs:autoscaling"], "metric": metric}
    run = run_stack("g6", overrides={**AUTOSCALED, "gke-ml-labs:autoscaling": scaling})
    (trigger,) = scaled(run)["spec"]["triggers"]
    named = set(re.findall(r"vllm:[a-z_]+", trigger["metadata"]["query"]))
    assert named == {f"vllm:{metric}"} and named <= exported_vllm_metrics()


def test_a_metric_the_pinned_vllm_does_not_export_would_be_caught():
    # vLLM renamed gpu_cache_usage_perc to kv_cache_usage_perc; GKE's example still names the old one.
    assert "vllm:gpu_cache_usage_perc" not in exported_vllm_metrics()
    assert "vllm:kv_cache_usage_perc" in exported_vllm_metrics()


def test_the_trigger_sets_only_keys_kedas_prometheus_scaler_reads(run):
    lines = (DATA / "keda" / "v2.20.2" / "prometheus-trigger-keys.txt").read_text().splitlines()
    known = {m[1] for line in lines if (m := re.match(r"name=(\w+),", line))}
    required = {m[1] for line in lines if (m := re.match(r"name=(\w+), order=\w+$", line))}
    assert versions.KEDA.upstream == "keda/v2.20.2", "record the trigger keys of the new KEDA release"
    (trigger,) = scaled(run)["spec"]["triggers"]
    assert required <= set(trigger["metadata"]) <= known, (required, known)


def test_the_query_sums_this_servers_pods_into_the_one_series_keda_accepts(tmp_path):
    scaling = keda.Scaling("num_requests_waiting", 10, 1, 2, 15, 0, 300, "http://p:9090")
    query = keda.query(scaling, "llm", vllm.NAME)
    # Labels as the Prometheus operator sets them on a ServiceMonitor's targets; vLLM's own labels as
    # tests/data/vllm/v0.34.0/metrics.txt has them.
    own = 'engine="0",model_name="Qwen/Qwen2.5-1.5B-Instruct",job="vllm",endpoint="http",container="vllm"'
    series = [
        (f'vllm:num_requests_waiting{{{own},namespace="llm",service="vllm",pod="vllm-a"}}', "12x12"),
        (f'vllm:num_requests_waiting{{{own},namespace="llm",service="vllm",pod="vllm-b"}}', "9x12"),
        # Another server in the namespace, and a server of the same name elsewhere: not this one's queue.
        (f'vllm:num_requests_waiting{{{own},namespace="llm",service="vllm-canary",pod="c"}}', "100x12"),
        (f'vllm:num_requests_waiting{{{own},namespace="team-a",service="vllm",pod="d"}}', "100x12"),
        (f'vllm:num_requests_running{{{own},namespace="llm",service="vllm",pod="vllm-a"}}', "200x12"),
    ]
    run_promql_tests(tmp_path, series, [(query, [("{}", 21)])])


def test_keda_values_exist_in_the_pinned_chart():
    schemas.assert_helm_values_exist(keda.values(SYSTEM_NODE_SELECTOR), versions.KEDA.upstream)
    defaults = schemas.chart_defaults(versions.KEDA.upstream)
    # The namespace enforces Restricted: the chart's own pods must already meet it.
    for part in ("operator", "metricServer", "webhooks"):
        context = defaults["securityContext"][part]
        assert context["capabilities"]["drop"] == ["ALL"] and context["allowPrivilegeEscalation"] is False
        assert context["seccompProfile"]["type"] == "RuntimeDefault"
        assert defaults["podSecurityContext"][part]["runAsNonRoot"] is True
