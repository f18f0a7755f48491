"""Status against a local server answering like Google's list APIs (tests/fake_google.py), reached
through the endpoint overrides a user would set: every left-over kind is found, priced (or said to be
unpriced) and makes the exit non-zero, GKE's unlabelled leftovers included; nothing of anyone else's is
listed; a project, kind or answer that cannot be read is never "none"; an unreadable stack file is one
line; Pulumi state's three answers are three lines; `--json` follows its documented schema."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path

import httpx
import jsonschema
import pytest

from fake_google import FAULTS, FakeGoogle, Fault, GoogleState
from fake_pulumi import pulumi_answering
from google_items import (
    DAY, G7, NOW, OURS, PROJECT, THEIRS, address, bucket, cluster, disk, filestore_instance, forwarding_rule, hmac_key,
    load_balancer, network, pvc_disk, repository, subnetwork, vm,
)
from ops import gcp, status

REPO = Path(__file__).resolve().parents[1]
REAL_WHICH = shutil.which
SCHEMA = json.loads((REPO / "docs" / "schemas" / "status.schema.json").read_text())


def leftovers() -> GoogleState:
    """A session's leftovers after a `pulumi destroy` that failed half-way, beside another team's things."""
    return GoogleState(
        project=PROJECT,
        clusters=[cluster("gml-g6", DAY, labels=OURS), cluster("search-prod", DAY, labels=THEIRS)],
        instances={
            "us-central1-a": [vm("gke-gml-g6-system-9z1c-x1", "us-central1-a", "e2-standard-4", DAY, labels=OURS,
                                 spot=False, pool="system"),
                              vm("ranker-1", "us-central1-a", "e2-standard-4", DAY, labels=THEIRS, spot=False)],
            "us-central1-b": [],
        },
        disks={
            "us-central1-a": [disk("pvc-3f1e", "us-central1-a", 50, DAY, labels=OURS),
                              disk("ranker-data", "us-central1-a", 500, DAY, labels=THEIRS)],
            "us-central1-c": [disk("gke-gml-g6-system-9z1c-x1", "us-central1-c", 100, DAY, labels=OURS,
                                   users=("gke-gml-g6-system-9z1c-x1",))],
        },
        addresses={"us-central1": [address("gml-g6-ingress", "us-central1", DAY, labels=OURS, status_="IN_USE")],
                   "global": [address("ranker-lb", "global", DAY, labels=THEIRS)]},
        forwarding_rules={"us-central1": [forwarding_rule("a1b2c3", "us-central1", DAY, labels=OURS)]},
        buckets=[bucket("search-logs", DAY, labels=THEIRS), bucket("gml-g7-artifacts", DAY, labels=G7),
                 bucket("other-1", DAY, labels={}), bucket("other-2", DAY, labels={})],
        hmac_keys=[hmac_key("GOOG1EOURS", f"gml-g7-model@{PROJECT}.iam.gserviceaccount.com", DAY),
                   hmac_key("GOOG1ETHEIRS", f"ranker@{PROJECT}.iam.gserviceaccount.com", DAY)],
        objects={"gml-g7-artifacts": [{"kind": "storage#object", "name": f"model/{i}", "size": str(512 * 1024**2)}
                                      for i in range(3)]},
    )  # fmt: skip


def project_stack_files(tmp_path: Path, files: dict[str, str]) -> Path:
    for stack, text in files.items():
        (tmp_path / f"Pulumi.{stack}.yaml").write_text(text)
    return tmp_path


G6_FILE = f"config:\n  gcp:project: {PROJECT}\n  gcp:region: us-central1\n  gke-ml-labs:lab: g6\n"


@pytest.fixture(autouse=True)
def no_pulumi_cli(monkeypatch):
    monkeypatch.setattr(status.shutil, "which", lambda name: None)


class Sleeps(list):
    """A stand-in for time.sleep that records the waits instead of waiting."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def run(state: GoogleState, capsys, argv: list[str], directory: Path, **client) -> tuple[int, str]:
    with FakeGoogle(state) as google:
        code = status.main(argv, client=google.client(**{"sleep": Sleeps(), **client}), now=NOW, directory=directory)
    return code, capsys.readouterr().out


def verdict(out: str) -> str:
    return out.strip().splitlines()[-1]


