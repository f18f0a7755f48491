"""g3: Kueue admission measured from recorded Workload objects; job builders against the schemas."""

from __future__ import annotations

import copy
import json
from datetime import datetime

import pytest
import schemas
from labs_fakes import fixture_outputs, recording_path

from benchmarks.labs import g3
from benchmarks.labs.errors import LabError
from benchmarks.labs.record import Recording, load_recording


@pytest.fixture(scope="module")
def rec() -> Recording:
    return load_recording(recording_path("g3"))


def test_jobs_are_queued_suspended_and_validate():
    outputs = fixture_outputs("g3")
    kueue = outputs["benchmark"]["kueue"]
    jobs = g3.build_workloads(outputs, "g3-0000-abcd")
    assert len(jobs) == kueue["jobs"]
    for job in jobs:
        schemas.validate_object(job)
        assert job["metadata"]["labels"][g3.QUEUE_LABEL] == kueue["local_queue"]
        assert job["spec"]["suspend"] is True
        limits = job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == str(kueue["job"]["gpus"])


def test_recorded_objects_have_the_api_shapes(rec):
    kinds = set()
    for snap in rec.snapshots[::4]:
        for obj in [o for v in snap.objects.values() for o in v]:
            schemas.validate_object(obj)
            kinds.add(obj["kind"])
    assert kinds == {"Workload", "Job", "Pod"}


def at(hms: str) -> datetime:
    return datetime.fromisoformat(f"2026-11-29T{hms}+00:00")


# Read off the fixture's objects by hand: each Job's creationTimestamp, and its Workload's
# QuotaReserved and Admitted lastTransitionTime. The ClusterQueue has an admission check
# (gpu-budget), so Kueue admits a few seconds after it reserves quota, as it does on a real cluster.
EXPECTED = {
    # job: (submitted, quota reserved, admitted, finished, waited s = admitted - submitted)
    "g3-job-a-8c41": (at("17:02:00"), at("17:02:01"), at("17:02:03"), at("17:07:57"), 3.0),
    "g3-job-b-8c41": (at("17:02:01"), at("17:02:02"), at("17:02:03"), at("17:08:15"), 2.0),
    "g3-job-c-8c41": (at("17:02:02"), at("17:07:58"), at("17:08:00"), at("17:09:35"), 358.0),
}


def test_admission_times_come_from_the_admitted_condition(rec):
    result = g3.measure(rec)
    got = {j.job: (j.submitted, j.quota_reserved, j.admitted, j.finished, j.waited_s) for j in result.jobs}
    assert got == EXPECTED


def test_two_admitted_one_waits_then_admitted_after_a_finish(rec):
    result = g3.measure(rec)
    assert result.passed, result.checks
    late = next(j for j in result.jobs if j.job == "g3-job-c-8c41")
    assert late.waiting_message == (
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor l4-spot, "
        "1 more needed"
    )
    # Admitted 17:08:00, three seconds after job a finished at 17:07:57 and freed its GPU.
    assert result.checks[2].evidence == "g3-job-c-8c41 admitted 3s after the first finish"
    assert result.max_admitted_at_once == 2
    assert late.flavors == {"cpu": "l4-spot", "memory": "l4-spot", "nvidia.com/gpu": "l4-spot"}


def _admit_all_at_once(rec: Recording) -> Recording:
    raw = json.loads(rec.model_dump_json())
    admitted = next(w for w in raw["snapshots"][-1]["objects"]["workloads"] if w["metadata"]["name"].startswith("job-g3-job-a"))
    for snap in raw["snapshots"]:
        for w in snap["objects"]["workloads"]:
            if w["metadata"]["name"].startswith("job-g3-job-c"):
                w["status"] = copy.deepcopy(admitted["status"])
    return Recording.model_validate(raw)


def test_three_admitted_at_once_fails_the_checks(rec):
    result = g3.measure(_admit_all_at_once(rec))
    assert not result.passed
    assert result.max_admitted_at_once == 3


def test_a_pod_of_a_waiting_job_is_reported_as_half_placed(rec):
    raw = json.loads(rec.model_dump_json())
    snap = raw["snapshots"][2]
    waiting_job = next(
        g3.owner_job(w) for w in snap["objects"]["workloads"] if w["status"]["conditions"][0]["status"] == "False"
    )
    pod = copy.deepcopy(snap["objects"]["pods"][0])
    pod["metadata"]["name"] = f"{waiting_job}-zzzzz"
    pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] = waiting_job
    snap["objects"]["pods"].append(pod)
    result = g3.measure(Recording.model_validate(raw))
    assert result.pods_without_admission == [f"{waiting_job}-zzzzz"]
    assert not result.checks[1].passed


def test_a_quota_that_admits_everything_is_refused():
    outputs = fixture_outputs("g3")
    outputs["benchmark"]["kueue"]["quota"]["gpus"] = 3
    with pytest.raises(LabError, match="quota.gpus 3 admits all 3 jobs"):
        g3.check_outputs(outputs)


def test_a_stack_without_kueue_outputs_names_the_missing_keys():
    outputs = {**fixture_outputs("g3"), "benchmark": {}}
    with pytest.raises(LabError, match="benchmark.kueue.local_queue"):
        g3.check_outputs(outputs)


def test_a_job_admitted_while_a_snapshot_is_taken_is_not_half_placed(tmp_path):
    """Kueue may admit a job (and the job controller start its pod) between two list calls of one poll.
    Pods must be listed before Workloads: a pod seen then belongs to a job admitted by the time its
    Workload is read, so admission and pods in one snapshot never contradict each other."""
    from labs_fakes import FakeCluster, live_args

    from benchmarks.cluster import WaitTimeout
    from benchmarks.labs.live import LabSession

    outputs = fixture_outputs("g3")
    session_id = "g3-11291000-abcd"
    job = g3.job_names(session_id, 3)[0]
    admitted_at = "2026-11-29T10:00:01Z"
    state = {"admitted": False}

    def on_list(api_version, kind, namespace, selector):
        if kind == "Workload":
            workload = {"metadata": {"name": f"job-{job}-1", "ownerReferences": [{"kind": "Job", "name": job}]},
                        "status": {"conditions": [{"type": "Admitted", "status": "True", "lastTransitionTime": admitted_at}]
                                   if state["admitted"] else []}}
            state["admitted"] = True  # Kueue admits it right after this list answered
            return [workload]
        if kind == "Pod" and state["admitted"]:
            return [{"metadata": {"name": f"{job}-x", "labels": {"batch.kubernetes.io/job-name": job}}}]
        return []

    session = LabSession("g3", outputs, FakeCluster(on_list), session_id, log=lambda _: None)
    args = live_args(tmp_path, job_seconds=1)
    args.timeout = 0.3  # several polls even on a busy machine
    with pytest.raises(WaitTimeout), session.scope:
        g3.record(session, args)
    assert len(session.snapshots) >= 2
    assert g3._pods_without_admission(session.snapshots) == []
