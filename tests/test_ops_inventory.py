"""Status lists every kind any lab can create: derived from the plans of every stack file (and of the
options that add Google resources), not from a list kept by hand. A planned Google resource type without
a lister (or a stated reason it needs none) fails here; so does a Google resource a component can create
that no plan shows; and status, against a fake seeded with what Google would list for every planned
resource, finds each one."""

from __future__ import annotations

import ast
import inspect
import json
import re
from functools import cache
from pathlib import Path

import pulumi_gcp
import pytest

from fake_google import FakeGoogle, GoogleState
from google_items import DAY, NOW, bucket, cluster, disk, network, repository, service_account, subnetwork, vm
from ops import inventory, status
from stacks.mockrun import MockRun, run_stack
from stacks.stackfile import stack_names

REPO = Path(__file__).resolve().parents[1]
PROJECT = "offline-plan-project"  # the project the offline plan names
# The options that add Google resources beyond the stack files' own: every lab with a budget, g6 with
# both cold-start settings and the image cache logged in to Docker Hub.
BUDGET = {"gke-ml-labs:budget": json.dumps({"billing_account": "012345-6789AB-CDEF01"})}
G6_ALL = {"image_streaming": True, "weights": "gcs", "dockerhub_username": "lab-user",
          "dockerhub_token_secret": f"projects/{PROJECT}/secrets/dockerhub-token/versions/1"}  # fmt: skip
VARIANTS = [(stack, BUDGET) for stack in stack_names()] + [("g6", {"gke-ml-labs:vllm": json.dumps(G6_ALL)})]


@cache
def planned_runs() -> list[MockRun]:
    return [run_stack(stack) for stack in stack_names()] + [run_stack(s, overrides=o) for s, o in VARIANTS]


def planned_google_types() -> set[str]:
    return {r.type for run in planned_runs() for r in run.resources if r.custom and r.type.startswith("gcp:")}


def test_every_planned_google_type_has_a_lister_or_a_stated_reason():
    types = planned_google_types()
    assert {"gcp:artifactregistry/repository:Repository", "gcp:billing/budget:Budget",
            "gcp:secretmanager/secretIamMember:SecretIamMember"} <= types
    missing = sorted(types - set(inventory.PLANNED))
    assert missing == [], f"a lab can create these and status would not see them: {missing}"
    for kind in inventory.PLANNED.values():
        assert kind in inventory.LISTERS or kind in inventory.NOT_LISTED, kind


def _type_token(cls: type) -> str:
    source = inspect.getsource(cls._internal_init)
    return re.search(r"__init__\(\s*'(gcp:[^']+)'", source).group(1)


def component_google_types() -> set[str]:
    """Every pulumi_gcp resource a component constructs (`gcp.<module>.<Class>(...)`), read from the source."""
    found = set()
    for path in sorted((REPO / "components").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            f = node.func if isinstance(node, ast.Call) else None
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Attribute) and \
                    isinstance(f.value.value, ast.Name) and f.value.value.id == "gcp":  # fmt: skip
                cls = getattr(getattr(pulumi_gcp, f.value.attr), f.attr)
                if isinstance(cls, type) and hasattr(cls, "_internal_init"):
                    found.add(_type_token(cls))
    return found


def test_the_plans_show_every_google_resource_a_component_can_create():
    """So a kind behind an option no variant above switches on cannot slip past the check above."""
    assert component_google_types() <= planned_google_types()


# --- what Google would list for each planned resource --------------------------------------------------


def google_items(run: MockRun) -> tuple[GoogleState, list[str]]:
    """A fake Google holding what the run's resources would be once up (the system pool and the GPU pool at
    one node each), and the names status must report."""
    state = GoogleState(project=PROJECT)
    names = []
    (gke,) = run.of_type("gcp:container/cluster:Cluster")
    cluster_name, zone = gke.inputs["name"], gke.inputs["location"]
    state.clusters.append(cluster(cluster_name, DAY, labels=gke.inputs["resourceLabels"], location=zone))
    names.append(f"cluster {cluster_name}")
    for r in run.resources:
        i = r.inputs
        if r.type == "gcp:container/nodePool:NodePool":
            node = f"gke-{cluster_name}-{r.name.split('-')[-1]}-1a2b3c4d-x0z1"
            config = i["nodeConfig"]
            state.instances.setdefault(zone, []).append(
                vm(node, zone, config["machineType"], DAY, labels=config.get("resourceLabels", {}), pool=r.name,
                   cluster=cluster_name, accelerators=int(sum(a["count"] for a in config.get("guestAccelerators", [])))))  # fmt: skip
            state.disks.setdefault(zone, []).append(
                disk(node, zone, int(config["diskSizeGb"]), DAY, labels=config.get("resourceLabels", {}), users=(node,)))
            names += [f"VM {node}", f"disk {node}"]
        elif r.type == "gcp:compute/network:Network":
            state.networks.append(network(i["name"], DAY))
            names.append(f"network {i['name']}")
        elif r.type == "gcp:compute/subnetwork:Subnetwork":
            state.subnetworks.setdefault(i["region"], []).append(
                subnetwork(i["name"], i["region"], DAY, network_name=i["name"], cidr=i["ipCidrRange"]))
            names.append(f"subnetwork {i['name']}")
        elif r.type == "gcp:serviceaccount/account:Account":
            email = f"{i['accountId']}@{PROJECT}.iam.gserviceaccount.com"
            state.service_accounts.append(service_account(email, i.get("displayName", "")))
            names.append(f"service account {email}")
        elif r.type == "gcp:storage/bucket:Bucket":
            state.buckets.append(bucket(i["name"], DAY, labels=i["labels"], location=i["location"].upper()))
            names.append(f"bucket {i['name']}")
        elif r.type == "gcp:artifactregistry/repository:Repository":
            state.repositories.setdefault(i["location"], []).append(
                repository(i["repositoryId"], i["location"], DAY, labels=i["labels"], size_bytes=6 * 10**9))
            names.append(f"repository {i['repositoryId']}")
    return state, names


