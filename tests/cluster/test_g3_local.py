"""`make g3-local` as a test: g3's benchmark, unchanged (`python -m benchmarks g3 --outputs FILE`),
against a local cluster of its own shaped like g3's pools, after the lab's real `pulumi up` through the
engine: the real kube-scheduler, Kueue 0.19.2 and JobSet 0.12.0 decide; kwok plays the nodes and pods
(a worker pod Succeeds 20 s after it starts, the benchmark's --work-seconds; no container runs).

It writes g3's result.json, its meta saying what was real and what simulated; it shows the gang
contrast (with Kueue two jobs admitted whole and the third waiting with no pod, without Kueue every job
partly placed); and what the controllers wrote has the shapes of the checked-in run
(examples/g3-local/recording.json), so that example and the shipped fixture it is compared with
(tests/test_labs_g3.py) stay honest."""

from __future__ import annotations

import json

from benchmarks.harness import load_result
from benchmarks.labs.g3 import G3Result
from localcluster import bench
from localcluster.build import REPO
from tests import g3_shapes

CHECKED_IN = REPO / "examples" / "g3-local" / "recording.json"
WORK_S = 20


def test_g3s_benchmark_on_the_local_cluster_shows_the_gang_contrast_and_says_what_was_simulated(tmp_path):
    out = tmp_path / "out"
    code = bench.run("g3", out, WORK_S, ["--work-seconds", str(WORK_S)], folder=tmp_path / "bench")
    (folder,) = out.iterdir()
    result = load_result(G3Result, folder)
    assert code == (0 if result.passed else 1), "the benchmark could not run: see its output above"
    passed = {c.name: c.passed for c in result.checks}
    assert passed["with Kueue: 2 jobs admitted whole while 1 waited for quota"], result.checks
    assert passed["with Kueue: never more jobs admitted than the quota covers, no pod of a waiting job"], result.checks
    assert passed["with Kueue: the waiting job admitted once another finished"], result.checks
    assert passed["without Kueue: jobs partly placed, GPUs held by workers that could not start"], result.checks
    assert result.default_scheduler.max_holding == 6  # every shared GPU of the L4 held

    simulation = result.meta.simulation
    assert simulation is not None
    real = " ".join(simulation.real)
    assert "kueue v0.19.2 controller manager (sigs.k8s.io/kueue)" in real
    assert "jobset v0.12.0 controller manager (sigs.k8s.io/jobset)" in real
    assert "kube-scheduler v1.35.4 (k8s.io/kubernetes)" in real
    assert any(line.startswith("2 nodes by kwok v0.8.0") for line in simulation.simulated)
    assert any(f"a Job's pod Succeeded {WORK_S} s later" in line for line in simulation.simulated)
    assert "## What was real and what was simulated" in (folder / "report.md").read_text()

    fresh = json.loads((folder / "recording.json").read_text())
    checked_in = json.loads(CHECKED_IN.read_text())
    assert g3_shapes.stable(fresh) == g3_shapes.stable(checked_in)
    assert g3_shapes.workload_orders(fresh) == g3_shapes.workload_orders(checked_in)
