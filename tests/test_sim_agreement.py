"""The real-time simulator, driven by the real client (the load generator in its own processes against
`python -m benchmarks.sim` in another, as g6 --sim runs them), against the virtual-clock oracle fed the same
plan; and what a scrape of the simulator's /metrics says over a point."""

from __future__ import annotations

import json

import httpx
import pytest
from oracle_agreement import Band, outside, side_by_side

from benchmarks.g6.config import G6Params
from benchmarks.g6.sweep import Measurement, PointContext, load_spec, measure_point
from benchmarks.g6.targets import ServerSettings, SimTarget
from benchmarks.harness import RunProgress
from benchmarks.loadgen import LocalRunner, LoadSpec, run_load, summarize
from benchmarks.loadgen.core import build_bodies
from benchmarks.metrics.scrape import Scrape, metrics_from_scrapes
from benchmarks.sim.virtual import replay

QWEN_05 = "Qwen/Qwen2.5-0.5B-Instruct"
QWEN_15 = "Qwen/Qwen2.5-1.5B-Instruct"


def _sweep(seed: int, **load) -> tuple[G6Params, SimTarget]:
    """g6 --sim's parameters and target for one point of the sweep's shape (256 in, 128 out), in real time."""
    params = G6Params(target_kind="sim", target="sim", model=QWEN_15, max_num_seqs=[32], speedup=1.0, seed=seed,
                      **{k: [v] for k, v in load.items() if k in ("concurrency", "rate")},
                      requests=load["requests"])  # fmt: skip
    return params, SimTarget(gpu="l4", speedup=1.0, seed=seed, base=ServerSettings(model=QWEN_15))


# real / oracle bands, from 12 seeds per point on this project's 2-core test machine shared with other
# builds (load average 12-20), 4 of them with two more busy processes of ours (client lag p99 up to 119 ms):
# measured ranges in the comments, each band about half as wide again. docs/testing.md has the table.
# TTFT p99 is not banded: over 32 or 48 requests it is their slowest one, which one stall of the host sets
# (a run of this test read 234 ms against the oracle's 57); ITL p99 rests on thousands of gaps.
SWEEP_BANDS = {
    "req/s": Band(0.93, 1.02),  # 0.962..0.996
    "output tok/s": Band(0.93, 1.02),  # 0.962..0.996
    "E2E p50": Band(0.96, 1.05),  # 0.989..1.020
    "ITL p50": Band(0.97, 1.10),  # 1.010..1.054
    "ITL mean": Band(0.98, 1.07),  # 1.010..1.038
    "ITL p90": Band(0.97, 1.8),  # 1.315..1.461
    "ITL p99": Band(0.97, 4.0),  # 1.87..2.85
    # The oracle's waves stay in lockstep (8 prompts prefilled in one 2,048-token step); the host's jitter
    # staggers them across steps, so most real prefills are smaller and faster: 0.664..1.039.
    "TTFT p50": Band(0.5, 1.2),
    "TTFT p90": Band(0.6, 1.4),  # 0.832..1.217
}
POISSON_BANDS = {
    "req/s": Band(0.97, 1.02),  # 0.989..1.002
    "output tok/s": Band(0.97, 1.02),  # 0.989..1.002
    "E2E p50": Band(0.98, 1.06),  # 1.000..1.031
    "ITL p50": Band(0.98, 1.08),  # 1.016..1.042
    "ITL mean": Band(0.98, 1.07),  # 0.997..1.010; 1.034 in a whole-suite run on that machine
    "ITL p90": Band(0.98, 1.9),  # 1.339..1.520
    "ITL p99": Band(0.98, 4.0),  # 1.505..2.254; 3.005 in that whole-suite run
    # Every request waits for the client's send and the server's event loop: the oracle has neither.
    "TTFT p50": Band(0.98, 1.45),  # 1.068..1.229
    "TTFT p90": Band(0.98, 2.2),  # 1.082..1.683
}


@pytest.mark.realtime
def test_a_sweep_point_agrees_with_the_oracle():
    """Closed loop, c=8 (max-num-seqs 32), 256 in / 128 out, 32 counted requests after 8 warm-up ones, x1:
    throughput within 7%, E2E p50 within 5%, ITL p50 and mean within 10% and 7% (SWEEP_BANDS)."""
    params, target = _sweep(seed=11, concurrency=8, requests=32)
    real, oracle = side_by_side(target, ServerSettings(max_num_seqs=32), lambda url: load_spec(params, url, concurrency=8))
    assert real.completed == oracle.completed == 32
    assert outside(real, oracle, SWEEP_BANDS) == []


