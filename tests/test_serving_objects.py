"""What the serving components send to the cluster, checked against the upstream schemas of the
pinned versions: InferenceService, WorkflowTemplate, ServiceMonitor (CRDs), core objects, Helm values."""

from __future__ import annotations

import json
import subprocess
import sys

import pod_security
import pulumi
import pytest
import schemas

from components import argo, cert_manager, knative, kserve, versions, vllm, workload_identity
from components.cluster import SYSTEM_NODE_SELECTOR
from components.gpu_pool import POOL_PLACEMENT
from components.placement import GPU_RESOURCE
from stacks.compose_serving import argo_args, inference_service_args, vllm_args
from stacks.config import LabConfig
from stacks.context import stack_id

PLACEMENT = POOL_PLACEMENT


def lab(name: str = "g5", **keys) -> LabConfig:
    return LabConfig(lab=name, stack=name, project="proj-1", **keys)


def container(deployment: dict) -> dict:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


@pytest.mark.parametrize(
    "keys",
    [
        {"enabled": True},
        {"enabled": True, "canary": "v2", "canary_traffic_percent": 30},
        {"enabled": True, "canary": "v2", "gpu": True, "model_format": "xgboost"},
    ],
    ids=["stable", "canary", "gpu-canary"],
)
def test_inference_service_validates_against_the_kserve_crd(keys):
    cfg = lab(kserve=keys, gpu_max_nodes=2)
    isvc = kserve.inference_service(stack_id(cfg), inference_service_args(cfg), PLACEMENT)
    schemas.validate_object(isvc)
    assert [pod_security.findings(pod) for _, pod in pod_security.pod_specs(isvc)] == [[]]
    predictor = isvc["spec"]["predictor"]
    assert predictor["minReplicas"] == 0, "scale to zero"
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "Knative"
    if keys.get("canary"):
        assert predictor["canaryTrafficPercent"] == cfg.kserve.canary_traffic_percent
        assert predictor["model"]["storageUri"] == cfg.kserve.versions["v2"]
    else:
        assert "canaryTrafficPercent" not in predictor
    if keys.get("gpu"):
        assert predictor["model"]["resources"]["limits"][GPU_RESOURCE] == "1"
        assert predictor["tolerations"] == PLACEMENT.tolerations
        assert predictor["nodeSelector"] == PLACEMENT.node_selector
    else:
        assert "tolerations" not in predictor and GPU_RESOURCE not in predictor["model"]["resources"]["limits"]


