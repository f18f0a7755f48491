"""Traffic that looks like production: seeded length distributions, requests stopping at EOS, and
the saturation search against a loopback server of known capacity."""

from __future__ import annotations

import asyncio
import json
import math
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from benchmarks.g6 import main
from benchmarks.g6.experiments.saturation import SaturationResult
from benchmarks.g6.experiments.saturation_report import PLOTS as SATURATION_PLOTS
from benchmarks.g6.experiments.saturation_report import render_saturation_report
from benchmarks.g6.result import G6Result
from benchmarks.harness import load_result
from benchmarks.loadgen import LoadgenError, LoadSpec
from benchmarks.loadgen import core
from benchmarks.loadgen.lengths import parse_lengths

FAST = ["--speedup", "20", "--scrape-interval", "0.1", "--quiet", "--repeats", "1"]
PNG = b"\x89PNG\r\n\x1a\n"


def _spec(**kw) -> LoadSpec:
    defaults = dict(base_url="http://127.0.0.1:1", model="m", concurrency=4, requests=4000, warmup=0)
    return LoadSpec(**{**defaults, **kw})


def test_drawn_lengths_follow_the_asked_distribution():
    """4,000 draws: the mean within 3 standard errors, the spread within 10%, the bounds held."""
    ins, outs = _spec(input_len="lognormal:256,128", output_len="uniform:16,256").lengths()
    se = 128 / math.sqrt(4000)
    assert abs(statistics.fmean(ins) - 256) < 3 * se + 0.5  # + rounding to whole tokens
    assert statistics.pstdev(ins) == pytest.approx(128, rel=0.1)
    # Uniform on 16..256: mean 136, standard deviation sqrt((241^2 - 1) / 12) = 69.6.
    assert abs(statistics.fmean(outs) - 136) < 3 * 69.6 / math.sqrt(4000)
    assert statistics.pstdev(outs) == pytest.approx(69.6, rel=0.05)
    assert min(outs) == 16 and max(outs) == 256
    # Clipped to the context: a prompt leaves a token for output, the output what the prompt leaves.
    ins, outs = _spec(input_len="lognormal:256,512", output_len="200", max_model_len=512).lengths()
    assert max(ins) == 511 and all(1 <= i and 1 <= o <= 200 and i + o <= 512 for i, o in zip(ins, outs))


def test_a_file_of_lengths_is_sampled_with_the_seed(tmp_path):
    path = tmp_path / "lengths.txt"
    path.write_text("10\n20\n\n30\n")
    ins, _ = _spec(input_len=f"file:{path}", requests=3000).lengths()
    assert set(ins) == {10, 20, 30} and statistics.fmean(ins) == pytest.approx(20, abs=1.0)


def test_the_same_seed_sends_the_same_requests_and_another_seed_others():
    shape = dict(input_len="lognormal:64,32", output_len="uniform:4,64", requests=50, eos=True)
    one, again, other = (core.build_bodies(_spec(seed=s, **shape).plan()) for s in (7, 7, 8))
    assert one == again and one != other
    bodies = [json.loads(b) for b in one]
    # --eos: the cap only, no forced length.
    assert all("ignore_eos" not in b and "min_tokens" not in b and 4 <= b["max_tokens"] <= 64 for b in bodies)
    fixed = json.loads(core.build_bodies(_spec(input_len=8, output_len=5, requests=1).plan())[0])
    assert (len(fixed["prompt"]), fixed["max_tokens"], fixed["min_tokens"], fixed["ignore_eos"]) == (8, 5, 5, True)


@pytest.mark.parametrize(
    "text, says",
    [("uniform:10", "expected 2 positive numbers"), ("uniform:20,10", "1 <= LO <= HI"), ("poisson:3", "unknown form"),
     ("0", "expected a whole number >= 1"), ("file:/nonexistent/lengths", "No such file")],
)
def test_a_bad_length_is_one_line_naming_what_is_allowed(text, says):
    with pytest.raises(LoadgenError, match=says):
        parse_lengths(text)


