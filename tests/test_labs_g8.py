"""g8: trainer Job builder, progress parsing, preemption measurement from a recorded run."""

from __future__ import annotations

import json

import pytest
import schemas
from labs_fakes import FakeCluster, fixture_outputs, live_args, recording_path

from benchmarks.kube.errors import LabError
from benchmarks.kube.record import Recording, load_recording
from benchmarks.labs import g8, live
from benchmarks.labs import plotting as g8_plotting


@pytest.fixture(scope="module")
def rec() -> Recording:
    return load_recording(recording_path("g8"))


@pytest.mark.parametrize("variant", list(g8.VARIANTS))
def test_trainer_job_validates_and_checkpoints_only_when_asked(variant):
    outputs = fixture_outputs("g8")
    cm, job = g8.build_workloads(outputs, "g8-0000-abcd", variant, steps=40, step_seconds=2.0)
    schemas.validate_object(cm)
    schemas.validate_object(job)
    spec = job["spec"]["template"]["spec"]
    env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
    assert env["CHECKPOINT"] == ("1" if g8.VARIANTS[variant] else "0")
    ckpt = outputs["benchmark"]["checkpoints"]
    assert env["BUCKET"] == ckpt["bucket"]
    assert env["CHECKPOINT_EVERY"] == "10"  # the stack's 20 s interval at 2 s per step
    assert spec["serviceAccountName"] == ckpt["service_account"]
    assert job["spec"]["podFailurePolicy"]["rules"][0]["onPodConditions"] == [{"type": "DisruptionTarget"}]
    assert "step {step} t=" in cm["data"]["trainer.py"]  # the line parse_progress reads


def test_parse_progress():
    text = "resumed from step 21\nstep 22 t=1764435000.500\nnoise\ncheckpoint step 29\nstep 23 t=1764435002.5\ndone step 39\n"
    p = g8.parse_progress(text)
    assert p.resumed_from == 21 and p.steps == [(22, 1764435000.5), (23, 1764435002.5)]
    assert p.checkpoints == [29] and p.done


def test_instance_of_reads_the_provider_id():
    node = {"metadata": {"name": "n"}, "spec": {"providerID": "gce://proj-1/us-central1-a/gke-x-gpu-1"}}
    assert g8.instance_of(node) == ("proj-1", "us-central1-a", "gke-x-gpu-1")
    with pytest.raises(LabError, match="providerID"):
        g8.instance_of({"metadata": {"name": "n"}, "spec": {"providerID": "kind://docker/x"}})


def test_recorded_objects_have_the_api_shapes(rec):
    for obj in [o for s in rec.snapshots[::3] for v in s.objects.values() for o in v] + rec.events + rec.nodes:
        schemas.validate_object(obj)


def test_checkpointing_loses_fewer_steps(rec):
    result = g8.measure(rec)
    assert result.passed, result.checks
    v = {x.name: x for x in result.variants}
    # From the trainers' logs: both ran steps 0-21 before the node went; with checkpoints the last one
    # saved was step 21 and the new pod logged "resumed from step 21" then step 22; without, it restarted at 0.
    got = {x.name: (x.steps_before, x.last_checkpoint, x.resumed_at_step, x.steps_lost) for x in result.variants}
    assert got == {"with-checkpoints": (22, 21, 22, 0), "without-checkpoints": (22, None, 0, 22)}
    for x in result.variants:
        assert 0 < x.reschedule_s < x.resume_s


def test_no_replacement_pod_fails_the_resume_check(rec):
    raw = json.loads(rec.model_dump_json())
    job = raw["client"]["runs"][0]["job"]
    raw["logs"] = {k: v for k, v in raw["logs"].items() if not (k.startswith(job) and k.endswith("q8n4d"))}
    result = g8.measure(Recording.model_validate(raw))
    assert not result.checks[0].passed and result.variants[0].steps_lost is None


def test_on_demand_pool_is_refused():
    outputs = fixture_outputs("g8")
    outputs["gpu_pool"] = {**outputs["gpu_pool"], "spot": False}
    with pytest.raises(LabError, match="Spot VM"):
        g8.check_outputs(outputs)


def test_failure_while_waiting_for_steps_cleans_up(tmp_path):
    cluster = FakeCluster()  # pods never appear: the wait times out
    args = live_args(tmp_path, kill_after=5, steps=10, step_seconds=1.0, variants="with-checkpoints")
    assert live.run(g8, args, cluster=cluster, outputs=fixture_outputs("g8")) == 2
    assert [d[1] for d in cluster.deleted] == ["Job", "ConfigMap", "Pod"]


def test_progress_plot_draws_each_pod_apart_and_marks_the_preemption(rec, tmp_path, monkeypatch):
    result = g8.measure(rec)
    for v in result.variants:
        panel = g8._panel(v)
        resumed = v.preempted_s + v.resume_s
        before, after = panel.segments
        # No line is drawn across the stall: the first pod's steps end before the new pod's begin.
        assert max(t for t, _ in before) < resumed <= min(t for t, _ in after)
        assert len(before) + len(after) == len(v.step_series)
        assert panel.marks == [(v.preempted_s, "spot VM preempted")]
        assert panel.spans[0][:2] == (v.preempted_s, resumed)
        assert f"{v.steps_lost} steps lost" in panel.title
    # Hand-read from the fixture: with-checkpoints preempted at 17:08:16.2, its first pod created 17:02:01.
    assert result.variants[0].preempted_s == pytest.approx(375.2)
    figures = []
    monkeypatch.setattr(g8_plotting.plt, "close", figures.append)
    assert g8.plots(result, tmp_path) == ["progress.png"] and (tmp_path / "progress.png").stat().st_size > 0
    (fig,) = figures
    assert [ax.get_title() for ax in fig.axes] == [g8._panel(v).title for v in result.variants], "one panel per variant"
