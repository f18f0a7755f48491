"""The load generator against the simulator's ground truth and against real local servers that fail."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import httpx
import pytest
from aiohttp import web

from benchmarks.g6.targets import SimTarget
from benchmarks.loadgen import LoadSpec, Slo, Timeouts, run_load, summarize
from benchmarks.loadgen.stats import summarize_ms
from benchmarks.loadgen.timers import poisson_offsets

MODEL = "Qwen/Qwen2.5-0.5B-Instruct"


@pytest.fixture(scope="module")
def sim_url():
    """The simulator in its own process at real-time speed, so its timings dwarf client noise."""
    target = SimTarget(model=MODEL, gpu="l4", speedup=1.0, seed=1, gpu_memory_utilization=0.9)
    with target.serving(32) as url:
        yield url


def _spec(base_url: str, **kw) -> LoadSpec:
    defaults = dict(model=MODEL, input_len=64, output_len=32, concurrency=4, requests=16)
    return LoadSpec(base_url=base_url, **{**defaults, **kw})


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_client_ttft_and_itl_match_the_servers_ground_truth(sim_url, api):
    spec = _spec(sim_url, api=api)
    run = asyncio.run(run_load(spec))
    truth = httpx.get(f"{sim_url}/sim/requests").json()
    # Pair each counted request with the server's record by arrival order (one clock: CLOCK_MONOTONIC).
    first_sent = min(r.sent for r in run.records)
    server = sorted((t for t in truth if t["arrival_s"] >= first_sent - 1e-3), key=lambda t: t["arrival_s"])
    client = sorted(run.records, key=lambda r: r.sent)
    assert len(server) == len(client) == 16
    assert all(r.ok and r.output_tokens == 32 for r in client)
    assert all(t["output_tokens"] == 32 and t["prompt_tokens"] == 64 for t in server)

    gaps = sorted((r.first_token - r.scheduled) - t["ttft_s"] for r, t in zip(client, server))
    client_ttft = sum(r.first_token - r.scheduled for r in client) / 16
    server_ttft = sum(t["ttft_s"] for t in server) / 16
    # Stated tolerance: per request, the client's TTFT is never below the server's, and the median
    # gap is within 2 ms + 5% (typically 1-1.5 ms here, about half of it the simulator's own HTTP
    # stack: it stamps the token before writing it). The means agree within 3 ms + 10%: on two
    # shared cores one request in ~50 meets a ~15 ms scheduling hiccup on one side or the other.
    assert gaps[0] >= -1e-4
    assert gaps[len(gaps) // 2] <= 0.002 + 0.05 * server_ttft
    assert client_ttft - server_ttft <= 0.003 + 0.10 * server_ttft

    # The summary's ITL against the server's own inter-token gaps (31 per request of 32 tokens).
    server_itl = [g for t in server for g in t["itl_s"]]
    assert len(server_itl) == 16 * 31
    server_itl_ms = 1000 * sum(server_itl) / len(server_itl)
    stats = summarize(run, spec)
    assert abs(stats.itl_ms.mean - server_itl_ms) <= 0.5 + 0.05 * server_itl_ms
    assert stats.completed == 16 and stats.failed == 0
    assert stats.output_tokens == 16 * 32
    assert stats.ttft_ms.mean == pytest.approx(client_ttft * 1000)


# -- real local servers that misbehave --------------------------------------------------------------

_CHUNK = json.dumps({"choices": [{"index": 0, "text": " x", "finish_reason": None}]}).encode()


async def _stream(request: web.Request, tokens: int, ttft_s: float, itl_s: float) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await asyncio.sleep(ttft_s)
    for i in range(tokens):
        await resp.write(b"data: " + _CHUNK + b"\n\n")
        if i < tokens - 1:
            await asyncio.sleep(itl_s)
    await resp.write(b'data: {"choices":[],"usage":{"completion_tokens":%d}}\n\ndata: [DONE]\n\n' % tokens)
    await resp.write_eof()
    return resp


def _handlers() -> dict[str, Callable]:
    calls = {"flaky": 0, "mixed": 0}

    async def ok(request):
        return await _stream(request, 4, 0.02, 0.002)

    async def flaky(request):  # every other request is an HTTP 500
        calls["flaky"] += 1
        if calls["flaky"] % 2:
            return web.json_response({"error": {"message": "boom"}}, status=500)
        return await _stream(request, 4, 0.02, 0.002)

    async def mixed(request):  # alternating fast and slow first tokens, for goodput
        calls["mixed"] += 1
        return await _stream(request, 4, 0.005 if calls["mixed"] % 2 else 0.08, 0.002)

    async def drop(request):  # the connection dies mid-stream
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b"data: " + _CHUNK + b"\n\n")
        await asyncio.sleep(0.01)
        request.transport.close()
        return resp

    async def stall(request):  # headers, then nothing
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await asyncio.sleep(30)
        return resp

    return {"ok": ok, "flaky": flaky, "mixed": mixed, "drop": drop, "stall": stall}


@asynccontextmanager
async def local_server() -> AsyncIterator[str]:
    app = web.Application()
    for name, handler in _handlers().items():
        app.router.add_post(f"/{name}/v1/completions", handler)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def _run(path: str, **kw):
    async def go():
        async with local_server() as base:
            spec = _spec(f"{base}/{path}", **kw)
            return await run_load(spec), spec

    run, spec = asyncio.run(go())
    return run, summarize(run, spec)


def test_http_errors_are_counted_apart_and_kept_out_of_latencies():
    _, stats = _run("flaky", concurrency=2, requests=12, warmup=0)
    assert stats.failures == {"http_500": 6}
    assert stats.completed == 6 and stats.failed == 6
    # A 500 answers at once; had it entered the statistics the minimum TTFT would be ~0.
    assert stats.ttft_ms.p50 >= 19.0
    assert stats.output_tokens == 6 * 4


def test_dropped_streams_are_failures():
    _, stats = _run("drop", concurrency=2, requests=4, warmup=0)
    assert stats.failures == {"truncated_stream": 4}
    assert stats.completed == 0 and stats.ttft_ms is None and stats.output_tokens_per_s == 0.0


def test_closed_port_is_a_connect_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        spec = _spec(f"http://127.0.0.1:{port}", concurrency=2, requests=4, warmup=0)
        stats = summarize(asyncio.run(run_load(spec)), spec)
    assert stats.failures == {"connect_error": 4}


def test_a_stalled_server_times_out_instead_of_hanging():
    start = time.monotonic()
    _, stats = _run("stall", concurrency=2, requests=2, warmup=0, timeouts=Timeouts(first_token_s=0.3))
    assert stats.failures == {"timeout_first_token": 2}
    assert time.monotonic() - start < 5


def test_duration_bounds_a_point():
    start = time.monotonic()
    run, stats = _run("ok", concurrency=2, requests=10_000, duration_s=0.5)
    assert stats.stopped_by == "duration"
    assert 0 < stats.completed < 10_000
    assert time.monotonic() - start < 3


def test_goodput_counts_only_requests_meeting_the_slo():
    _, stats = _run("mixed", concurrency=1, requests=10, warmup=0, slo=Slo(ttft_ms=40))
    assert stats.goodput is not None
    assert stats.goodput.fraction == pytest.approx(0.5)
    assert stats.goodput.requests_per_s == pytest.approx(0.5 * stats.requests_per_s)
    assert stats.requests_per_s == pytest.approx(10 / stats.window.seconds)


def test_latency_counts_from_the_scheduled_send_time_when_the_client_stalls():
    """No coordinated omission: a request the client sent late carries its lateness in TTFT and lag."""
    stalled = []

    def block_once(_record):
        if not stalled:
            stalled.append(True)
            time.sleep(0.1)  # the client's loop is stuck; open-loop arrivals keep falling due

    async def go():
        async with local_server() as base:
            spec = _spec(f"{base}/ok", concurrency=None, rate=200.0, requests=60, warmup=0, seed=3)
            return await run_load(spec, on_done=block_once)

    run = asyncio.run(go())
    lags = [r.sent - r.scheduled for r in run.records]
    assert max(lags) >= 0.05
    for r in run.records:
        assert r.first_token - r.scheduled >= r.sent - r.scheduled + 0.015  # server TTFT is 20 ms
    late = [r for r in run.records if r.sent - r.scheduled >= 0.05]
    assert all(r.first_token - r.scheduled >= 0.07 for r in late)


def test_poisson_schedule_is_seeded_and_has_the_asked_rate():
    a = poisson_offsets(50.0, 2000, seed=7)
    assert a == poisson_offsets(50.0, 2000, seed=7)
    assert a != poisson_offsets(50.0, 2000, seed=8)
    assert a[-1] / len(a) == pytest.approx(1 / 50.0, rel=0.1)
    assert all(x < y for x, y in zip(a, a[1:]))


def test_percentiles_are_in_milliseconds():
    s = summarize_ms([i / 1000 for i in range(1, 101)])  # 1..100 ms
    assert (s.mean, s.p50, s.p90) == pytest.approx((50.5, 50.5, 90.1))
    assert s.p99 == pytest.approx(99.01)
    assert summarize_ms([]) is None


def test_summary_of_hand_timed_records():
    """ITL is the gap between consecutive chunks of one stream: the wait from send to the first
    chunk is TTFT, never an ITL. A failed request counts apart and times nothing."""
    from benchmarks.loadgen.backend import RequestRecord
    from benchmarks.loadgen.runner import LoadRun

    a = RequestRecord(scheduled=10.000, dispatched=10.000, sent=10.001, first_token=10.100,
                      end=10.151, chunk_times=[10.100, 10.120, 10.150], output_tokens=3)
    b = RequestRecord(scheduled=10.050, dispatched=10.050, sent=10.052, first_token=10.250,
                      end=10.261, chunk_times=[10.250, 10.260], output_tokens=2)
    failed = RequestRecord(scheduled=10.060, dispatched=10.060, sent=10.061, end=10.070, error="http_500")
    spec = _spec("http://127.0.0.1:9", concurrency=2, requests=3, warmup=0)
    stats = summarize(LoadRun(records=[a, b, failed], warmup=[], stopped_by="requests", wall_offset=0.0), spec)
    # ITLs by hand: a 20 and 30 ms, b 10 ms -> sorted 10, 20, 30; p90 at rank 1.8: 20 + 0.8 x 10.
    assert (stats.itl_ms.mean, stats.itl_ms.p50, stats.itl_ms.p90, stats.itl_ms.p99) == pytest.approx((20, 20, 28, 29.8))
    # TTFT from the scheduled send: a 100 ms, b 200 ms.
    assert (stats.ttft_ms.mean, stats.ttft_ms.p50) == pytest.approx((150, 150))
    # TPOT from token counts: a (151 - 100) / 2 = 25.5 ms, b 11 ms. E2E: a 151 ms, b 211 ms.
    assert stats.tpot_ms.mean == pytest.approx((25.5 + 11) / 2)
    assert stats.e2e_ms.mean == pytest.approx((151 + 211) / 2)
    assert (stats.completed, stats.failed, stats.failures, stats.output_tokens) == (2, 1, {"http_500": 1}, 5)
    # Window: first scheduled send 10.000 to last end 10.261; 2 completions and 5 tokens in it.
    assert stats.window.seconds == pytest.approx(0.261)
    assert stats.requests_per_s == pytest.approx(2 / 0.261)
    assert stats.output_tokens_per_s == pytest.approx(5 / 0.261)