def test_every_kind_of_leftover_is_found_priced_and_fails_the_proof(tmp_path, capsys):
    code, out = run(leftovers(), capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}))
    assert code == 1
    # By hand, 24 h each at the list prices in facts/prices.py: the cluster fee $0.00 (the free tier credits
    # one zonal cluster, as the estimate assumes); e2-standard-4 on-demand us-central1 $0.13402/h -> $3.22;
    # 50 GiB + 100 GiB pd-balanced at $0.10/GiB-month -> $5.00 + $10.00 a month, /730 h x 24 h = $0.16 + $0.33;
    # an external address in use $0.005/h -> $0.12; the first forwarding rule $0.025/h -> $0.60;
    # 1.5 GiB of standard storage at $0.020/GiB-month -> $0.03/month -> $0.00 in a day.
    assert "cluster gml-g6 (us-central1-a, lab g6): RUNNING, node pools: system (e2-standard-4, on-demand, " \
           "1 node(s) now, autoscaling 1-2), gpu (g2-standard-4, spot, 0 node(s) now, autoscaling 0-1)" in out
    assert "$0.0000/h: the GKE free tier credits 1 zonal cluster per billing account (its $0.1000/h fee, charged " \
           "if the account runs another one), $0.00 so far" in out
    assert "VM gke-gml-g6-system-9z1c-x1 (us-central1-a, lab g6): e2-standard-4, on-demand, RUNNING" in out
    assert "$0.1340/h, $3.22 so far" in out
    assert "disk pvc-3f1e (us-central1-a, lab g6): 50 GiB pd-balanced, attached to nothing" in out
    assert "50 GiB x $0.10/GiB-month = $5.00/month ($0.0068/h), $0.16 so far" in out
    assert "100 GiB pd-balanced, attached to gke-gml-g6-system-9z1c-x1" in out and "$0.33 so far" in out
    assert "address gml-g6-ingress (us-central1, lab g6): external 34.118.20.7, IN_USE by a1b2" in out
    assert "$0.0050/h (in use), $0.12 so far" in out
    assert "forwarding rule a1b2c3 (us-central1, lab g6)" in out and "$0.0250/h (rule 1 of ours in the project" in out
    assert "bucket gml-g7-artifacts (us-central1, lab g7): STANDARD, holds 1610612736 bytes" in out
    assert "1.50 GiB x $0.020/GiB-month = $0.03/month, $0.00 so far" in out
    assert "HMAC key GOOG1EOURS (global, lab ?): ACTIVE, of gml-g7-model@lab-project.iam.gserviceaccount.com" in out
    assert "a live credential to the lab's buckets: `gcloud storage hmac update GOOG1EOURS --deactivate && " \
           "gcloud storage hmac delete GOOG1EOURS`, cost so far not known" in out
    total = 0.13402 * 24 + (5.0 + 10.0) / 730 * 24 + 0.12 + 0.60 + 1.5 * 0.02 / 730 * 24
    assert "8 of ours (1 cluster, 1 VM, 2 disks, 1 address, 1 forwarding rule, 1 bucket, 1 HMAC key)" in out
    assert f"${total:.2f} so far at list price" in out and "; 1 of them without a list price there (1 HMAC key)" in out
    per_hour = 0.13402 + 15.0 / 730 + 0.005 + 0.025 + 1.5 * 0.02 / 730
    assert verdict(out) == (f"NOT DOWN: 8 thing(s) of gke-ml-labs remain (${per_hour:.4f}/h at list price, and 1 "
                            "without a price: 1 HMAC key); `make down LAB=g6`, `make down LAB=g7`, or delete them as "
                            "their lines say")  # fmt: skip


def test_other_peoples_resources_are_not_listed(tmp_path, capsys):
    _, out = run(leftovers(), capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}))
    for theirs in ("search-prod", "ranker-1", "ranker-data", "ranker-lb", "search-logs", "other-1", "GOOG1ETHEIRS"):
        assert theirs not in out


def test_every_page_of_every_list_is_read_and_nothing_is_filtered_away_by_the_server(tmp_path, capsys):
    state = leftovers()
    run(state, capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}))
    disk_calls = [q for _, path, q, _ in state.calls if path.endswith("/aggregated/disks")]
    assert [q.get("pageToken") for q in disk_calls] == [None, "1"]  # one zone a page, as the fake answers
    # GKE's PVC disks and load balancers carry no label of ours: the lists ask for everything.
    assert not any("filter" in q for _, path, q, _ in state.calls if "/aggregated/" in path)
    bucket_pages = [q.get("pageToken") for _, path, q, _ in state.calls if path == "/storage/v1/b"]
    assert bucket_pages == [None, "2"]  # four buckets, two a page