@pytest.mark.realtime
def test_an_open_loop_poisson_point_agrees_with_the_oracle():
    """Open loop, Poisson 6 req/s (max-num-seqs 32), 256 in / 128 out, 48 counted requests after 6 warm-up
    ones, x1: throughput within 3%, E2E p50 within 6%, ITL p50 and mean within 8% and 7%, TTFT p50 at most
    45% above (POISSON_BANDS)."""
    params, target = _sweep(seed=12, rate=6.0, requests=48)
    real, oracle = side_by_side(target, ServerSettings(max_num_seqs=32), lambda url: load_spec(params, url, rate=6.0))
    assert real.completed == oracle.completed == 48
    assert outside(real, oracle, POISSON_BANDS) == []


def _scrape(url: str) -> Scrape:
    return Scrape(0.0, httpx.get(f"{url}/metrics", timeout=10).text)


def test_a_scrape_before_and_after_a_point_counts_exactly_its_prefix_lookups():
    """vllm:prefix_cache_queries_total and vllm:prefix_cache_hits_total (v0.34.0's names) read before and
    after a point: their increase is that point's prompt tokens (its warm-up's included) and the hits the
    bodies' shared prefixes make, counted by hand from the bodies; a second point on the same server reads
    only its own. The virtual-clock replay of the same plans counts the same."""
    target = SimTarget(gpu="l4", speedup=10.0, seed=0, base=ServerSettings(model=QWEN_05))
    settings = ServerSettings(max_model_len=2048)
    deltas, expected = [], []
    with target.serving(settings) as server:
        for seed in (1, 2):
            # One at a time, so a group's first request has finished its prefill before the next looks.
            spec = LoadSpec(base_url=server.base_url, model=QWEN_05, concurrency=1, requests=6, input_len=40, output_len=2,
                            prefix_len=64, prefix_groups=2, seed=seed)  # fmt: skip
            before = _scrape(server.base_url)
            run_load(spec)
            after = _scrape(server.base_url)
            m = metrics_from_scrapes([before, after])
            deltas.append((m.prefix_cache_queries, m.prefix_cache_hits))
            prompts = [json.loads(b)["prompt"] for b in build_bodies(spec.plan())]
            hits = sum(64 if any(q[:64] == p[:64] for q in prompts[:i]) else 0 for i, p in enumerate(prompts))
            expected.append((float(sum(map(len, prompts))), float(hits)))
            replayed = replay(spec.plan(), target.config(settings))
            oracle = replayed.metrics(-1.0, replayed.end_s + 1)
            assert (oracle.prefix_cache_queries, oracle.prefix_cache_hits) == expected[-1]
    assert deltas == expected == [(7 * 104.0, 5 * 64.0)] * 2


def test_requests_over_the_context_are_counted_errors_of_the_point():
    """Prompt + forced output over max-model-len: vLLM v0.34.0 refuses each with HTTP 400 (min_tokens above
    the max_tokens it clamps to the context). The load generator counts them as failures, kept out of the
    latencies, and the point's errors say so (no "Errors: None"). Stopping at EOS instead, the same lengths
    are no error: the server clamps max_tokens to what the prompt leaves."""
    params = G6Params(target_kind="sim", target="sim", model=QWEN_05, concurrency=[2], max_model_len=2048, speedup=10.0)
    target = SimTarget(gpu="l4", speedup=10.0, seed=0, base=ServerSettings(model=QWEN_05, max_model_len=2048))
    how = Measurement(runner=LocalRunner(), prom=None, progress=RunProgress(enabled=False), price=None)
    with target.serving(ServerSettings()) as server:
        # No max_model_len in the spec: the client does not clip the lengths to the context.
        forced = LoadSpec(base_url=server.base_url, model=QWEN_05, concurrency=2, requests=4, input_len=2000, output_len=100)
        point, errors, _ = measure_point(params, forced, server, "c=2", PointContext(None, None), how)
        stopping = forced.model_copy(update={"eos": True})
        clamped = summarize(run_load(stopping), stopping)
    assert point.failed == 4 and point.completed == 0 and point.failures == {"http_400": 4}
    assert point.ttft_ms is None and point.output_tokens_per_s == 0
    assert errors == ["c=2: 4 failed requests {'http_400': 4}"]
    assert clamped.failed == 0 and clamped.completed == 4
    assert clamped.realised.output_tokens.p99 <= 2048 - 2000 and clamped.realised.input_tokens.mean == 2000
