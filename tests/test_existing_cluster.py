"""`cluster: existing`: every lab's Kubernetes half applied to a kubeconfig context, with no Google
resource, in update and in preview mode; the outputs keep their names, say honestly what has no
meaning there, and the benchmarks read them."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from pulumi.runtime import rpc

import existing_cluster as ec
from fake_pulumi import pulumi_answering
from benchmarks.g6 import cli as g6_cli
from benchmarks.g6.resolve import read_stack_outputs, resolve_params
from benchmarks.harness.outputs import read_outputs
from benchmarks.kube.evidence import from_cluster
from benchmarks.kube.stack import gpu_placement, system_selector
from benchmarks.labs import g1, g2, g3, g4, g5, g7, g8
from ops import estimate, preflight, session, status
from ops.gcp import GcpClient
from stacks.loader import ConfigError
from stacks.mockrun import MockRun
from stacks.plan import main as plan_main
from stacks.stackfile import load_config

LABS = ["dev", "g1", "g2", "g3", "g4", "g5", "g6", "g7", "g8"]
# The contract (DESIGN.md) and program.build's other keys: an existing cluster keeps every name.
CONTRACT = ["lab", "lab_title", "config_sha256", "project", "region", "zones", "cluster_name", "cluster_target", "kubeconfig",
            "system_pool", "gpu_pool", "namespaces", "endpoints", "prometheus", "grafana", "artifact_bucket",
            "labels", "versions", "benchmark", "cost_estimate"]  # fmt: skip
# The local control plane's nodes, labelled as no GKE pool is: nothing may fall back to GKE's labels.
LOCAL = {
    "context": ec.LOCAL_CONTEXT,
    "system_node_selector": {"node-role.example.com/system": "true"},
    "gpu_nodes": {"node_selector": {"accelerator.example.com/l4": "true"},
                  "taints": [{"key": "accelerator.example.com/l4", "effect": "NoSchedule"}]},
}  # fmt: skip


@pytest.fixture(scope="module")
def runs() -> dict[tuple[str, bool], MockRun]:
    return {(lab, preview): ec.run_existing(lab, preview=preview) for lab in LABS for preview in (False, True)}


@pytest.mark.parametrize("preview", [False, True], ids=["update", "preview"])
@pytest.mark.parametrize("lab", LABS)
def test_every_lab_runs_on_an_existing_cluster_and_creates_nothing_of_google(runs, lab, preview):
    run = runs[(lab, preview)]
    assert [r.type for r in run.resources if r.type.startswith("gcp:")] == []
    assert [r.type for r in run.resources if r.type.startswith("pulumi:providers:")] == ["pulumi:providers:kubernetes"]
    (provider,) = run.of_type("pulumi:providers:kubernetes")
    objects = [r for r in run.resources if r.custom and r.type.startswith("kubernetes:")]
    assert all(r.provider.startswith(provider.urn) for r in objects), "every object goes to the existing cluster"
    assert sorted(run.outputs) == sorted(CONTRACT) and not run.unknown_outputs


def test_the_kubernetes_half_is_the_same_as_on_gke(runs, stack_runs):
    """Every Kubernetes object of each lab's GKE stack exists on the existing cluster too (the GKE-only
    objects are Google's, and g7/g8's Workload Identity pieces become plain ServiceAccounts)."""
    for lab in LABS:
        gke = {(r.type, r.name) for r in stack_runs[(lab, False)].resources if r.type.startswith("kubernetes:")}
        existing = {(r.type, r.name) for r in runs[(lab, False)].resources if r.type.startswith("kubernetes:")}
        assert gke == existing, lab


def test_outputs_with_no_gke_meaning_say_so(runs):
    out = runs[("g3", False)].outputs
    # The context is gcloud's gke_<project>_<zone>_<cluster>: the outputs name that project and cluster.
    assert (out["project"], out["region"], out["zones"], out["cluster_name"]) == (
        "ml-labs-demo", "us-central1", ["us-central1-a"], "team-l4")
    assert out["cost_estimate"] is None, "the nodes are the user's: this stack prices nothing"
    assert out["system_pool"] == {"name": None, "node_selector": {}}
    pool = out["gpu_pool"]
    assert (pool["name"], pool["spot"], pool["min_nodes"], pool["max_nodes"]) == (None, None, None, 1)
    assert pool["node_selector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert pool["tolerations"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule", "operator": "Equal"}]
    assert pool["sharing"]["max_allocatable_gpus"] == 6  # gpus_per_node 1 x gpu_sharing.replicas 6 x 1 node
    local = ec.run_existing("dev", **LOCAL).outputs
    assert (local["project"], local["region"], local["zones"], local["cluster_name"]) == (None, None, [], None)


def test_a_gke_nodepool_and_spot_label_in_the_selectors_name_the_pools():
    out = ec.run_existing("g8", gpu_nodes={"node_selector": {"cloud.google.com/gke-nodepool": "l4-spot",
                                                             "cloud.google.com/gke-spot": "true"}}).outputs  # fmt: skip
    assert (out["gpu_pool"]["name"], out["gpu_pool"]["spot"]) == ("l4-spot", True)


def test_the_kubeconfig_output_is_the_chosen_context_alone_with_absolute_files():
    kubeconfig = yaml.safe_load(ec.run_existing("dev", context=ec.LOCAL_CONTEXT).outputs["kubeconfig"])
    assert kubeconfig["current-context"] == "local" and [c["name"] for c in kubeconfig["contexts"]] == ["local"]
    (cluster,), (user,) = kubeconfig["clusters"], kubeconfig["users"]
    pki = ec.KUBECONFIG.parent / "pki"
    assert cluster["cluster"] == {"server": "https://127.0.0.1:46443", "certificate-authority": str(pki / "ca.crt")}
    assert user == {"name": "admin", "user": {"client-certificate": str(pki / "admin.crt"), "client-key": str(pki / "admin.key")}}


def test_an_unreachable_existing_cluster_fails_destroy_and_its_credentials_stay_secret(runs, stack_runs):
    """The GKE target's provider forgets objects of a cluster that no longer answers (it deleted the
    cluster itself); on a user's cluster that would leave every object behind unrecorded."""
    (existing,) = runs[("dev", False)].of_type("pulumi:providers:kubernetes")
    (gke,) = stack_runs[("dev", False)].of_type("pulumi:providers:kubernetes")
    assert set(existing.inputs) == {"kubeconfig"} and gke.inputs["deleteUnreachable"] == "true"
    assert existing.inputs["kubeconfig"][rpc._special_sig_key] == rpc._special_secret_sig