@pytest.mark.parametrize("canary", [None, "v2"])
def test_triton_inference_service_validates_and_names_the_runtime_the_chart_installs(canary):
    cfg = lab(kserve={"enabled": True, "runtime": "triton", "max_replicas": 3, "canary": canary,
                      "scale_metric": "concurrency", "scale_target": 4, "scale_to_zero_retention_s": 90},
              gpu_sharing={"enabled": True, "replicas": 6})
    isvc = kserve.inference_service(stack_id(cfg), inference_service_args(cfg), PLACEMENT)
    schemas.validate_object(isvc)
    # The chart installs one ClusterServingRuntime per server it configures, named kserve-<key>; Triton's
    # key is enabled by default and carries the image we pin.
    triton = schemas.chart_defaults(versions.KSERVE_RUNTIMES.upstream)["kserve"]["servingruntime"]["tritonserver"]
    assert triton["disabled"] is False and kserve.TRITON_RUNTIME == "kserve-tritonserver"
    assert f"{triton['image']}:{triton['tag']}" == versions.TRITON_IMAGE
    values = kserve.runtimes_values()["kserve"]["servingruntime"]
    assert values["enabled"] is True and f"{values['tritonserver']['image']}:{values['tritonserver']['tag']}" == versions.TRITON_IMAGE
    predictor, model = isvc["spec"]["predictor"], isvc["spec"]["predictor"]["model"]
    assert model["runtime"] == "kserve-tritonserver" and model["protocolVersion"] == "v2"
    assert model["modelFormat"] == {"name": "triton", "version": "2"}
    assert model["storageUri"] == cfg.kserve.versions[canary or "v1"]
    # The autoscaler settings: KServe maps these to Knative's metric/target/min-scale/max-scale.
    assert (predictor["scaleMetric"], predictor["scaleTarget"]) == ("concurrency", 4)
    assert (predictor["minReplicas"], predictor["maxReplicas"]) == (0, 3)
    annotations = isvc["metadata"]["annotations"]
    assert annotations["autoscaling.knative.dev/scale-to-zero-pod-retention-period"] == "90s"
    assert annotations["serving.knative.dev/progress-deadline"] == "30m"
    assert not any(k.startswith("autoscaling.knative.dev/m") for k in annotations), "KServe refuses min/max-scale"
    # One (time-shared) L4 per replica, on the GPU pool only.
    assert model["resources"]["limits"][GPU_RESOURCE] == "1"
    assert predictor["tolerations"] == PLACEMENT.tolerations and predictor["nodeSelector"] == PLACEMENT.node_selector
    assert model["command"][:2] == ["/bin/sh", "-c"] and "KIND_GPU" in model["command"][2]
    # Restricted Pod Security and our rules, with no waiver, a writable /tmp for the read-only root, no
    # API token. The pod-level half (Knative accepts it with kubernetes.podspec-securitycontext) runs
    # Triton, whose image starts as root, as its triton-server user, and gives the storage-initializer
    # KServe injects the seccomp profile it lacks.
    ((workload, pod),) = pod_security.pod_specs(isvc)
    assert workload == "models/InferenceService/cifar10" and pod_security.findings(pod) == []
    assert predictor["securityContext"]["runAsUser"] == kserve.KSERVE_UID == 1000
    assert predictor["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert {"name": "tmp", "mountPath": "/tmp"} in model["volumeMounts"] and {"name": "HOME", "value": "/tmp"} in model["env"]
    assert ("canaryTrafficPercent" in predictor) == (canary is not None)
    endpoint = kserve.endpoint(inference_service_args(cfg), "example.com", {})
    assert endpoint["path"] == "/v2/models/cifar10/infer" and endpoint["protocol"] == "kserve-v2"


def test_triton_on_cpu_runs_the_model_as_published():
    cfg = lab(kserve={"enabled": True, "runtime": "triton", "gpu": False})
    isvc = kserve.inference_service(stack_id(cfg), inference_service_args(cfg), PLACEMENT)
    schemas.validate_object(isvc)
    assert [pod_security.findings(pod) for _, pod in pod_security.pod_specs(isvc)] == [[]]
    model = isvc["spec"]["predictor"]["model"]
    assert "command" not in model and GPU_RESOURCE not in model["resources"]["limits"]
    assert "tolerations" not in isvc["spec"]["predictor"]


def _start_triton(tmp_path, model_dir):
    """Run triton_start.sh as the pod does (`sh -c SCRIPT tritonserver ARGS`), with a stand-in
    entrypoint that prints what it would exec."""
    entry = tmp_path / "entry"
    entry.write_text('#!/bin/sh\necho "exec: $*"\n')
    entry.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "MODEL_DIR": str(model_dir), "REPO_DIR": str(tmp_path / "repo"),
           "TRITON_ENTRYPOINT": str(entry)}
    args = ["tritonserver", "--model-store=/mnt/models", "--grpc-port=9000", "--http-port=8080", "--allow-http=true"]
    done = subprocess.run(["/bin/sh", "-c", kserve.TRITON_START, *args], env=env, capture_output=True, text=True,
                          timeout=30, check=True)
    return done.stdout


CIFAR10_CONFIG = """name: "cifar10"
platform: "pytorch_libtorch"
max_batch_size: 1
input [
  {
    name: "INPUT__0"
    data_type: TYPE_FP32
    dims: [3,32,32]
  }
]
instance_group [
    {
        count: 1
        kind: KIND_CPU
    }
]
"""