def test_what_the_issue_found_missing_is_listed_priced_and_counted(tmp_path, capsys):
    """The leftovers status once called DOWN: a 12 GiB image cache, a Filestore instance, a PVC disk with
    only GKE's label, a load balancer's forwarding rule and reserved address with no label, a `gml-*`
    bucket with no label."""
    lb = load_balancer("3f1e9c2a-7b4d-4e21-9a6f-0c5d8e7b1a23", "llm/vllm-public", "34.118.20.9", cluster="gml-g6",
                       cluster_id="0f3e8b2c1d4a5e6f", network_name="gml-g6", nodes=("gke-gml-g6-system-9z1c-x1",),
                       created=DAY)  # fmt: skip
    state = GoogleState(
        project=PROJECT,
        repositories={"us-central1": [repository("gml-g6-dockerhub", "us-central1", DAY, labels=OURS,
                                                 size_bytes=12 * 1024**3)]},
        filestore=[filestore_instance("gml-g6-share", "us-west1-b", DAY, labels=OURS, capacity_gb=1024)],
        disks={"us-central1-a": [pvc_disk("pvc-0259a8b1-e797-40f4-960f-129d7f942907", "us-central1-a", 200, DAY,
                                          cluster="gml-g6", pvc="model-cache", namespace="llm")]},
        forwarding_rules={"us-central1": [lb["forwarding_rule"]]},
        target_pools={"us-central1": [lb["target_pool"]]},
        firewalls=lb["firewalls"],
        http_health_checks=[lb["http_health_check"]],
        addresses={"us-central1": [lb["address"]]},
        buckets=[bucket("gml-g6-weights", DAY)],
        objects={"gml-g6-weights": [{"kind": "storage#object", "name": "w", "size": str(3 * 1024**3)}]},
    )  # fmt: skip
    code, out = run(state, capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}))
    assert code == 1, out
    # By hand: 12 GiB = 12.88 GB x $0.10/GB-month = $1.29/month; 1024 GiB x $0.000274/GiB-hour = $0.2806/h;
    # 200 GiB pd-ssd x $0.17 = $34.00/month ($0.0466/h); a reserved address $7.30/730 h = $0.0100/h; the
    # forwarding rule $0.025/h; 3 GiB of standard storage $0.06/month.
    assert "repository gml-g6-dockerhub (us-central1, lab g6): Artifact Registry DOCKER remote repository, holds " \
           "12884901888 bytes" in out and "12.88 GB x $0.10/GB-month = $1.29/month" in out
    assert "Filestore instance gml-g6-share (us-west1-b, lab g6): BASIC_HDD, 1024 GiB provisioned, READY" in out
    assert "1024 GiB x $0.000274/GiB-hour = $0.2806/h" in out
    assert "disk pvc-0259a8b1-e797-40f4-960f-129d7f942907 (us-central1-a, lab g6): 200 GiB pd-ssd, attached to " \
           "nothing; GKE's volume for PVC llm/model-cache" in out and "$34.00/month ($0.0466/h)" in out
    name = lb["name"]
    assert f"forwarding rule {name} (us-central1, lab g6): EXTERNAL TCP 34.118.20.9; made by GKE for Service " \
           "llm/vllm-public" in out and "$0.0250/h (rule 1 of ours" in out
    assert f"address {name} (us-central1, lab g6): external 34.118.20.9, RESERVED; made by GKE for Service " \
           "llm/vllm-public" in out and "$0.0100/h (reserved, not in use)" in out
    assert f"target pool {name} (us-central1, lab g6): 1 instance(s); made by GKE for Service llm/vllm-public" in out
    assert f"firewall rule k8s-fw-{name} (global, lab g6): on network gml-g6; made by GKE for Service " \
           "llm/vllm-public" in out
    assert "firewall rule k8s-0f3e8b2c1d4a5e6f-node-http-hc (global, lab g6)" in out
    assert "health check k8s-0f3e8b2c1d4a5e6f-node (global, lab g6): made by GKE" in out
    assert "bucket gml-g6-weights (us-central1, lab g6): STANDARD, holds 3221225472 bytes" in out
    per_hour = 12 * 1024**3 / 1e9 * 0.10 / 730 + 1024 * 0.000274 + 200 * 0.17 / 730 + 0.01 + 0.025 + 3 * 0.02 / 730
    assert verdict(out).startswith(f"NOT DOWN: 10 thing(s) of gke-ml-labs remain (${per_hour:.4f}/h at list price, "
                                   "and 4 without a price: 1 target pool, 2 firewall rules, 1 health check)")  # fmt: skip