@pytest.mark.parametrize(
    ("fields", "line"),
    [
        ({"kubeconfig": "/nonexistent/kubeconfig"}, "gke-ml-labs:cluster.kubeconfig: cannot read /nonexistent/kubeconfig"),
        ({"context": "prod"}, "gke-ml-labs:cluster.context: 'prod' is not a context of "),
    ],
    ids=["no-file", "no-context"],
)
def test_a_kubeconfig_or_context_that_is_not_there_is_one_line_naming_the_key(fields, line):
    with pytest.raises(ConfigError) as e:
        ec.run_existing("dev", **fields)
    (problem,) = e.value.problems
    assert problem.startswith(line) and "\n" not in problem and e.value.stack_file == "Pulumi.dev.yaml"


def test_pods_land_on_the_configured_nodes_never_on_gke_pools():
    for lab in ("g1", "g3", "g5", "g6", "g7"):
        run = ec.run_existing(lab, **LOCAL)
        text = json.dumps([r.inputs for r in run.resources], default=str)
        assert "gke-ml-labs/pool" not in text, lab
        out = run.outputs
        assert gpu_placement(out) == (
            {"accelerator.example.com/l4": "true"},
            [{"key": "accelerator.example.com/l4", "effect": "NoSchedule", "operator": "Exists"}],
        )
        assert system_selector(out) == {"node-role.example.com/system": "true"}


