"""Labs g5-g7 end to end under Pulumi mocks: ordering on an empty cluster, nothing public, outputs."""

from __future__ import annotations

import json

import pytest
import schemas
import yaml

from components import versions
from stacks.mockrun import MockRun, Recorded, run_stack

STACKS = ("g5", "g6", "g7")
RELEASE = "kubernetes:helm.sh/v3:Release"
CONFIG_FILE = "kubernetes:yaml/v2:ConfigFile"
ISVC = "kubernetes:serving.kserve.io/v1beta1:InferenceService"
TEMPLATE = "kubernetes:argoproj.io/v1alpha1:WorkflowTemplate"
MONITOR = "kubernetes:monitoring.coreos.com/v1:ServiceMonitor"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
GPU_KEY = "nvidia.com/gpu"


@pytest.fixture(scope="module")
def runs() -> dict[tuple[str, bool], MockRun]:
    return {(s, p): run_stack(s, preview=p) for s in STACKS for p in (False, True)}


def release(run: MockRun, chart: str) -> Recorded:
    (found,) = [r for r in run.of_type(RELEASE) if r.inputs["chart"].endswith(chart)]
    return found


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("preview", [False, True], ids=["update", "preview"])
def test_stack_runs_and_exports_its_endpoints(runs, stack, preview):
    run = runs[(stack, preview)]
    assert run.outputs["lab"] == stack
    # Everything the benchmarks read is known even in a first preview.
    assert not {"endpoints", "benchmark", "versions", "artifact_bucket"} & run.unknown_outputs
    endpoint = {"g5": "kserve", "g6": "vllm", "g7": "argo"}[stack]
    assert {"namespace", "service", "port", "path", "protocol"} <= set(run.outputs["endpoints"][endpoint])


def test_kserve_installs_in_order_on_an_empty_cluster(runs):
    run = runs[("g5", False)]
    core, kourier = (run.one(CONFIG_FILE, f"knative-{n}") for n in ("core", "kourier"))
    # serving-core.yaml carries the CRDs too; a second ConfigFile of serving-crds.yaml would create
    # each CRD twice, which pulumi-kubernetes (>= 4.29) refuses with AlreadyExists.
    assert [c.inputs["file"] for c in run.of_type(CONFIG_FILE)] == [versions.KNATIVE_SERVING_CORE, versions.KOURIER]
    assert run.depends_on(kourier, core)
    controller = release(run, "kserve-resources")
    for before in (release(run, "kserve-crd"), release(run, "cert-manager"), kourier):
        assert run.depends_on(controller, before), before.name
    runtimes = release(run, "kserve-runtime-configs")
    assert run.depends_on(runtimes, controller)
    isvc = run.one(ISVC)
    assert run.depends_on(isvc, controller) and run.depends_on(isvc, runtimes)
    assert isvc.inputs["spec"]["predictor"]["minReplicas"] == 0
    assert run.outputs["benchmark"]["inference_service"] == isvc.inputs["metadata"]["name"]


def test_canary_percent_reaches_the_inference_service_and_the_benchmark():
    run = run_stack("g5", overrides={"gke-ml-labs:kserve": {"canary": "v2", "canary_traffic_percent": 35}})
    predictor = run.one(ISVC).inputs["spec"]["predictor"]
    assert predictor["canaryTrafficPercent"] == 35
    bench = run.outputs["benchmark"]
    assert bench["canary_traffic_percent"] == 35 and bench["canary_version"] == "v2"
    assert predictor["model"]["storageUri"] == bench["model_versions"]["v2"]