def test_another_clusters_load_balancer_is_not_ours(tmp_path, capsys):
    theirs = load_balancer("9a9a9a9a-1111-2222-3333-444455556666", "web/frontend", "35.1.2.3", cluster="search-prod",
                           cluster_id="77aa88bb99cc00dd", network_name="default",
                           nodes=("gke-search-prod-default-pool-1a2b3c4d-x0z1",), created=DAY)  # fmt: skip
    state = GoogleState(project=PROJECT, forwarding_rules={"us-central1": [theirs["forwarding_rule"]]},
                        target_pools={"us-central1": [theirs["target_pool"]]}, firewalls=theirs["firewalls"],
                        http_health_checks=[theirs["http_health_check"]], addresses={"us-central1": [theirs["address"]]},
                        disks={"us-central1-a": [pvc_disk("pvc-77", "us-central1-a", 10, DAY, cluster="search-prod",
                                                          pvc="data", namespace="web")]})  # fmt: skip
    code, out = run(state, capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}))
    assert code == 0, out
    assert theirs["name"] not in out and "pvc-77" not in out


def test_networks_subnetworks_and_service_accounts_left_behind_are_not_down(tmp_path, capsys):
    state = GoogleState(project=PROJECT, networks=[network("gml-g6", DAY), network("default", DAY)],
                        subnetworks={"us-central1": [subnetwork("gml-g6", "us-central1", DAY, network_name="gml-g6")]},
                        service_accounts=[{"email": f"gml-g6-nodes@{PROJECT}.iam.gserviceaccount.com",
                                           "displayName": "GKE nodes of gml-g6",
                                           "name": f"projects/{PROJECT}/serviceAccounts/gml-g6-nodes@x"},
                                          {"email": f"ranker@{PROJECT}.iam.gserviceaccount.com"}])  # fmt: skip
    code, out = run(state, capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}))
    assert code == 1
    assert "network gml-g6 (global, lab g6): VPC network; since 2026-11-28T18:00:00+00:00 (24.0 h); no list price " \
           "in facts/prices.py, cost so far not known" in out
    assert "subnetwork gml-g6 (us-central1, lab g6): 10.10.0.0/20 of gml-g6" in out
    assert "service account gml-g6-nodes@lab-project.iam.gserviceaccount.com (global, lab g6): GKE nodes of gml-g6; " \
           "since not known; no list price in facts/prices.py" in out
    assert "ranker@" not in out and "network default" not in out
    assert verdict(out).startswith("NOT DOWN: 3 thing(s) of gke-ml-labs remain ($0.0000/h at list price, and 3 "
                                   "without a price: 1 network, 1 subnetwork, 1 service account)")  # fmt: skip


def test_two_addresses_are_two_addresses(tmp_path, capsys):
    state = GoogleState(project=PROJECT, addresses={"us-central1": [
        address("gml-g6-a", "us-central1", DAY, labels=OURS), address("gml-g6-b", "us-central1", DAY, labels=OURS)]})
    _, out = run(state, capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}))
    assert "2 of ours (2 addresses)" in out and "addresss" not in out
    assert "$0.0200/h now" in out, "two reserved addresses at $0.01/h, none left out of the total"


def test_nothing_left_exits_zero_only_then_and_names_what_it_does_not_list(tmp_path, capsys):
    empty = GoogleState(project=PROJECT, instances={"us-central1-a": [
        vm("gke-old-gpu", "us-central1-a", "g2-standard-4", NOW, labels=OURS, status_="TERMINATED")]})
    code, out = run(empty, capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}))
    assert code == 0, out
    assert f"project {PROJECT} (named by Pulumi.g6.yaml; VMs, clusters, disks, addresses, forwarding rules, target " \
           "pools, firewall rules, health checks, networks, subnetworks, buckets, HMAC keys, service accounts, " \
           "repositories, Filestore instances; every zone and region):" in out
    assert "none of ours" in out
    assert verdict(out) == (f"DOWN: nothing billable of gke-ml-labs in {PROJECT}, for the 15 kinds listed; not checked: "
                            "enabled APIs (left enabled on destroy by design (components/apis.py), no charge); project "
                            "IAM bindings (lines of the project's policy, no charge); billing budgets (kept on the "
                            "billing account, not in the project); service agents (Google's own identities of its APIs, "
                            "which no destroy removes, no charge); Secret Manager IAM bindings (lines of the policy of "
                            "one's own Docker Hub token secret, no charge); backend services and instance groups of GKE internal "
                            "load balancers (no list price of their own; their forwarding rule is listed)")  # fmt: skip


