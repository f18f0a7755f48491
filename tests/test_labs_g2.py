"""g2: time-sliced GPU pods, their iteration logs and the fit/contention measurement."""

from __future__ import annotations

import json

import pytest
import schemas
from labs_fakes import fixture_outputs, recording_path

from benchmarks.kube.errors import LabError
from benchmarks.kube.record import Recording, load_recording
from benchmarks.labs import g2


@pytest.fixture(scope="module")
def rec() -> Recording:
    return load_recording(recording_path("g2"))


def test_round_pods_request_one_shared_gpu_each_and_validate():
    objs = g2.build_workloads(fixture_outputs("g2"), "g2-0000-abcd", pods=3, round_no=1, duration_s=30)
    assert [o["kind"] for o in objs] == ["ConfigMap", "Pod", "Pod", "Pod"]
    for obj in objs:
        schemas.validate_object(obj)
    for pod in objs[1:]:
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        # One shared GPU each, and no CPU limit: it would throttle the loop whose latency is measured.
        assert limits["nvidia.com/gpu"] == "1" and "cpu" not in limits
        assert pod["metadata"]["labels"][g2.ROUND_LABEL] == "1"
    assert [o["kind"] for o in g2.build_workloads(fixture_outputs("g2"), "g2-0000-abcd", 2, round_no=2)] == ["Pod", "Pod"]


def test_parse_iterations_skips_other_lines():
    text = "ready t=1764435000.000\niter 0 t=1764435000.152 ms=152.0\nWarning: x\niter 1 t=1764435000.304 ms=151.5\n"
    assert g2.parse_iterations(text) == [(0, 1764435000.152, 152.0), (1, 1764435000.304, 151.5)]


def test_recorded_objects_have_the_api_shapes(rec):
    for obj in [o for s in rec.snapshots for v in s.objects.values() for o in v] + rec.events:
        schemas.validate_object(obj)


def test_fit_and_contention_from_the_recording(rec):
    result = g2.measure(rec)
    assert result.passed, result.checks
    running = [r.running for r in result.rounds]
    assert running == [1, 2, 3, 4] and result.rounds[-1].pods == 5
    latencies = [r.mean_latency_ms for r in result.rounds]
    assert latencies == sorted(latencies)  # sharing adds no capacity: each pod slows as more join
    assert all(r.window_s and r.window_s > 0 for r in result.rounds)


def test_latency_counts_only_the_overlap_window():
    info = {"round": 2, "pods": 2, "dcgm": None}
    pods = {n: {"metadata": {"name": n, "labels": {g2.ROUND_LABEL: "2"}}, "status": {"phase": "Succeeded"}} for n in "ab"}
    logs = {
        "a": "iter 0 t=100.0 ms=10\niter 1 t=101.0 ms=20\niter 2 t=102.0 ms=20\niter 3 t=110.0 ms=10\n",
        "b": "iter 0 t=101.0 ms=20\niter 1 t=102.0 ms=20\n",
    }
    r = g2._round(info, pods, logs)
    assert r.window_s == 1.0 and r.latency_ms == {"a": 20.0, "b": 20.0}


def test_all_pods_running_fails_the_pending_check(rec):
    raw = json.loads(rec.model_dump_json())
    extra = next(iter(g2.measure(rec).rounds[-1].pending))
    raw["logs"][extra] = raw["logs"][next(k for k in raw["logs"] if k.startswith("g2-r4-p0"))]
    assert not g2.measure(Recording.model_validate(raw)).checks[1].passed


def test_a_stack_without_sharing_is_refused():
    outputs = fixture_outputs("g2")
    outputs["benchmark"]["gpu_sharing"]["allocatable_gpus_per_node"] = 1
    with pytest.raises(LabError, match="nothing is shared"):
        g2.check_outputs(outputs)


def test_pod_count_axis_has_whole_pods_only(tmp_path, monkeypatch):
    from benchmarks.labs import plotting

    figures = []
    monkeypatch.setattr(plotting.plt, "close", figures.append)
    assert g2.plots(g2.measure(load_recording(recording_path("g2"))), tmp_path) == ["latency_vs_pods.png"]
    (fig,) = figures
    ax = fig.axes[0]
    lo, hi = ax.get_xlim()
    ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