def test_offline_plan_of_a_triton_stack_file_shows_the_service_and_its_autoscaler(tmp_path, capsys):
    """What `pulumi config set --path kserve.runtime triton -s g5` makes of the shipped stack file,
    planned offline from a copy of that file."""
    from stacks.plan import main as plan_main
    from stacks.stackfile import REPO

    shipped = (REPO / "Pulumi.g5.yaml").read_text()
    assert "    runtime: sklearn\n" in shipped
    (tmp_path / "Pulumi.g5.yaml").write_text(shipped.replace("    runtime: sklearn\n", "    runtime: triton\n"))
    assert plan_main(["g5", "--dir", str(tmp_path), "--k8s-out", str(tmp_path / "k8s")]) == 0
    table = capsys.readouterr().out
    (row,) = [line for line in table.splitlines() if line.startswith("kubernetes:serving.kserve.io/v1beta1:InferenceService")]
    assert ("models/cifar10; kserve-tritonserver (triton 2); gs://kfserving-examples/models/torchscript; "
            "replicas 0..3 on rps 10 per replica; 1 nvidia.com/gpu each") in row
    assert "gpus 1x nvidia-l4 TIME_SHARING x6" in table
    isvc = yaml.safe_load((tmp_path / "k8s" / "inferenceservice-models-cifar10.yaml").read_text())
    schemas.validate_object(isvc)
    assert isvc["spec"]["predictor"]["model"]["runtime"] == "kserve-tritonserver"
    assert isvc["metadata"]["annotations"]["serving.knative.dev/progress-deadline"] == "30m"


def test_triton_stack_exports_what_the_load_benchmark_reads():
    run = run_stack("g5", overrides={"gke-ml-labs:kserve": {"runtime": "triton", "max_replicas": 2,
                                                            "scale_metric": "concurrency", "scale_target": 3}})
    bench = run.outputs["benchmark"]
    assert (bench["runtime"], bench["served_model"], bench["gpu_predictor"]) == ("triton", "cifar10", True)
    assert (bench["scale_metric"], bench["scale_target"], bench["max_replicas"]) == ("concurrency", 3, 2)
    assert (bench["scale_to_zero_grace_s"], bench["scale_to_zero_retention_s"], bench["request_timeout_s"]) == (60, 0, 1800)
    assert run.outputs["endpoints"]["kserve"]["path"] == "/v2/models/cifar10/infer"
    assert run.outputs["versions"]["triton"] == "23.05-py3"


def test_workflow_template_waits_for_argo_and_kserve(runs):
    run = runs[("g7", False)]
    template = run.one(TEMPLATE)
    assert run.depends_on(template, release(run, "argo-workflows"))
    assert run.depends_on(template, release(run, "kserve-resources"))
    assert not run.of_type(ISVC), "g7's InferenceService comes from the workflow, not from Pulumi"
    # So destroy removes the namespace holding it while KServe can still clear its finalizer.
    workflows_ns = next(
        r for r in run.of_type("kubernetes:core/v1:Namespace") if r.inputs["metadata"]["name"] == "pipelines"
    )
    assert run.depends_on(workflows_ns, release(run, "kserve-resources"))


def test_g7_bucket_and_identities_hold_only_bucket_roles(runs):
    run = runs[("g7", False)]
    bucket = run.one("gcp:storage/bucket:Bucket").inputs
    assert bucket["forceDestroy"] is True and bucket["uniformBucketLevelAccess"] is True
    assert bucket["publicAccessPrevention"] == "enforced"
    assert bucket["labels"]["lab"] == "g7"
    assert run.outputs["artifact_bucket"] == bucket["name"] == run.outputs["benchmark"]["bucket"]
    roles = sorted(r.inputs["role"] for r in run.of_type("gcp:storage/bucketIAMMember:BucketIAMMember"))
    assert roles == ["roles/storage.objectAdmin", "roles/storage.objectViewer"]
    assert all(r.inputs["bucket"] == bucket["name"] for r in run.of_type("gcp:storage/bucketIAMMember:BucketIAMMember"))
    # Project-wide roles belong to the node account only: none for the workflow or model accounts.
    assert all(r.name.startswith("gke-nodes-") for r in run.of_type("gcp:projects/iAMMember:IAMMember"))
    cluster = run.one("gcp:container/cluster:Cluster")
    bindings = run.of_type("gcp:serviceaccount/iAMMember:IAMMember")
    assert {b.inputs["member"] for b in bindings} == {
        "serviceAccount:offline-plan-project.svc.id.goog[pipelines/workflow-runner]",
        "serviceAccount:offline-plan-project.svc.id.goog[pipelines/model-reader]",
    }
    assert all(run.depends_on(b, cluster) for b in bindings), "Identity Pool does not exist before the cluster"