def test_a_sweep_with_distributions_and_eos_reports_the_lengths_it_sent_and_received(tmp_path, capsys):
    """The issue's own command, small: what the simulator's usage counted, per point, in result and report."""
    rc = main(["--sim", "--model", "Qwen/Qwen2.5-0.5B-Instruct", "--max-num-seqs", "32", "--concurrency", "8",
               "--requests", "96", "--input-len", "lognormal:256,128", "--output-len", "uniform:16,256", "--eos",
               "--out", str(tmp_path), *FAST])  # fmt: skip
    assert rc == 0
    (folder,) = tmp_path.iterdir()
    (point,) = load_result(G6Result, folder).points
    got = point.realised
    assert point.eos and point.input_len.describe() == "lognormal:256,128"
    # Prompts as token ids: the server counts exactly what was drawn (96 requests: the mean within 4 standard errors).
    assert got.input_tokens.n == 96 and abs(got.input_tokens.mean - 256) < 4 * 128 / math.sqrt(96)
    # The simulator stops uniformly between 1 and each cap (caps uniform on 16..256): outputs average
    # about (1 + 136) / 2 = 68.5 tokens, far below the caps, and never above 256.
    assert 45 < got.output_tokens.mean < 95 and got.output_tokens.p99 <= 256
    assert point.output_tokens == round(got.output_tokens.mean * 96)
    report = (folder / "report.md").read_text()
    assert "stopping at EOS under a cap (max_tokens) of uniform:16,256" in report
    assert f"| {got.output_tokens.mean:,.1f} / {got.output_tokens.p50:,.0f} / {got.output_tokens.p99:,.0f} |" in report


# -- saturation against a server of known capacity ---------------------------------------------------

CAPACITY = 20.0  # requests per second: one at a time, 50 ms each


@contextmanager
def capacity_server() -> Iterator[str]:
    """Serves one request at a time for 1/CAPACITY s, first come first served, then sends its tokens at
    once: TTFT is the queue wait plus the service time, and it grows without bound past CAPACITY."""
    state: dict = {}
    started = threading.Event()
    head = b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n"

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                length = next((int(v) for k, _, v in (line.partition(b":") for line in request.split(b"\r\n"))
                               if k.lower() == b"content-length"), 0)  # fmt: skip
                body = json.loads(await reader.readexactly(length)) if length else {}
                path = request.split(b" ")[1]
                if path == b"/v1/models":
                    data = json.dumps({"data": [{"id": "cap", "object": "model", "max_model_len": 4096}]}).encode()
                    writer.write(head % (b"application/json", len(data)) + data)
                    continue
                if path == b"/health":
                    writer.write(head % (b"text/plain", 0))
                    continue
                if not path.startswith(b"/v1/"):  # no /metrics: a server of one's own may have none
                    writer.write(head.replace(b"200 OK", b"404 Not Found") % (b"text/plain", 0))
                    continue
                # First come, first served on a clock of its own: a late wake-up delays one answer, never
                # the next one's service, so the capacity is CAPACITY however busy this machine is.
                now = state["loop"].time()
                state["free_at"] = done = max(now, state["free_at"]) + 1 / CAPACITY
                await asyncio.sleep(done - now)
                n = body.get("max_tokens", 4) if not body.get("ignore_eos") else body["max_tokens"]
                events = b"".join(b'data: {"choices":[{"index":0,"text":" x"}]}\n\n' for _ in range(n))
                events += b'data: {"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d}}\n\ndata: [DONE]\n\n' % (
                    len(body.get("prompt", [])), n)
                writer.write(head % (b"text/event-stream", len(events)) + events)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def serve() -> None:
        state["free_at"] = 0.0
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        state["url"] = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        state["stop"] = asyncio.Event()
        state["loop"] = asyncio.get_running_loop()
        started.set()
        async with server:
            await state["stop"].wait()

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    started.wait(5)
    try:
        yield state["url"]
    finally:
        state["loop"].call_soon_threadsafe(state["stop"].set)
        thread.join(5)


