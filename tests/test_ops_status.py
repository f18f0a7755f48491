"""Status against a local server answering like the Compute, Container and Cloud Storage APIs, reached
through the endpoint overrides a user would set: every left-over kind is found, priced and makes the
exit non-zero; nothing of anyone else's is listed; a project that cannot be checked is never "none";
an unreadable stack file is one line; Pulumi state's three answers are three lines."""

from __future__ import annotations

import os
import shutil
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from fake_google import FakeGoogle, GoogleState
from fake_pulumi import pulumi_answering
from ops import status

PROJECT = "lab-project"
NOW = datetime(2026, 11, 29, 18, 0, tzinfo=timezone.utc)
COMPUTE = f"https://www.googleapis.com/compute/v1/projects/{PROJECT}"
PACIFIC = timezone(timedelta(hours=-8))  # Compute writes creationTimestamp in Pacific time
OURS = {"app": "gke-ml-labs", "lab": "g6", "stack": "g6", "managed-by": "pulumi"}
G7 = {**OURS, "lab": "g7", "stack": "g7"}
THEIRS = {"team": "search", "app": "ranker"}
REPO = Path(__file__).resolve().parents[1]
REAL_WHICH = shutil.which


def stamp(t: datetime) -> str:
    return t.astimezone(PACIFIC).isoformat(timespec="milliseconds")


def vm(name: str, zone: str, machine: str, created: datetime, *, labels: dict, spot: bool = True,
       accelerators: int = 0, status_: str = "RUNNING", pool: str | None = None) -> dict:
    """An instance as instances.aggregatedList returns it (the fields status reads, and some it doesn't)."""
    labels = {**labels, **({"goog-gke-node": "", "goog-k8s-cluster-name": "gml-g6", "goog-k8s-node-pool-name": pool}
                           if pool else {})}  # fmt: skip
    body = {
        "kind": "compute#instance", "id": "4567", "name": name,
        "selfLink": f"{COMPUTE}/zones/{zone}/instances/{name}",
        "zone": f"{COMPUTE}/zones/{zone}",
        "machineType": f"{COMPUTE}/zones/{zone}/machineTypes/{machine}",
        "status": status_, "creationTimestamp": stamp(created), "labels": labels,
        "scheduling": {"provisioningModel": "SPOT" if spot else "STANDARD", "preemptible": spot,
                       "automaticRestart": not spot, "onHostMaintenance": "TERMINATE"},
        "networkInterfaces": [{"network": f"{COMPUTE}/global/networks/gml-g6"}],
    }  # fmt: skip
    if accelerators:
        body["guestAccelerators"] = [
            {"acceleratorType": f"{COMPUTE}/zones/{zone}/acceleratorTypes/nvidia-l4", "acceleratorCount": accelerators}
        ]
    return body


def disk(name: str, zone: str, size_gb: int, created: datetime, *, labels: dict, users: tuple[str, ...] = (),
         disk_type: str = "pd-balanced") -> dict:
    return {
        "kind": "compute#disk", "id": "771", "name": name, "sizeGb": str(size_gb), "status": "READY",
        "zone": f"{COMPUTE}/zones/{zone}", "selfLink": f"{COMPUTE}/zones/{zone}/disks/{name}",
        "type": f"{COMPUTE}/zones/{zone}/diskTypes/{disk_type}", "creationTimestamp": stamp(created),
        "labels": labels, "labelFingerprint": "42WmSpB8rSM=", "physicalBlockSizeBytes": "4096",
        **({"users": [f"{COMPUTE}/zones/{zone}/instances/{u}" for u in users]} if users else {}),
    }  # fmt: skip


def address(name: str, region: str, created: datetime, *, labels: dict, status_: str = "RESERVED") -> dict:
    scope = "global" if region == "global" else f"regions/{region}"
    return {
        "kind": "compute#address", "id": "991", "name": name, "address": "34.118.20.7", "addressType": "EXTERNAL",
        "networkTier": "PREMIUM", "status": status_, "creationTimestamp": stamp(created), "labels": labels,
        "selfLink": f"{COMPUTE}/{scope}/addresses/{name}",
        **({"region": f"{COMPUTE}/regions/{region}"} if region != "global" else {}),
        **({"users": [f"{COMPUTE}/{scope}/forwardingRules/a1b2"]} if status_ == "IN_USE" else {}),
    }  # fmt: skip


