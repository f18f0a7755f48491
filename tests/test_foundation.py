"""The base platform every lab stands on: a GKE cluster that costs nothing while idle."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import yaml
from conftest import STACKS
from kube_fixtures import G2_L4 as PUBLISHED_G2_L4

from components import argo, checkpoints
from components.naming import resource_name
from stacks.context import stack_id
from stacks.loader import ConfigError, parse
from stacks.mockrun import run_stack
from stacks.outputs import StackOutputs
from stacks.plan import main as plan_main
from stacks.stackfile import REPO

CONTRACT = {
    "lab", "project", "region", "zones", "cluster_name", "kubeconfig", "gpu_pool", "namespaces",
    "endpoints", "prometheus", "grafana", "artifact_bucket", "labels", "versions", "benchmark",
}
NODE_POOL = "gcp:container/nodePool:NodePool"


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("preview", [False, True], ids=["update", "preview"])
def test_every_stack_file_runs_and_exports_the_contract(stack_runs, stack, preview):
    run = stack_runs[(stack, preview)]
    assert run.resources, "nothing registered"
    assert CONTRACT <= set(run.outputs) | run.unknown_outputs
    if not preview:
        assert not run.unknown_outputs
        assert run.outputs["lab"] == stack, "each Pulumi.<lab>.yaml is that lab's stack"
        StackOutputs.model_validate(run.outputs)  # the kit reads them through the same model


def test_the_program_cannot_export_a_key_off_the_contract():
    good = {name: None for name in StackOutputs.model_fields}
    assert StackOutputs.contract(**good) == good
    renamed = {("gpu_pools" if k == "gpu_pool" else k): v for k, v in good.items()}
    with pytest.raises(ValueError, match=r"unknown \['gpu_pools'\], missing \['gpu_pool'\]"):
        StackOutputs.contract(**renamed)


@pytest.mark.parametrize("stack", STACKS)
def test_gpu_pool_scales_to_zero_on_spot_and_is_tainted(stack_runs, stack):
    run = stack_runs[(stack, False)]
    pool = run.one(NODE_POOL, "gpu-pool").inputs
    auto, node = pool["autoscaling"], pool["nodeConfig"]
    assert auto["totalMinNodeCount"] == 0 and pool["initialNodeCount"] == 0
    assert "minNodeCount" not in auto and "maxNodeCount" not in auto, "per-zone and total bounds mixed"
    assert auto["locationPolicy"] == "ANY"
    assert node["spot"] is True
    assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"} in node["taints"]
    assert node["workloadMetadataConfig"] == {"mode": "GKE_METADATA"}
    accel = node["guestAccelerators"][0]
    assert accel["type"] == "nvidia-l4" and accel["count"] == 1
    # A new project's L4 quota is usually one GPU: every lab must fit it as shipped.
    assert auto["totalMaxNodeCount"] * accel["count"] <= 1


def test_dev_cluster_is_zonal_destroyable_and_uses_workload_identity(stack_runs):
    run = stack_runs[("dev", False)]
    cluster = run.one("gcp:container/cluster:Cluster").inputs
    assert cluster["location"] == "us-central1-a", "a regional cluster leaves GKE's free tier"
    assert cluster["deletionProtection"] is False
    assert cluster["removeDefaultNodePool"] is True
    assert cluster["workloadIdentityConfig"] == {"workloadPool": "offline-plan-project.svc.id.goog"}
    assert cluster["releaseChannel"] == {"channel": "REGULAR"}
    system = run.one(NODE_POOL, "gke-system").inputs
    assert "taints" not in system["nodeConfig"] and "guestAccelerators" not in system["nodeConfig"]
    # Exactly the two pools: nothing else can hold a node.
    assert sorted(r.name for r in run.of_type(NODE_POOL)) == ["gke-system", "gpu-pool"]


@pytest.mark.parametrize("stack", STACKS)
def test_outputs_say_how_to_land_on_each_pool(stack_runs, stack):
    # The kit places its clients and GPU pods by these selectors alone (it reads no code of the program).
    run = stack_runs[(stack, False)]
    labels = {r.name: r.inputs["nodeConfig"]["labels"] for r in run.of_type(NODE_POOL)}
    system, gpu = run.outputs["system_pool"]["node_selector"], run.outputs["gpu_pool"]["node_selector"]
    assert system.items() <= labels["gke-system"].items() and not system.items() <= labels["gpu-pool"].items()
    assert gpu.items() <= labels["gpu-pool"].items() and not gpu.items() <= labels["gke-system"].items()
    assert run.outputs["system_pool"]["name"] == run.one(NODE_POOL, "gke-system").inputs["name"]


def test_node_pools_guard_against_replacement_by_backfilled_fields(stack_runs):
    run = stack_runs[("dev", False)]
    for pool in run.of_type(NODE_POOL):
        assert {"nodeConfig.kubeletConfig", "nodeConfig.linuxNodeConfig"} <= set(pool.ignore_changes)
        node = pool.inputs["nodeConfig"]
        # Set explicitly so GKE has nothing to fill in.
        for key in ("imageType", "diskType", "diskSizeGb", "oauthScopes", "metadata", "serviceAccount"):
            assert key in node, key


@pytest.mark.parametrize("stack", STACKS)
def test_billing_labels_on_every_labelled_cloud_resource(stack_runs, stack):
    run = stack_runs[(stack, False)]
    wanted = {"lab": run.outputs["lab"], "stack": stack, "managed-by": "pulumi"}
    paths = {
        "gcp:container/cluster:Cluster": ("resourceLabels",),
        NODE_POOL: ("nodeConfig", "resourceLabels"),
        "gcp:storage/bucket:Bucket": ("labels",),
    }
    checked = 0
    for r in run.resources:
        if r.type in paths:
            value = r.inputs
            for p in paths[r.type]:
                value = value.get(p) or {}
            assert wanted.items() <= value.items(), f"{r.type} {r.name} lacks billing labels: {value}"
            checked += 1
    assert checked >= 3


@pytest.mark.parametrize("stack", STACKS)
def test_no_service_account_key_anywhere(stack_runs, stack):
    run = stack_runs[(stack, False)]
    assert not run.of_type("gcp:serviceaccount/key:Key")
    for r in run.resources:
        assert "privateKey" not in json.dumps(r.inputs), r.name


def test_nodes_run_as_a_dedicated_service_account_not_the_default_one(stack_runs):
    run = stack_runs[("dev", False)]
    sa = run.one("gcp:serviceaccount/account:Account", "gke-nodes")
    roles = {r.inputs["role"] for r in run.of_type("gcp:projects/iAMMember:IAMMember") if r.parent == sa.parent}
    # GKE's documented role for node service accounts (logs, metrics, autoscaling metrics), nothing else.
    assert roles == {"roles/container.defaultNodeServiceAccount"}
    for pool in run.of_type(NODE_POOL):
        assert pool.inputs["nodeConfig"]["serviceAccount"].startswith(sa.inputs["accountId"])
    # The short-lived default pool too: an org may have disabled the default compute account.
    cluster = run.one("gcp:container/cluster:Cluster").inputs
    assert cluster["nodeConfig"]["serviceAccount"].startswith(sa.inputs["accountId"])


def test_apis_stay_enabled_on_destroy(stack_runs):
    services = stack_runs[("dev", False)].of_type("gcp:projects/service:Service")
    assert {"container.googleapis.com", "compute.googleapis.com"} <= {s.inputs["service"] for s in services}
    assert all(s.inputs["disableOnDestroy"] is False for s in services)


def test_kubernetes_provider_authenticates_through_the_gke_plugin(stack_runs):
    run = stack_runs[("dev", False)]
    provider = run.one("pulumi:providers:kubernetes")
    kubeconfig = run.outputs["kubeconfig"]
    assert "token" not in kubeconfig
    (user,) = yaml.safe_load(kubeconfig)["users"]
    # With Application Default Credentials, which the walk-through sets up, not gcloud's active account.
    assert user["user"]["exec"]["command"] == "gke-gcloud-auth-plugin"
    assert user["user"]["exec"]["args"] == ["--use_application_default_credentials"]
    assert provider.inputs["deleteUnreachable"] in (True, "true")


@pytest.mark.parametrize("machine, l4s", PUBLISHED_G2_L4.items())
def test_every_g2_machine_type_asks_for_its_published_l4_count(machine, l4s):
    run = run_stack("dev", overrides={"gke-ml-labs:gpu_machine_type": machine})
    accel = run.one(NODE_POOL, "gpu-pool").inputs["nodeConfig"]["guestAccelerators"][0]
    assert (accel["type"], accel["count"]) == ("nvidia-l4", l4s)
    assert run.outputs["gpu_pool"]["machine_type"] == machine


def test_only_g2_machine_types_are_accepted():
    for machine in ("g2-standard-2", "g2-standard-64", "a2-highgpu-1g"):
        with pytest.raises(ConfigError, match=f"'{machine}' does not carry an L4; allowed: "
                                             + ", ".join(PUBLISHED_G2_L4)):
            parse({"lab": "dev", "gpu_machine_type": machine}, stack="dev", project="p", region=None)


def test_preview_leaves_cloud_computed_outputs_unknown(stack_runs):
    run = stack_runs[("dev", True)]
    assert "kubeconfig" in run.unknown_outputs
    assert run.outputs["gpu_pool"]["max_nodes"] == 1


BAD = [
    ({"gke-ml-labs:gpu_max_node": 2}, "gke-ml-labs:gpu_max_node: unknown key; did you mean 'gpu_max_nodes'?"),
    ({"gke-ml-labs:gpu_spot": "sometimes"}, "gke-ml-labs:gpu_spot: Input should be a valid boolean"),
    ({"gke-ml-labs:gpu_max_nodes": 0}, "gke-ml-labs:gpu_max_nodes: Input should be greater than or equal to 1"),
    ({"gke-ml-labs:gpu_max_nodes": 40}, "gke-ml-labs:gpu_max_nodes: Input should be less than or equal to 16"),
    (
        {"gke-ml-labs:gpu_machine_type": "g2-standard-24", "gke-ml-labs:gpu_count": 1},
        "gpu_count 1: g2-standard-24 carries exactly 2 L4",
    ),
    ({"gke-ml-labs:gpu_machine_type": "n1-standard-4"}, "'n1-standard-4' does not carry an L4; allowed: g2-standard-4"),
    ({"gke-ml-labs:zone": "europe-west4-a"}, "zone 'europe-west4-a' is not in region us-central1"),
    ({"gke-ml-labs:gpu_zones": ["us-central1-b", "us-east1-c"]}, "zone 'us-east1-c' is not in region us-central1"),
    ({"gke-ml-labs:gpu_min_nodes": 2, "gke-ml-labs:gpu_max_nodes": 1}, "gpu_min_nodes (2) is above gpu_max_nodes (1)"),
    ({"gke-ml-labs:lab": "g9"}, "gke-ml-labs:lab: Input should be 'dev', 'g1'"),
    ({"gke-ml-labs:pods_cidr": "10.10.0.0/16"}, "subnet_cidr 10.10.0.0/20 overlaps pods_cidr 10.10.0.0/16"),
    ({"gke-ml-labs:labels": {"Team": "x"}}, "GCE labels are lowercase"),
    ({"gcp:project": None}, "gcp:project is not set"),
    ({"gcp:region": "central"}, "'central' is not a GCP region name"),
]


@pytest.mark.parametrize("overrides,message", BAD, ids=[m[:40] for _, m in BAD])
def test_bad_config_fails_with_file_key_and_what_is_allowed_before_any_resource(overrides, message, monkeypatch):
    created = []
    monkeypatch.setattr("stacks.cloud.ProjectApis", lambda *a, **k: created.append(a))
    with pytest.raises(ConfigError) as info:
        run_stack("dev", overrides=overrides)
    text = str(info.value)
    assert text.startswith("Pulumi.dev.yaml: ") and "nothing was created" in text
    assert message in text
    assert not created


def test_a_secret_given_in_plain_text_is_refused():
    with pytest.raises(ConfigError, match="pulumi config set --secret hf_token"):
        run_stack("dev", overrides={"gke-ml-labs:hf_token": "hf_abc"})
    # The same value given as a secret is accepted.
    assert run_stack("dev", secrets={"gke-ml-labs:hf_token": "hf_abc"}).resources


def test_lab_defaults_lie_under_the_stack_file():
    from stacks.labs import with_lab_defaults

    merged = with_lab_defaults({"lab": "g6", "vllm": {"max_num_seqs": 8}})
    assert merged["vllm"] == {"enabled": True, "max_num_seqs": 8}
    assert with_lab_defaults({"lab": "g6", "vllm": {"enabled": False}})["vllm"]["enabled"] is False


def test_offline_plan_prints_the_pool_and_writes_kubernetes_yaml(tmp_path, capsys):
    assert plan_main(["dev"]) == 0
    table = capsys.readouterr().out
    assert "gpu-pool" in table and "spot; nodes 0..1; gpus 1x nvidia-l4; taint nvidia.com/gpu=present:NO_SCHEDULE" in table
    assert plan_main(["dev", "--json", "--k8s-out", str(tmp_path)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert "kubeconfig" not in plan["outputs"]
    assert {r["type"] for r in plan["resources"]} >= {"gcp:container/cluster:Cluster", NODE_POOL}


def test_offline_plan_reports_bad_config_without_a_traceback(capsys):
    assert plan_main(["nope"]) == 2
    assert "no stack file Pulumi.nope.yaml" in capsys.readouterr().err


def _plan(*args: str) -> subprocess.CompletedProcess:
    # As a user runs it; every ResourceWarning shown, so an event loop left unclosed (whose collection
    # at exit printed a `BaseEventLoop.__del__` traceback in about one run in ten) shows every time.
    return subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", "-m", "stacks.plan", *args],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )


def test_offline_plan_leaves_no_event_loop_open():
    done = _plan("g2")
    assert done.returncode == 0 and "resources for stack g2" in done.stdout
    assert done.stderr == ""


@pytest.mark.parametrize("target", ["file", "under-a-file"])
def test_a_k8s_out_that_cannot_be_a_folder_fails_in_one_line_before_any_work(tmp_path, target, capsys):
    a_file = tmp_path / "plan.yaml"
    a_file.write_text("mine\n")
    out = a_file if target == "file" else a_file / "g3"
    assert plan_main(["g3", "--k8s-out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no plan was made
    (line,) = captured.err.splitlines()
    assert line.startswith(f"--k8s-out {out}: ")
    assert ("is a file, not a folder" if target == "file" else "cannot create the folder: Not a directory") in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.yaml"] and a_file.read_text() == "mine\n"


def test_k8s_out_is_not_created_for_a_stack_that_does_not_exist(tmp_path, capsys):
    assert plan_main(["nope", "--k8s-out", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()


def test_offline_plan_names_the_missing_price_in_one_line():
    from stacks.plan import cost_section

    assert cost_section(parse({"lab": "dev"}, stack="dev", project="p", region="us-east4")).startswith("### Cost estimate")
    line = cost_section(parse({"lab": "dev"}, stack="dev", project="p", region="europe-west9"))
    assert line.startswith("No cost estimate: no prices for region 'europe-west9' (") and "\n" not in line


@pytest.mark.parametrize("stack", STACKS)
def test_each_kubernetes_object_is_declared_once(stack_runs, stack):
    """Two resources for one object (a namespace two components both create) fail on a real cluster."""
    seen: dict[tuple, str] = {}
    for r in stack_runs[(stack, False)].resources:
        meta = r.inputs.get("metadata")
        if not r.type.startswith("kubernetes:") or not isinstance(meta, dict):
            continue
        key = (r.inputs.get("apiVersion"), r.inputs.get("kind"), meta.get("namespace"), meta.get("name"))
        assert key not in seen, f"{key} declared by both {seen[key]} and {r.name}"
        seen[key] = r.name


@pytest.mark.parametrize("stack", ["G6", "g6.sweep", "g6-", "lab-g7-experiment-sweep-2"], ids=str)
def test_a_stack_name_that_cannot_name_the_gcp_resources_is_refused(stack):
    # Upper case or dots are no GCE label value or GKE name; beyond 20 characters gml-<stack>-wf and
    # gml-<stack>-model are both cut to one 30-character service account id, so g7's second one collides.
    with pytest.raises(ConfigError, match=f"stack name '{re.escape(stack)}'"):
        parse({"lab": "g7"}, stack=stack, project="proj-1", region="us-central1")


def test_the_longest_allowed_stack_name_gives_distinct_valid_service_account_ids():
    cfg = parse({"lab": "g7"}, stack="a" * 20, project="proj-1", region="us-central1")
    owner = stack_id(cfg)
    ids = [argo.account_id(owner, "wf"), argo.account_id(owner, "model"), checkpoints.account_id(owner),
           f"{resource_name(owner)}-nodes"]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[a-z][-a-z0-9]{4,28}[a-z0-9]", i) for i in ids), ids
    assert len(resource_name(owner)) <= 40


@pytest.mark.parametrize(("stack", "api"), [("g7", "iam"), ("g7", "storage"), ("g8", "iam"), ("g8", "storage")])
def test_lab_cloud_resources_wait_for_the_api_they_call(stack_runs, stack, api):
    # On an empty project iam.googleapis.com is off until the stack enables it: a lab's own service
    # accounts and buckets must be created after that, not in parallel with it.
    run = stack_runs[(stack, False)]
    service = next(s for s in run.of_type("gcp:projects/service:Service") if s.inputs["service"].startswith(f"{api}."))
    users = {"iam": "gcp:serviceaccount/account:Account", "storage": "gcp:storage/bucket:Bucket"}[api]
    for resource in run.of_type(users):
        assert run.depends_on(resource, service), f"{resource.name} may call {api} before it is enabled"