@pytest.fixture(scope="module")
def saturation_run(tmp_path_factory) -> Path:
    """From 10 req/s, doubling and bisecting to within 10%, 4 s of arrivals a located run; then each held
    rate run twice (--repeats 2) for 4 s, pooled."""
    out = tmp_path_factory.mktemp("saturation")
    with capacity_server() as url:
        rc = main(["--target", url, "--experiment", "saturation", "--start-rate", "10", "--input-len", "8",
                   "--output-len", "4", "--point-seconds", "4", "--hold-seconds", "4", "--repeats", "2", "--out", str(out),
                   "--quiet"])  # fmt: skip
    assert rc == 0
    (folder,) = out.iterdir()
    return folder


@pytest.mark.realtime
def test_the_saturation_search_finds_the_servers_capacity_from_what_it_served(saturation_run):
    """Located: 10, 20 (capacity exactly: a queue that never drains), 40 doubling, then bisection. Held from
    there. Stated tolerance: the highest held rate that passed within 15% below the capacity (a 4 s window's
    ~70 Poisson arrivals offer a rate 12% above its plan one time in six) and never above what the runs that
    fell behind served (the capacity, within a 4-s window's count of completions: 2%); the lowest that
    failed above it."""
    result = load_result(SaturationResult, saturation_run)
    assert {10.0, 20.0, 40.0} <= {p.rate for p in result.points if p.stage == "locate"}
    assert 0.85 * CAPACITY <= result.saturation_rate <= 1.02 * CAPACITY
    assert result.capacity_per_s == pytest.approx(CAPACITY, rel=0.05)
    assert result.first_failing_rate is not None and result.first_failing_rate > result.saturation_rate
    assert (result.first_failing_rate - result.saturation_rate) / result.saturation_rate <= 0.1
    # The two rates that decide the answer ran twice each, with seeds of their own.
    for deciding in (result.at_saturation, result.first_failing):
        assert len(deciding.runs) == 2 and len({r.point.seed for r in deciding.runs}) == 2
    # A run the server did not keep up with served its capacity, measured at steady state: never the offered
    # rate divided by anything.
    behind = [r for p in result.points for r in p.runs if not r.kept_up]
    assert behind and all(0.85 * CAPACITY <= r.steady.requests_per_s <= 1.05 * CAPACITY for r in behind)
    assert all(r.steady.in_system_growth_per_s > 0.05 * r.steady.offered_per_s for r in behind)
    # One it kept up with served what it was offered (Poisson: the window's own arrivals, within their noise).
    for p in result.points:
        for r in p.runs:
            s = r.steady
            if r.kept_up:
                assert abs(s.requests_per_s - s.offered_per_s) <= 3 * math.sqrt(s.offered_per_s / s.seconds) + 0.5
            # 4 tokens a request, every one counted inside the window.
            assert s.output_tokens_per_s == pytest.approx(4 * s.requests_per_s, rel=0.15)
    assert all(r.point.rate == p.rate for p in result.points for r in p.runs)  # a server of our own runs in real time


@pytest.mark.realtime
def test_the_saturation_report_answers_with_what_was_served_and_prices_only_passing_rates(saturation_run):
    result = load_result(SaturationResult, saturation_run)
    report = (saturation_run / "report.md").read_text()
    assert report == render_saturation_report(result)
    at = result.at_saturation
    assert report.split("\n")[4] == "## The answer"
    assert f"**Provision for at most {at.rate:,.2f} requests/s** (offered, Poisson arrivals): held for 2 runs" in report
    assert "did not keep up: the requests in the system grew" in report
    # The failing held rate's answer says why its runs pooled failed, not only the verdict.
    fail = result.first_failing
    assert fail.misses and f"it failed: {'; '.join(fail.misses)}." in report
    assert "No latency SLO was given" in report
    for name in SATURATION_PLOTS:
        assert (saturation_run / name).read_bytes()[:8] == PNG
    data = json.loads((saturation_run / "result.json").read_text())
    assert data["saturation_rate"] == result.saturation_rate and all(p["runs"] for p in data["points"])


