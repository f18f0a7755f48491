"""The virtual-clock oracle: the simulator's own engine replaying a load generator's plan on an event
queue instead of sleeps, so a point's expected answer takes seconds and has no host jitter in it.

    replay(spec.plan(), SimConfig(model=..., speedup=...))  ->  Replay: .run (a LoadRun), .metrics(...)

What it shares with the real-time simulator (`python -m benchmarks.sim`: app.py over engine.Engine):
- the requests: the plan's own bodies, made by the load generator's `build_bodies` and read by the same
  `RequestReader` (prompt tokens and prefix blocks, max_tokens against the context, min_tokens,
  ignore_eos, the seed or prompt that decides where EOS falls, vLLM's 400s);
- the engine: `EngineCore` (a request reaches the scheduler REQUEST_OVERHEAD_S after it arrives, the
  same `Scheduler`, prefix cache and counters, each step lasting its cost model's duration over
  `speedup`, tokens appearing as the step ends);
- the schedule: the plan's open-loop send times (`arrival_offsets`, the workers' own) or its closed
  loop (each of `concurrency` slots sends its next request when the previous one ends), its warm-up,
  `duration_s` and per-phase timeouts, as the load generator's workers apply them.

What differs is only what the host adds to a real-time run: here a request leaves at its scheduled
time (no client lag) and reaches the server at once (no loopback hop); every token is read as it is
made, one chunk each (no chunks coalescing while an event loop is busy); each step starts the instant
the last one ends (no timer overshoot, no stalled process for the real-time engine to catch up on).

Times are on the clock the real-time simulator would run on (GPU seconds / speedup), so the records
make a point the same way a real-time run's do: `summarize(replay.run, spec, speedup)`; `Replay.point`
does that and reads the server's figures over the point's window.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from benchmarks.loadgen.core import LoadRun, Plan, Record, arrival_offsets, build_bodies
from benchmarks.loadgen.spec import LoadSpec
from benchmarks.loadgen.stats import PointStats, summarize
from benchmarks.metrics.model import GaugeStats, Series, ServerMetrics, bucket_ms
from benchmarks.metrics.scrape import histogram_bucket
from benchmarks.sim.admission import BadRequest, RequestReader
from benchmarks.sim.config import SimConfig
from benchmarks.sim.engine import EngineCore, SimRequest, StepRecord
from benchmarks.sim.metrics import TTFT_BUCKETS, WINDOW_S, fb_used_mib, gpu_activity

SEND, FIRST_TOKEN_TIMEOUT, TOTAL_TIMEOUT = "send", "timeout_first_token", "timeout_total"


class Sample(NamedTuple):
    """The server's gauges and counters from instant `t` until the next sample (taken each time the
    engine schedules: a scrape between two samples reads these)."""

    t: float
    running: int
    waiting: int
    kv_blocks_used: int
    preemptions: int
    prefix_queries: int
    prefix_hits: int


@dataclass(frozen=True)
class Replay:
    """One plan replayed: the load generator's view (`run`) and the server's (`samples`, `steps`)."""

    run: LoadRun
    samples: list[Sample]
    steps: list[StepRecord]
    arrivals: dict[int, float]  # request index -> when the server saw it (its TTFT's start)
    times: list[float]  # of the samples
    step_ends: list[float]
    num_gpu_blocks: int
    fb_used_mib: float
    speedup: float

    @property
    def end_s(self) -> float:
        return max([r.end for r in (*self.run.warmup, *self.run.records)], default=0.0)

    def _at(self, t: float) -> Sample:
        """The sample in force at `t` (an idle server's before the first)."""
        k = bisect.bisect_right(self.times, t) - 1
        return self.samples[k] if k >= 0 else Sample(t, 0, 0, 0, 0, 0, 0)

    def metrics(self, start: float, end: float, interval_s: float = 1.0) -> ServerMetrics:
        """What the server's /metrics says over [start, end] (this replay's clock): gauges' time-weighted
        means and maxima, counters' increase, the GPU series' share of the window, the TTFT histogram's
        p50/p99 buckets of the requests whose first token fell in it, and the gauges every `interval_s`
        as a scrape would have read them. Durations stay on this clock (`in_time_scale` converts)."""
        if end <= start:
            raise ValueError(f"an empty window [{start}, {end}]")
        fields = dict(zip(("running", "waiting", "kv_cache_usage"), self._gauges(start, end)))
        first, last = self._at(start), self._at(end)
        busy, tensor, dram = self._activity(start, end)
        # The DCGM gauges look back WINDOW_S from each scrape: their maximum is over such looks in the window.
        peaks = [(busy, tensor, dram), *(self._activity(t - WINDOW_S, t) for t in _marks(start + WINDOW_S, end, WINDOW_S))]
        counts = _ttft_buckets(
            [r.first_token - self.arrivals[r.i] for r in (*self.run.warmup, *self.run.records)
             if r.first_token is not None and start <= r.first_token <= end]
        )  # fmt: skip
        scraped = [(t, self._at(t)) for t in _marks(start, end, interval_s)]
        series = [Series(name="running", points=[(t, s.running) for t, s in scraped]),
                  Series(name="waiting", points=[(t, s.waiting) for t, s in scraped]),
                  Series(name="kv_cache_usage", points=[(t, s.kv_blocks_used / self.num_gpu_blocks) for t, s in scraped])]  # fmt: skip
        return ServerMetrics(
            source="virtual",
            **fields,
            gpu_util=GaugeStats(mean=100 * busy, max=100 * max(p[0] for p in peaks)),
            sm_active=GaugeStats(mean=busy, max=max(p[0] for p in peaks)),
            dram_active=GaugeStats(mean=dram, max=max(p[2] for p in peaks)),
            fb_used_mib=GaugeStats(mean=self.fb_used_mib, max=self.fb_used_mib),
            preemptions=float(last.preemptions - first.preemptions),
            prefix_cache_queries=float(last.prefix_queries - first.prefix_queries),
            prefix_cache_hits=float(last.prefix_hits - first.prefix_hits),
            ttft_p50_bucket_ms=bucket_ms(histogram_bucket(0.5, counts)),
            ttft_p99_bucket_ms=bucket_ms(histogram_bucket(0.99, counts)),
            series=series,
        )

    def _activity(self, start: float, end: float) -> tuple[float, float, float]:
        """gpu_activity over the steps that end after `start` and before the first that ends after `end`."""
        lo = bisect.bisect_right(self.step_ends, start)
        hi = bisect.bisect_left(self.step_ends, end) + 1
        return gpu_activity(self.steps[lo:hi], start, end)

    def _gauges(self, start: float, end: float) -> Iterator[GaugeStats]:
        """running, waiting and KV use over [start, end]: each sample weighted by how long it held there."""
        k = max(bisect.bisect_right(self.times, start) - 1, 0)
        held = []
        for s, nxt in zip(self.samples[k:], [*self.samples[k + 1 :], None]):
            until = end if nxt is None else min(nxt.t, end)
            if s.t >= end:
                break
            held.append((max(until - max(s.t, start), 0.0), s))
        span = end - start
        held = held or [(span, self._at(start))]
        for value in (lambda s: s.running, lambda s: s.waiting, lambda s: s.kv_blocks_used / self.num_gpu_blocks):
            yield GaugeStats(mean=sum(w * value(s) for w, s in held) / span, max=max(value(s) for _, s in held))

    def point(self, spec: LoadSpec) -> tuple[PointStats, ServerMetrics | None]:
        """The point as g6 measures it: the records' figures in GPU time and the server's over their window."""
        stats = summarize(self.run, spec, self.speedup)
        if stats.window is None:
            return stats, None
        window = (stats.window.start.timestamp() - self.run.wall_offset, stats.window.end.timestamp() - self.run.wall_offset)
        return stats, self.metrics(*window).in_time_scale(self.speedup)


def _marks(start: float, end: float, step: float) -> list[float]:
    """start, start + step, ... up to end (none when end is before start)."""
    return [start + k * step for k in range(int((end - start) / step) + 1)] if end >= start else []


def _ttft_buckets(ttfts: list[float]) -> dict[float, float]:
    """Cumulative counts per upper bound, as vLLM's TTFT histogram holds them."""
    bounds = [*TTFT_BUCKETS, math.inf]
    return {b: float(sum(1 for t in ttfts if t <= b)) for b in bounds}


@dataclass
class _Client:
    """The load generator's schedule of one plan, as its workers run it (core._Worker): sends at
    scheduled times, the closed loop's next request from the end of the last, timeouts per phase."""

    plan: Plan
    events: list[tuple[float, int, str, int]] = field(default_factory=list)
    records: dict[int, Record] = field(default_factory=dict)
    sent: dict[int, tuple[float, SimRequest]] = field(default_factory=dict)  # in flight: i -> (send time, its request)
    _order: Iterator[int] = field(default_factory=itertools.count)
    _claims: Iterator[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        plan = self.plan
        self.deadline = plan.duration_s if plan.duration_s is not None else math.inf
        if plan.concurrency is not None:
            for _ in range(plan.concurrency):
                self.next_in_slot(0.0)
        else:
            for i, offset in enumerate(arrival_offsets(plan)):
                if offset >= self.deadline:
                    break
                self.push(offset, SEND, i)

    def push(self, t: float, kind: str, i: int) -> None:
        heapq.heappush(self.events, (t, next(self._order), kind, i))

    def next_in_slot(self, t: float) -> None:
        """Closed loop: a slot free at `t` sends the next request, unless the run is over."""
        if self.plan.concurrency is None or t >= self.deadline:
            return
        i = next(self._claims)
        if i < self.plan.total:
            self.push(t, SEND, i)

    def next_time(self) -> float | None:
        return self.events[0][0] if self.events else None

    def ended(self, i: int, record: Record) -> None:
        self.records[i] = record
        self.sent.pop(i, None)
        self.next_in_slot(record.end)


class _Replayer:
    """The engine core on a virtual clock, fed by one plan's client."""

    def __init__(self, plan: Plan, config: SimConfig) -> None:
        self.plan = plan
        self.client = _Client(plan)
        self.reader = RequestReader(config)
        self.sizing = config.sizing()
        self.core = EngineCore(self.sizing, seed=config.seed, speedup=config.speedup,
                               prefix_caching=config.enable_prefix_caching, on_finish=self._finished)  # fmt: skip
        self.bodies = build_bodies(plan)
        self.index: dict[str, int] = {}  # request id -> plan index
        self.arrivals: dict[int, float] = {}
        self.samples: list[Sample] = []
        self.steps: list[StepRecord] = []

    def run(self, config: SimConfig) -> Replay:
        now = 0.0
        while True:
            self._client_until(now, inclusive=True)
            step = self.core.schedule(now)
            self._sample(now)
            if step is None:
                pending = [t for t in (self.client.next_time(), self.core.scheduler.next_arrival_s()) if t is not None]
                if not pending:
                    break
                now = max(now, min(pending))
                continue
            end = now + self.core.duration_s(step)
            self._client_until(end, inclusive=False)  # sends and timeouts while the step runs, at their times
            self.steps.append(self.core.finish_step(step, now, end, end))
            now = end
        records = self.client.records
        assert not self.client.sent, "requests left in flight with nothing left to happen"
        ordered = [records[i] for i in sorted(records)]
        counted = [r for r in ordered if r.i >= self.plan.warmup]
        run = LoadRun(
            records=counted,
            warmup=[r for r in ordered if r.i < self.plan.warmup],
            stopped_by="requests" if len(counted) == self.plan.requests else "duration",
            wall_offset=0.0,
            client={"virtual": True},
        )
        return Replay(run=run, samples=self.samples, steps=self.steps, arrivals=self.arrivals,
                      times=[s.t for s in self.samples], step_ends=[s.end_s for s in self.steps], num_gpu_blocks=self.sizing.num_gpu_blocks, fb_used_mib=fb_used_mib(self.sizing),
                      speedup=config.speedup)  # fmt: skip

    def _client_until(self, t: float, *, inclusive: bool) -> None:
        events = self.client.events
        while events and (events[0][0] <= t if inclusive else events[0][0] < t):
            at, _, kind, i = heapq.heappop(events)
            if kind == SEND:
                self._send(i, at)
            elif i in self.client.sent:
                self._timeout(i, at, kind)

    def _send(self, i: int, t: float) -> None:
        body = json.loads(self.bodies[i])
        try:
            admission = self.reader.read(body, chat=self.plan.api == "chat")
        except BadRequest as exc:
            # Answered at once, before the engine: the record of an HTTP error (no content decoded).
            self.client.ended(i, Record(i, t, t, None, t, [], 0, f"http_{exc.status}"))
            return
        request = self.core.submit(admission, t)
        self.index[request.request_id] = i
        self.arrivals[i] = t
        self.client.sent[i] = (t, request)
        # The watchdog's phases: no body bytes yet (completions stream none before the first token; chat
        # sends its role-only chunk at once), then the whole request.
        if self.plan.api != "chat":
            self.client.push(t + self.plan.first_token_s, FIRST_TOKEN_TIMEOUT, i)
        self.client.push(t + self.plan.total_s, TOTAL_TIMEOUT, i)

    def _timeout(self, i: int, t: float, kind: str) -> None:
        sent, request = self.client.sent[i]
        if kind == FIRST_TOKEN_TIMEOUT and request.token_times_s:
            return
        self.client.ended(i, Record(i, sent, sent, None, t, [], 0, kind))
        self.core.abort(request, t)  # the client hung up: the server frees the sequence

    def _finished(self, request: SimRequest) -> None:
        i = self.index[request.request_id]
        if i not in self.client.sent:
            return  # ended by the client (a timeout) first
        sent, _ = self.client.sent[i]
        times = list(request.token_times_s)
        assert request.finish_s is not None
        self.client.ended(i, Record(i, sent, sent, times[0] if times else None, request.finish_s, times,
                                    request.output_tokens, None, request.prompt_tokens))  # fmt: skip

    def _sample(self, t: float) -> None:
        s = self.core.scheduler
        sample = Sample(t, len(s.running), len(s.waiting), self.sizing.num_gpu_blocks - s.free_blocks, s.preemptions_total,
                        s.prefix_queries, s.prefix_hits)  # fmt: skip
        if self.samples and self.samples[-1].t == t:
            self.samples[-1] = sample
        elif not self.samples or self.samples[-1][1:] != sample[1:]:
            self.samples.append(sample)


def replay(plan: Plan, config: SimConfig) -> Replay:
    """Replay `plan` against the simulator `config` describes, on a virtual clock."""
    return _Replayer(plan, config).run(config)