@pytest.mark.parametrize("layout", ["repository", "model folder"])
def test_triton_start_moves_the_example_to_the_gpu_and_keeps_the_runtime_flags(tmp_path, layout):
    # The two published layouts of KServe's CIFAR-10 example (models/torchscript and .../cifar10),
    # read-only as KServe mounts them.
    src = tmp_path / "mnt"
    folder = src / "cifar10" if layout == "repository" else src
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(CIFAR10_CONFIG)
    (folder / "1" / "model.pt").write_bytes(b"torchscript")
    for path in [*src.rglob("*"), src]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    out = _start_triton(tmp_path, src)
    repo = tmp_path / "repo"
    assert out.splitlines()[-1] == (
        f"exec: tritonserver --model-store={repo} --grpc-port=9000 --http-port=8080 --allow-http=true "
        "--pinned-memory-pool-byte-size=67108864"  # 64 MiB, not Triton's 256 MiB, inside the 2Gi limit
    )
    config = (repo / "cifar10" / "config.pbtxt").read_text()
    assert "kind: KIND_GPU" in config and "KIND_CPU" not in config
    assert config.replace("KIND_GPU", "KIND_CPU") == CIFAR10_CONFIG, "nothing else changes"
    assert (repo / "cifar10" / "1" / "model.pt").read_bytes() == b"torchscript"
    assert (folder / "config.pbtxt").read_text() == CIFAR10_CONFIG, "the mounted model is left as it is"


@pytest.mark.parametrize("quantization", [None, "awq"])
def test_vllm_deployment_carries_exactly_the_configured_server_args(quantization):
    cfg = lab("g6", vllm={"enabled": True, "max_num_seqs": 64, "max_model_len": 8192, "quantization": quantization,
                          "gpu_memory_utilization": 0.85, "dtype": "float16"})
    deployment = vllm.deployment(vllm_args(cfg, PLACEMENT), with_token=False)
    schemas.validate_object(deployment)
    expected = [
        "Qwen/Qwen2.5-1.5B-Instruct",
        "--dtype=float16",
        "--max-num-seqs=64",
        "--max-model-len=8192",
        "--gpu-memory-utilization=0.85",
        *([f"--quantization={quantization}"] if quantization else []),
        "--port=8000",
    ]
    main = container(deployment)
    assert main["args"] == expected
    assert main["image"] == versions.VLLM_IMAGE and not main["image"].endswith(":latest")


def test_vllm_pod_lands_on_the_gpu_pool_without_service_links():
    cfg = lab("g6", vllm={"enabled": True})
    deployment = vllm.deployment(vllm_args(cfg, PLACEMENT), with_token=False)
    pod = deployment["spec"]["template"]["spec"]
    main = container(deployment)
    assert pod["enableServiceLinks"] is False
    assert pod["tolerations"] == PLACEMENT.tolerations and pod["nodeSelector"] == PLACEMENT.node_selector
    assert main["resources"]["limits"][GPU_RESOURCE] == main["resources"]["requests"][GPU_RESOURCE] == "1"
    # One GPU in the default quota: an update must free it before the new pod asks for it.
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"]["medium"] == "Memory"
    assert {"name": "dshm", "mountPath": "/dev/shm"} in main["volumeMounts"]
    # The startup probe allows the whole configured download time before liveness may restart it.
    startup = main["startupProbe"]
    assert startup["httpGet"]["path"] == "/health"
    assert startup["periodSeconds"] * startup["failureThreshold"] >= cfg.vllm.startup_timeout_min * 60
    assert main["livenessProbe"]["httpGet"]["path"] == main["readinessProbe"]["httpGet"]["path"] == "/health"
    assert not any(e["name"] == "HF_TOKEN" for e in main["env"])


@pytest.mark.parametrize("cpu,quantity", [(None, "2"), (3, "3"), (0.5, "500m"), (1.25, "1250m")])
def test_vllm_requests_the_configured_cpu_as_kubernetes_writes_it(cpu, quantity):
    cfg = lab("g6", vllm={"enabled": True, **({} if cpu is None else {"cpu": cpu})})
    assert container(vllm.deployment(vllm_args(cfg, PLACEMENT), with_token=False))["resources"]["requests"]["cpu"] == quantity


def test_vllm_probes_wait_out_a_busy_api_server_instead_of_the_kubelets_1s_default():
    # vLLM v0.34.0's /health only reads a flag, but the API server's event loop answers it between the work of
    # every request in flight: under g6's saturation search that takes seconds. A timeout left at the
    # kubelet's 1 s default fails such a probe, and three readiness failures drop the Service endpoint mid-run.
    main = container(vllm.deployment(vllm_args(lab("g6", vllm={"enabled": True}), PLACEMENT), with_token=False))
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        probe = main[kind]
        assert probe.get("timeoutSeconds", 1) >= 10, f"{kind} times out a /health answered in a few seconds"
        # One probe at a time: a timeout above the period would overlap the next attempt's slot.
        assert probe["timeoutSeconds"] <= probe["periodSeconds"], kind
    # The endpoint goes only after 3 probes in a row each waited their whole timeout: 30 s of no answer.
    ready = main["readinessProbe"]
    assert ready["failureThreshold"] * ready["timeoutSeconds"] >= 30