def test_a_stack_file_with_a_typo_still_gets_its_project_checked(tmp_path, capsys):
    typo = G6_FILE + "  gke-ml-labs:gpu_max_node: 2\n"
    code, out = run(leftovers(), capsys, [], project_stack_files(tmp_path, {"g6": typo}))
    assert code == 1 and "cluster gml-g6" in out and f"project {PROJECT} (named by Pulumi.g6.yaml; " in out


def test_an_unreadable_stack_file_is_one_line_and_the_others_are_still_checked(tmp_path, capsys):
    broken = "config:\n  gcp:project: gpu-project-b\n  gke-ml-labs:vllm: {model: [qwen\n"
    code, out = run(GoogleState(project=PROJECT), capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE, "g7": broken}))
    assert code == 2
    (line,) = [line for line in out.splitlines() if line.startswith("stack file Pulumi.g7.yaml")]
    assert line.startswith("stack file Pulumi.g7.yaml:4:1: not valid YAML: expected ',' or ']'")
    assert verdict(out).startswith("NOT PROVEN: nothing of ours found in what could be checked, but not checked: "
                                   "Pulumi.g7.yaml:4:1")
    assert "none of ours" in out  # lab-project itself was checked


def test_a_yml_stack_file_leaves_the_proof_incomplete(tmp_path, capsys):
    (tmp_path / "Pulumi.g7.yml").write_text("config:\n  gcp:project: gpu-project-b\n  gke-ml-labs:lab: g7\n")
    code, out = run(GoogleState(project=PROJECT), capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}))
    assert code == 2
    assert "stack file Pulumi.g7.yml: Pulumi reads only Pulumi.<stack>.yaml (the extension of Pulumi.yaml) and " \
           "ignores it: rename it to Pulumi.g7.yaml" in out
    # Asked for by name, it is still one line, and says the .yaml is missing.
    code, out = run(GoogleState(project=PROJECT), capsys, ["--stack", "g7", "--project", PROJECT], tmp_path)
    assert code == 2
    (line,) = [line for line in out.splitlines() if "Pulumi.g7.yml" in line and not line.startswith("NOT PROVEN")]
    assert line == ("no stack file Pulumi.g7.yaml: Pulumi.g7.yml: Pulumi reads only Pulumi.<stack>.yaml (the extension "
                    "of Pulumi.yaml) and ignores it: rename it to Pulumi.g7.yaml")


def test_a_project_that_cannot_be_checked_is_never_none(tmp_path, capsys):
    # The fake answers 403 for any project but its own, as Google does for a project one cannot see.
    code, out = run(GoogleState(project=PROJECT), capsys, ["--project", "gpu-project-b"],
                    project_stack_files(tmp_path, {"g6": G6_FILE}))  # fmt: skip
    assert code == 2
    section = out.split("project gpu-project-b")[1].split("project lab-project")[0]
    assert "NOT CHECKED VMs: compute.googleapis.com: GET" in section and "HTTP 403" in section
    assert "NOT CHECKED buckets: storage.googleapis.com: GET" in section
    assert "none of ours" not in section, "nothing could be listed there: no claim about it"
    assert verdict(out).startswith("NOT PROVEN") and "VMs in gpu-project-b" in verdict(out)


def test_an_api_not_enabled_is_named_with_the_command_that_enables_it(tmp_path, capsys):
    state = GoogleState(project=PROJECT, disabled={"storage", "file"})
    code, out = run(state, capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}))
    assert code == 2
    assert "NOT CHECKED buckets: storage.googleapis.com is not enabled, so they could not be listed " \
           f"(`gcloud services enable storage.googleapis.com --project {PROJECT}`)" in out
    assert "NOT CHECKED Filestore instances: file.googleapis.com is not enabled" in out
    assert "none of ours among the VMs, clusters, disks, addresses, forwarding rules" in out
    assert verdict(out) == ("NOT PROVEN: nothing of ours found in what could be checked, but not checked: buckets in "
                            f"{PROJECT}; HMAC keys in {PROJECT}; Filestore instances in {PROJECT} (see above)")


