"""Per-lab behaviour of the platform features (g1-g4, g8, tenancy), read from the whole program run
under mocks: what a user of each lab relies on."""

from __future__ import annotations

import functools
import json
import re

import pytest

from benchmarks.labs import g4
import schemas
import yaml

from components import upstream
from components.dashboards import all_dashboards
from components.dashboards.gpu import DCGM_METRICS
from components.gpu_pool import POOL_PLACEMENT
from stacks.mockrun import MockRun, run_stack

K = "gke-ml-labs"
RELEASE = "kubernetes:helm.sh/v3:Release"
POOL = "gcp:container/nodePool:NodePool"
CLUSTER = "gcp:container/cluster:Cluster"
SYSTEM = {"gke-ml-labs/pool": "system"}
NVIDIA = {f"{K}:gpu_sharing": {"mode": "nvidia", "replicas": 3}, f"{K}:gpu_driver_version": "INSTALLATION_DISABLED"}
TENANTS = {
    "enabled": True,
    "tenants": [{"name": "team-a", "group": "team-a@example.com", "gpus": 1, "cpu": 2.5, "memory_gib": 6}],
    "security_group": "gke-security-groups@example.com",
}


@functools.cache
def run(stack: str, overrides: str = "{}", preview: bool = False) -> MockRun:
    # Overrides as JSON text so the cache can key on them.
    return run_stack(stack, overrides=json.loads(overrides), preview=preview)


def values(r: MockRun, release: str) -> dict:
    return r.one(RELEASE, release).inputs["values"]


def gib(quantity: str) -> float:
    number, unit = re.fullmatch(r"([0-9.]+)(Gi|Mi)?", quantity).groups()
    return float(number) / (1024 if unit == "Mi" else 1)


def cores(quantity: str) -> float:
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


# ---------------------------------------------------------------- observability (g1, g8)


def test_prometheus_scrapes_every_namespace_and_fits_the_system_pool():
    v = values(run("g1"), "kps")
    spec = v["prometheus"]["prometheusSpec"]
    for kind in ("serviceMonitor", "podMonitor", "rule", "probe", "scrapeConfig"):
        assert spec[f"{kind}SelectorNilUsesHelmValues"] is False
    assert spec["retention"] == "2d" and spec["scrapeInterval"] == "15s"
    assert v["alertmanager"]["enabled"] is False
    for path in (("prometheus", "prometheusSpec"), ("prometheusOperator",), ("kube-state-metrics",), ("grafana",)):
        node = v
        for key in path:
            node = node[key]
        assert node["nodeSelector"] == SYSTEM, path
    total_cpu = sum(
        cores(c["resources"]["requests"]["cpu"])
        for c in (spec, v["prometheusOperator"], v["kube-state-metrics"], v["grafana"], v["prometheus-node-exporter"])
    )
    assert total_cpu < 1.0  # of the e2-standard-4's ~3.9 allocatable cores, shared with every controller


def test_grafana_loads_labelled_dashboards_from_all_namespaces_without_a_default_password():
    r = run("g1")
    grafana = values(r, "kps")["grafana"]
    assert grafana["sidecar"]["dashboards"] == {
        "enabled": True, "label": "grafana_dashboard", "labelValue": "1", "searchNamespace": "ALL"
    }
    assert grafana["service"]["type"] == "ClusterIP"
    assert "adminPassword" not in grafana  # the chart generates one; nothing like "prom-operator"
    maps = [c for c in r.of_type("kubernetes:core/v1:ConfigMap") if c.name.startswith("dashboard-")]
    models = {file: json.loads(body) for c in maps for file, body in c.inputs["data"].items()}
    assert models == all_dashboards()
    assert all(c.inputs["metadata"]["labels"]["grafana_dashboard"] == "1" for c in maps)
    assert sorted(r.outputs["grafana"]["dashboards"].values()) == sorted(m["uid"] for m in models.values())


def test_outputs_name_the_prometheus_and_grafana_services():
    out = run("g8").outputs
    assert out["prometheus"] == {"namespace": "monitoring", "service": "kps-prometheus", "port": 9090}
    assert out["grafana"]["service"] == "kps-grafana" and out["grafana"]["port"] == 80
    assert out["endpoints"]["prometheus"]["protocol"] == "http"
    # fullnameOverride is what makes the chart name its Services so.
    assert values(run("g8"), "kps")["fullnameOverride"] == "kps"


