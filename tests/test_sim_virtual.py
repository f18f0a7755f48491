"""The virtual-clock oracle (benchmarks/sim/virtual.py) against what is not the engine: hand arithmetic
from the cost model's published constants and the model's and GPU's published figures, Little's law, the
bodies the load generator sends; its determinism; and a change of the plan reaching its answer."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from benchmarks.g6.config import G6Params
from benchmarks.g6.experiments.kv import probe_spec
from benchmarks.g6.experiments.prefix import PrefixParams, prefix_spec
from benchmarks.g6.experiments.saturation import point_spec
from benchmarks.g6.sweep import load_spec
from benchmarks.g6.targets import ServerSettings, SimTarget
from benchmarks.loadgen import LoadSpec, summarize
from benchmarks.loadgen.core import arrival_offsets, build_bodies
from benchmarks.sim import SimConfig
from benchmarks.sim.cli import main
from benchmarks.sim.virtual import replay

QWEN_05 = "Qwen/Qwen2.5-0.5B-Instruct"
QWEN_15 = "Qwen/Qwen2.5-1.5B-Instruct"

# Qwen2.5-0.5B-Instruct as its config.json and safetensors publish it, on an L4 (NVIDIA's datasheet:
# 300 GB/s, 121 TFLOP/s dense bf16), with the cost model's constants as docs/calibration.md states them.
PARAMS = 494_032_768  # safetensors total (embedding tied with the output projection)
LAYERS, HIDDEN, INTERMEDIATE, HEADS, KV_HEADS, HEAD_DIM = 24, 896, 4864, 14, 2, 64
SMALL = LAYERS * (2 * HIDDEN + (HEADS + 2 * KV_HEADS) * HEAD_DIM) + HIDDEN  # norms and q/k/v biases: no matmul
WEIGHT_BYTES = 2 * PARAMS
KV_PER_TOKEN = 2 * LAYERS * KV_HEADS * HEAD_DIM * 2
ACTIVATION_BYTES_PER_TOKEN = (INTERMEDIATE + HIDDEN) * LAYERS * 7 * 2  # 7 elementwise passes, bf16
BANDWIDTH, ACHIEVED, FLOPS, COMPUTE_EFF = 300e9, 0.77, 121e12, 0.6
STEP_OVERHEAD, PER_SEQUENCE, REQUEST_OVERHEAD = 0.8e-3, 38e-6, 20e-3


def _step(new: int, cached: int) -> tuple[float, float]:
    """(duration, bytes moved) of one sequence's step, by hand from costs.py's docstring."""
    moved = WEIGHT_BYTES + (cached + 2 * new) * KV_PER_TOKEN + new * ACTIVATION_BYTES_PER_TOKEN
    attended = new * cached + new * (new + 1) / 2
    flops = 2 * (PARAMS - SMALL) * new + 4 * LAYERS * HEADS * HEAD_DIM * attended
    compute = flops / (FLOPS * COMPUTE_EFF) + new * ACTIVATION_BYTES_PER_TOKEN / (BANDWIDTH * ACHIEVED)
    return STEP_OVERHEAD + PER_SEQUENCE + max(moved / (BANDWIDTH * ACHIEVED), compute), moved


def _spec(**kw) -> LoadSpec:
    defaults = dict(base_url="http://virtual", model=QWEN_05, concurrency=1, requests=1, warmup=0, input_len=100, output_len=3)
    return LoadSpec(**{**defaults, **kw})


def test_one_request_by_hand():
    """TTFT = the API server's 20 ms + the 100-token prefill step (memory-bound at this size: 1.18 GB moved,
    5.96 ms); each next token one decode step at batch 1 (0.99 GB of weights and KV, 5.13 ms)."""
    run = replay(_spec().plan(), SimConfig(model=QWEN_05, max_model_len=2048)).run
    (record,) = run.records
    prefill, _ = _step(100, 0)
    second, _ = _step(1, 100)
    third, _ = _step(1, 101)
    assert record.ok and record.output_tokens == 3 and record.input_tokens == 100
    assert record.first_token - record.scheduled == pytest.approx(REQUEST_OVERHEAD + prefill, rel=1e-9)
    assert [b - a for a, b in zip(record.chunk_times, record.chunk_times[1:])] == pytest.approx([second, third], rel=1e-9)
    assert record.end == record.chunk_times[-1]
    assert prefill == pytest.approx(5.964e-3, abs=1e-6) and second == pytest.approx(5.129e-3, abs=1e-6)


def test_dram_active_is_bytes_moved_over_what_peak_bandwidth_moves_by_hand():
    """One decode step at batch 1 moves 0.991 GB in 5.13 ms: 193 GB/s of the L4's 300, DRAM active 0.644.
    The roofline's memory time over the step (4.29 of 5.13 ms, 0.837) is not NVIDIA's figure: the achieved
    bandwidth (77% of peak) is not a busy interface for the missing 23%."""
    replayed = replay(_spec().plan(), SimConfig(model=QWEN_05, max_model_len=2048))
    (record,) = replayed.run.records
    duration, moved = _step(1, 101)  # the step that makes the third token
    metrics = replayed.metrics(record.chunk_times[1], record.chunk_times[2])
    assert metrics.dram_active.mean == pytest.approx(moved / (BANDWIDTH * duration), rel=1e-6)
    assert metrics.dram_active.mean == pytest.approx(0.644, abs=1e-3)
    assert metrics.sm_active.mean == pytest.approx(1.0) and metrics.gpu_util.mean == pytest.approx(100.0)


def test_littles_law_on_an_open_loop_point():
    """Requests in flight = arrival rate x time in the system, from the client's records (in flight against
    req/s x E2E) and from the server's own gauges (running + waiting against req/s x the time from reaching
    the engine to the end, E2E less the API server's 20 ms): within 2%, the window's edges."""
    spec = _spec(model=QWEN_15, rate=6.0, requests=300, warmup=0, input_len="lognormal:300,200", output_len=128, eos=True,
                 concurrency=None)  # fmt: skip
    replayed = replay(spec.plan(), SimConfig(model=QWEN_15, max_model_len=4096))
    stats, server = replayed.point(spec)
    assert stats.completed == 300 and server is not None
    e2e_s = stats.e2e_ms.mean / 1000
    assert stats.in_flight_mean == pytest.approx(stats.requests_per_s * e2e_s, rel=0.02)
    assert server.running.mean + server.waiting.mean == pytest.approx(stats.requests_per_s * (e2e_s - REQUEST_OVERHEAD), rel=0.02)
    assert server.running.mean > 5  # a point with a batch, not one request at a time


def test_the_same_plan_gives_the_same_records_and_a_changed_plan_a_changed_answer():
    """Each field of a plan reaches the answer the way a server would show it; the replay is a function of
    the plan alone."""
    config = SimConfig(model=QWEN_05, max_model_len=2048)
    base = _spec(concurrency=4, requests=24, warmup=4, input_len=200, output_len=32)
    plan = base.plan()

    def run(p=plan, c=config):
        return replay(p, c).run

    first = run()
    assert run() == first
    ttft = lambda r: summarize(r, base).ttft_ms.p50  # noqa: E731
    tps = lambda r: summarize(r, base).output_tokens_per_s  # noqa: E731
    assert tps(run(replace(plan, concurrency=8))) > 1.3 * tps(first)  # twice the batch, one weight read a step
    assert ttft(run(replace(plan, input_lens=[800] * plan.total))) > 1.5 * ttft(first)  # 4x the prefill after 20 ms
    assert sum(r.output_tokens for r in run(replace(plan, output_lens=[8] * plan.total)).records) == 24 * 8
    assert len(run(replace(plan, warmup=8, requests=20)).warmup) == 8
    stopped = run(replace(plan, duration_s=0.3))
    assert stopped.stopped_by == "duration" and 0 < len(stopped.records) < 24
    eos = run(replace(plan, eos=True))
    assert all(r.ok for r in eos.records) and sum(r.output_tokens for r in eos.records) < 24 * 32
    # EOS stops follow each request's own tokens, never the order requests arrive in.
    assert [r.output_tokens for r in eos.records] == [r.output_tokens for r in run(replace(plan, eos=True, concurrency=2)).records]
    assert [r.output_tokens for r in run(replace(plan, eos=True, seed=1)).records] != [r.output_tokens for r in eos.records]
    # Open loop: sent when the load generator's workers send them (its own schedule of the plan).
    poisson = replace(plan, concurrency=None, rate=50.0)
    open_loop = run(poisson)
    assert [r.scheduled for r in (*open_loop.warmup, *open_loop.records)] == arrival_offsets(poisson)
    assert run(c=config.model_copy(update={"max_num_seqs": 1})) != first
    assert summarize(run(c=config.model_copy(update={"speedup": 4.0})), base, 4.0).ttft_ms.p50 == pytest.approx(ttft(first))


def test_the_prefix_cache_hits_what_the_bodies_share():
    """Two groups with a 100-token prefix each, one request at a time: after a group's first request,
    each hits the prefix's 6 full blocks (96 tokens), counted by hand from the bodies the load generator
    sends (their token ids), not from any description of the plan."""
    spec = _spec(concurrency=1, requests=10, warmup=0, input_len=40, output_len=4, prefix_len=100, prefix_groups=2)
    plan = spec.plan()
    prompts = [json.loads(b)["prompt"] for b in build_bodies(plan)]
    shared = [len([1 for k in range(0, len(p) - 15, 16) if p[: k + 16] in [q[: k + 16] for q in prompts[:i]]]) * 16
              for i, p in enumerate(prompts)]  # fmt: skip
    replayed = replay(plan, SimConfig(model=QWEN_05, max_model_len=2048))
    metrics = replayed.metrics(-1.0, replayed.end_s + 1)
    assert shared == [0, 0] + [96] * 8
    assert metrics.prefix_cache_queries == sum(len(p) for p in prompts) == 10 * 140
    assert metrics.prefix_cache_hits == sum(shared)
    off = replay(plan, SimConfig(model=QWEN_05, max_model_len=2048, enable_prefix_caching=False))
    assert off.metrics(-1.0, off.end_s + 1).prefix_cache_queries == 0
    ttft_on, ttft_off = summarize(replayed.run, spec).ttft_ms.p50, summarize(off.run, spec).ttft_ms.p50
    assert ttft_on < ttft_off


def test_requests_vllm_refuses_are_http_errors_in_the_records():
    """Over max-model-len with a forced length: vLLM v0.34.0 answers 400 (min_tokens above the clamped
    max_tokens); the replay records what the load generator would."""
    spec = _spec(concurrency=2, requests=4, input_len=2000, output_len=100)
    run = replay(spec.plan(), SimConfig(model=QWEN_05, max_model_len=2048)).run
    stats = summarize(run, spec)
    assert stats.failed == 4 and stats.failures == {"http_400": 4} and stats.completed == 0 and stats.ttft_ms is None


# -- every experiment's points, replayed: the entry their agreement checks call ------------------------


def _g6(**kw) -> tuple[G6Params, SimTarget]:
    """g6 --sim's parameters and the simulator it starts for them (x1: GPU time on the records' clock)."""
    params = G6Params(target_kind="sim", target="sim", model=QWEN_15, speedup=1.0, **kw)
    base = ServerSettings(model=QWEN_15, gpu_memory_utilization=params.gpu_memory_utilization,
                          max_model_len=params.max_model_len)  # fmt: skip
    return params, SimTarget(gpu="l4", speedup=1.0, seed=params.seed, base=base)


def test_a_sweep_point_and_a_saturation_rate_replay_as_g6_builds_them():
    """The sweep's closed-loop point and a saturation search's open-loop points, from g6's own spec builders:
    well below capacity the server keeps pace with Poisson arrivals (completions' end-time slope about 1),
    far above it completions fall behind (the slope is offered / capacity, above 1)."""
    params, target = _g6(concurrency=[8], max_num_seqs=[32], max_model_len=4096)
    config = target.config(ServerSettings(max_num_seqs=32))
    sweep = load_spec(params, "http://sim", concurrency=8)
    stats, server = replay(sweep.plan(), config).point(sweep)
    assert stats.completed == params.requests_at(8) and server.running.max == 8 and server.waiting.max == 0
    slow, fast = (point_spec(params, "http://sim", rate, 8.0) for rate in (2.0, 40.0))
    assert replay(slow.plan(), config).point(slow)[0].end_slope == pytest.approx(1.0, abs=0.05)
    assert replay(fast.plan(), config).point(fast)[0].end_slope > 1.3


def test_a_kv_probe_replays_with_preemption_only_past_the_pool():
    """Closed loops of 1,024-token sequences (lognormal prompts around 512, a cap of 512, EOS) from the kv
    experiment's probe_spec at utilisation 0.22: half the pool's worth of sequences at their cap runs without
    a preemption, three times it preempts."""
    params, target = _g6(experiment="kv", max_model_len=4096, gpu_memory_utilization=0.22)
    config = target.config(ServerSettings())
    fit = config.sizing().num_gpu_blocks // math.ceil(1023 / 16)
    for concurrency, preempted in ((fit // 2, False), (3 * fit, True)):
        probe = probe_spec(params, "http://sim", 1024, concurrency)
        stats, server = replay(probe.plan(), config).point(probe)
        assert stats.completed == 6 * concurrency and (server.preemptions > 0) is preempted, concurrency


def test_a_prefix_arm_replays_with_the_hits_its_groups_share():
    """The prefix experiment's point (4 groups of 2,048 shared tokens, 2 requests/s), caching on and off:
    on, most of the prompt tokens hit and TTFT falls; off, the counters stay at zero."""
    params, target = _g6(experiment="prefix", requests=48, max_model_len=4096)
    spec = prefix_spec(params, PrefixParams(), "http://sim", 0)
    on = replay(spec.plan(), target.config(ServerSettings(enable_prefix_caching=True))).point(spec)
    off = replay(spec.plan(), target.config(ServerSettings(enable_prefix_caching=False))).point(spec)
    assert on[1].prefix_cache_hits / on[1].prefix_cache_queries > 0.7 and off[1].prefix_cache_queries == 0
    assert on[0].ttft_ms.p50 < 0.5 * off[0].ttft_ms.p50


# -- python -m benchmarks.sim --virtual ------------------------------------------------------------------


def test_virtual_prints_the_points_figures_and_json_for_machines(capsys):
    argv = ["--virtual", "--model", QWEN_05, "--max-model-len", "2048", "--rate", "8", "--requests", "40",
            "--input-len", "uniform:50,150", "--output-len", "64", "--eos", "--prefix-len", "32", "--seed", "3"]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert main([*argv, "--json"]) == 0
    saved = json.loads(capsys.readouterr().out)
    # The same point as replaying the plan the load generator would send, server and point seeded alike.
    spec = LoadSpec(base_url="http://virtual", model=QWEN_05, rate=8, requests=40, input_len="uniform:50,150",
                    output_len=64, eos=True, prefix_len=32, seed=3, max_model_len=2048)  # fmt: skip
    stats, server = replay(spec.plan(), SimConfig(model=QWEN_05, max_model_len=2048, seed=3)).point(spec)
    assert saved["point"]["ttft_ms"]["p99"] == pytest.approx(stats.ttft_ms.p99)
    assert saved["server"]["prefix_cache_hits"] == server.prefix_cache_hits > 0
    assert saved["config"]["seed"] == 3 and saved["load"]["rate"] == 8
    assert f"{stats.requests_per_s:,.2f} req/s, {stats.output_tokens_per_s:,.0f} output tok/s" in text
    assert f"p50 {stats.ttft_ms.p50:,.1f}   p90 {stats.ttft_ms.p90:,.1f}   p99 {stats.ttft_ms.p99:,.1f}" in text
    rate = server.prefix_cache_hits / server.prefix_cache_queries
    assert f"{rate:.1%} of {server.prefix_cache_queries:,.0f} prompt tokens hit" in text
    assert f"KV cache      peak {server.kv_cache_usage.max:.1%}" in text


@pytest.mark.parametrize(("argv", "said"), [
    (["--virtual", "--model", QWEN_05], "--virtual needs --concurrency N (closed loop) or --rate R"),
    (["--virtual", "--model", QWEN_05, "--concurrency", "2", "--input-len", "uniform:5"], "argument --input-len: lengths"),
    (["--virtual", "--model", QWEN_05, "--concurrency", "0"], "--concurrency: Input should be greater than or equal to 1"),
    (["--virtual", "--model", QWEN_05, "--concurrency", "2", "--speedup", "4"], "--speedup: no server runs with --virtual"),
    (["--virtual", "--model", "nope", "--concurrency", "2"], "unknown model 'nope'"),
    (["--model", QWEN_05, "--concurrency", "2"], "--concurrency: load flags, for --virtual only"),
])  # fmt: skip
def test_virtual_refuses_bad_input_in_one_line(argv, said, capsys):
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse's own refusals
        status = exc.code
    err = capsys.readouterr().err
    assert status == 2 and said in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