@pytest.mark.parametrize("answer", ["clusters", "Filestore instances", "VMs"])
def test_places_an_api_could_not_reach_leave_the_proof_incomplete(tmp_path, capsys, answer):
    state = GoogleState(project=PROJECT, clusters=[cluster("gml-g6", NOW, labels=OURS)])
    if answer == "clusters":
        state.missing_zones = ["us-central1-b"]
    elif answer == "Filestore instances":
        state.filestore_unreachable = ["us-central1-b"]
    else:
        state.faults = [Fault("/aggregated/instances", "unreachable")]
    code, out = run(state, capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}))
    assert code == 1 and "cluster gml-g6 (us-central1-a, lab g6)" in out, "what did answer is still listed"
    assert f"NOT CHECKED {answer}: these " in out and "did not answer" in out
    assert f"not checked: {answer} in {PROJECT}" in verdict(out)


def test_gpu_only_keeps_the_narrow_check(tmp_path, capsys):
    state = leftovers()
    state.instances["us-central1-b"] = [vm("gke-gml-g6-gpu-1a2b-x9", "us-central1-b", "g2-standard-4",
                                           NOW - timedelta(hours=2, minutes=30), labels=OURS, pool="gpu")]
    code, out = run(state, capsys, ["--gpu-only"], project_stack_files(tmp_path, {"g6": G6_FILE}))
    assert code == 1
    # g2-standard-4 spot in us-central1: $0.05874 + $0.2231 (catalogue rows) = $0.28184/h, x 2.5 h = $0.70.
    assert "VM gke-gml-g6-gpu-1a2b-x9 (us-central1-b, lab g6): g2-standard-4, 1 GPU, spot, RUNNING" in out
    assert "$0.2818/h, $0.70 so far" in out
    assert "cluster" not in out.split("project lab-project")[1] and "system" not in out
    state.instances = {}
    code, out = run(state, capsys, ["--gpu-only"], project_stack_files(tmp_path, {"g6": G6_FILE}))
    assert code == 0 and verdict(out).startswith("DOWN for GPU VMs only: none of gke-ml-labs in lab-project; not "
                                                 "checked: every other kind")


# --- answers a proof must not take for "none" -----------------------------------------------------------

# Where a fault is injected (a text of the call's path) and the API the one line must name.
FAULT_PLACES = {
    "/aggregated/instances": "compute.googleapis.com",
    "/global/networks": "compute.googleapis.com",
    "/locations/-/clusters": "container.googleapis.com",
    "/storage/v1/b": "storage.googleapis.com",
    "/hmacKeys": "storage.googleapis.com",
    "/artifactregistry/": "artifactregistry.googleapis.com",
    "/file/": "file.googleapis.com",
    "/iam/": "iam.googleapis.com",
}
# clusters.list has no pages: a page token in its answer means nothing to it.
FAULT_CASES = [(where, mode) for where in FAULT_PLACES for mode in FAULTS
               if not (mode == "repeated page token" and where == "/locations/-/clusters")]  # fmt: skip
QUICK = httpx.Timeout(0.5)


def quick(mode: str) -> httpx.Timeout:
    """The short timeout for the timeout fault alone: under load, any other call may take longer than it."""
    return QUICK if mode == "timeout" else gcp.TIMEOUT


@pytest.mark.parametrize("where,mode", FAULT_CASES)
def test_a_broken_answer_is_not_proven_in_one_line_naming_the_api(tmp_path, capsys, where, mode):
    sleeps = Sleeps()
    state = GoogleState(project=PROJECT, faults=[Fault(where, mode)])
    code, out = run(state, capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}), timeout=quick(mode), sleep=sleeps)
    assert code == 2, out
    (line,) = [line for line in out.splitlines() if line.startswith("  NOT CHECKED")]
    assert f"{FAULT_PLACES[where]}: GET" in line, line
    expected = {"empty body": "an empty body", "cut-off JSON": "a body that is not JSON", "JSON array": "a JSON list",
                "wrong shape": "not the answer Google documents", "repeated page token": "repeated page token",
                "403": "HTTP 403", "429": "HTTP 429", "500": "HTTP 500", "503": "HTTP 503",
                "timeout": "no answer within 0.5 s"}[mode]  # fmt: skip
    assert expected in line, line
    assert verdict(out).startswith("NOT PROVEN") and "Traceback" not in out
    assert sleeps == ([1.0, 2.0, 4.0] if mode in ("429", "500", "503") else []), "429 and 5xx are retried 3 times"
    assert "(after 4 attempts)" in line if mode in ("429", "500", "503") else "attempts" not in line