def test_vllm_runs_unprivileged_and_writes_only_to_its_empty_dirs():
    cfg = lab("g6", vllm={"enabled": True})
    pod = vllm.deployment(vllm_args(cfg, PLACEMENT), with_token=False)["spec"]["template"]["spec"]
    main = container({"spec": {"template": {"spec": pod}}})
    env = {e["name"]: e.get("value") for e in main["env"]}
    empty_dirs = {v["name"]: v["emptyDir"] for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in main["volumeMounts"]}
    # The image's root (uid 0) is not used: nobody, with a read-only root filesystem.
    assert pod["securityContext"]["runAsUser"] == 65534 and main["securityContext"]["readOnlyRootFilesystem"] is True
    # Everything vLLM writes by default lands on an emptyDir: ~ (caches), the model download, /tmp
    # (IPC sockets, TorchInductor) and /dev/shm (in memory).
    assert set(mounts) == {"/tmp", "/cache", "/dev/shm"} and set(mounts.values()) <= set(empty_dirs)
    assert env["HOME"] == "/cache" and env["HF_HOME"].startswith("/cache/")
    assert empty_dirs[mounts["/dev/shm"]]["medium"] == "Memory"
    assert empty_dirs[mounts["/cache"]]["sizeLimit"] == "40Gi", "room for the model download"


def test_hf_token_comes_from_a_secret_only_when_one_is_given():
    cfg = lab("g6", vllm={"enabled": True})
    main = container(vllm.deployment(vllm_args(cfg, PLACEMENT), with_token=True))
    token = next(e for e in main["env"] if e["name"] == "HF_TOKEN")
    assert token["valueFrom"]["secretKeyRef"] == {"name": vllm.HF_SECRET, "key": vllm.HF_SECRET_KEY}
    secret = vllm.hf_secret(vllm_args(cfg, PLACEMENT), "hf_x")
    schemas.validate_object(secret)
    assert secret["metadata"]["name"] == vllm.HF_SECRET


def test_vllm_service_and_service_monitor_validate():
    cfg = lab("g6", vllm={"enabled": True})
    service = vllm.service(vllm_args(cfg, PLACEMENT))
    schemas.validate_object(service)
    assert service["spec"]["type"] == "ClusterIP"
    # The Service may not hold `pulumi up` until a pod runs (the provider's 10-minute endpoint await is
    # shorter than a GPU node from zero); the Deployment does, long enough for the node, the image and
    # the model, so `up` returns when the (new) server is ready.
    deployment = vllm.deployment(vllm_args(cfg, PLACEMENT), with_token=False)
    assert service["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
    assert "pulumi.com/skipAwait" not in deployment["metadata"]["annotations"]
    timeout_s = int(deployment["metadata"]["annotations"]["pulumi.com/timeoutSeconds"])
    assert timeout_s >= (15 + cfg.vllm.startup_timeout_min) * 60
    assert deployment["spec"]["strategy"]["type"] == "Recreate", "an update never needs a second GPU"
    monitor = vllm.service_monitor(vllm_args(cfg, PLACEMENT))
    schemas.validate_object(monitor)
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]


def test_workflow_template_validates_and_chains_train_register_deploy():
    cfg = lab("g7", kserve={"enabled": True}, argo={"enabled": True, "retry_limit": 3, "retry_policy": "Always"})
    template = argo.workflow_template(argo_args(cfg, SYSTEM_NODE_SELECTOR), "bucket-x")
    schemas.validate_object(template)
    spec = template["spec"]
    assert spec["serviceAccountName"] == argo.WORKFLOW_SA
    (fail,) = spec["arguments"]["parameters"]
    assert fail["name"] == "fail_step" and fail["value"] == "none"
    assert fail["enum"] == ["none", "train", "register", "deploy"]
    tasks = {t["name"]: t for t in next(t for t in spec["templates"] if t["name"] == "pipeline")["dag"]["tasks"]}
    assert "dependencies" not in tasks["train"]
    assert tasks["register"]["dependencies"] == ["train"] and tasks["deploy"]["dependencies"] == ["register"]
    steps = {t["name"]: t for t in spec["templates"] if "script" in t}
    assert set(steps) == {"train", "register", "deploy"}
    for name, step in steps.items():
        assert step["retryStrategy"] == {"limit": 3, "retryPolicy": "Always"}
        env = {e["name"]: e["value"] for e in step["script"]["env"]}
        assert env["FAIL_STEP"] == "{{workflow.parameters.fail_step}}"
        # Each program fails on purpose when the parameter names it.
        assert f'if os.environ["FAIL_STEP"] == "{name}":' in step["script"]["source"]
        assert "tolerations" not in step, "CPU steps never tolerate the GPU taint"
    assert {e["name"]: e["value"] for e in steps["register"]["script"]["env"]}["BUCKET"] == "bucket-x"
    assert steps["train"]["outputs"]["artifacts"][0]["name"] == "model"


