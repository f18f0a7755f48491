"""`make lab-local LAB=g3` as a test: g3's benchmark, unchanged (`python -m benchmarks g3 --outputs FILE`),
against a local cluster of its own shaped like g3's pools, after the lab's real `pulumi up` through the
engine: the real kube-scheduler, Kueue 0.19.2 and JobSet 0.12.0 decide, and the GPU node is the real one,
whose kubelet runs every worker's barrier script (scripts/barrier.py) in the Python stand-in.

It writes g3's result.json, its meta saying what was real and what simulated; it shows the gang contrast
from the workers' own log lines (with Kueue every job's barrier released, without it every job partly
placed until its coordinator gave up at the rendezvous timeout); and every condition the controllers and
the kubelet wrote is one the shipped fixture (tests/data/labs/g3/) has, so examples/g3 stays honest.
(examples/g3-local is the same benchmark with kwok's pods, recorded before the real node existed.)"""

from __future__ import annotations

import json

from benchmarks.harness import load_result
from benchmarks.labs.g3 import G3Result
from localcluster import bench, nodes
from tests import condition_shapes, g3_recording

WORK_S = 20


def test_g3s_workers_run_their_barrier_for_real_and_show_the_gang_contrast_in_their_own_logs(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("g3")  # short: the kubelet's Unix sockets live under it
    out = tmp_path / "out"
    code = bench.run("g3", out, WORK_S, ["--work-seconds", str(WORK_S)], folder=tmp_path / "bench", real_node=True)
    (folder,) = out.iterdir()
    result = load_result(G3Result, folder)
    assert code == 0, [(c.name, c.evidence) for c in result.checks if not c.passed]

    # With Kueue: every job whole on the real node, every worker released by worker 0's barrier, as it logged.
    kueue_workers = [w for job in result.kueue.jobs for w in job.workers]
    assert len(kueue_workers) == 9 and {w.node for w in kueue_workers} == {nodes.REAL_NODE_NAME}
    assert all(w.released is not None and w.gave_up is None for w in kueue_workers)
    # Without: 2 of 3 workers of each job held the 6 shared GPUs until the coordinators gave up at the timeout.
    scheduler = result.default_scheduler
    assert scheduler.max_holding == 6 and scheduler.deadlock is not None
    assert sorted(scheduler.deadlock.placed.values()) == [2, 2, 2]
    assert "gave up" in scheduler.deadlock.ended_by and "rendezvous timeout" in scheduler.deadlock.ended_by
    assert [j.outcome for j in scheduler.jobs] == ["Failed"] * 3
    gave_up = [w for job in scheduler.jobs for w in job.workers if w.gave_up is not None]
    assert gave_up and all(w.released is None for w in gave_up)

    simulation = result.meta.simulation
    assert simulation is not None
    real = " ".join(simulation.real)
    assert "kueue v0.19.2 controller manager (sigs.k8s.io/kueue)" in real
    assert "jobset v0.12.0 controller manager (sigs.k8s.io/jobset)" in real
    assert f"{nodes.REAL_NODE_NAME}: kubelet and kube-proxy" in real

    fresh = condition_shapes.stable(json.loads((folder / "recording.json").read_text()))
    built = condition_shapes.shapes(json.loads(g3_recording.PATH.read_text()))
    assert fresh <= built, sorted(fresh - built)
