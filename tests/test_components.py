"""Each component alone: built from its own args under Pulumi mocks, with no lab config anywhere.

A component is reusable only if its args say everything it needs; these tests build every one from
hand-written args (nothing from stacks/ but the mock runner), check that all it creates hangs under
it and that it registers its outputs, and check a few values its args decide.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
from collections.abc import Callable

import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml

import components
from components import versions
from components.apis import ProjectApis, ProjectApisArgs
from components.argo import ArgoWorkflows, ArgoWorkflowsArgs
from components.budget import BudgetArgs, ProjectBudget
from components.checkpoints import Checkpoints, CheckpointsArgs
from components.cluster import POOL_LABEL, GkeCluster, GkeClusterArgs, PoolDefaults
from components.cost_exporter import CostExporter, CostExporterArgs
from components.gpu_pool import GpuNodePool, GpuNodePoolArgs, GpuSharing
from components.gpu_sharing import GpuOperator, GpuOperatorArgs
from components.helm_release import HelmRelease, HelmReleaseArgs
from components.idle_guard import IdleGuard, IdleGuardArgs
from components.image_cache import ImageCache, ImageCacheArgs
from components.knative import KnativeArgs, KnativeServing
from components.keda import Keda, KedaArgs
from components.kserve import InferenceServiceArgs, KServe, KServeArgs
from components.kueue import Kueue, KueueArgs
from components.model_weights import ModelWeights, ModelWeightsArgs
from components.naming import StackId
from components.network import Network, NetworkArgs
from components.observability import Observability, ObservabilityArgs
from components.placement import GpuPlacement, Placement, Taint
from components.tenancy import Tenancy, TenancyArgs, Tenant
from components.training_operator import TrainingOperator, TrainingOperatorArgs
from components.upstream_crds import UpstreamCrds
from components.vllm import VllmServer, VllmServerArgs
from components.workload_identity import BucketIdentity, BucketIdentityArgs
from stacks.mockrun import MockRun, Recorded, run_program

OWNER = StackId(lab="g3", stack="team-x")
# Nodes named as no GKE pool of ours is: a component alone follows its args, never GKE's labels.
SYSTEM = {"node-role.example.com/system": "true"}
PLACEMENT = Placement(
    system_node_selector=SYSTEM,
    gpu=GpuPlacement(node_selector={"accelerator.example.com/l4": "true"}, taints=(Taint("dedicated", "gpu", "NoSchedule"),)),
)
PROJECT = "proj-alone"
LABELS = {"lab": "g3", "stack": "team-x", "managed-by": "pulumi"}


def _namespace(name: str) -> pulumi.Resource:
    """A resource standing for what a component waits for (a release, a cluster)."""
    return k8s.core.v1.Namespace(f"stand-in-{name}", metadata={"name": name})


CASES: dict[type, Callable[[], pulumi.ComponentResource]] = {
    ProjectApis: lambda: ProjectApis(
        "apis", ProjectApisArgs(project=PROJECT, services=["container.googleapis.com", "compute.googleapis.com",
                                                           "container.googleapis.com"])
    ),
    Network: lambda: Network(
        "net", NetworkArgs(project=PROJECT, region="asia-south1", network_name="gml-x", subnet_cidr="10.1.0.0/20",
                           pods_cidr="10.4.0.0/14", services_cidr="10.8.0.0/20")
    ),
    GkeCluster: lambda: GkeCluster(
        "gke",
        GkeClusterArgs(project=PROJECT, zone="asia-south1-b", cluster_name="gml-x", network="vpc", subnetwork="sub",
                       release_channel="STABLE", resource_labels=LABELS, system_machine_type="e2-standard-2",
                       system_min_nodes=1, system_max_nodes=3, system_spot=True),
    ),
    GpuNodePool: lambda: GpuNodePool(
        "gpu",
        GpuNodePoolArgs(
            pool_defaults=PoolDefaults(project=PROJECT, cluster="gml-x", zone="asia-south1-b",
                                       service_account="nodes@proj-alone.iam.gserviceaccount.com", resource_labels=LABELS),
            node_locations=["asia-south1-a", "asia-south1-b"], machine_type="g2-standard-24", accelerator="nvidia-l4",
            gpus_per_node=2, spot=False, min_nodes=0, max_nodes=3, driver_version="DEFAULT", disk_gb=200,
            sharing=GpuSharing(strategy="TIME_SHARING", max_shared_clients_per_gpu=3),
        ),
    ),
    HelmRelease: lambda: HelmRelease(
        "jobset", HelmReleaseArgs(
            chart=versions.JOBSET, namespace="jobs", values={"a": 1}, labels={"x": "y"}, pod_security="restricted"
        )
    ),
    BucketIdentity: lambda: BucketIdentity(
        "reader",
        BucketIdentityArgs(project=PROJECT, account_id="gml-x-reader", bucket="bkt", role="roles/storage.objectViewer",
                           namespace="ns", service_account="ksa", labels={"x": "y"}),
    ),
    Observability: lambda: Observability(
        "obs", ObservabilityArgs(stack_id=OWNER, placement=PLACEMENT, retention="6h", scrape_interval_s=30)
    ),
    GpuOperator: lambda: GpuOperator(
        "gpu-operator",
        GpuOperatorArgs(stack_id=OWNER, replicas=6, nvidia_driver="DEFAULT", scrape_interval_s=20, system_node_selector=SYSTEM),
    ),
    Kueue: lambda: Kueue(
        "kueue",
        KueueArgs(stack_id=OWNER, placement=PLACEMENT, namespace="queued", cluster_queue="cq", local_queue="lq",
                  flavor="l4", quota_gpus=5, quota_cpu=1.5, quota_memory_gib=2.5, pods_ready_timeout_min=9),
    ),
    TrainingOperator: lambda: TrainingOperator(
        "training", TrainingOperatorArgs(stack_id=OWNER, namespace="train", system_node_selector=SYSTEM)
    ),
    Checkpoints: lambda: Checkpoints(
        "ckpt",
        CheckpointsArgs(stack_id=OWNER, project=PROJECT, region="asia-south1", billing_labels=LABELS,
                        namespace="spot", service_account="writer", delete_after_days=3),
    ),
    Tenancy: lambda: Tenancy(
        "tenancy",
        TenancyArgs(stack_id=OWNER, tenants=[Tenant(name="team-a", group="a@example.com", gpus=2, cpu=1.5,
                                                    memory_gib=0.5, pods=7)],
                    kueue=_namespace("kueue-system"), local_queue="lq", cluster_queue="cq"),
    ),
    KnativeServing: lambda: KnativeServing(
        "knative", KnativeArgs(domain="lab.test", progress_deadline_min=25, request_timeout_s=900, scale_to_zero_grace_s=30)
    ),
    KServe: lambda: KServe(
        "kserve",
        KServeArgs(stack_id=OWNER, domain="lab.test", placement=PLACEMENT,
                   example=InferenceServiceArgs(namespace="models", name="m", runtime="triton", model_format="xgboost",
                                                served_model="net", storage_uri="gs://b/m2", min_replicas=0,
                                                max_replicas=2, scale_metric="concurrency", scale_target=7,
                                                progress_deadline_min=33, scale_to_zero_retention_s=45, gpu=True,
                                                canary_traffic_percent=20)),
    ),
    VllmServer: lambda: VllmServer(
        "vllm",
        VllmServerArgs(stack_id=OWNER, placement=PLACEMENT.gpu, namespace="llm", model="org/model", dtype="float16",
                       max_model_len=2048, gpu_memory_utilization=0.8, max_num_seqs=32, startup_timeout_min=12,
                       hf_token=pulumi.Output.secret("hf_token_value")),
    ),
    ArgoWorkflows: lambda: ArgoWorkflows(
        "argo",
        ArgoWorkflowsArgs(stack_id=OWNER, project=PROJECT, region="asia-south1", billing_labels=LABELS, namespace="wf",
                          workflow_namespace="runs", template_name="tpl", model_name="m", fail_step="train",
                          retry_limit=2, retry_policy="Always", artifact_retention_days=4, system_node_selector=SYSTEM),
    ),
    ProjectBudget: lambda: ProjectBudget(
        "budget",
        BudgetArgs(project=PROJECT, billing_account="012345-6789AB-CDEF01", display_name="a budget", amount_usd=12.34,
                   thresholds=[0.5, 1.0], forecast=False),
    ),
    IdleGuard: lambda: IdleGuard(
        "guard", IdleGuardArgs(stack_id=OWNER, ttl_minutes=33, schedule="*/7 * * * *", system_node_selector=SYSTEM)
    ),
    CostExporter: lambda: CostExporter(
        "costs", CostExporterArgs(stack_id=OWNER, region="asia-south1", refresh_seconds=45, system_node_selector=SYSTEM)
    ),
    ImageCache: lambda: ImageCache(
        "cache", ImageCacheArgs(project=PROJECT, region="asia-south1", repository_id="gml-x-hub", labels=LABELS,
                                reader_email="nodes@proj-alone.iam.gserviceaccount.com")
    ),
    ModelWeights: lambda: ModelWeights(
        "weights",
        ModelWeightsArgs(stack_id=OWNER, project=PROJECT, region="asia-south1", namespace="llm", model="org/model",
                         billing_labels=LABELS, system_node_selector={POOL_LABEL: "system"}),
    ),
    UpstreamCrds: lambda: UpstreamCrds("offline", ("kueue/v0.19.2/crds/",)),
    Keda: lambda: Keda("scaler", KedaArgs(stack_id=OWNER, system_node_selector=SYSTEM)),
}


def built_alone(component: type) -> tuple[MockRun, Recorded]:
    def program() -> dict:
        CASES[component]()
        return {}

    run = run_program(program, stack="component-alone", config={"gcp:project": PROJECT})
    (me,) = [r for r in run.resources if not r.custom and r.type.split(":")[-1] == component.__name__]
    return run, me


def test_every_component_has_a_case():
    defined = set()
    for info in pkgutil.walk_packages(components.__path__, "components."):
        if info.name.startswith(("components.scripts", "components.pipeline_steps")):
            continue  # programs that run in pods, not Pulumi code
        module = importlib.import_module(info.name)
        defined |= {c for _, c in inspect.getmembers(module, inspect.isclass)
                    if issubclass(c, pulumi.ComponentResource) and c.__module__ == info.name}
    assert defined == set(CASES)


@pytest.mark.parametrize("component", list(CASES), ids=lambda c: c.__name__)
def test_component_builds_alone_from_its_args(component):
    run, me = built_alone(component)
    stand_ins = {r.urn for r in run.resources if r.name.startswith("stand-in-")}
    mine = [r for r in run.resources if r is not me and r.urn not in stand_ins and not r.type.startswith("pulumi:providers:")]
    assert mine, "a component creates something"
    strays = [r.name for r in mine if me not in run.ancestors(r)]
    assert not strays, f"not parented to the component: {strays}"
    assert me.urn in run.registered_outputs


def _objects(run: MockRun, kind: str) -> list[dict]:
    return [r.inputs for r in run.resources if r.custom and r.type.endswith(f":{kind}")]


def test_cluster_alone_takes_zone_channel_and_system_pool_from_args():
    run, _ = built_alone(GkeCluster)
    cluster = run.one("gcp:container/cluster:Cluster").inputs
    assert (cluster["location"], cluster["releaseChannel"]) == ("asia-south1-b", {"channel": "STABLE"})
    assert cluster["resourceLabels"] == LABELS
    system = run.one("gcp:container/nodePool:NodePool").inputs
    assert system["autoscaling"]["totalMinNodeCount"] == 1 and system["autoscaling"]["totalMaxNodeCount"] == 3
    assert system["nodeConfig"]["machineType"] == "e2-standard-2" and system["nodeConfig"]["spot"] is True
    assert system["nodeConfig"]["labels"] == {POOL_LABEL: "system"}


def test_gpu_pool_alone_carries_the_accelerators_sharing_and_taint_of_its_args():
    run, _ = built_alone(GpuNodePool)
    pool = run.one("gcp:container/nodePool:NodePool").inputs
    (accel,) = pool["nodeConfig"]["guestAccelerators"]
    assert accel["count"] == 2 and accel["gpuSharingConfig"]["maxSharedClientsPerGpu"] == 3
    assert accel["gpuDriverInstallationConfig"] == {"gpuDriverVersion": "DEFAULT"}
    assert pool["nodeLocations"] == ["asia-south1-a", "asia-south1-b"] and pool["cluster"] == "gml-x"
    assert pool["nodeConfig"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}]


def test_apis_alone_enable_each_service_once():
    run, _ = built_alone(ProjectApis)
    assert sorted(s["service"] for s in _objects(run, "Service")) == ["compute.googleapis.com", "container.googleapis.com"]


def test_kueue_alone_sets_the_quota_and_queues_of_its_args():
    run, _ = built_alone(Kueue)
    (cq,) = _objects(run, "ClusterQueue")
    quota = {r["name"]: r["nominalQuota"] for r in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]}
    assert quota == {"cpu": "1500m", "memory": "2560Mi", "nvidia.com/gpu": "5"}
    (lq,) = _objects(run, "LocalQueue")
    assert (lq["metadata"]["namespace"], lq["metadata"]["name"], lq["spec"]["clusterQueue"]) == ("queued", "lq", "cq")
    kueue = run.one("kubernetes:helm.sh/v3:Release", "kueue").inputs
    assert "timeout: 9m" in kueue["values"]["managerConfig"]["controllerManagerConfigYaml"]
    assert kueue["values"]["enablePrometheus"] is False, "no Prometheus was given"


def test_tenancy_alone_gives_each_tenant_its_quota_and_a_queue():
    run, _ = built_alone(Tenancy)
    (quota,) = _objects(run, "ResourceQuota")
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "2", "requests.cpu": "1500m",
                                     "requests.memory": "512Mi", "pods": "7"}
    (lq,) = _objects(run, "LocalQueue")
    assert (lq["metadata"]["namespace"], lq["spec"]["clusterQueue"]) == ("team-a", "cq")
    binding = next(b for b in _objects(run, "RoleBinding"))
    assert binding["subjects"][0]["name"] == "a@example.com"


def test_vllm_alone_runs_the_flags_of_its_args_with_the_token_from_a_secret():
    run, _ = built_alone(VllmServer)
    (deployment,) = _objects(run, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["org/model", "--dtype=float16", "--max-num-seqs=32", "--max-model-len=2048",
                                 "--gpu-memory-utilization=0.8", "--port=8000"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}} in container["env"]
    assert container["startupProbe"]["failureThreshold"] * container["startupProbe"]["periodSeconds"] == 12 * 60
    assert not _objects(run, "ServiceMonitor"), "no Prometheus was given"


def test_vllm_prefix_caching_is_the_flag_or_its_no_form_and_unset_leaves_vllms_default():
    from dataclasses import replace

    from components.vllm import server_args

    base = VllmServerArgs(stack_id=OWNER, placement=PLACEMENT.gpu, namespace="llm", model="org/model", dtype="float16",
                          max_model_len=2048, gpu_memory_utilization=0.8, max_num_seqs=32, startup_timeout_min=12)  # fmt: skip
    flags = {v: [a for a in server_args(replace(base, enable_prefix_caching=v)) if "prefix" in a] for v in (None, True, False)}
    # vLLM v0.34.0's serve --help: --enable-prefix-caching, --disable-prefix-caching.
    assert flags == {None: [], True: ["--enable-prefix-caching"], False: ["--disable-prefix-caching"]}


def test_kserve_alone_deploys_the_triton_canary_on_the_gpu_pool():
    run, _ = built_alone(KServe)
    (isvc,) = _objects(run, "InferenceService")
    predictor = isvc["spec"]["predictor"]
    assert predictor["canaryTrafficPercent"] == 20 and predictor["maxReplicas"] == 2
    assert (predictor["scaleMetric"], predictor["scaleTarget"]) == ("concurrency", 7)
    model = predictor["model"]
    assert model["storageUri"] == "gs://b/m2" and model["runtime"] == "kserve-tritonserver"
    assert model["modelFormat"] == {"name": "triton", "version": "2"}, "runtime triton ignores model_format"
    assert predictor["nodeSelector"] == PLACEMENT.gpu.node_selector
    assert predictor["tolerations"] == [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule", "operator": "Equal"}]
    assert isvc["metadata"]["annotations"]["serving.knative.dev/progress-deadline"] == "33m"
    assert isvc["metadata"]["annotations"]["autoscaling.knative.dev/scale-to-zero-pod-retention-period"] == "45s"
    controller = run.one("kubernetes:helm.sh/v3:Release", "kserve-resources").inputs
    assert controller["values"]["kserve"]["controller"]["gateway"]["domain"] == "lab.test"


def test_knative_alone_applies_the_pinned_core_and_kourier_manifests():
    run, _ = built_alone(KnativeServing)
    files = sorted(r.inputs["file"] for r in run.of_type("kubernetes:yaml/v2:ConfigFile"))
    assert files == sorted([versions.KNATIVE_SERVING_CORE, versions.KOURIER])


def test_argo_alone_names_its_bucket_after_stack_and_project_and_retries_as_asked():
    run, _ = built_alone(ArgoWorkflows)
    bucket = run.one("gcp:storage/bucket:Bucket").inputs
    assert bucket["name"] == "gml-team-x-proj-alone-artifacts" and bucket["location"] == "asia-south1"
    assert bucket["lifecycleRules"][0]["condition"]["age"] == 4
    (template,) = _objects(run, "WorkflowTemplate")
    assert template["metadata"]["namespace"] == "runs" and template["spec"]["arguments"]["parameters"][0]["value"] == "train"
    steps = [t for t in template["spec"]["templates"] if "script" in t]
    assert [s["retryStrategy"] for s in steps] == [{"limit": 2, "retryPolicy": "Always"}] * 3


def test_checkpoints_alone_expire_objects_and_bind_the_writer_to_its_bucket():
    run, _ = built_alone(Checkpoints)
    bucket = run.one("gcp:storage/bucket:Bucket").inputs
    assert bucket["name"] == "gml-team-x-ckpt-proj-alone" and bucket["lifecycleRules"][0]["condition"]["age"] == 3
    wi = run.one("gcp:serviceaccount/iAMMember:IAMMember").inputs
    assert wi["member"] == "serviceAccount:proj-alone.svc.id.goog[spot/writer]"


def test_budget_alone_splits_the_amount_and_sets_the_thresholds():
    run, _ = built_alone(ProjectBudget)
    budget = run.one("gcp:billing/budget:Budget").inputs
    assert budget["amount"]["specifiedAmount"] == {"units": "12", "nanos": 340000000}
    assert [r["thresholdPercent"] for r in budget["thresholdRules"]] == [0.5, 1.0], "no forecast rule"


def test_idle_guard_and_cost_exporter_alone_follow_their_args():
    guard, _ = built_alone(IdleGuard)
    (cron,) = _objects(guard, "CronJob")
    env = {e["name"]: e["value"] for e in cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert cron["spec"]["schedule"] == "*/7 * * * *" and (env["TTL_MINUTES"], env["DRY_RUN"]) == ("33", "false")
    costs, _ = built_alone(CostExporter)
    app = next(c for c in _objects(costs, "ConfigMap") if c["metadata"]["name"] == "cost-exporter-app")
    assert json.loads(app["data"]["prices.json"])["region"] == "asia-south1"
    assert not _objects(costs, "ServiceMonitor"), "no Prometheus was given"


def test_observability_and_gpu_operator_alone_scrape_as_often_as_asked():
    obs, _ = built_alone(Observability)
    kps = obs.one("kubernetes:helm.sh/v3:Release", "kps").inputs["values"]["prometheus"]["prometheusSpec"]
    assert (kps["retention"], kps["scrapeInterval"]) == ("6h", "30s")
    assert obs.one("kubernetes:helm.sh/v3:Release", "dcgm-exporter").inputs["values"]["serviceMonitor"]["interval"] == "30s"
    operator, _ = built_alone(GpuOperator)
    values = operator.one("kubernetes:helm.sh/v3:Release", "gpu-operator").inputs["values"]
    slicing = yaml.safe_load(values["devicePlugin"]["config"]["data"]["any"])
    assert slicing["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 6}]
    assert values["dcgmExporter"]["serviceMonitor"]["enabled"] is False, "no Prometheus was given"


def test_image_cache_alone_proxies_docker_hub_where_its_args_say_and_lets_the_nodes_read():
    run, _ = built_alone(ImageCache)
    repo = run.one("gcp:artifactregistry/repository:Repository").inputs
    assert (repo["location"], repo["repositoryId"], repo["mode"]) == ("asia-south1", "gml-x-hub", "REMOTE_REPOSITORY")
    reader = run.one("gcp:artifactregistry/repositoryIamMember:RepositoryIamMember").inputs
    assert reader["member"] == "serviceAccount:nodes@proj-alone.iam.gserviceaccount.com"


def test_model_weights_alone_copy_the_model_of_its_args_on_the_system_pool():
    run, _ = built_alone(ModelWeights)
    (job,) = _objects(run, "Job")
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {POOL_LABEL: "system"} and "repo_id='org/model'" in pod["containers"][0]["command"][2]
    assert run.one("gcp:storage/bucket:Bucket").inputs["location"] == "asia-south1"


def _selectors(value, key=None):
    """Every nodeSelector (and Kueue's nodeLabels) in a tree of inputs, Helm values included."""
    if isinstance(value, dict):
        if key in ("nodeSelector", "nodeLabels"):
            yield value
            return
        for k, v in value.items():
            yield from _selectors(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from _selectors(v)


KUBERNETES_HALF = [Observability, GpuOperator, Kueue, TrainingOperator, Tenancy, KServe, VllmServer, ArgoWorkflows,
                   IdleGuard, CostExporter, Keda]  # fmt: skip


@pytest.mark.parametrize("component", KUBERNETES_HALF, ids=lambda c: c.__name__)
def test_a_kubernetes_half_component_places_pods_by_its_args_never_by_gke_pools(component):
    run, _ = built_alone(component)
    selectors = [s for r in run.resources if r.custom for s in _selectors(r.inputs)]
    assert all(s in (SYSTEM, PLACEMENT.gpu.node_selector) for s in selectors), selectors
    assert POOL_LABEL not in json.dumps([r.inputs for r in run.resources], default=str)


def test_the_offline_stand_in_alone_registers_each_locked_crd_of_its_folder():
    run, _ = built_alone(UpstreamCrds)
    crds = run.of_type("kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition")
    # The lock holds these four of Kueue v0.19.2's CRDs (tests/upstream.lock.tsv).
    assert sorted(c.inputs["metadata"]["name"] for c in crds) == [
        "clusterqueues.kueue.x-k8s.io", "localqueues.kueue.x-k8s.io", "resourceflavors.kueue.x-k8s.io",
        "workloads.kueue.x-k8s.io",
    ]