def test_g7_and_g8_use_the_users_bucket_and_create_no_identity_of_google(runs):
    for lab, namespace, accounts in (("g7", "pipelines", {"workflow-runner", "model-reader"}), ("g8", "spot-jobs", {"checkpointer"})):
        run = runs[(lab, False)]
        assert run.outputs["artifact_bucket"] == ec.BUCKETS[lab]
        sas = [r.inputs["metadata"] for r in run.of_type("kubernetes:core/v1:ServiceAccount")
               if r.inputs["metadata"]["namespace"] == namespace]  # fmt: skip
        assert {m["name"] for m in sas} == accounts and all("annotations" not in m for m in sas)
    values = next(r.inputs["values"] for r in runs[("g7", False)].of_type("kubernetes:helm.sh/v3:Release")
                  if r.name == "argo-workflows")  # fmt: skip
    assert values["artifactRepository"] == {"gcs": {"bucket": ec.BUCKETS["g7"]}}


CHECKS = {"g1": g1, "g2": g2, "g3": g3, "g4": g4, "g5": g5, "g7": g7, "g8": g8}


@pytest.mark.parametrize("lab", [*CHECKS, "g6"])
def test_the_benchmarks_accept_an_existing_clusters_outputs(runs, lab, tmp_path):
    saved = tmp_path / "outputs.json"
    # As `pulumi stack output` gives them: the engine exports no output whose value is None (an existing
    # cluster has no cost estimate, and no bucket of the project's).
    outputs = runs[(lab, False)].stack_output()
    assert "cost_estimate" not in outputs
    if lab == "g8":  # g8 preempts a Spot VM: its selector must say the nodes are spot
        outputs = ec.run_existing("g8", gpu_nodes={"node_selector": {"cloud.google.com/gke-spot": "true"}}).stack_output()
    saved.write_text(json.dumps(outputs))
    if lab == "g6":
        inv = g6_cli.parse(["--outputs", str(saved)])
        assert resolve_params(inv, read_stack_outputs(inv)).model == "Qwen/Qwen2.5-1.5B-Instruct"
    else:
        CHECKS[lab].check_outputs(read_outputs(outputs_file=saved))


def test_g8_refuses_a_pool_not_known_to_be_spot(runs):
    with pytest.raises(Exception, match="gpu_pool.spot is not known"):
        g8.check_outputs(runs[("g8", False)].outputs)


def test_the_report_gives_no_billing_export_line_for_an_existing_cluster(runs, stack_runs):
    """The billing export finds a run's cost by the labels of what its stack created: nothing, here."""
    common = {"server_version": {}, "nodes": [], "pods": [], "events": [], "nvidia_smi": None,
              "started": datetime(2026, 12, 1, 17, 1, tzinfo=timezone.utc), "finished": datetime(2026, 12, 1, 17, 7, tzinfo=timezone.utc)}  # fmt: skip
    assert runs[("g1", False)].outputs["cluster_target"] == "existing"
    assert from_cluster(outputs=runs[("g1", False)].outputs, **common).make_cost == (
        "none: the run was on an existing cluster (cluster.target existing), whose nodes carry no billing label of "
        "this stack; where the lab runs the cost exporter, its list-price figures stand in")
    on_gke = from_cluster(outputs=stack_runs[("g1", False)].outputs, **common).make_cost
    assert on_gke == "make cost LAB=g1 SINCE=2026-12-01T17:00 UNTIL=2026-12-01T19:00 BILLING_TABLE=PROJECT_ID.DATASET.TABLE"


# ---------------------------------------------------------------- the operator commands on such a stack


@pytest.fixture
def mine(tmp_path, monkeypatch) -> Path:
    """A user's Pulumi.g3-mine.yaml on an existing cluster, where the operator commands read stack files."""
    config = {f"gke-ml-labs:{k}": v for k, v in ec.raw("g3").items()}
    (tmp_path / "Pulumi.g3-mine.yaml").write_text(yaml.safe_dump({"config": config}))
    read = lambda stack, project=None, directory=None: load_config(stack, project, directory=tmp_path)  # noqa: E731
    monkeypatch.setattr(preflight, "load_config", read)
    monkeypatch.setattr(session, "load_config", read)
    monkeypatch.setattr(GcpClient, "from_environment", classmethod(lambda cls: pytest.fail("a Google client was made")))
    return tmp_path