@pytest.mark.realtime
def test_saturation_against_the_simulator_judges_the_slo_in_gpu_time_at_steady_state(tmp_path):
    """--slo-ttft-ms 500 on the GPU's clock: a run that passed kept its steady window's TTFT p99 (GPU time: the
    simulator's x20) within 500 ms, and its figures are the window's: 32 tokens a request."""
    rc = main(["--sim", "--experiment", "saturation", "--model", "Qwen/Qwen2.5-0.5B-Instruct", "--slo-ttft-ms", "500",
               "--start-rate", "2", "--max-points", "4", "--point-seconds", "4", "--input-len", "128", "--output-len",
               "32", "--out", str(tmp_path), *FAST])  # fmt: skip
    (folder,) = tmp_path.iterdir()
    result = load_result(SaturationResult, folder)
    assert rc == 0 and result.points
    spot = result.gpu_price.gpu_node_spot
    for p in result.points:
        for r in p.runs:
            assert r.point.rate == pytest.approx(p.rate * 20)  # sent at 20x: the simulator's clock
            s = r.steady
            if r.passed:
                assert s.ttft_ms.p99 <= 500 and s.ttft_ms.p99 > 20 * 1  # GPU time: at least 20x a 1 ms TTFT
            elif r.kept_up:
                assert any("TTFT p99" in miss for miss in r.misses)
            # A million output tokens cost the spot GPU node's hour over that many tokens an hour, at the pace served.
            usd = r.usd_per_million_output_tokens.gpu_node_spot
            assert usd == pytest.approx(spot / (s.output_tokens_per_s * 3600) * 1e6)


# -- shared prefixes and the prefix cache ------------------------------------------------------------

QWEN_05 = "Qwen/Qwen2.5-0.5B-Instruct"


def test_the_simulated_prefix_cache_shares_whole_blocks_once_and_counts_as_vllm_does():
    from benchmarks.sim.config import SimConfig
    from benchmarks.sim.engine import Admission, Scheduler

    sizing = SimConfig(model=QWEN_05).sizing()
    s = Scheduler(sizing, seed=0, prefix_caching=True)
    total = s.free_blocks

    def submit(hashes: tuple[int, ...]):
        admission = Admission(prompt_tokens=64, max_tokens=4, ignore_eos=True, block_hashes=hashes)
        return s.new_request(admission, arrival_s=0.0, ready_s=0.0)

    first = submit((1, 2, 3, 4))
    s.complete(s.schedule(0.0), 0.01)  # its 64-token prefill: 4 full blocks join the cache
    assert first.registered and total - s.free_blocks == 4
    second = submit((1, 2, 3, 4))
    s.schedule(0.02)
    # The whole prompt is cached, but its last token is computed again: 63 tokens served, no new block.
    assert second.cached_tokens == 63 and total - s.free_blocks == 4 + 1  # + first's first output block
    assert (s.prefix_queries, s.prefix_hits) == (128, 63)
    other = submit((9, 2, 3, 4))  # another first block: nothing after it can match
    s.schedule(0.03)
    assert other.cached_tokens == 0
    for r in (first, second, other):
        s.abort(r, 0.04)
    # Everything is free again; the cached blocks stay until a new block needs their room.
    assert s.free_blocks == total and set(s.evictable) >= {1, 2, 3, 4}


def test_prefix_counters_are_read_from_vllm_0_33_0_exposition():
    """The counters as vLLM v0.34.0's /metrics serves them (tests/data/vllm/v0.34.0/metrics.txt: a _total
    sample and a _created one), over a point: the window's increase."""
    from benchmarks.metrics.scrape import Scrape, metrics_from_scrapes

    def text(queries: float, hits: float) -> str:
        labels = '{engine="0",model_name="Qwen/Qwen2.5-1.5B-Instruct"}'
        return (
            "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.\n"
            "# TYPE vllm:prefix_cache_queries_total counter\n"
            f"vllm:prefix_cache_queries_total{labels} {queries}\n"
            "# HELP vllm:prefix_cache_queries_created Prefix cache queries, in terms of number of queried tokens.\n"
            "# TYPE vllm:prefix_cache_queries_created gauge\n"
            f"vllm:prefix_cache_queries_created{labels} 1.764e+09\n"
            "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.\n"
            "# TYPE vllm:prefix_cache_hits_total counter\n"
            f"vllm:prefix_cache_hits_total{labels} {hits}\n"
        )

    m = metrics_from_scrapes([Scrape(0.0, text(1000.0, 200.0)), Scrape(1.0, text(5608.0, 4040.0))])
    assert (m.prefix_cache_queries, m.prefix_cache_hits) == (4608.0, 3840.0)