def test_dcgm_exporter_runs_on_gpu_nodes_with_gke_drivers_and_every_dashboard_metric():
    r = run("g1")
    v = values(r, "dcgm-exporter")
    placement = POOL_PLACEMENT
    assert v["nodeSelector"] == placement.node_selector and v["tolerations"] == placement.tolerations
    enabled = {line.split(",")[0] for line in v["customMetrics"].splitlines() if line and not line.startswith("#")}
    assert set(DCGM_METRICS) <= enabled and "DCGM_FI_PROF_SM_ACTIVE" in enabled
    host = {vol["name"]: vol["hostPath"] for vol in v["extraHostVolumes"]}
    mounts = {m["mountPath"]: m["name"] for m in v["extraVolumeMounts"]}
    env = {e["name"]: e["value"] for e in v["extraEnv"]}
    assert host[mounts["/usr/local/nvidia"]] == "/home/kubernetes/bin/nvidia"
    assert env["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
    assert "/etc/dcgm-exporter/default-counters.csv" in mounts  # the chart's own counters mount is kept
    # No GPU request and no NVIDIA runtime on GKE: only a privileged container sees /dev/nvidia*. Helm
    # merges our securityContext into the chart's, whose allowPrivilegeEscalation: false the API server
    # refuses next to privileged: true.
    chart_values = yaml.safe_load(upstream.path("dcgm-exporter/4.5.3-4.8.2/values.yaml").read_text())
    chart_default = chart_values["securityContext"]
    merged = {**chart_default, **v.get("securityContext", {})}
    assert merged["privileged"] is True and merged["allowPrivilegeEscalation"] is not False
    assert v["serviceMonitor"]["honorLabels"] is True  # pod/namespace labels survive the scrape
    # GKE admits the chart's system-node-critical pods outside kube-system only with this quota.
    quota = r.one("kubernetes:core/v1:ResourceQuota", "monitoring-critical-pods")
    assert r.depends_on(r.one(RELEASE, "dcgm-exporter"), quota)


@pytest.mark.parametrize("overrides", ["{}", json.dumps(NVIDIA)], ids=["gke-mode", "nvidia-mode"])
def test_exactly_one_dcgm_exporter_runs_and_gke_managed_dcgm_is_off(overrides):
    r = run("g2", overrides)
    releases = {rel.name: rel.inputs["values"] for rel in r.of_type(RELEASE)}
    exporters = ["dcgm-exporter"] if "dcgm-exporter" in releases else []
    if releases.get("gpu-operator", {}).get("dcgmExporter", {}).get("enabled"):
        exporters.append("gpu-operator")
    assert len(exporters) == 1, exporters
    monitoring = r.one(CLUSTER).inputs["monitoringConfig"]
    assert "DCGM" not in monitoring["enableComponents"]
    assert monitoring["managedPrometheus"]["enabled"] is False


# ---------------------------------------------------------------- GPU sharing (g2)


@pytest.mark.parametrize(
    "machine,replicas,nodes,per_node",
    [("g2-standard-4", 4, 1, 4), ("g2-standard-24", 3, 2, 6), ("g2-standard-48", 2, 1, 8)],
)
def test_gke_time_sharing_allocatable_is_gpus_times_replicas(machine, replicas, nodes, per_node):
    r = run("g2", json.dumps({
        f"{K}:gpu_machine_type": machine, f"{K}:gpu_max_nodes": nodes, f"{K}:gpu_sharing": {"replicas": replicas}
    }))
    accel = r.one(POOL, "gpu-pool").inputs["nodeConfig"]["guestAccelerators"][0]
    assert accel["gpuSharingConfig"] == {"gpuSharingStrategy": "TIME_SHARING", "maxSharedClientsPerGpu": replicas}
    sharing = r.outputs["gpu_pool"]["sharing"]
    assert sharing["allocatable_gpus_per_node"] == per_node == accel["count"] * replicas
    assert sharing["max_allocatable_gpus"] == per_node * nodes
    assert r.outputs["benchmark"]["gpu_sharing"] == sharing


def test_nvidia_mode_turns_gke_plugin_and_driver_install_off_and_slices_in_the_device_plugin():
    r = run("g2", json.dumps(NVIDIA))
    node_config = r.one(POOL, "gpu-pool").inputs["nodeConfig"]
    accel = node_config["guestAccelerators"][0]
    assert accel["gpuDriverInstallationConfig"]["gpuDriverVersion"] == "INSTALLATION_DISABLED"
    assert "gpuSharingConfig" not in accel  # not both modes at once
    assert node_config["labels"]["gke-no-default-nvidia-gpu-device-plugin"] == "true"
    v = values(r, "gpu-operator")
    assert v["driver"]["enabled"] is False  # COS: the driver is Google's installer's
    assert v["hostPaths"]["driverInstallDir"] == v["toolkit"]["installDir"] == "/home/kubernetes/bin/nvidia"
    plugin = v["devicePlugin"]["config"]
    sliced = yaml.safe_load(plugin["data"][plugin["default"]])
    assert sliced["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 3}]
    installer = r.one("kubernetes:yaml/v2:ConfigFile")
    assert re.search(r"/container-engine-accelerators/[0-9a-f]{40}/nvidia-driver-installer/cos/", installer.inputs["file"])
    operator = r.one(RELEASE, "gpu-operator")
    assert r.depends_on(operator, installer) and r.depends_on(operator, r.one(RELEASE, "kps"))
    assert r.outputs["gpu_pool"]["sharing"]["allocatable_gpus_per_node"] == 3


# ---------------------------------------------------------------- Kueue (g3)


def test_g3_quota_admits_two_whole_jobs_not_three_and_the_pool_holds_two_not_three():
    r = run("g3")
    bench = r.outputs["benchmark"]["kueue"]
    cq = r.one("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue").inputs["spec"]
    quota = {q["name"]: q["nominalQuota"] for q in cq["resourceGroups"][0]["flavors"][0]["resources"]}
    workers, worker, jobs = bench["workers"], bench["worker"], bench["jobs"]
    assert (jobs, workers, worker["gpus"]) == (3, 3, 1)  # Pulumi.g3.yaml: three jobs of three one-GPU workers
    gpus = int(quota["nvidia.com/gpu"])
    assert 2 * workers <= gpus < 3 * workers
    assert cores(quota["cpu"]) >= 2 * workers * worker["cpu"]
    assert gib(quota["memory"]) >= 2 * workers * worker["memory_gib"]
    assert bench["expected_admitted"] == 2
    # The pool holds the two admitted jobs (one L4 time-shared x6) but not all three: without Kueue
    # the jobs contend.
    pool = r.outputs["gpu_pool"]["sharing"]["max_allocatable_gpus"]
    assert 2 * workers <= pool < jobs * workers
    assert bench["block_admission"] is True  # what components/kueue.py configures; the report says which


def test_g3_queues_target_the_gpu_pool_and_admit_all_or_nothing():
    r = run("g3")
    flavor = r.one("kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor").inputs["spec"]
    pool_labels = r.one(POOL, "gpu-pool").inputs["nodeConfig"]["labels"]
    assert flavor["nodeLabels"].items() <= pool_labels.items()
    assert flavor["tolerations"] == POOL_PLACEMENT.tolerations
    lq = r.one("kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue").inputs
    bench = r.outputs["benchmark"]["kueue"]
    assert lq["metadata"] == {**lq["metadata"], "namespace": bench["namespace"], "name": bench["local_queue"]}
    assert lq["spec"]["clusterQueue"] == bench["cluster_queue"]
    config = yaml.safe_load(values(r, "kueue")["managerConfig"]["controllerManagerConfigYaml"])
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert config["metrics"]["enableClusterQueueResources"] is True  # the dashboard's quota-use panels
    assert int(config["waitForPodsReady"]["timeout"].rstrip("m")) >= 15  # a GPU node from zero takes up to ~15 min
    assert {"batch/job", "jobset.x-k8s.io/jobset", "kubeflow.org/pytorchjob"} <= set(config["integrations"]["frameworks"])
    # Kueue leaves jobs without the queue label alone (its default, which the chart's own config only
    # shows commented out): the g3 benchmark's run without Kueue depends on it.
    assert not config.get("manageJobsWithoutQueueName", False)
    assert r.depends_on(r.one(RELEASE, "kueue"), r.one(RELEASE, "jobset"))


# ---------------------------------------------------------------- Training Operator (g4)


def test_g4_installs_trainer_v2_with_torch_distributed_and_a_two_node_trainjob_validates():
    r = run("g4")
    trainer = r.one(RELEASE, "training-operator-trainer").inputs
    assert (trainer["chart"], trainer["version"], trainer["namespace"]) == (
        "oci://ghcr.io/kubeflow/charts/kubeflow-trainer", "2.3.0", "kubeflow-system")
    values = trainer["values"]
    schemas.assert_helm_values_exist(values, "kubeflow-trainer/v2.3.0")
    assert values["runtimes"]["torchDistributed"]["enabled"] is True
    # Without Kueue, the chart brings the one JobSet controller, on the system pool like every controller.
    assert values["jobset"]["install"] is True and values["jobset"]["controller"]["nodeSelector"] == {"gke-ml-labs/pool": "system"}
    assert values["manager"]["nodeSelector"] == {"gke-ml-labs/pool": "system"}
    assert values["runtimes"]["installer"]["nodeSelector"] == {"gke-ml-labs/pool": "system"}
    assert not r.of_type("kubernetes:kustomize/v2:Directory")
    bench = r.outputs["benchmark"]["training"]
    assert (bench["api"], bench["runtime"], bench["operator_version"]) == ("trainer-v2", "torch-distributed", "2.3.0")
    assert r.outputs["versions"]["kubeflow-trainer"] == "2.3.0" and "kubeflow-system" in r.outputs["namespaces"]
    # The JobSet it installs is the chart's dependency, the same version Kueue's JobSet release pins.
    chart = yaml.safe_load(upstream.path("kubeflow-trainer/v2.3.0/Chart.yaml").read_text())
    assert {d["name"]: d["version"] for d in chart["dependencies"]}["jobset"] == r.outputs["versions"]["jobset"]
    lab_ns = r.one("kubernetes:core/v1:Namespace", "training-operator-lab-ns")
    assert r.depends_on(lab_ns, r.one(RELEASE, "training-operator-trainer"))
    assert lab_ns.inputs["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    # The job the g4 benchmark submits, built from these outputs.
    *_, job = g4.build_workloads(r.outputs, "g4-0000-abcd")
    schemas.validate_object(job)
    assert job["kind"] == "TrainJob" and job["spec"]["trainer"]["numNodes"] == bench["world_size"] == 2


def test_g4_with_kueue_uses_kueue_s_jobset_and_installs_no_second_one():
    r = run("g3", '{"gke-ml-labs:training_operator": {"enabled": true}}')
    trainer = r.one(RELEASE, "training-operator-trainer")
    assert trainer.inputs["values"]["jobset"] == {"install": False}
    assert r.depends_on(trainer, r.one(RELEASE, "jobset"))


def test_g4_on_api_v1_installs_the_pinned_v1_overlay_and_a_two_worker_job_validates():
    r = run("g4", '{"gke-ml-labs:training_operator": {"api": "v1", "clean_pod_policy": "None"}}')
    overlay = r.one("kubernetes:kustomize/v2:Directory").inputs["directory"]
    assert overlay == "github.com/kubeflow/trainer.git/manifests/overlays/standalone?ref=v1.9.4"
    assert not r.of_type(RELEASE)
    bench = r.outputs["benchmark"]["training"]
    assert bench["namespace"] in r.outputs["namespaces"] and bench["workers"] == 2 and bench["api"] == "v1"
    assert bench["clean_pod_policy"] == "None" and ":" in bench["image"] and not bench["image"].endswith(":latest")
    # The job the g4 benchmark submits, built from these outputs.
    _, job = g4.build_workloads(r.outputs, "g4-0000-abcd")
    schemas.validate_object(job)
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] + specs["Worker"]["replicas"] == bench["world_size"] == 2
    for spec in specs.values():
        pod = spec["template"]["spec"]
        assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert pod["tolerations"] == r.outputs["gpu_pool"]["tolerations"]


# ---------------------------------------------------------------- checkpoints (g8)


def test_g8_bucket_is_private_labelled_expiring_and_deleted_with_the_stack():
    r = run("g8")
    bucket = r.one("gcp:storage/bucket:Bucket").inputs
    assert bucket["forceDestroy"] is True and bucket["uniformBucketLevelAccess"] is True
    assert bucket["publicAccessPrevention"] == "enforced"
    assert bucket["softDeletePolicy"]["retentionDurationSeconds"] == 0
    assert bucket["lifecycleRules"] == [{"action": {"type": "Delete"}, "condition": {"age": 7.0}}]
    assert bucket["labels"]["lab"] == "g8" and bucket["location"] == "us-central1"
    assert r.outputs["artifact_bucket"] == bucket["name"] == r.outputs["benchmark"]["checkpoints"]["bucket"]
    assert "storage.googleapis.com" in {s.inputs["service"] for s in r.of_type("gcp:projects/service:Service")}


def test_g8_job_writes_through_workload_identity_to_that_bucket_only():
    r = run("g8")
    bench = r.outputs["benchmark"]["checkpoints"]
    account = r.one("gcp:serviceaccount/account:Account", "checkpoints-identity-gsa")
    email = f"{account.inputs['accountId']}@offline-plan-project.iam.gserviceaccount.com"
    grants = [g for g in r.resources if g.inputs.get("member") == f"serviceAccount:{email}"]
    assert [(g.type, g.inputs["role"], g.inputs["bucket"]) for g in grants] == [
        ("gcp:storage/bucketIAMMember:BucketIAMMember", "roles/storage.objectAdmin", bench["bucket"])
    ]
    binding = r.one("gcp:serviceaccount/iAMMember:IAMMember", "checkpoints-identity-wi")
    ns, ksa = bench["namespace"], bench["service_account"]
    assert binding.inputs["member"] == f"serviceAccount:offline-plan-project.svc.id.goog[{ns}/{ksa}]"
    assert binding.inputs["role"] == "roles/iam.workloadIdentityUser"
    assert r.depends_on(binding, r.one(CLUSTER))  # "Identity Pool does not exist" otherwise
    sa = r.one("kubernetes:core/v1:ServiceAccount", "checkpoints-identity-ksa").inputs["metadata"]
    assert (sa["namespace"], sa["name"]) == (ns, ksa)
    assert sa["annotations"] == {"iam.gke.io/gcp-service-account": email}


# ---------------------------------------------------------------- tenancy


def test_tenants_get_quota_limits_isolation_rbac_and_a_queue():
    r = run("g3", json.dumps({f"{K}:tenancy": TENANTS}))
    objs = [o.inputs for o in r.resources if o.inputs.get("metadata", {}).get("namespace") == "team-a"]
    by_kind = {}
    for o in objs:
        by_kind.setdefault(o["kind"], []).append(o)
    hard = by_kind["ResourceQuota"][0]["spec"]["hard"]
    assert hard == {"requests.nvidia.com/gpu": "1", "requests.cpu": "2500m", "requests.memory": "6Gi", "pods": "20"}
    assert by_kind["LimitRange"][0]["spec"]["limits"][0]["defaultRequest"]  # pods without requests pass the quota
    policies = {p["metadata"]["name"]: p["spec"] for p in by_kind["NetworkPolicy"]}
    assert policies["default-deny"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    dns = policies["allow-dns"]["egress"][0]
    assert dns["to"][0]["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "kube-system"}
    assert {p["port"] for p in dns["ports"]} == {53}
    scrape = policies["allow-monitoring-scrape"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"]
    assert scrape == {"kubernetes.io/metadata.name": r.outputs["prometheus"]["namespace"]}
    assert by_kind["RoleBinding"][0]["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "team-a@example.com"}
    ]
    assert by_kind["LocalQueue"][0]["spec"]["clusterQueue"] == r.outputs["benchmark"]["kueue"]["cluster_queue"]
    # NetworkPolicies are enforced only with Dataplane V2, on in every lab so tenancy never replaces a cluster.
    assert r.one(CLUSTER).inputs["datapathProvider"] == "ADVANCED_DATAPATH"
    assert run("g3").one(CLUSTER).inputs["datapathProvider"] == "ADVANCED_DATAPATH"
    # The tenants' groups resolve through Google Groups for RBAC.
    assert r.one(CLUSTER).inputs["authenticatorGroupsConfig"] == {"securityGroup": "gke-security-groups@example.com"}


def test_priority_classes_order_serving_training_batch_and_batch_never_preempts():
    r = run("g1", json.dumps({f"{K}:tenancy": TENANTS}))
    classes = {p.inputs["metadata"]["name"]: p.inputs for p in r.of_type("kubernetes:scheduling.k8s.io/v1:PriorityClass")}
    assert classes["lab-serving"]["value"] > classes["lab-training"]["value"] > classes["lab-batch"]["value"]
    assert classes["lab-batch"]["preemptionPolicy"] == "Never"
    assert not any(p["globalDefault"] for p in classes.values())
    # Without Kueue there is no queue to point at.
    assert not r.of_type("kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue")


# ---------------------------------------------------------------- all five labs


@pytest.mark.parametrize("preview", [False, True], ids=["update", "preview"])
@pytest.mark.parametrize(
    "stack,features",
    [("g1", {"observability"}), ("g2", {"observability", "gpu_sharing"}), ("g3", {"observability", "gpu_sharing", "kueue"}),
     ("g4", {"gpu_sharing", "training"}), ("g8", {"observability", "checkpoints"})],
)
def test_each_lab_runs_and_exports_its_benchmark_parameters(stack, features, preview):
    r = run(stack, preview=preview)
    assert "benchmark" not in r.unknown_outputs
    assert set(r.outputs["benchmark"]) == features
    assert len(set(r.outputs["namespaces"])) == len(r.outputs["namespaces"])
