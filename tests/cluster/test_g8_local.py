"""`make lab-local LAB=g8` as a test: g8's benchmark, unchanged but for the two options a cluster off Compute
Engine needs (`--preempt-command`, `--storage-emulator`), after the lab's real `pulumi up`, on a local cluster whose
GPU node is the real one. The trainer runs in the PyTorch stand-in and checkpoints to fake-gcs-server; the node is
preempted by powering it off through its logind, so the real kubelet's graceful node shutdown fails and stops the
trainer's pod (DisruptionTarget, as on a Spot VM), the Job's podFailurePolicy ignores that failure, and the node
comes back under its name with a fresh disk, where the replacement pod resumes from the bucket.

Every figure is read from what ran: the trainers' own log lines, the pods' and Job's statuses, the bucket's files."""

from __future__ import annotations

import json

from benchmarks.harness import load_result
from benchmarks.labs.g8 import G8Result, parse_progress
from localcluster import bench, nodes


def _condition(obj: dict, kind: str) -> dict | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def test_g8s_trainer_is_preempted_by_the_kubelets_graceful_shutdown_and_resumes_from_the_bucket(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("g8")  # short: the kubelet's Unix sockets live under it
    out = tmp_path / "out"
    code = bench.run("g8", out, 1.0, ["--steps", "14", "--kill-after", "6", "--step-seconds", "1"],
                     folder=tmp_path / "bench", real_node=True)  # fmt: skip
    (folder,) = out.iterdir()
    result = load_result(G8Result, folder)
    assert code == 0, f"g8 did not pass on the real node: {[(c.name, c.evidence) for c in result.checks if not c.passed]}"
    v = {x.name: x for x in result.variants}
    ckpt, none = v["with-checkpoints"], v["without-checkpoints"]

    # The checkpointing trainer saved on SIGTERM the step it had just finished and its successor began after it;
    # the other began again at 0. Both had run at least the steps the benchmark waited for.
    assert ckpt.steps_before >= 6 and none.steps_before >= 6
    assert (ckpt.last_checkpoint, ckpt.resumed_at_step, ckpt.steps_lost) == (ckpt.steps_before - 1, ckpt.steps_before, 0)
    assert (none.resumed_at_step, none.steps_lost) == (0, none.steps_before)
    assert all(0 < x.reschedule_s < x.resume_s for x in result.variants)

    rec = json.loads((folder / "recording.json").read_text())
    pods = {p["metadata"]["name"]: p for s in rec["snapshots"] for p in s["objects"].get("pods", [])}
    first = {x.job: min((p for p in pods.values() if p["metadata"]["labels"]["batch.kubernetes.io/job-name"] == x.job),
                        key=lambda p: p["metadata"]["creationTimestamp"]) for x in result.variants}  # fmt: skip
    assert "checkpoint step" in rec["logs"][first[ckpt.job]["metadata"]["name"]].splitlines()[-1]
    assert rec["logs"][first[ckpt.job]["metadata"]["name"]].splitlines()[-1].endswith(" sigterm")
    for job, pod in first.items():
        # What the real kubelet wrote when logind announced the shutdown: the Job's podFailurePolicy keys on it.
        assert (pod["status"]["phase"], pod["status"]["reason"]) == ("Failed", "Terminated"), job
        disruption = _condition(pod, "DisruptionTarget")
        assert disruption and (disruption["reason"], disruption["message"]) == (
            "TerminationByKubelet", "Pod was terminated in response to imminent node shutdown."), job
        assert pod["spec"]["nodeName"] == nodes.REAL_NODE_NAME
    jobs = {j["metadata"]["name"]: j for s in rec["snapshots"] for j in s["objects"].get("jobs", [])}
    for job in first:
        assert _condition(jobs[job], "Complete") and not jobs[job]["status"].get("failed"), "the preemption spent the backoff"
    assert parse_progress(rec["logs"][max(pods, key=lambda n: pods[n]["metadata"]["creationTimestamp"])]).done

    # The checkpoint is a file of the emulated bucket, which outlived the node's fresh disk.
    bucket = tmp_path / "bench" / "g8" / "cluster" / "state" / "gcs" / "local-checkpoints"
    assert [p.relative_to(bucket).as_posix() for p in bucket.rglob("checkpoint.pt")] == [
        f"benchmarks/{result.run_id}/with-checkpoints/checkpoint.pt"]

    simulation = result.meta.simulation
    assert simulation is not None
    assert "shuts down gracefully as GKE's Spot nodes do" in " ".join(simulation.real)
    simulated = " ".join(simulation.simulated)
    assert "is fake-gcs-server v1.56.1 on this host" in simulated and "a preemption is its PowerOff" in simulated