@pytest.fixture(scope="module")
def prefix_run(tmp_path_factory) -> Path:
    """Two groups sharing 2,048-token prefixes, 64 tokens of their own each, both arms offered 4 req/s, two runs
    each (--repeats 2: the prefix experiment once dropped it): at most 2048 / 2112 of the tokens can hit,
    fewer while a group's first requests are still in prefill together. In real time (x1): the prefill a hit
    skips is milliseconds of the simulated L4, which this machine's scheduling jitter, multiplied by a
    speed-up, would drown."""
    out = tmp_path_factory.mktemp("prefix")
    rc = main(["--sim", "--experiment", "prefix", "--model", QWEN_05, "--prefix-len", "2048", "--prefix-groups", "2",
               "--rate", "4", "--requests", "24", "--input-len", "64", "--output-len", "16", "--out", str(out),
               *FAST, "--speedup", "1", "--repeats", "2"])  # fmt: skip
    assert rc == 0
    (folder,) = out.iterdir()
    return folder


@pytest.mark.realtime
def test_prefix_caching_on_hits_and_saves_prefill_the_server_measured(prefix_run):
    from benchmarks.g6.experiments.prefix import PrefixResult
    from benchmarks.g6.experiments.prefix_report import PLOTS as PREFIX_PLOTS
    from benchmarks.g6.experiments.prefix_report import render_prefix_report

    result = load_result(PrefixResult, prefix_run)
    on, off = result.arm(True), result.arm(False)
    assert on.cache.enable_prefix_caching is True and off.cache.enable_prefix_caching is False  # as the server says
    assert len(on.runs) == len(off.runs) == 2
    # Both arms at one open-loop rate, run k of each with the same seed: the same prompts and arrivals.
    assert all(r.point.rate == 4.0 and r.point.concurrency is None for a in (on, off) for r in a.runs)
    assert [r.point.seed for r in on.runs] == [r.point.seed for r in off.runs] and on.runs[0].point.seed != on.runs[1].point.seed
    # Measured by the server's counters, not the prefix length restated: each run's own share.
    assert all(0.5 < r.prefix_cache_hit_rate <= 2048 / 2112 for r in on.runs)
    assert len({r.prefix_cache_hit_rate for r in on.runs}) == 2
    assert off.prefix_cache_hit_rate is None and all(r.point.server.prefix_cache_queries == 0 for r in off.runs)
    # The server's own prefill time, its TTFT less its queue time on the simulator (it has no prefill histogram).
    assert all(r.prefill_source == "vllm:time_to_first_token_seconds less vllm:request_queue_time_seconds"
               for a in (on, off) for r in a.runs)  # fmt: skip
    assert on.prefill_ms.mean < off.prefill_ms.mean and result.prefill_saved_us_per_cached_token.mean > 0
    saved = [1000 * (b.prefill_ms - a.prefill_ms) / a.cached_tokens_per_request for a, b in zip(on.runs, off.runs)]
    assert result.prefill_saved_us_per_cached_token.values == pytest.approx(saved)
    assert on.figures.ttft_p50_ms.mean < off.figures.ttft_p50_ms.mean
    report = (prefix_run / "report.md").read_text()
    assert report == render_prefix_report(result)
    assert "| off | 2 | none: no lookups |" in report and "not a measurement of vLLM" in report
    assert "The server's prefill took" in report
    assert "no cache serves more than 97.0% of them" in report  # 2048 / (2048 + 64), by hand
    for name in PREFIX_PLOTS:
        assert (prefix_run / name).read_bytes()[:8] == PNG


