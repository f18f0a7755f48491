"""The lab fixtures look like what a real GKE cluster returns, and the helper that makes them so
refuses what a cluster never returns."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timedelta

import pytest

import kube_fixtures as kf
import schemas

PATHS = {p.parent.name: p for p in kf.recording_paths()}


def load(lab: str) -> dict:
    return json.loads(PATHS[lab].read_text())


@pytest.mark.parametrize("lab", sorted(PATHS))
def test_every_fixture_went_through_the_helper(lab):
    raw = load(lab)
    assert kf.problems(raw) == []
    assert kf.realistic(raw) == raw, f"run `python -m tests.kube_fixtures` after editing {lab}'s fixture"


def test_the_g3_fixture_admits_with_the_quota_as_the_g3_stack_does():
    """The g3 ClusterQueue has no admission check, so Kueue writes QuotaReserved and Admitted in one
    update. (Telling them apart is tested with a Workload that has a check: tests/test_labs_g3.py.)"""
    admitted = [
        w for snap in load("g3")["snapshots"] for w in snap["objects"].get("workloads", []) if kf._true_at(w, "Admitted")
    ]
    assert admitted and all(kf._true_at(w, "Admitted") == kf._true_at(w, "QuotaReserved") for w in admitted)
    assert not any((w.get("status") or {}).get("admissionChecks") for w in admitted)


def _g3_with(edit) -> list[str]:
    raw = load("g3")
    edit(raw)
    return kf.problems(raw)


def _gpu_node(raw: dict) -> dict:
    return next(n for n in raw["nodes"] if n["metadata"]["labels"].get("cloud.google.com/gke-accelerator"))


def test_an_l4_on_a_machine_that_carries_none_is_refused():
    def n1(raw):
        _gpu_node(raw)["metadata"]["labels"]["node.kubernetes.io/instance-type"] = "n1-standard-8"

    assert any("n1-standard-8 carries no L4 (only G2 machines do)" in p for p in _g3_with(n1))

    def wrong_count(raw):
        _gpu_node(raw)["status"]["capacity"]["nvidia.com/gpu"] = "3"

    assert any("g2-standard-4 has 1 L4 x 6 client(s), not nvidia.com/gpu 3" in p for p in _g3_with(wrong_count))


def test_nodes_sharing_an_address_a_boot_id_or_a_pod_range_are_refused():
    def clone_identity(raw):
        system, gpu = raw["nodes"][0], _gpu_node(raw)
        gpu["status"]["addresses"] = copy.deepcopy(system["status"]["addresses"][:1]) + gpu["status"]["addresses"][1:]
        gpu["status"]["nodeInfo"]["bootID"] = system["status"]["nodeInfo"]["bootID"]
        gpu["spec"]["podCIDR"] = system["spec"]["podCIDR"]

    found = " | ".join(_g3_with(clone_identity))
    for field in ("InternalIP", "bootID", "podCIDR"):
        assert f"share {field} " in found


def test_job_events_from_the_scheduler_and_a_placeholder_commit_are_refused():
    def scheduler(raw):
        event = next(e for e in raw["events"] if e["involvedObject"]["kind"] == "Job")
        event["source"] = {"component": "default-scheduler"}
        raw["server_version"]["gitCommit"] = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678"

    found = _g3_with(scheduler)
    assert any("event BackoffLimitExceeded comes from job-controller, not default-scheduler" in p for p in found)
    assert any("gitCommit 'a1b2c3d4e5f60718293a4b5c6d7e8f9012345678' is a placeholder" in p for p in found)


def test_kueue_timing_that_kueue_never_produces_is_refused():
    def admitted_after_quota(raw):  # without admission checks Kueue admits in the same update
        for snap in raw["snapshots"]:
            for w in snap["objects"].get("workloads", []):
                if kf._true_at(w, "Admitted"):
                    kf._condition(w, "Admitted")["lastTransitionTime"] = "2026-11-29T17:09:59Z"

    assert any("Kueue admits with QuotaReserved when there are no checks" in p for p in _g3_with(admitted_after_quota))

    def pod_first(raw):  # a Kueue JobSet stays suspended, so without pods, until admission
        snap = next(s for s in raw["snapshots"] if s["objects"]["pods"])
        snap["objects"]["pods"][0]["metadata"]["creationTimestamp"] = "2026-11-29T17:01:59Z"

    assert any("before its JobSet was admitted" in p for p in _g3_with(pod_first))

    def overcommitted(raw):  # the scheduler never binds more GPU requests than the node allocates
        snap = next(s for s in raw["snapshots"] if len(s["objects"]["pods"]) == 6)
        extra = copy.deepcopy(snap["objects"]["pods"][0])
        extra["metadata"]["name"] += "x"
        snap["objects"]["pods"] += [extra]

    found = _g3_with(overcommitted)
    assert any("request 7 nvidia.com/gpu, it allocates 6" in p for p in found), found


def test_unknown_event_reasons_need_their_emitter_named():
    raw = load("g3")
    next(e for e in raw["events"] if e["involvedObject"]["kind"] == "Job")["reason"] = "SomethingNew"
    with pytest.raises(ValueError, match="no known source for a Job event 'SomethingNew'"):
        kf.realistic(raw)


T0 = datetime.fromisoformat("2026-11-29T10:00:00+00:00")


def test_kueue_conditions_follow_kueue_order_and_validate_against_the_crd():
    checks = {"gpu-budget": T0 + timedelta(seconds=4)}
    conditions, states = kf.kueue_conditions(
        T0 + timedelta(seconds=1), cluster_queue="gpu", checks=checks,
        pods_ready=T0 + timedelta(seconds=30), finished=T0 + timedelta(seconds=120),
    )  # fmt: skip
    assert [(c["type"], c["lastTransitionTime"]) for c in conditions] == [
        ("QuotaReserved", "2026-11-29T10:00:01Z"),
        ("Admitted", "2026-11-29T10:00:04Z"),
        ("Finished", "2026-11-29T10:02:00Z"),  # before PodsReady, as Kueue 0.19.2 left them (examples/g3-local)
        ("PodsReady", "2026-11-29T10:02:00Z"),  # Recovered at the finish (examples/g3-real-node)
    ]
    assert conditions[-1]["reason"] == "Recovered"
    running, _ = kf.kueue_conditions(T0, cluster_queue="gpu", pods_ready=T0 + timedelta(seconds=30))
    assert (running[-1]["reason"], running[-1]["lastTransitionTime"]) == ("Started", "2026-11-29T10:00:30Z")
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": "job-train-1a2b3", "namespace": "batch-jobs"},
        "spec": {"queueName": "lab-queue", "podSets": [{"name": "main", "count": 1, "template": {
            "spec": {"containers": [{"name": "main", "image": "busybox:1.37.0"}]}}}]},
        "status": {"conditions": conditions, "admissionChecks": states},
    }  # fmt: skip
    schemas.validate_custom_resource(workload)
    no_checks, _ = kf.kueue_conditions(T0, cluster_queue="gpu")
    assert no_checks[0]["lastTransitionTime"] == no_checks[1]["lastTransitionTime"], "admitted in the same update"
    with pytest.raises(ValueError, match="only after quota is reserved"):
        kf.kueue_conditions(T0, checks={"gpu-budget": T0 - timedelta(seconds=1)})