def forwarding_rule(name: str, region: str, created: datetime, *, labels: dict) -> dict:
    return {
        "kind": "compute#forwardingRule", "id": "551", "name": name, "IPAddress": "34.118.20.7", "IPProtocol": "TCP",
        "portRange": "80-80", "loadBalancingScheme": "EXTERNAL", "region": f"{COMPUTE}/regions/{region}",
        "selfLink": f"{COMPUTE}/regions/{region}/forwardingRules/{name}", "creationTimestamp": stamp(created),
        "labels": labels, "target": f"{COMPUTE}/regions/{region}/targetPools/a1b2",
    }  # fmt: skip


def cluster(name: str, created: datetime, *, labels: dict) -> dict:
    """A cluster as projects.locations.clusters.list returns it (container v1)."""
    return {
        "name": name, "location": "us-central1-a", "zone": "us-central1-a", "status": "RUNNING",
        "createTime": created.isoformat().replace("+00:00", "Z"), "resourceLabels": labels,
        "currentNodeCount": 2, "currentMasterVersion": "1.33.5-gke.1201000",
        "selfLink": f"https://container.googleapis.com/v1/projects/{PROJECT}/zones/us-central1-a/clusters/{name}",
        "nodePools": [
            {"name": "system", "status": "RUNNING", "initialNodeCount": 1,
             "config": {"machineType": "e2-standard-4", "diskSizeGb": 100, "diskType": "pd-balanced"},
             "autoscaling": {"enabled": True, "minNodeCount": 1, "maxNodeCount": 2, "locationPolicy": "BALANCED"}},
            {"name": "gpu", "status": "RUNNING", "initialNodeCount": 0,
             "config": {"machineType": "g2-standard-4", "spot": True,
                        "accelerators": [{"acceleratorCount": "1", "acceleratorType": "nvidia-l4"}]},
             "autoscaling": {"enabled": True, "totalMinNodeCount": 0, "totalMaxNodeCount": 1, "locationPolicy": "ANY"}},
        ],
    }  # fmt: skip


def bucket(name: str, created: datetime, *, labels: dict) -> dict:
    return {
        "kind": "storage#bucket", "id": name, "name": name, "projectNumber": "123456789012",
        "location": "US-CENTRAL1", "locationType": "region", "storageClass": "STANDARD",
        "timeCreated": created.isoformat(timespec="milliseconds").replace("+00:00", "Z"), "labels": labels,
        "selfLink": f"https://www.googleapis.com/storage/v1/b/{name}",
    }  # fmt: skip


def hmac_key(access_id: str, email: str, created: datetime) -> dict:
    return {"kind": "storage#hmacKeyMetadata", "id": f"{PROJECT}/{access_id}", "accessId": access_id,
            "projectId": PROJECT, "serviceAccountEmail": email, "state": "ACTIVE", "etag": "MQ==",
            "timeCreated": created.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "updated": created.isoformat(timespec="milliseconds").replace("+00:00", "Z")}  # fmt: skip


