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
    args = live_args(tmp_path, kill_after=5, steps=10, step_seconds=1.0, variants="with-checkpoints",
                     preempt_command=None, storage_emulator=None)
    assert live.run(g8, args, cluster=cluster, outputs=fixture_outputs("g8")) == 2
    assert [d[1] for d in cluster.deleted] == ["Job", "ConfigMap", "Pod"]


def test_progress_plot_draws_each_pod_apart_and_marks_the_preemption(rec, tmp_path, monkeypatch):
    result = g8.measure(rec)
    for v in result.variants:
        panel = g8._panel(v)
        resumed = v.preempted_s + v.resume_s
        before, after = panel.segments
        # No line is drawn across the stall: the first pod's steps end before the new pod's begin.
        assert max(t for t, _ in before) < resumed <= min(t for t, _ in after) + 0.01
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


def test_a_preempt_command_runs_here_with_the_node_name_and_its_failure_is_said(tmp_path):
    node = {"metadata": {"name": "gpu-0"}, "spec": {}}  # no gce:// providerID: not a Compute Engine node
    g8.preempt(node, command=f"touch {tmp_path}/{{node}}.preempted")
    assert (tmp_path / "gpu-0.preempted").exists()
    with pytest.raises(LabError, match=r"--preempt-command sh exited with 3: no such node"):
        g8.preempt(node, command="sh -c 'echo no such node >&2; exit 3'")


def test_a_storage_emulator_reaches_the_trainer_only_when_given():
    outputs = fixture_outputs("g8")
    env = lambda job: {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}  # noqa: E731
    _, job = g8.build_workloads(outputs, "g8-0000-abcd", storage_emulator="http://10.10.0.1:4443")
    assert env(job)["STORAGE_EMULATOR_HOST"] == "http://10.10.0.1:4443"
    _, job = g8.build_workloads(outputs, "g8-0000-abcd")
    assert "STORAGE_EMULATOR_HOST" not in env(job)  # on GKE: Cloud Storage through Workload Identity


def test_the_report_says_how_the_node_was_preempted(rec):
    assert "preempted with `simulateMaintenanceEvent` (a real Spot preemption path" in g8.report_body(g8.measure(rec))
    raw = json.loads(rec.model_dump_json())
    for run in raw["client"]["runs"]:
        run["preempted_by"] = "dbus-send --print-reply PowerOff"
    body = g8.report_body(g8.measure(Recording.model_validate(raw)))
    assert "preempted by `dbus-send --print-reply PowerOff` (--preempt-command), not by Compute Engine" in body
    assert "simulateMaintenanceEvent" not in body


def test_a_log_the_recreated_node_no_longer_has_keeps_what_was_read():
    """The first local run lost every preempted pod's steps: the real kubelet, back with a fresh disk, answered
    the old pod's log read with this line (HTTP 200), which replaced the log read before the preemption."""
    read = "starting from step 0\nstep 0 t=1796690474.912\n"
    gone = "unable to retrieve container logs for containerd://4a5e03e8db760c950c830d6dbcd4fcea4a3e4933779d97bbe7e8a871a65cb096"
    assert g8.kept_log(read, gone) == read
    assert g8.kept_log(read, "") == read
    assert g8.kept_log(read, read + "step 1 t=1796690476.913\n") == read + "step 1 t=1796690476.913\n"
    assert g8.kept_log(None, read) == read


def test_a_first_log_cut_short_by_the_node_counts_the_steps_its_checkpoint_proves(rec):
    """The last lines the first pod logged in the graceful shutdown may go with the node before they are read;
    the successor's "resumed from step 21" proves step 21 was done, so no negative loss is reported."""
    raw = json.loads(rec.model_dump_json())
    job = raw["client"]["runs"][0]["job"]
    (first,) = [k for k, v in raw["logs"].items() if k.startswith(job) and "starting from step 0" in v]
    raw["logs"][first] = "\n".join(ln for ln in raw["logs"][first].splitlines() if not ln.startswith(("step 21 ", "checkpoint step 21")))
    v = g8.measure(Recording.model_validate(raw)).variants[0]
    assert (v.name, v.steps_before, v.resumed_at_step, v.steps_lost) == ("with-checkpoints", 22, 22, 0)


def test_the_real_runs_plot_draws_no_line_from_the_first_pod_to_the_second():
    """examples/g8-real-node: its successor's first step fell 60 ns before the resume time as rounded to the millisecond, so
    the first plot joined step 22 of the preempted pod to step 0 of its successor."""
    from benchmarks.labs import examples

    result = g8.measure(load_recording(examples.recording_of("g8-real-node")))
    for v in result.variants:
        before, after = g8._panel(v).segments
        assert [s for _, s in before] == list(range(v.steps_before)), v.name
        assert after[0][1] == v.resumed_at_step, v.name


def test_a_preempted_pod_never_reported_stopped_does_not_stop_the_run(tmp_path, monkeypatch):
    """On GKE the VM can go before its kubelet reports the pod stopped: the fast log watch after the preemption
    gives up after its limit, says so, and the run goes on to wait for the Job."""
    monkeypatch.setattr(g8, "SHUTDOWN_WATCH_S", 0.05)
    preempted = []
    monkeypatch.setattr(g8, "preempt", lambda node, gcp=None, command=None: preempted.append(node) or g8.now())
    jobs: list[dict] = []

    def on_list(api_version, kind, namespace, selector):
        if kind == "Node":
            return [{"metadata": {"name": "gpu-0"}, "spec": {}}]
        if kind == "Pod":
            job = selector.split("=", 1)[1]
            return [{"metadata": {"name": f"{job}-abcde", "labels": {"batch.kubernetes.io/job-name": job},
                                  "creationTimestamp": "2026-12-08T00:00:00Z"},
                     "spec": {"nodeName": "gpu-0"}, "status": {"phase": "Running"}}]  # fmt: skip
        if kind == "Job" and preempted:
            jobs.append({"metadata": {"name": "x"}, "status": {"conditions": [
                {"type": "Complete", "status": "True", "lastTransitionTime": "2026-12-08T00:01:00Z"}]}})
            return jobs[-1:]
        return []

    cluster = FakeCluster(on_list)
    cluster.on_log = lambda *a: "starting from step 0\n" + "".join(f"step {i} t=1796688000.{i}\n" for i in range(5))
    args = live_args(tmp_path, kill_after=5, steps=10, step_seconds=1.0, variants="with-checkpoints",
                     preempt_command=None, storage_emulator=None)
    live.run(g8, args, cluster=cluster, outputs=fixture_outputs("g8"))
    assert len(preempted) == 1 and jobs, "the run stopped at the watch instead of waiting for the Job"
    (report,) = tmp_path.glob("*/report.md")
    assert "no step logged by a replacement pod" in report.read_text()
