"""The `cluster` key: gke by default (every existing stack keeps its config and digest), or an existing
cluster reached by kubeconfig context, where the GKE-only keys and the features that need Google are
refused, each in one line naming its key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import existing_cluster as ec
from stacks.loader import ConfigError, parse
from stacks.stackfile import load_config

REPO = Path(__file__).resolve().parents[1]


def problems(raw: dict, project: str | None = None) -> list[str]:
    with pytest.raises(ConfigError) as e:
        parse(raw, stack="mine", project=project, region=None)
    return e.value.problems


def test_the_default_target_keeps_the_digest_reports_recorded_before_the_key_existed():
    # examples/g3 was run against the g3 stack before `cluster` existed; its report names that digest.
    recorded = json.loads((REPO / "examples" / "g3" / "result.json").read_text())
    digest = next(v for k, v in _walk(recorded) if k == "config_sha256")
    cfg = load_config("g3")  # the offline plan's project, as the example was made
    assert cfg.cluster.target == "gke" and cfg.sha256 == digest


def test_a_key_added_later_changes_the_digest_once_it_is_set():
    # vllm.cpu came after reports recorded digests: at its default the digest is the one recorded, set it is not.
    assert load_config("g6", changes={"vllm": {"cpu": 2.0}}).sha256 == load_config("g6").sha256
    assert load_config("g6", changes={"vllm": {"cpu": 0.5}}).sha256 != load_config("g6").sha256


def _walk(value, key=None):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v, key)
    else:
        yield key, value


def test_the_short_forms_name_the_target():
    assert parse({"lab": "dev", "cluster": "gke"}, stack="mine", project="p", region=None).cluster.target == "gke"
    assert problems({"lab": "dev", "cluster": "existing"}) == [
        "gke-ml-labs:cluster: target existing needs kubeconfig and context: the kubeconfig file and the context "
        "of the cluster to apply the lab to (got 'existing')"
    ]


def test_gke_refuses_the_keys_of_an_existing_cluster():
    assert problems({"lab": "dev", "cluster": {"kubeconfig": "k", "charts": "upstream-crds"}}, project="p") == [
        "gke-ml-labs:cluster: charts, kubeconfig: only for target existing (target gke creates the cluster "
        "itself): remove them, or set target: existing"
    ]


def test_an_existing_cluster_needs_no_gcp_project_and_a_gke_one_does():
    cfg = parse(ec.raw("g3"), stack="mine", project=None, region=None)
    assert cfg.project is None and cfg.cluster.existing and cfg.cluster.context == ec.GKE_CONTEXT
    assert problems({"lab": "g3"}) == ["gcp:project is not set: run `pulumi config set gcp:project YOUR_PROJECT -s mine`"]


def test_every_lab_stack_file_turned_existing_is_valid():
    for stack in ("dev", "g1", "g2", "g3", "g4", "g5", "g6", "g7", "g8"):
        cfg = parse(ec.raw(stack), stack=stack, project=None, region=None)
        assert cfg.cluster.existing and cfg.lab == stack


def test_gke_only_keys_are_refused_one_line_each():
    raw = {**ec.raw("g3"), "zone": "us-central1-a", "gpu_spot": True, "gpu_count": 1}
    assert problems(raw) == [
        "gke-ml-labs:zone: configures the GKE cluster or its pools, which gke-ml-labs:cluster.target existing "
        "does not create: remove it",
        "gke-ml-labs:gpu_count: configures the GKE cluster or its pools, which gke-ml-labs:cluster.target existing "
        "does not create: remove it (GPUs per node are cluster.gpu_nodes.gpus_per_node)",
        "gke-ml-labs:gpu_spot: configures the GKE cluster or its pools, which gke-ml-labs:cluster.target existing "
        "does not create: remove it",
    ]


REFUSED = [
    ("g8", {}, {"bucket": None}, "gke-ml-labs:checkpoints.enabled: checkpoints go to a Cloud Storage bucket"),
    ("g7", {}, {"bucket": None}, "gke-ml-labs:argo.enabled: the pipeline's artefacts go to a Cloud Storage bucket"),
    ("g6", {"vllm": {"weights": "gcs"}}, {}, "gke-ml-labs:vllm.weights: gcs needs a bucket"),
    ("g6", {"vllm": {"image_streaming": True}}, {}, "gke-ml-labs:vllm.image_streaming: it needs an Artifact Registry"),
    ("dev", {"budget": {"billing_account": "012345-6789AB-CDEF01"}}, {}, "gke-ml-labs:budget.billing_account: "),
    ("g3", {"tenancy": {"enabled": True, "security_group": "gke-security-groups@example.com",
                        "tenants": [{"name": "team-a", "group": "a@example.com"}]}}, {},
     "gke-ml-labs:tenancy.security_group: Google Groups for RBAC is a setting of the GKE cluster"),
    ("g2", {"gpu_sharing": {"enabled": True, "mode": "nvidia"}, "gpu_driver_version": "INSTALLATION_DISABLED"}, {},
     "gke-ml-labs:gpu_sharing.mode: nvidia needs GKE's driver install off"),
]


@pytest.mark.parametrize(("stack", "keys", "cluster", "start"), REFUSED, ids=[r[3].split(":")[1] for r in REFUSED])
def test_a_feature_that_needs_google_is_refused_in_one_line_naming_its_key(stack, keys, cluster, start):
    raw = ec.raw(stack, **cluster)
    for key, value in keys.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    (line,) = problems(raw)
    assert line.startswith(start) and "cluster.target existing creates nothing of Google" in line and "\n" not in line


def test_a_bucket_of_ones_own_lets_g7_and_g8_run_on_an_existing_cluster():
    for stack in ("g7", "g8"):
        assert parse(ec.raw(stack), stack=stack, project=None, region=None).cluster.bucket == ec.BUCKETS[stack]


def test_gpus_per_node_must_match_the_machine_type_the_checks_assume():
    (line,) = problems(ec.raw("dev", gpu_nodes={"gpus_per_node": 2}))
    assert line == (
        "gke-ml-labs:cluster.gpu_nodes.gpus_per_node 2, but gke-ml-labs:gpu_machine_type g2-standard-4 carries 1 L4: "
        "set gpu_machine_type to a G2 type with 2 (g2-standard-24), the shape the checks and cost figures assume"
    )
    cfg = parse({**ec.raw("dev", gpu_nodes={"gpus_per_node": 2}), "gpu_machine_type": "g2-standard-24"},
                stack="mine", project=None, region=None)
    assert cfg.gpus_per_node == 2 and cfg.max_gpus == 2


def test_a_selector_that_is_not_a_kubernetes_label_is_refused():
    (line,) = problems(ec.raw("dev", system_node_selector={"pool name": "system"}))
    assert line.startswith("gke-ml-labs:cluster.system_node_selector: pool name='system' is not a Kubernetes label")


def test_a_misspelt_cluster_key_gets_the_nearest_name():
    (line,) = problems(ec.raw("dev", kubeconfg="x"))
    assert line.startswith("gke-ml-labs:cluster.kubeconfg: unknown key; did you mean 'kubeconfig'?")