@pytest.mark.parametrize("experiment, extra", [
    ("kv", ["--context-len", "256", "--gpu-memory-utilization", "0.07", "--max-num-seqs", "8", "--max-model-len", "1024"]),
    ("quant", ["--variants", "bf16", "--concurrency", "2", "--requests", "4", "--input-len", "32", "--output-len", "8"]),
    ("saturation", ["--start-rate", "4", "--max-points", "2", "--point-seconds", "1", "--requests", "8",
                    "--input-len", "32", "--output-len", "8"]),
    ("prefix", ["--prefix-len", "64", "--rate", "8", "--requests", "6", "--input-len", "16", "--output-len", "8"]),
])  # fmt: skip
def test_every_experiment_runs_with_the_chat_api_and_counts_the_servers_prompt_tokens(tmp_path, experiment, extra):
    rc = main(["--sim", "--api", "chat", "--experiment", experiment, "--model", QWEN_05, *extra, "--out", str(tmp_path),
               *FAST])  # fmt: skip
    assert rc in (0, 1)  # a kv or saturation search may stop at its budget
    (folder,) = tmp_path.iterdir()
    data = json.loads((folder / "result.json").read_text())
    assert data["params"]["api"] == "chat"
    points = [p for p in _points(data) if p["completed"]]
    assert points and all(p["realised"]["input_tokens"]["n"] == p["completed"] for p in points)


def _points(data: dict) -> list[dict]:
    """Every load point of any g6 result.json."""
    found = []
    for key in ("points", "probes", "variants", "arms"):
        for item in data.get(key, []):
            if "runs" in item:  # a saturation rate's, a prefix arm's
                found += [run["point"] for run in item["runs"]]
            else:
                found += [item["point"]] if "point" in item else item.get("points", [item] if "completed" in item else [])
    return found


# -- a simulator slowed by its host ------------------------------------------------------------------


def _sweep_against(url: str, out: Path) -> G6Result:
    assert main(["--target", url, "--concurrency", "4", "--requests", "24", "--input-len", "32", "--output-len", "32",
                 "--scrape-interval", "0.2", "--out", str(out), "--quiet", "--repeats", "1"]) in (0, 1)  # fmt: skip
    (folder,) = out.iterdir()
    return load_result(G6Result, folder)


@pytest.mark.realtime
def test_a_simulator_the_host_stalls_is_marked_host_slowed_and_a_quiet_one_is_not(tmp_path, monkeypatch):
    """The same point against the simulator (Qwen2.5-0.5B at x1, steps of about 5 ms) twice in this process:
    once as it runs, once with its event loop stalled 10 ms after every step, as a busy host stalls it. The
    stalled server's own step counters say its tokens came late on nearly every step; the report marks the
    point host-slowed and says its tails are this machine's. The quiet one counts the same steps, late on far
    fewer."""
    from benchmarks.sim import SimConfig, running_server
    from benchmarks.sim.engine import EngineCore

    config = SimConfig(model=QWEN_05, max_model_len=2048)
    with running_server(config) as url:
        quiet = _sweep_against(url, tmp_path / "quiet")
    finish = EngineCore.finish_step

    def stalled(self, *args):
        time.sleep(0.010)
        return finish(self, *args)

    monkeypatch.setattr(EngineCore, "finish_step", stalled)
    with running_server(config) as url:
        slowed = _sweep_against(url, tmp_path / "slowed")
    (q,), (s,) = quiet.points, slowed.points
    assert q.server.sim_steps > 24 and s.server.sim_steps > 24  # at least a step per request
    assert s.server.late_step_share > 0.9 and s.server.host_slowed
    assert q.server.late_step_share < s.server.late_step_share / 3
    report = next((tmp_path / "slowed").iterdir()).joinpath("report.md").read_text()
    assert f"**host-slowed** ({s.server.late_step_share:.1%} of steps late)" in report
    assert "1 point(s) were host-slowed" in report