def leftovers() -> GoogleState:
    """A session's leftovers after a `pulumi destroy` that failed half-way, beside another team's things."""
    day = NOW - timedelta(hours=24)
    return GoogleState(
        project=PROJECT,
        clusters=[cluster("gml-g6", day, labels=OURS), cluster("search-prod", day, labels=THEIRS)],
        instances={
            "us-central1-a": [vm("gke-gml-g6-system-9z1c-x1", "us-central1-a", "e2-standard-4", day, labels=OURS,
                                 spot=False, pool="system"),
                              vm("ranker-1", "us-central1-a", "e2-standard-4", day, labels=THEIRS, spot=False)],
            "us-central1-b": [],
        },
        disks={
            "us-central1-a": [disk("pvc-3f1e", "us-central1-a", 50, day, labels=OURS),
                              disk("ranker-data", "us-central1-a", 500, day, labels=THEIRS)],
            "us-central1-c": [disk("gke-gml-g6-system-9z1c-x1", "us-central1-c", 100, day, labels=OURS,
                                   users=("gke-gml-g6-system-9z1c-x1",))],
        },
        addresses={"us-central1": [address("gml-g6-ingress", "us-central1", day, labels=OURS, status_="IN_USE")],
                   "global": [address("ranker-lb", "global", day, labels=THEIRS)]},
        forwarding_rules={"us-central1": [forwarding_rule("a1b2c3", "us-central1", day, labels=OURS)]},
        buckets=[bucket("search-logs", day, labels=THEIRS), bucket("gml-g7-artifacts", day, labels=G7),
                 bucket("other-1", day, labels={}), bucket("other-2", day, labels={})],
        hmac_keys=[hmac_key("GOOG1EOURS", f"gml-g7-model@{PROJECT}.iam.gserviceaccount.com", day),
                   hmac_key("GOOG1ETHEIRS", f"ranker@{PROJECT}.iam.gserviceaccount.com", day)],
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


def run(state: GoogleState, capsys, argv: list[str], directory: Path) -> tuple[int, str]:
    with FakeGoogle(state) as google:
        code = status.main(argv, client=google.client(), now=NOW, directory=directory)
    return code, capsys.readouterr().out


def test_every_kind_of_leftover_is_found_priced_and_fails_the_proof(tmp_path, capsys):
    code, out = run(leftovers(), capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}))
    assert code == 1
    # By hand, 24 h each at the list prices in facts/prices.py:
    # cluster fee $0.10/h -> $2.40; e2-standard-4 on-demand us-central1 $0.13402/h -> $3.22;
    # 50 GiB + 100 GiB pd-balanced at $0.10/GiB-month -> $5.00 + $10.00 a month, /730 h x 24 h = $0.16 + $0.33;
    # an external address in use $0.005/h -> $0.12; the first forwarding rule $0.025/h -> $0.60;
    # 1.5 GiB of standard storage at $0.020/GiB-month -> $0.03/month -> $0.00 in a day.
    assert "cluster gml-g6 (us-central1-a, lab g6): RUNNING, node pools: system (e2-standard-4, on-demand, " \
           "1 node(s) now, autoscaling 1-2), gpu (g2-standard-4, spot, 0 node(s) now, autoscaling 0-1)" in out
    assert "$0.1000/h cluster fee; the free tier credits 1 zonal cluster per billing account, $2.40 so far" in out
    assert "VM gke-gml-g6-system-9z1c-x1 (us-central1-a, lab g6): e2-standard-4, on-demand, RUNNING" in out
    assert "$0.1340/h, $3.22 so far" in out
    assert "disk pvc-3f1e (us-central1-a, lab g6): 50 GiB pd-balanced, attached to nothing" in out
    assert "50 GiB x $0.10/GiB-month = $5.00/month ($0.0068/h), $0.16 so far" in out
    assert "100 GiB pd-balanced, attached to gke-gml-g6-system-9z1c-x1" in out and "$0.33 so far" in out
    assert "address gml-g6-ingress (us-central1, lab g6): external 34.118.20.7, IN_USE by a1b2" in out
    assert "$0.0050/h (in use), $0.12 so far" in out
    assert "forwarding rule a1b2c3 (us-central1, lab g6)" in out and "$0.0250/h (rule 1 of the project" in out
    assert "bucket gml-g7-artifacts (us-central1, lab g7): STANDARD, holds 1610612736 bytes" in out
    assert "1.50 GiB x $0.020/GiB-month = $0.03/month, $0.00 so far" in out
    assert "HMAC key GOOG1EOURS (global, lab ?): ACTIVE, of gml-g7-model@lab-project.iam.gserviceaccount.com" in out
    assert "a live credential to the lab's buckets: `gcloud storage hmac update GOOG1EOURS --deactivate && " \
           "gcloud storage hmac delete GOOG1EOURS`, cost so far not known" in out
    total = 2.40 + 0.13402 * 24 + (5.0 + 10.0) / 730 * 24 + 0.12 + 0.60 + 1.5 * 0.02 / 730 * 24
    assert "8 billable (1 cluster, 1 VM, 2 disks, 1 address, 1 forwarding rule, 1 bucket, 1 HMAC key)" in out
    assert f"${total:.2f} so far at list price" in out and "; 1 of them with no list price there, not in" in out
    assert "NOT DOWN: 8 billable thing(s) of gke-ml-labs remain" in out
    assert "`make down LAB=g6`, `make down LAB=g7`" in out