@pytest.mark.parametrize("index", range(len(stack_names()) + len(VARIANTS)),
                         ids=stack_names() + [f"{s}+{'+'.join(o)}" for s, o in VARIANTS])  # fmt: skip
def test_status_finds_everything_a_plan_creates(index, tmp_path, capsys, monkeypatch):
    run = planned_runs()[index]
    state, names = google_items(run)
    monkeypatch.setattr(status.shutil, "which", lambda name: None)
    (tmp_path / f"Pulumi.{run.stack}.yaml").write_text(f"config:\n  gcp:project: {PROJECT}\n")
    with FakeGoogle(state) as google:
        code = status.main([], client=google.client(), now=NOW, directory=tmp_path)
    out = capsys.readouterr().out
    assert code == 1, out
    missing = [n for n in names if f"\n  {n} (" not in out]
    assert missing == [], f"status did not list {missing}"
    assert out.strip().splitlines()[-1].startswith(f"NOT DOWN: {len(names)} thing(s) of gke-ml-labs remain")


def test_everything_a_plan_creates_plus_gkes_leftovers_plus_a_fault_in_every_api_is_never_down(tmp_path, capsys, monkeypatch):
    """The issue's bar in one run: the g6 plan with every option, GKE's unlabelled leftovers, and each API
    answering badly in its own way. Whatever could be listed is listed, every API that failed is named,
    and the verdict is NOT DOWN."""
    from fake_google import Fault
    from google_items import load_balancer, pvc_disk

    run = planned_runs()[-1]  # g6 with image streaming and weights in a bucket
    state, names = google_items(run)
    lb = load_balancer("3f1e9c2a-7b4d-4e21-9a6f-0c5d8e7b1a23", "llm/vllm-public", "34.118.20.9", cluster="gml-g6",
                       cluster_id="0f3e8b2c1d4a5e6f", network_name="gml-g6", nodes=("gke-gml-g6-gke-1a2b3c4d-x0z1",),
                       created=DAY)  # fmt: skip
    state.forwarding_rules = {"us-central1": [lb["forwarding_rule"]]}
    state.target_pools = {"us-central1": [lb["target_pool"]]}
    state.firewalls = lb["firewalls"]
    state.addresses = {"us-central1": [lb["address"]]}
    state.disks["us-central1-a"].append(pvc_disk("pvc-0259a8b1", "us-central1-a", 200, DAY, cluster="gml-g6",
                                                 pvc="model-cache", namespace="llm"))  # fmt: skip
    state.faults = [Fault("/artifactregistry/", "cut-off JSON"), Fault("/file/", "503"), Fault("/iam/", "wrong shape"),
                    Fault("/hmacKeys", "repeated page token"), Fault("/aggregated/healthChecks", "empty body"),
                    Fault("/global/httpHealthChecks", "JSON array"), Fault("/b/gml-g6-offline", "403")]  # fmt: skip
    monkeypatch.setattr(status.shutil, "which", lambda name: None)
    (tmp_path / "Pulumi.g6.yaml").write_text(f"config:\n  gcp:project: {PROJECT}\n")
    with FakeGoogle(state) as google:
        code = status.main([], client=google.client(sleep=lambda s: None), now=NOW, directory=tmp_path)
    out = capsys.readouterr().out
    assert code == 1
    verdict = out.strip().splitlines()[-1]
    assert verdict.startswith("NOT DOWN: ") and f"repositories in {PROJECT}" in verdict.split("not checked: ")[1]
    for kind in ("repositories", "Filestore instances", "service accounts", "HMAC keys", "health checks"):
        assert f"NOT CHECKED {kind}: " in out
    listed = [n for n in names if not n.startswith(("repository", "service account"))]
    assert [n for n in listed if f"\n  {n} (" not in out] == []
    for gke in (f"forwarding rule {lb['name']}", f"address {lb['name']}", "disk pvc-0259a8b1", "firewall rule k8s-fw-"):
        assert f"\n  {gke}" in out
    assert "what it holds not known: storage.googleapis.com: GET" in out, "the weights bucket, its objects refused"
