"""Status against a local server answering like the Compute API: our GPU nodes, since when and at
what cost so far; non-zero exit while any is up; nothing of anyone else's counted."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from fake_google import FakeGoogle, GoogleState
from facts import prices
from ops import status

PROJECT = "lab-project"
NOW = datetime(2026, 11, 29, 18, 0, tzinfo=timezone.utc)
COMPUTE = f"https://www.googleapis.com/compute/v1/projects/{PROJECT}"


def vm(name: str, zone: str, machine: str, created: datetime, *, labels: dict, spot: bool = True,
       accelerators: int = 0, status_: str = "RUNNING") -> dict:
    """An instance as instances.aggregatedList returns it (the fields status reads, and some it doesn't)."""
    body = {
        "kind": "compute#instance",
        "id": "4567",
        "name": name,
        "zone": f"{COMPUTE}/zones/{zone}",
        "machineType": f"{COMPUTE}/zones/{zone}/machineTypes/{machine}",
        "status": status_,
        "creationTimestamp": created.astimezone(timezone(timedelta(hours=-8))).isoformat(timespec="milliseconds"),
        "labels": labels,
        "scheduling": {"provisioningModel": "SPOT" if spot else "STANDARD", "preemptible": spot,
                       "automaticRestart": not spot, "onHostMaintenance": "TERMINATE"},
        "networkInterfaces": [{"network": f"{COMPUTE}/global/networks/gml-g6"}],
    }
    if accelerators:
        body["guestAccelerators"] = [
            {"acceleratorType": f"{COMPUTE}/zones/{zone}/acceleratorTypes/nvidia-l4", "acceleratorCount": accelerators}
        ]
    return body


OURS = {"app": "gke-ml-labs", "lab": "g6", "stack": "g6", "managed-by": "pulumi", "goog-gke-node": ""}


@pytest.fixture(autouse=True)
def no_pulumi_cli(monkeypatch):
    monkeypatch.setattr(status.shutil, "which", lambda name: None)


def run(state: GoogleState, capsys) -> tuple[int, str]:
    with FakeGoogle(state) as google:
        code = status.main(["--project", PROJECT], client=google.client(), now=NOW)
    return code, capsys.readouterr().out


def test_gpu_node_up_exits_nonzero_with_since_and_cost(capsys):
    started = NOW - timedelta(hours=2, minutes=30)
    state = GoogleState(project=PROJECT, instances={
        "us-central1-a": [
            vm("gke-gml-g6-gpu-1a2b", "us-central1-a", "g2-standard-4", started, labels=OURS),
            vm("gke-gml-g6-system-9z", "us-central1-a", "e2-standard-4", NOW - timedelta(days=1), labels=OURS, spot=False),
        ],
        "us-central1-b": [],
    })
    code, out = run(state, capsys)
    assert code == 1
    cost = prices.hourly("us-central1", "g2-standard-4", spot=True) * 2.5
    assert "GPU nodes of gke-ml-labs running now: 1" in out
    assert "gke-gml-g6-gpu-1a2b (us-central1-a, g2-standard-4, 1 GPU, spot, lab g6)" in out
    assert f"since {started.astimezone(timezone(timedelta(hours=-8))).isoformat()}" in out and "(2.5 h)" in out
    assert f"${cost:.2f} so far" in out
    assert "system" not in out.split("running now")[1], "CPU nodes are not GPU nodes"
    assert "dev: Pulumi CLI not found: cannot read state" in out
    # The server was asked for our label only.
    (_, _, query, _), = [c for c in state.calls if c[1].endswith("/aggregated/instances")]
    assert query["filter"] == 'labels.app="gke-ml-labs"'


def test_nothing_up_exits_zero(capsys):
    state = GoogleState(project=PROJECT, instances={
        "us-central1-a": [vm("gke-old-gpu", "us-central1-a", "g2-standard-4", NOW, labels=OURS, status_="TERMINATED")],
        "asia-south1-b": [],
    })
    code, out = run(state, capsys)
    assert code == 0 and "GPU nodes of gke-ml-labs running now: none" in out


def test_gpu_from_guest_accelerators_and_unpriced_machine(capsys):
    state = GoogleState(project=PROJECT, instances={
        # A G2 machine with two L4s, in a region facts/prices.py has (its source lists L4 there) ...
        "europe-west4-a": [vm("gke-gml-g6-gpu-7c1e", "europe-west4-a", "g2-standard-24", NOW - timedelta(hours=1),
                              labels=OURS, spot=False, accelerators=2)],
        # ... and one in a region it lacks.
        "us-south1-a": [vm("gke-gml-g7-gpu-2b9d", "us-south1-a", "g2-standard-24", NOW - timedelta(hours=1),
                           labels=OURS, spot=False, accelerators=2)],
    })
    code, out = run(state, capsys)
    assert code == 1
    # By hand from the catalogue's europe-west4 rows: g2-standard-24 VM $0.92571/h + L4x2 $1.17608/h.
    assert "2 GPU, on-demand" in out and f"${0.92571 + 1.17608:.4f}/h" in out
    assert "not in facts/prices.py" in out


def test_pulumi_state_counts_when_cli_present(monkeypatch):
    class Done:
        returncode = 0
        stdout = '[{"name": "g6", "current": false, "resourceCount": 57}, {"name": "dev", "resourceCount": 0}]'

    monkeypatch.setattr(status.shutil, "which", lambda name: "/usr/bin/pulumi")
    monkeypatch.setattr(status.subprocess, "run", lambda *a, **k: Done())
    text = status.report(["dev", "g6"], status.pulumi_stacks(), [], NOW)
    assert "g6: 57 resource(s) (run `pulumi destroy -s g6`)" in text and "dev: 0 resource(s)" in text