def _service_types(value) -> list[str]:
    """Every Service type named anywhere in an object or Helm values (`type`/`serviceType` keys)."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("type", "serviceType") and item in ("LoadBalancer", "NodePort", "ClusterIP"):
                found.append(item)
            found.extend(_service_types(item))
    elif isinstance(value, list):
        for item in value:
            found.extend(_service_types(item))
    return found


@pytest.mark.parametrize("stack", STACKS)
def test_nothing_is_exposed_publicly(runs, stack):
    run = runs[(stack, False)]
    for resource in run.resources:
        if resource.type.startswith("kubernetes:"):
            public = {t for t in _service_types(resource.inputs) if t != "ClusterIP"}
            assert not public, f"{resource.type} {resource.name} asks for {public}"
    if stack == "g7":
        server = release(run, "argo-workflows").inputs["values"]["server"]
        assert server["authModes"] == ["client"] and server["serviceType"] == "ClusterIP"


@pytest.mark.parametrize("stack", STACKS)
def test_only_gpu_workloads_tolerate_the_gpu_taint(runs, stack):
    run = runs[(stack, False)]
    ours = ("knative", "kserve", "argo", "vllm")
    for resource in run.resources:
        if resource.type.startswith("kubernetes:") and resource.name.startswith(ours):
            tolerates = f'"key": "{GPU_KEY}"' in json.dumps(resource.inputs)
            assert tolerates == (resource.name == "vllm-deployment"), resource.name


def test_vllm_deployment_is_scraped_when_prometheus_runs(runs):
    run = runs[("g6", False)]
    monitor = run.one(MONITOR, "vllm-servicemonitor")
    assert run.depends_on(monitor, release(run, "kube-prometheus-stack"))
    without = run_stack("g6", overrides={"gke-ml-labs:observability": {"enabled": False}, "gke-ml-labs:cost_exporter": {"enabled": False}})
    assert not without.of_type(MONITOR)
    assert without.one(DEPLOYMENT, "vllm-deployment")


def test_vllm_outputs_every_server_parameter(runs):
    run = runs[("g6", False)]
    bench = run.outputs["benchmark"]
    args = run.one(DEPLOYMENT, "vllm-deployment").inputs["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == bench["model"]  # vllm serve's positional model_tag
    for flag, key in [("--dtype", "dtype"), ("--max-num-seqs", "max_num_seqs"),
                      ("--max-model-len", "max_model_len"), ("--gpu-memory-utilization", "gpu_memory_utilization")]:
        assert f"{flag}={bench[key]}" in args
    assert bench["quantization"] is None and not any(a.startswith("--quantization") for a in args)
    assert bench["image"] == versions.VLLM_IMAGE and bench["sweep"]["max_num_seqs"]
    assert run.outputs["endpoints"]["vllm"] == {
        "namespace": "llm", "service": "vllm", "port": 8000, "path": "/v1", "protocol": "openai"
    }


def test_the_g6_sweep_key_is_vllm_max_num_seqs():
    run = run_stack("g6", overrides={"gke-ml-labs:vllm": {"max_num_seqs": 32}})
    assert run.outputs["benchmark"]["max_num_seqs"] == 32
    (server,) = run.one(DEPLOYMENT, "vllm-deployment").inputs["spec"]["template"]["spec"]["containers"]
    assert "--max-num-seqs=32" in server["args"]


def test_hf_token_becomes_a_secret_never_a_plain_output():
    token = "hf_secret_value_123"
    run = run_stack("g6", secrets={"gke-ml-labs:hf_token": token})
    secret = run.one("kubernetes:core/v1:Secret", "vllm-hf-token")
    assert secret.inputs["metadata"]["name"] == "hf-token"
    assert token not in json.dumps(run.outputs, default=str)
    assert not run_stack("g6").of_type("kubernetes:core/v1:Secret")