def test_other_peoples_resources_are_not_listed(tmp_path, capsys):
    _, out = run(leftovers(), capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}))
    for theirs in ("search-prod", "ranker-1", "ranker-data", "ranker-lb", "search-logs", "other-1", "GOOG1ETHEIRS"):
        assert theirs not in out


def test_compute_is_asked_for_our_label_and_every_page_is_read(tmp_path, capsys):
    state = leftovers()
    run(state, capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}))
    disk_calls = [q for _, path, q, _ in state.calls if path.endswith("/aggregated/disks")]
    assert [q.get("pageToken") for q in disk_calls] == [None, "1"]  # one zone a page, as the fake answers
    assert {q["filter"] for q in disk_calls} == {'labels.app="gke-ml-labs"'}
    bucket_pages = [q.get("pageToken") for _, path, q, _ in state.calls if path == "/storage/v1/b"]
    assert bucket_pages == [None, "2"]  # four buckets, two a page


def test_nothing_left_exits_zero_only_then(tmp_path, capsys):
    empty = GoogleState(project=PROJECT, instances={"us-central1-a": [
        vm("gke-old-gpu", "us-central1-a", "g2-standard-4", NOW, labels=OURS, status_="TERMINATED")]})
    code, out = run(empty, capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}))
    assert code == 0, out
    assert f"project {PROJECT} (named by Pulumi.g6.yaml; clusters, VMs, disks, addresses, forwarding rules, " \
           "buckets, HMAC keys, every zone and region):" in out
    assert "none of ours" in out and f"DOWN: nothing billable of gke-ml-labs in {PROJECT}" in out


def test_a_stack_file_with_a_typo_still_gets_its_project_checked(tmp_path, capsys):
    typo = G6_FILE + "  gke-ml-labs:gpu_max_node: 2\n"
    code, out = run(leftovers(), capsys, [], project_stack_files(tmp_path, {"g6": typo}))
    assert code == 1 and "cluster gml-g6" in out and f"project {PROJECT} (named by Pulumi.g6.yaml; " in out


def test_an_unreadable_stack_file_is_one_line_and_the_others_are_still_checked(tmp_path, capsys):
    broken = "config:\n  gcp:project: gpu-project-b\n  gke-ml-labs:vllm: {model: [qwen\n"
    empty = GoogleState(project=PROJECT)
    code, out = run(empty, capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE, "g7": broken}))
    assert code == 2
    (line,) = [line for line in out.splitlines() if "Pulumi.g7.yaml" in line]
    assert line.startswith("stack file Pulumi.g7.yaml:4:1: not valid YAML: expected ',' or ']'")
    assert "DOWN: nothing" not in out and "NOT PROVEN" in out
    assert "none of ours" in out  # lab-project itself was checked


def test_a_project_that_cannot_be_checked_is_never_none(tmp_path, capsys):
    # The fake answers 403 for any project but its own, as Google does for a project one cannot see.
    code, out = run(GoogleState(project=PROJECT), capsys, ["--project", "gpu-project-b"],
                    project_stack_files(tmp_path, {"g6": G6_FILE}))  # fmt: skip
    assert code == 2
    section = out.split("project gpu-project-b")[1].split("project lab-project")[0]
    assert "NOT CHECKED VMs: GET" in section and "HTTP 403" in section and "NOT CHECKED buckets: GET" in section
    assert "none of ours" not in section, "nothing could be listed there: no claim about it"
    assert "NOT PROVEN" in out