@pytest.mark.parametrize("mode", FAULTS)
def test_a_broken_answer_never_hides_what_was_found(tmp_path, capsys, mode):
    """A bucket of ours whose objects cannot be listed is still left over: NOT DOWN, its size unknown."""
    state = GoogleState(project=PROJECT, buckets=[bucket("gml-g6-weights", DAY, labels=OURS)],
                        objects={"gml-g6-weights": []}, faults=[Fault("/b/gml-g6-weights/o", mode)])  # fmt: skip
    code, out = run(state, capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}), timeout=quick(mode))
    assert code == 1, out
    (line,) = [line for line in out.splitlines() if "bucket gml-g6-weights" in line]
    assert "STANDARD, what it holds not known: storage.googleapis.com: GET" in line
    assert "no price: its size is not known, cost so far not known" in line
    assert verdict(out).startswith("NOT DOWN: 1 thing(s) of gke-ml-labs remain ($0.0000/h at list price, and 1 "
                                   "without a price: 1 bucket)")


def test_a_busy_api_is_asked_again_with_backoff_and_then_answers(tmp_path, capsys):
    sleeps = Sleeps()
    state = GoogleState(project=PROJECT, faults=[Fault("/aggregated/disks", "429", times=2),
                                                 Fault("/global/firewalls", "503", times=1, retry_after="3")])
    code, out = run(state, capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}), sleep=sleeps)
    assert code == 0, out
    assert sleeps == [1.0, 2.0, 3.0], "1 s, 2 s, then the server's Retry-After"
    assert len([1 for _, path, _, _ in state.calls if path.endswith("/aggregated/disks")]) == 3


def test_a_refusal_is_not_asked_again(tmp_path, capsys):
    sleeps = Sleeps()
    state = GoogleState(project=PROJECT, faults=[Fault("/aggregated/disks", "403")])
    code, _ = run(state, capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}), sleep=sleeps)
    assert code == 2 and sleeps == []
    assert len([1 for _, path, _, _ in state.calls if path.endswith("/aggregated/disks")]) == 1


def test_a_list_that_never_ends_stops_at_the_page_bound(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(gcp, "MAX_PAGES", 5)
    state = GoogleState(project=PROJECT, faults=[Fault("/global/networks", "endless pages")])
    code, out = run(state, capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}))
    assert code == 2
    assert re.search(r"NOT CHECKED networks: compute.googleapis.com: GET \S+/projects/lab-project/global/networks: "
                     r"more than 5 pages", out), out
    assert len([1 for _, path, _, _ in state.calls if path.endswith("/global/networks")]) == 5


# --- Pulumi state, JSON, make ------------------------------------------------------------------------


def test_pulumi_not_logged_in_is_its_own_line_and_fails(tmp_path, monkeypatch, capsys):
    # What pulumi v3 prints for `stack ls` with a Pulumi Cloud backend and no login in a script.
    monkeypatch.setattr(status.shutil, "which", REAL_WHICH)
    pulumi_answering(tmp_path, monkeypatch, {"stack ls": (
        "", "error: PULUMI_ACCESS_TOKEN must be set for login during non-interactive CLI sessions\n", 255)})
    code, out = run(GoogleState(project=PROJECT), capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}))
    assert code == 2
    assert "Pulumi state: cannot read the backend: `pulumi stack ls` failed (not logged in? run `pulumi login`): " \
           "error: PULUMI_ACCESS_TOKEN must be set" in out
    assert verdict(out).startswith("NOT PROVEN")