def test_preflight_checks_only_the_kubeconfig_context(mine, capsys):
    assert preflight.main(["--stack", "g3-mine"]) == 0
    out = capsys.readouterr().out
    assert "no Google check applies" in out and f"OK    kubeconfig: context {ec.GKE_CONTEXT} in {ec.KUBECONFIG}" in out
    text = (mine / "Pulumi.g3-mine.yaml").read_text().replace(ec.GKE_CONTEXT, "gone")
    (mine / "Pulumi.g3-mine.yaml").write_text(text)
    assert preflight.main(["--stack", "g3-mine"]) == 2
    assert "FAIL  kubeconfig: gke-ml-labs:cluster.context: 'gone' is not a context of" in capsys.readouterr().out


def test_estimate_prices_nothing_of_an_existing_cluster(mine, capsys):
    assert estimate.main(["g3-mine"], directory=mine) == 0
    assert capsys.readouterr().out.startswith("g3-mine: no estimate: it runs on an existing cluster")


def test_up_is_the_kubeconfig_check_then_pulumi_up(mine, tmp_path, monkeypatch, capsys):
    log = pulumi_answering(tmp_path, monkeypatch, {"up": ("Resources:\n    + 80 created\n", "", 0)})
    assert session.main(["up", "--stack", "g3-mine"]) == 0
    assert [json.loads(line) for line in log.read_text().splitlines()] == [["up", "-s", "g3-mine"]]
    assert f"OK    kubeconfig: context {ec.GKE_CONTEXT}" in capsys.readouterr().out
    (mine / "Pulumi.g3-mine.yaml").write_text((mine / "Pulumi.g3-mine.yaml").read_text().replace(ec.GKE_CONTEXT, "gone"))
    assert session.main(["up", "--stack", "g3-mine"]) == 1
    assert len(log.read_text().splitlines()) == 1, "no `pulumi up` after a failed preflight"


def test_down_is_the_destroy_alone(mine, tmp_path, monkeypatch, capsys):
    log = pulumi_answering(tmp_path, monkeypatch, {"destroy": ("The resources in the stack have been deleted.\n", "", 0)})
    assert session.main(["down", "--stack", "g3-mine"]) == 0
    assert [json.loads(line) for line in log.read_text().splitlines()] == [["destroy", "-s", "g3-mine", "--yes"]]
    assert "created nothing of Google, no status check to run" in capsys.readouterr().out
    # A destroy that did not finish is not proof, whatever Pulumi's own exit code: 2, as make promises.
    (tmp_path / "unreachable").mkdir()
    pulumi_answering(tmp_path / "unreachable", monkeypatch, {"destroy": ("", "error: the cluster is unreachable\n", 255)})
    assert session.main(["down", "--stack", "g3-mine"]) == 2


def test_status_checks_no_project_for_an_existing_stack_and_says_why(mine, monkeypatch, capsys):
    monkeypatch.setattr(status.shutil, "which", lambda name: None)  # no Pulumi CLI: state not read
    for argv in (["--stack", "g3-mine"], []):
        assert status.main(argv, directory=mine) == 0
        out = capsys.readouterr().out
        assert "stack g3-mine: on an existing cluster (cluster.target existing): it created nothing of Google" in out
        assert out.rstrip().endswith("DOWN: nothing billable of gke-ml-labs: g3-mine created nothing of Google")
    # A stack file that cannot be read still leaves the proof incomplete.
    (mine / "Pulumi.broken.yaml").write_text("config: [")
    assert status.main([], directory=mine) == 2


def test_the_offline_plan_of_an_existing_stack_prices_nothing(mine, capsys):
    assert plan_main(["g3-mine", "--dir", str(mine)]) == 0
    out = capsys.readouterr().out
    assert "resources for stack g3-mine (update)." in out and "gcp:" not in out
    assert out.rstrip().endswith("No cost estimate: it runs on an existing cluster (cluster.target existing), whose "
                                 "nodes it neither creates nor bills.")
