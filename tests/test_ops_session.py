"""`make up` / `make down` against a `pulumi` on PATH that answers as the CLI does and a local server
that answers like Google, reached through the endpoint overrides: down destroys, then proves (or
fails to prove) that nothing billable is left; up never runs `pulumi up` after a failed preflight."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from fake_google import FakeGoogle, GoogleState
from fake_pulumi import pulumi_answering
from ops import session
from google_items import DAY, NOW, OURS, PROJECT, cluster, disk

REPO = Path(__file__).resolve().parents[1]
# Under `make test` the suite inherits the outer make's variables: run make as a user's shell would.
MAKE_ENV = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")}
DESTROYED = "Destroying (g6):\n - 57 deleted\nThe resources in the stack have been deleted.\n"
STACK_LS = (json.dumps([{"name": "g6", "current": False, "resourceCount": 0}]), "", 0)


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_down_destroys_then_fails_while_a_disk_is_left(tmp_path, monkeypatch, capsys):
    log = pulumi_answering(tmp_path, monkeypatch, {"destroy": (DESTROYED, "", 0), "stack ls": STACK_LS})
    state = GoogleState(project=PROJECT, disks={"us-central1-a": [disk("pvc-3f1e", "us-central1-a", 50, NOW, labels=OURS)]})
    with FakeGoogle(state) as google:
        for name, value in google.environment().items():
            monkeypatch.setenv(name, value)
        code = session.main(["down", "--stack", "g6", "--project", PROJECT])
    out = capsys.readouterr().out
    assert code == 1
    assert calls(log)[0] == ["destroy", "-s", "g6", "--yes"]
    assert "disk pvc-3f1e (us-central1-a, lab g6): 50 GiB pd-balanced, attached to nothing" in out
    assert "NOT DOWN" in out


def test_make_down_is_zero_only_when_nothing_is_left(tmp_path, monkeypatch):
    pulumi_answering(tmp_path, monkeypatch, {"destroy": (DESTROYED, "", 0), "stack ls": STACK_LS})
    state = GoogleState(project=PROJECT, clusters=[cluster("gml-g6", NOW, labels=OURS)])
    with FakeGoogle(state) as google:
        env = {**MAKE_ENV, "PATH": os.environ["PATH"], **google.environment()}
        left = subprocess.run(["make", "-s", "down", "LAB=g6", f"PROJECT={PROJECT}"], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        state.clusters = []
        gone = subprocess.run(["make", "-s", "down", "LAB=g6", f"PROJECT={PROJECT}"], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    assert left.returncode == 1 and "cluster gml-g6" in left.stdout, "make keeps status's NOT DOWN: 1"
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert f"DOWN: nothing billable of gke-ml-labs in {PROJECT}" in gone.stdout


@pytest.mark.parametrize("goal", ["up", "down", "preflight"])
def test_make_up_and_down_refuse_without_lab_before_anything_runs(tmp_path, monkeypatch, goal):
    log = pulumi_answering(tmp_path, monkeypatch, {"destroy": (DESTROYED, "", 0), "up": ("", "", 0)})
    done = subprocess.run(["make", goal], cwd=REPO, env={**MAKE_ENV, "PATH": os.environ["PATH"]},
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert f"make {goal} needs LAB: e.g. make {goal} LAB=g6 PROJECT=my-lab-project" in line
    assert not log.exists(), "nothing ran: no pulumi, no preflight"


def test_make_plan_plans_the_lab_it_is_given():
    done = subprocess.run(["make", "-s", "plan", "LAB=g6"], cwd=REPO, env=MAKE_ENV, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "resources for stack g6 (update)." in done.stdout and "vllm" in done.stdout
    wrong = subprocess.run(["make", "-s", "plan", "LAB=g9"], cwd=REPO, env=MAKE_ENV, capture_output=True, text=True,
                           timeout=300)  # fmt: skip
    assert wrong.returncode == 2 and "no stack file Pulumi.g9.yaml" in wrong.stderr


def test_a_failed_destroy_still_shows_what_is_left(tmp_path, monkeypatch, capsys):
    pulumi_answering(tmp_path, monkeypatch, {
        "destroy": ("", "error: the current deployment has 1 resource(s) with pending operations\n", 255),
        "stack ls": STACK_LS})  # fmt: skip
    with FakeGoogle(GoogleState(project=PROJECT)) as google:
        for name, value in google.environment().items():
            monkeypatch.setenv(name, value)
        code = session.main(["down", "--stack", "g6", "--project", PROJECT])
        out = capsys.readouterr().out
        assert code == 2, "nothing found, but Pulumi may still hold what it could not delete: not proven"
        assert "`pulumi destroy -s g6` did not finish (exit 255); what is left:" in out and "none of ours" in out
        google.state.disks = {"us-central1-a": [disk("pvc-3f1e", "us-central1-a", 50, DAY, labels=OURS)]}
        assert session.main(["down", "--stack", "g6", "--project", PROJECT]) == 1, "status's NOT DOWN, not pulumi's 255"


def test_without_the_pulumi_cli_up_and_down_say_so_in_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert session._pulumi(["destroy", "-s", "g6", "--yes"]) == 2
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("the Pulumi CLI is not on PATH: install it")


def test_up_does_not_run_pulumi_up_after_a_failed_preflight(tmp_path, monkeypatch, capsys):
    log = pulumi_answering(tmp_path, monkeypatch, {"up": ("", "", 0)})
    with FakeGoogle(GoogleState(project=PROJECT)) as google:  # no API enabled, no quota
        for name, value in google.environment().items():
            monkeypatch.setenv(name, value)
        code = session.main(["up", "--stack", "g6", "--project", PROJECT])
    out = capsys.readouterr().out
    assert code == 1 and "FAIL  APIs enabled: not enabled: " in out
    assert "not running `pulumi up -s g6`: preflight failed (above)" in out
    assert all(call[0] != "up" for call in calls(log)), "preflight asks pulumi who is logged in, nothing more"