def test_pulumi_state_counts_and_missing_cli_are_distinct_lines(tmp_path, monkeypatch, capsys):
    code, out = run(GoogleState(project=PROJECT), capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}))
    assert code == 0 and "Pulumi state: Pulumi CLI not found on PATH, state not read" in out
    monkeypatch.setattr(status.shutil, "which", REAL_WHICH)
    pulumi_answering(tmp_path, monkeypatch, {"stack ls": (
        '[{"name": "g6", "current": false, "lastUpdate": "2026-11-29T16:02:11.000Z", "resourceCount": 57}]', "", 0)})
    code, out = run(GoogleState(project=PROJECT), capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}))
    assert "  g6: stack has 57 resource(s) (run `make down LAB=g6`)" in out


@pytest.mark.parametrize("case", ["leftovers", "nothing", "not proven", "no project"])
def test_json_output_follows_the_documented_schema(tmp_path, capsys, case):
    state = {"leftovers": leftovers(), "nothing": GoogleState(project=PROJECT),
             "not proven": GoogleState(project=PROJECT, faults=[Fault("/iam/", "JSON array")]),
             "no project": GoogleState(project=PROJECT)}[case]  # fmt: skip
    files = {"g6": G6_FILE if case != "no project" else "config:\n  gke-ml-labs:lab: g6\n"}
    code, out = run(state, capsys, ["--json"], project_stack_files(tmp_path, files))
    document = json.loads(out)  # the whole output is one JSON document
    jsonschema.validate(document, SCHEMA)
    assert (document["verdict"], document["exit_status"]) == {
        "leftovers": ("NOT DOWN", 1), "nothing": ("DOWN", 0), "not proven": ("NOT PROVEN", 2),
        "no project": ("NOT PROVEN", 2)}[case] and code == document["exit_status"]  # fmt: skip
    if case == "leftovers":
        (project,) = document["projects"]
        vm_line = next(f for f in project["found"] if f["kind"] == "VM")
        assert vm_line["hourly_usd"] == pytest.approx(0.13402) and vm_line["cost_so_far_usd"] == pytest.approx(0.13402 * 24)
        assert project["unpriced"] == 1 and len(project["found"]) == 8


def test_a_wrong_json_document_fails_the_schema():
    """The schema is a real check: a document missing its verdict, or with a made-up one, is refused."""
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"schema_version": 1}, SCHEMA)
    good = {"schema_version": 1, "verdict": "MAYBE", "exit_status": 0, "verdict_line": "", "checked_at": "",
            "price_date": "", "scope": [], "not_listed": {}, "pulumi_state": {"cli_missing": True, "error": None,
            "resources": {}}, "stack_files_unreadable": [], "projects": [], "projects_not_checked": []}  # fmt: skip
    with pytest.raises(jsonschema.ValidationError, match="MAYBE"):
        jsonschema.validate(good, SCHEMA)


# Under `make test` the suite inherits the outer make's variables: run make as a user's shell would.
MAKE_ENV = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")}


def make_status(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", "status", f"PROJECT={PROJECT}"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=180)  # fmt: skip


def test_make_status_reaches_google_through_the_endpoint_overrides_and_keeps_the_exit_status():
    """What a user runs: `make status PROJECT=...`, the API base URLs and the token from the environment,
    and make's exit status the command's own: 1 NOT DOWN, 2 NOT PROVEN, 0 DOWN."""
    state = leftovers()
    with FakeGoogle(state) as google:
        env = {**MAKE_ENV, **google.environment()}
        done = make_status(env)
        assert done.returncode == 1, done.stdout + done.stderr
        for name in ("cluster gml-g6", "disk pvc-3f1e", "address gml-g6-ingress", "bucket gml-g7-artifacts"):
            assert name in done.stdout
        # JSON=1 (without -s): stdout is the document alone, for `| jq`.
        as_json = subprocess.run(["make", "status", f"PROJECT={PROJECT}", "JSON=1"], cwd=REPO, env=env,
                                 capture_output=True, text=True, timeout=180)  # fmt: skip
        assert as_json.returncode == 1 and json.loads(as_json.stdout)["verdict"] == "NOT DOWN", as_json.stdout[:300]
        state.clusters, state.instances, state.disks, state.addresses = [], {}, {}, {}
        state.forwarding_rules, state.buckets, state.hmac_keys = {}, [], []
        state.disabled = {"iam"}
        not_proven = make_status(env)
        state.disabled = set()
        down = make_status(env)
    assert not_proven.returncode == 2, not_proven.stdout + not_proven.stderr
    assert down.returncode == 0, down.stdout + down.stderr
    assert f"project {PROJECT} (" in down.stdout and "none of ours" in down.stdout