def test_an_api_not_enabled_is_named_with_the_command_that_enables_it(tmp_path, capsys):
    state = GoogleState(project=PROJECT, disabled={"storage"})
    code, out = run(state, capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}))
    assert code == 2
    assert "NOT CHECKED buckets: storage.googleapis.com is not enabled, so they could not be listed " \
           f"(`gcloud services enable storage.googleapis.com --project {PROJECT}`)" in out
    assert "none of ours among the VMs, clusters, disks, addresses, forwarding rules" in out


def test_zones_the_container_api_could_not_reach_leave_the_proof_incomplete(tmp_path, capsys):
    state = GoogleState(project=PROJECT, clusters=[cluster("gml-g6", NOW, labels=OURS)], missing_zones=["us-central1-b"])
    code, out = run(state, capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}))
    assert code == 1 and "cluster gml-g6 (us-central1-a, lab g6)" in out, "what did answer is still listed"
    assert "NOT CHECKED clusters: these zones did not answer, their clusters are unknown: us-central1-b" in out


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


def test_pulumi_not_logged_in_is_its_own_line_and_fails(tmp_path, monkeypatch, capsys):
    # What pulumi v3 prints for `stack ls` with a Pulumi Cloud backend and no login in a script.
    monkeypatch.setattr(status.shutil, "which", REAL_WHICH)
    pulumi_answering(tmp_path, monkeypatch, {"stack ls": (
        "", "error: PULUMI_ACCESS_TOKEN must be set for login during non-interactive CLI sessions\n", 255)})
    code, out = run(GoogleState(project=PROJECT), capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}))
    assert code == 2
    assert "Pulumi state: cannot read the backend: `pulumi stack ls` failed (not logged in? run `pulumi login`): " \
           "error: PULUMI_ACCESS_TOKEN must be set" in out
    assert "NOT PROVEN" in out


def test_pulumi_state_counts_and_missing_cli_are_distinct_lines(tmp_path, monkeypatch, capsys):
    code, out = run(GoogleState(project=PROJECT), capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}))
    assert code == 0 and "Pulumi state: Pulumi CLI not found on PATH, state not read" in out
    monkeypatch.setattr(status.shutil, "which", REAL_WHICH)
    pulumi_answering(tmp_path, monkeypatch, {"stack ls": (
        '[{"name": "g6", "current": false, "lastUpdate": "2026-11-29T16:02:11.000Z", "resourceCount": 57}]', "", 0)})
    code, out = run(GoogleState(project=PROJECT), capsys, [], project_stack_files(tmp_path, {"g6": G6_FILE}))
    assert "  g6: stack has 57 resource(s) (run `make down LAB=g6`)" in out


def test_make_status_reaches_google_through_the_endpoint_overrides(tmp_path):
    """What a user runs: `make status PROJECT=...`, the API base URLs and the token from the environment."""
    state = leftovers()
    with FakeGoogle(state) as google:
        env = {**os.environ, **google.environment(), "PATH": os.environ["PATH"]}
        done = subprocess.run(["make", "-s", "status", f"PROJECT={PROJECT}"], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode != 0, done.stdout + done.stderr
        for name in ("cluster gml-g6", "disk pvc-3f1e", "address gml-g6-ingress", "bucket gml-g7-artifacts"):
            assert name in done.stdout
        assert "$0.1000/h cluster fee" in done.stdout
        state.clusters, state.instances, state.disks, state.addresses = [], {}, {}, {}
        state.forwarding_rules, state.buckets, state.hmac_keys = {}, [], []
        done = subprocess.run(["make", "-s", "status", f"PROJECT={PROJECT}"], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"project {PROJECT} (" in done.stdout and "none of ours" in done.stdout