def test_workflow_steps_install_and_write_only_under_their_tmp_empty_dir():
    cfg = lab("g7", kserve={"enabled": True}, argo={"enabled": True})
    spec = argo.workflow_template(argo_args(cfg, SYSTEM_NODE_SELECTOR), "bucket-x")["spec"]
    # The pods run as argoexec's user, so the init and wait containers and the step share file ownership.
    assert spec["securityContext"]["runAsUser"] == argo.ARGO_EXECUTOR_UID
    assert spec["volumes"] == [{"name": "tmp", "emptyDir": {"sizeLimit": "2Gi"}}]
    for step in (t for t in spec["templates"] if "script" in t):
        script = step["script"]
        env = {e["name"]: e["value"] for e in script["env"]}
        assert script["securityContext"]["readOnlyRootFilesystem"] is True
        assert script["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}] and env["HOME"] == "/tmp"
        # pip cannot write the image's site-packages (root's, and read-only): it installs under /tmp.
        assert f"--target {argo.DEPS_DIR} " in script["source"] and env["PYTHONPATH"] == argo.DEPS_DIR
    for path in (argo.DEPS_DIR, argo.MODEL_DIR, argo.STORAGE_URI_FILE):
        assert path.startswith("/tmp/")


def test_deploy_step_creates_a_restricted_predictor_that_validates():
    cfg = lab("g7", kserve={"enabled": True}, argo={"enabled": True})
    step = next(t for t in argo.workflow_template(argo_args(cfg, SYSTEM_NODE_SELECTOR), "bucket-x")["spec"]["templates"] if t["name"] == "deploy")
    env = {e["name"]: e["value"] for e in step["script"]["env"]}
    # As the step does it: the predictor from the template, the storageUri from the register step.
    predictor = json.loads(env["PREDICTOR"])
    predictor["model"]["storageUri"] = "gs://bucket-x/models/iris-argo/wf-1"
    isvc = {"apiVersion": kserve.API_VERSION, "kind": "InferenceService",
            "metadata": {"name": "iris-argo", "namespace": "pipelines"}, "spec": {"predictor": predictor}}
    schemas.validate_object(isvc)
    assert predictor["serviceAccountName"] == argo.MODEL_SA and predictor["minReplicas"] == 0
    assert predictor["securityContext"]["runAsUser"] == kserve.KSERVE_UID
    assert predictor["automountServiceAccountToken"] is False
    assert 'predictor["model"]["storageUri"] = os.environ["STORAGE_URI"]' in (argo.STEPS / "deploy.py").read_text()


def test_workflow_service_account_may_do_exactly_what_its_steps_do():
    cfg = lab("g7", kserve={"enabled": True}, argo={"enabled": True})
    role, binding = argo.workflow_role(argo_args(cfg, SYSTEM_NODE_SELECTOR)), argo.workflow_role_binding(argo_args(cfg, SYSTEM_NODE_SELECTOR))
    schemas.validate_object(role)
    schemas.validate_object(binding)
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == {
        ("serving.kserve.io", "inferenceservices", "create"),
        ("serving.kserve.io", "inferenceservices", "get"),
        ("serving.kserve.io", "inferenceservices", "patch"),
        ("argoproj.io", "workflowtaskresults", "create"),
        ("argoproj.io", "workflowtaskresults", "patch"),
    }
    # The deploy program calls exactly those verbs on inferenceservices, nothing else.
    program = (argo.STEPS / "deploy.py").read_text()
    api_calls = ("get_namespaced", "create_namespaced", "patch_namespaced", "delete_", "list_", "replace_")
    calls = {c for c in api_calls if c in program}
    assert calls == {"get_namespaced", "create_namespaced", "patch_namespaced"}
    role_ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]}
    assert binding["roleRef"] == role_ref
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": argo.WORKFLOW_SA, "namespace": "pipelines"}]


