"""Where a cold start's minutes go, read from API objects, events and logs in their real shapes
(tests/cold_start_fixtures.py): vLLM from zero, the same listed out of order, a warm node that holds
the image, an image that never pulls, a spot stock-out; and Triton's start-up for g5."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from benchmarks.kube.phases import TRITON_LOG, VLLM_LOG, extract, glog_time, phase_names, vllm_time
from tests import cold_start_fixtures as fx


def _phases(case: dict) -> tuple:
    got = extract(case["pod"], case["node"], case["events"], case["log"], VLLM_LOG, container="vllm",
                  sent=case["sent"], first_token=case["first_token"])  # fmt: skip
    return got, {p.name: p.seconds for p in got.phases}


# By hand from the fixture's timeline: the request at 10:00:00.4; the API's whole seconds after it
# (pod 10:00:01, TriggeredScaleUp :12, node created :47, Ready 10:01:17, scheduled 10:02:52, Pulling
# :55, Pulled 10:05:26, started :29); vLLM's log seconds (Starting to load 10:05:45, download done
# 10:06:17, loaded :19, engine :56); pod Ready 10:07:08; first token 10:07:09.7.
FROM_ZERO = {
    "pod created": 0.6, "scale-up triggered": 11.0, "node created": 35.0, "node ready": 30.0,
    "GPU allocatable": 95.0, "pod sandbox": 3.0, "image pulled": 151.0, "container started": 3.0,
    "server process up": 16.0, "weights downloaded": 32.0, "weights loaded": 2.0, "engine warmed up": 37.0,
    "engine ready (/health)": 12.0, "first token": 1.7,
}  # fmt: skip


@pytest.mark.parametrize("case", [fx.from_zero, fx.out_of_order], ids=["in order", "out of order"])
def test_a_cold_start_from_zero_is_timed_phase_by_phase(case):
    got, seconds = _phases(case())
    assert seconds == FROM_ZERO
    assert [p.name for p in got.phases] == list(FROM_ZERO)  # in the order they happen
    assert got.total_s == pytest.approx(429.3)  # 10:00:00.4 -> 10:07:09.7
    assert got.total_s == pytest.approx(sum(FROM_ZERO.values()))  # the phases add up to the wait
    assert got.image_bytes == 9834711221  # the kubelet's "Image size"
    assert (got.failure, got.node_was_up, got.node) == (None, False, fx.NODE)


def test_a_repeated_event_counts_from_its_first_time_and_a_retried_pull_does_not_move_the_start():
    got, _ = _phases(fx.out_of_order())
    pull = next(p for p in got.phases if p.name == "image pulled")
    assert pull.start == datetime(2026, 12, 1, 10, 2, 55, tzinfo=timezone.utc)  # the first Pulling, not the retry


def test_a_warm_node_holding_the_image_skips_the_scale_up_and_the_pull_and_says_why():
    got, seconds = _phases(fx.image_present())
    skipped = {p.name: p.skipped for p in got.phases if p.skipped}
    assert set(skipped) == {"scale-up triggered", "node created", "node ready", "pod sandbox", "image pulled",
                            "weights downloaded"}  # fmt: skip
    assert "already up" in skipped["node ready"] and "already on the node" in skipped["image pulled"]
    assert "0.5 s" in skipped["weights downloaded"]
    # Without the download line its time falls to the load: 10:00:21 (started :05) -> 10:00:55.
    assert seconds["weights loaded"] == 34.0
    assert got.node_was_up and got.image_bytes is None and got.failure is None
    assert got.total_s == pytest.approx(105.3)


def test_an_image_that_never_pulls_is_named_with_the_kubelets_reason():
    got, seconds = _phases(fx.pull_backoff())
    assert got.failure.startswith("the image did not pull (ImagePullBackOff): Failed to pull image")
    assert "not found" in got.failure
    assert seconds["node ready"] == 30.0 and seconds["image pulled"] is None
    assert got.total_s == pytest.approx(174.6)  # up to the last moment seen: the pull started


def test_a_spot_stock_out_is_named_as_the_failed_scale_up():
    got, seconds = _phases(fx.stock_out())
    assert got.failure == ("the node scale-up failed (cluster-autoscaler FailedScaleUp): GCE out of resources "
                           "(a stock-out: no capacity for this machine type in the zone)")  # fmt: skip
    assert seconds["scale-up triggered"] == 11.0
    assert next(p for p in got.phases if p.name == "node created").skipped == "no node came up for the pod"


def test_without_a_request_time_the_clock_starts_at_the_pods_creation():
    case = fx.from_zero()
    got = extract(case["pod"], case["node"], case["events"], case["log"], VLLM_LOG, container="vllm")
    first = got.phases[0]
    assert first.name == "pod created" and first.seconds is None and "no request time" in first.skipped
    assert got.total_s == pytest.approx(428.0 - 1.0)  # pod 10:00:01 -> Ready 10:07:08; no first token


def test_log_times_take_the_containers_year_and_cross_new_year():
    started = datetime(2026, 12, 31, 23, 59, 50, tzinfo=timezone.utc)
    line = "\x1b[1;36m(EngineCore_DP0 pid=245)\x1b[0;0m INFO 01-01 00:00:12 [core.py:251] init engine"
    assert vllm_time(line, started) == datetime(2027, 1, 1, 0, 0, 12, tzinfo=timezone.utc)
    assert glog_time("I1130 09:05:44.108820 1 model_lifecycle.cc:815] successfully loaded 'cifar10'",
                     datetime(2026, 11, 30, 9, 5, 0, tzinfo=timezone.utc)) == datetime(
        2026, 11, 30, 9, 5, 44, 108820, tzinfo=timezone.utc)  # fmt: skip


def test_triton_has_its_own_server_phase():
    assert phase_names(TRITON_LOG)[8:] == ["model loaded", "engine ready (/health)", "first token"]
