"""The g6 method: fresh prompts at every point, figures read at steady state, intervals that hold across
reruns, and the server's prefix-cache counters as the witness that no point reused another's prompts."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks.g6 import main
from benchmarks.g6.config import G6Params
from benchmarks.g6.result import G6Result
from benchmarks.g6.sweep import Measurement, PointContext, load_spec, load_specs, measure_point
from benchmarks.g6.targets import ServerSettings, SimTarget
from benchmarks.harness import RunProgress, load_result
from benchmarks.loadgen import LoadRun, LoadSpec, LocalRunner, Record
from benchmarks.loadgen import core
from benchmarks.loadgen.reruns import rerun
from benchmarks.loadgen.steady import steady_state

QWEN_05 = "Qwen/Qwen2.5-0.5B-Instruct"
BLOCK = 16  # the prefix cache's unit (vLLM's and the simulator's block size)


def _blocks(body: bytes) -> set[tuple[int, ...]]:
    """Every full 16-token block of a completion prompt, with what precedes it (a prefix cache's key)."""
    ids = json.loads(body)["prompt"]
    return {tuple(ids[: (k + 1) * BLOCK]) for k in range(len(ids) // BLOCK)}


def _params(**kw) -> G6Params:
    return G6Params(**{"target_kind": "sim", "target": "sim", "model": QWEN_05, "concurrency": [1, 8], **kw})


def test_every_point_of_a_sweep_and_every_repeat_sends_prompts_of_its_own():
    """A prefix cache can only help a point that repeats a block another point sent: none does, nor a
    point's warm-up and its counted requests."""
    params = _params(requests=16)
    points = [spec for repeat in range(2) for spec in load_specs(params, "http://x:1", "max-num-seqs", 8, "repeat", repeat)]
    assert len({spec.seed for spec in points}) == 4
    seen: list[set] = []
    for spec in points:
        plan = spec.plan()
        bodies = core.build_bodies(plan)
        warm = set().union(*(_blocks(b) for b in bodies[: plan.warmup]))
        counted = set().union(*(_blocks(b) for b in bodies[plan.warmup :]))
        assert warm and counted and not warm & counted
        seen.append(warm | counted)
    assert all(not a & b for k, a in enumerate(seen) for b in seen[k + 1 :])
    # The same run sends the same prompts again: a rerun with the same --seed is the same experiment.
    again = load_specs(params, "http://x:1", "max-num-seqs", 8, "repeat", 0)
    assert [s.seed for s in again] == [s.seed for s in points[:2]]


def test_a_counted_prompt_does_not_depend_on_the_warm_up_before_it():
    short, long = (LoadSpec(base_url="http://x:1", model="m", concurrency=2, requests=5, warmup=w, seed=9) for w in (1, 4))
    assert core.build_bodies(short.plan())[1:] == core.build_bodies(long.plan())[4:]


def test_every_request_carries_a_seed_of_its_own_and_stays_greedy():
    """The seed decides a sampling server's output (and the simulator's EOS stand-in) from the request
    alone; at temperature 0 vLLM samples greedily whatever it says."""
    spec = LoadSpec(base_url="http://x:1", model="m", concurrency=2, requests=50, warmup=2, seed=3, eos=True)
    bodies = [json.loads(b) for b in core.build_bodies(spec.plan())]
    assert len({b["seed"] for b in bodies}) == 52 and all(b["temperature"] == 0.0 for b in bodies)
    assert all(0 <= b["seed"] < 2**31 for b in bodies)


def test_the_rerun_interval_is_students_prediction_interval_for_a_mean_of_as_many():
    """[1, 2, 3]: mean 2, s = 1, t(0.975, 2) = 4.303 (any t table), half-width 4.303 * sqrt(2/3) = 3.513."""
    r = rerun([1.0, 2.0, 3.0], signed=True)
    assert (r.mean, r.n) == (2.0, 3) and r.lo == pytest.approx(2 - 3.5134, abs=1e-3) and r.hi == pytest.approx(5.5134, abs=1e-3)
    # A rate or a latency cannot go below zero; one run has no interval at all.
    assert rerun([1.0, 2.0, 3.0]).lo == 0.0
    one = rerun([7.0])
    assert (one.mean, one.lo, one.hi) == (7.0, None, None) and rerun([None]) is None


def _fcfs(rate: float, capacity: float, seconds: float) -> LoadRun:
    """Arrivals every 1/rate s served one at a time for 1/capacity s each, first come first served."""
    records, free = [], 0.0
    for i in range(round(rate * seconds)):
        sent = i / rate
        start = max(sent, free)
        free = start + 1 / capacity
        records.append(Record(i, sent, sent, start + 0.5 / capacity, free, [start + 0.5 / capacity], 1, None, 8))
    return LoadRun(records=records, warmup=[], stopped_by="requests", wall_offset=0.0, client={})


def test_a_server_that_keeps_up_serves_the_offered_rate_and_its_queue_stays_flat():
    spec = LoadSpec(base_url="http://x:1", model="m", rate=10.0, requests=600)
    s = steady_state(_fcfs(10.0, 20.0, 60.0), spec)
    # Arrivals every 0.1 s, each done 0.05 s later: the ramp is 20% of the 59.9 s of arrivals.
    assert s.start_s == pytest.approx(0.2 * 59.9) and s.end_s == pytest.approx(59.9)
    assert s.requests_per_s == pytest.approx(10.0, rel=0.01) and s.offered_per_s == pytest.approx(10.0, rel=0.01)
    assert abs(s.in_system_growth_per_s) < 0.01 and s.in_system_mean == pytest.approx(0.5, abs=0.05)
    assert s.output_tokens_per_s == pytest.approx(10.0, rel=0.01)


def test_a_server_past_its_capacity_serves_its_capacity_and_its_queue_grows_at_the_difference():
    """20 arriving a second, 10 served: the requests in the system grow by 10 a second, whatever the offered
    rate says."""
    spec = LoadSpec(base_url="http://x:1", model="m", rate=20.0, requests=1200)
    s = steady_state(_fcfs(20.0, 10.0, 60.0), spec)
    assert s.requests_per_s == pytest.approx(10.0, rel=0.01) and s.offered_per_s == pytest.approx(20.0, rel=0.01)
    assert s.in_system_growth_per_s == pytest.approx(10.0, rel=0.01) and s.growth_share == pytest.approx(0.5, rel=0.01)
    # Request i waits i/10 - i/20 = i/20 s: TTFT grows 1 s per second of arrivals (1000 ms/s).
    assert s.ttft_growth_ms_per_s == pytest.approx(1000.0, rel=0.01)


@pytest.fixture(scope="module")
def sim_05():
    target = SimTarget(gpu="l4", speedup=4.0, seed=1, base=ServerSettings(model=QWEN_05, max_model_len=2048))
    with target.serving(ServerSettings(max_num_seqs=16)) as server:
        yield server


def test_a_point_sent_prompts_another_point_sent_is_flagged_by_the_servers_own_counters(sim_05):
    """The simulator caches prefixes (on by default, as vLLM's V1 engine): a point sent twice hits on its
    second run, and the error names it; a point of its own hits nothing."""
    params = _params(speedup=4.0, scrape_interval_s=0.2)
    how = Measurement(LocalRunner(), None, RunProgress(enabled=False), None)
    fresh = load_spec(params, sim_05.base_url, concurrency=4, requests=12, input_len=256, output_len=4, seed=101)
    first = measure_point(params, fresh, sim_05, "first", PointContext(16, None), how)
    again = measure_point(params, fresh, sim_05, "again", PointContext(16, None), how)
    other = measure_point(params, fresh.model_copy(update={"seed": 102}), sim_05, "other", PointContext(16, None), how)
    assert first.point.server.prefix_cache_hit_rate < 0.01 and first.errors == []
    assert other.point.server.prefix_cache_hit_rate < 0.01 and other.errors == []
    # 256-token prompts: 15 of their 16 blocks can hit (the last token is computed again).
    assert again.point.server.prefix_cache_hit_rate > 0.9
    assert again.errors and "again: " in again.errors[0] and "prefix-cache hits" in again.errors[0]


@pytest.mark.realtime
def test_a_sweep_on_the_simulator_hits_no_prefix_cache_at_any_point(tmp_path):
    """Before prompts were seeded per point, the sweep's c=8 point was 88.7% cache hits."""
    rc = main(["--sim", "--model", QWEN_05, "--max-num-seqs", "8", "--concurrency", "1,8", "--requests", "16",
               "--repeats", "2", "--speedup", "8", "--scrape-interval", "0.2", "--quiet", "--out", str(tmp_path)])  # fmt: skip
    assert rc == 0
    (folder,) = tmp_path.iterdir()
    result = load_result(G6Result, folder)
    assert len(result.points) == 4 and len({p.seed for p in result.points}) == 4
    assert all(p.server.prefix_cache_queries > 0 and p.server.prefix_cache_hit_rate < 0.01 for p in result.points)
    assert result.meta.errors == []
    # The answer is each point over its two runs: their mean, with Student's interval for a rerun's mean.
    for f in result.across:
        runs = [p.output_tokens_per_s for p in result.points if p.concurrency == f.concurrency]
        mean, half = sum(runs) / 2, 12.706 * abs(runs[0] - runs[1]) / math.sqrt(2)
        assert f.runs == 2 and f.output_tokens_per_s.mean == pytest.approx(mean)
        assert f.output_tokens_per_s.hi == pytest.approx(mean + half)
    assert "## The answer: every point over its 2 runs" in (folder / "report.md").read_text()