def test_workload_identity_service_account_names_its_gcp_account():
    ksa = workload_identity.service_account("workflow-runner", "pipelines", "wf@p.iam.gserviceaccount.com", {})
    schemas.validate_object(ksa)
    assert ksa["metadata"]["annotations"] == {"iam.gke.io/gcp-service-account": "wf@p.iam.gserviceaccount.com"}
    assert workload_identity.wi_member("p", "pipelines", "workflow-runner") == (
        "serviceAccount:p.svc.id.goog[pipelines/workflow-runner]"
    )


def test_helm_values_exist_in_the_pinned_charts():
    schemas.assert_helm_values_exist(kserve.resources_values("example.com", SYSTEM_NODE_SELECTOR), versions.KSERVE_RESOURCES.upstream)
    schemas.assert_helm_values_exist(kserve.runtimes_values(), versions.KSERVE_RUNTIMES.upstream)
    schemas.assert_helm_values_exist(cert_manager.values(SYSTEM_NODE_SELECTOR), versions.CERT_MANAGER.upstream)
    schemas.validate_helm_values(cert_manager.values(SYSTEM_NODE_SELECTOR), versions.CERT_MANAGER.upstream)
    schemas.assert_helm_values_exist(argo.values("bucket-x", SYSTEM_NODE_SELECTOR), versions.ARGO_WORKFLOWS.upstream)


def test_argo_server_is_cluster_internal_with_client_auth_and_keyless_artifacts():
    values = argo.values("bucket-x", SYSTEM_NODE_SELECTOR)
    assert values["server"]["serviceType"] == "ClusterIP"
    assert values["server"]["authModes"] == ["client"]
    assert values["artifactRepository"] == {"gcs": {"bucket": "bucket-x"}}, "no key secret: Workload Identity"


def test_kserve_runs_in_knative_mode_behind_kourier():
    values = kserve.resources_values("lab.example", SYSTEM_NODE_SELECTOR)["kserve"]["controller"]
    assert values["deploymentMode"] == "Knative"
    assert values["gateway"] == {"domain": "lab.example", "disableIstioVirtualHost": True}


KNATIVE = knative.KnativeArgs(
    domain="lab.example", progress_deadline_min=20, request_timeout_s=1200, scale_to_zero_grace_s=60
)


def test_knative_config_maps_survive_a_gpu_cold_start():
    settings = knative.config_maps(KNATIVE)
    manifest_cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "config-deployment", "namespace": "knative-serving"},
        "data": {"_example": "# docs"},
    }
    patched = knative.patch_object(manifest_cm, settings)
    schemas.validate_object(patched)
    # Triton's nvcr.io tags are used as they are (resolving them needs credentials), and Knative's own
    # default list, which the key replaces, stays in it.
    assert patched["data"] == {
        "_example": "# docs",
        "progress-deadline": "20m",
        "registries-skipping-tag-resolving": "kind.local,ko.local,dev.local,nvcr.io",
    }
    assert settings["config-network"] == {"ingress-class": "kourier.ingress.networking.knative.dev"}
    assert settings["config-autoscaler"]["enable-scale-to-zero"] == "true"
    assert settings["config-domain"] == {"lab.example": ""}
    assert int(settings["config-defaults"]["revision-timeout-seconds"]) >= 15 * 60
    # A ConfigMap we don't configure, and one of the same name elsewhere, are left alone.
    other_name = {**manifest_cm, "metadata": {"name": "config-gc", "namespace": "knative-serving"}}
    other_namespace = {**manifest_cm, "metadata": {"name": "config-deployment", "namespace": "x"}}
    assert knative.patch_object(other_name, settings) is None
    assert knative.patch_object(other_namespace, settings) is None


KOURIER_SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "kourier", "namespace": "kourier-system"},
    "spec": {"ports": [{"name": "http2", "port": 80, "protocol": "TCP", "targetPort": 8080}],
             "selector": {"app": "3scale-kourier-gateway"}, "type": "LoadBalancer"},
}


def test_kourier_gateway_is_never_a_load_balancer():
    patched = knative.patch_object(KOURIER_SERVICE, knative.config_maps(KNATIVE))
    schemas.validate_object(patched)
    assert patched["spec"]["type"] == "ClusterIP"
    assert KOURIER_SERVICE["spec"]["type"] == "LoadBalancer", "the manifest object itself is not mutated"


def test_the_transform_rewrites_manifest_children_as_the_engine_hands_them_over():
    transform = knative.manifest_transform(knative.config_maps(KNATIVE))
    props = {k: v for k, v in KOURIER_SERVICE.items() if k != "kind"}
    opts = pulumi.ResourceOptions()
    result = transform(pulumi.ResourceTransformArgs(True, "kubernetes:core/v1:Service", "kourier", props, opts))
    assert result.props["spec"]["type"] == "ClusterIP" and "kind" not in result.props
    # Props that carry apiVersion and kind keep them.
    full = transform(pulumi.ResourceTransformArgs(True, "kubernetes:core/v1:Service", "kourier", KOURIER_SERVICE, opts))
    assert full.props["kind"] == "Service" and full.props["apiVersion"] == "v1"
    assert full.props["spec"]["type"] == "ClusterIP"
    deployment = pulumi.ResourceTransformArgs(True, "kubernetes:apps/v1:Deployment", "x", {"metadata": {}}, opts)
    assert transform(deployment) is None


# The activator Deployment of Knative Serving 1.21.1 (config/core/deployments/activator.yaml), cut to
# the fields around the one we change.
ACTIVATOR = {
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "activator", "namespace": "knative-serving",
                 "labels": {"app.kubernetes.io/component": "activator", "app.kubernetes.io/name": "knative-serving"}},
    "spec": {"selector": {"matchLabels": {"app": "activator", "role": "activator"}},
             "template": {"metadata": {"labels": {"app": "activator", "role": "activator"}},
                          "spec": {"serviceAccountName": "controller", "terminationGracePeriodSeconds": 600,
                                   "containers": [{"name": "activator", "image": "gcr.io/knative-releases/activator"}]}}},
}  # fmt: skip


def test_the_activator_drains_as_long_as_the_longest_request_it_may_hold():
    """Knative's config-defaults: raise the activator's terminationGracePeriodSeconds with
    max-revision-timeout-seconds, or a drained activator cuts requests held through a cold start."""
    patched = knative.patch_object(ACTIVATOR, knative.config_maps(KNATIVE))
    schemas.validate_object(patched)
    assert patched["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 1200  # KNATIVE's timeout
    assert ACTIVATOR["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 600, "not mutated"
    short = knative.KnativeArgs(domain="lab.example", progress_deadline_min=20, request_timeout_s=300,
                                scale_to_zero_grace_s=60)  # fmt: skip
    kept = knative.patch_object(ACTIVATOR, knative.config_maps(short))
    assert kept["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 600, "never below Knative's own"


@pytest.mark.parametrize("step", ["train", "register", "deploy"])
def test_each_step_program_exits_non_zero_when_fail_step_names_it(step):
    # Run as the workflow runs it (python reading the program on stdin), before its packages are needed.
    program = (argo.STEPS / f"{step}.py").read_text()
    done = subprocess.run(
        [sys.executable, "-"], input=program, capture_output=True, text=True, env={"FAIL_STEP": step}, timeout=30
    )
    assert done.returncode == 1
    assert f"fail_step={step}: this step fails on purpose" in done.stderr


def test_cert_manager_is_pinned_to_the_chart_its_values_are_checked_against():
    assert versions.CERT_MANAGER.upstream == f"cert-manager/{versions.CERT_MANAGER.version}"
    # KServe's webhook configurations get their CA from the CA injector (cert-manager.io/inject-ca-from).
    assert schemas.chart_defaults(versions.CERT_MANAGER.upstream)["cainjector"]["enabled"] is True
    assert cert_manager.values(SYSTEM_NODE_SELECTOR)["cainjector"].get("enabled", True) is True


def test_a_cert_manager_value_of_the_wrong_type_fails_as_helm_would():
    with pytest.raises(AssertionError, match="values.schema.json"):
        schemas.validate_helm_values({"crds": {"enabled": "yes"}}, versions.CERT_MANAGER.upstream)
