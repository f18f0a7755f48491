"""What the server measurably did at steady state: between a point's ramp and the end of its arrivals.

A point's whole window (first answer to last end) mixes three regimes: the ramp, while the server fills
from idle; the steady state, while requests arrive and leave at the pace the server holds; and the
drain, after the last arrival, when the server empties. A rate the server holds is read in the middle
one only: completions and output tokens counted inside it, over its length.

The window opens at the first counted send plus the ramp (RAMP_E2E end-to-end latencies of the point,
and at least RAMP_SHARE of its arrivals' span, at most half of it) and closes at the last counted send.
Whether the server kept up is read from the requests in the system (sent, not yet ended) across the
window: constant when it keeps up, growing at (offered - served) per second when it does not; the
least-squares slope over the window, with TTFT's against the send time beside it (a queue in front
of the prefill shows there first).

Several runs of one rate are pooled (`pool`) for a p99 a user meets over hours: near capacity a slow
stretch delays hundreds of consecutive requests at once, so the pooled p99's interval resamples blocks
of consecutive sends whole (BLOCKS per window), never single requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict

from benchmarks.loadgen.core import LoadRun, Record
from benchmarks.loadgen.spec import LoadSpec
from benchmarks.loadgen.stats import Summary, meets_slo, scaled, summarize_ms, tpot_s

RAMP_E2E = 2.0
RAMP_SHARE = 0.2
# The in-system count is read on a grid this fine (seconds on the figures' scale).
GRID_S = 0.05
# Blocks of consecutive sends each window is cut into for a pooled figure's interval: about 20 s each in a
# 300-s run, longer than the slow stretches near capacity (tens of seconds), and 30 blocks over three runs.
BLOCKS = 10


class SteadyState(BaseModel):
    """A point's steady window and what the server did in it; times in seconds on the figures' scale
    (GPU time for a simulator run faster), from the counted requests' first send."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    start_s: float
    end_s: float
    seconds: float
    arrivals: int  # counted requests sent in the window
    completions: int  # completed requests that ended in it
    offered_per_s: float  # arrivals / seconds: the rate the window was really offered
    requests_per_s: float  # completions / seconds: the rate the server served
    output_tokens_per_s: float  # output tokens streamed in the window / seconds
    goodput_per_s: float | None  # completions in it that met every SLO / seconds; None without SLOs
    # Least-squares slope of the requests in the system over the window: ~0 when the server keeps up.
    in_system_growth_per_s: float
    in_system_mean: float
    # Least-squares slope of TTFT against send time, over the window's arrivals (ms per second).
    ttft_growth_ms_per_s: float | None
    # Latencies of the requests sent in the window (ms).
    ttft_ms: Summary | None
    tpot_ms: Summary | None
    itl_ms: Summary | None
    e2e_ms: Summary | None

    @property
    def growth_share(self) -> float:
        """The in-system growth as a share of the offered rate: the part of the arrivals left queued."""
        return self.in_system_growth_per_s / self.offered_per_s if self.offered_per_s else 0.0


def _slope(x: np.ndarray, y: np.ndarray) -> float | None:
    if x.size < 3 or np.ptp(x) <= 0:
        return None
    return float(np.polyfit(x, y, 1)[0])


class Window(NamedTuple):
    """One run's steady window: its records on the figures' scale, the first counted send, and the window."""

    records: list[Record]
    t0: float
    start: float
    end: float

    @property
    def sent_ok(self) -> list[Record]:
        """The completed requests sent in the window: whose latencies are the window's."""
        return [r for r in self.records if r.ok and self.start <= r.scheduled <= self.end]


def window(run: LoadRun, time_scale: float = 1.0) -> Window | None:
    """The steady window of one point's counted requests; None when it has too few to have one."""
    records = [scaled(r, time_scale) for r in run.records] if time_scale != 1.0 else run.records
    ok = [r for r in records if r.ok]
    if len(ok) < 3:
        return None
    t0 = min(r.scheduled for r in records)
    last = max(r.scheduled for r in records)
    span = last - t0
    e2e_p50 = float(np.median([r.end - r.scheduled for r in ok]))
    ramp = min(max(RAMP_E2E * e2e_p50, RAMP_SHARE * span), span / 2)
    return Window(records, t0, t0 + ramp, last) if last > t0 + ramp else None


def steady_state(run: LoadRun, spec: LoadSpec, time_scale: float = 1.0) -> SteadyState | None:
    """What the server did in the steady window of one point's counted requests; None without one."""
    w = window(run, time_scale)
    if w is None:
        return None
    records, t0, start, end = w
    ok = [r for r in records if r.ok]
    seconds = end - start
    sent = [r for r in records if start <= r.scheduled <= end]
    done = [r for r in ok if start <= r.end <= end]
    tokens = sum(r.output_tokens / len(r.chunk_times) * sum(1 for t in r.chunk_times if start <= t <= end)
                 for r in ok if r.chunk_times)  # fmt: skip
    grid = np.arange(start, end, GRID_S)
    sends = np.sort([r.scheduled for r in records])
    ends = np.sort([r.end for r in records])
    in_system = np.searchsorted(sends, grid, side="right") - np.searchsorted(ends, grid, side="right")
    sent_ok = w.sent_ok
    ttft = np.array([(r.first_token or r.end) - r.scheduled for r in sent_ok]) * 1000.0
    growth = _slope(grid, in_system.astype(float))
    ttft_growth = _slope(np.array([r.scheduled for r in sent_ok]), ttft)
    met = None if not spec.slo.is_set() else sum(1 for r in done if meets_slo(r, spec.slo)) / seconds
    return SteadyState(
        start_s=start - t0,
        end_s=end - t0,
        seconds=seconds,
        arrivals=len(sent),
        completions=len(done),
        offered_per_s=len(sent) / seconds,
        requests_per_s=len(done) / seconds,
        output_tokens_per_s=tokens / seconds,
        goodput_per_s=met,
        in_system_growth_per_s=growth or 0.0,
        in_system_mean=float(in_system.mean()) if in_system.size else 0.0,
        ttft_growth_ms_per_s=ttft_growth,
        **latencies(sent_ok),
    )


def latencies(requests: Sequence[Record], blocks: Sequence[int] | None = None) -> dict[str, Summary | None]:
    """TTFT, TPOT, ITL and E2E of `requests`; with `blocks` (counts of consecutive requests that belong
    together), their intervals resample those blocks whole, else single requests (ITL: one request's gaps)."""
    tpots = [tpot_s(r) for r in requests]
    gaps = [max(0, len(r.chunk_times) - 1) for r in requests]

    def per_block(counts: Sequence[int]) -> list[int] | None:
        """Values per block, where each request has `counts` of them; None without blocks."""
        if not blocks:
            return None
        ends = np.cumsum(blocks)
        return [int(sum(counts[e - b : e])) for b, e in zip(blocks, ends)]

    ones = [1] * len(requests)
    return {
        "ttft_ms": summarize_ms([(r.first_token or r.end) - r.scheduled for r in requests], per_block(ones)),
        "tpot_ms": summarize_ms([t for t in tpots if t is not None], per_block([t is not None for t in tpots])),
        "itl_ms": summarize_ms([b - a for r in requests for a, b in zip(r.chunk_times, r.chunk_times[1:])],
                               per_block(gaps) or gaps),  # fmt: skip
        "e2e_ms": summarize_ms([r.end - r.scheduled for r in requests], per_block(ones)),
    }


class Pooled(BaseModel):
    """Several runs' steady windows of one offered rate as one long window: sums over the runs, latencies
    over every request sent in them (intervals from resampling blocks of consecutive sends whole)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    runs: int
    seconds: float
    arrivals: int
    completions: int
    failed: int  # requests sent in the windows that did not complete
    offered_per_s: float
    requests_per_s: float
    output_tokens_per_s: float
    # The requests in the system's change across the windows (their least-squares slopes times their
    # lengths, summed) as a share of the arrivals: above 0 growing, below 0 draining a backlog.
    growth_share: float
    ttft_ms: Summary | None
    tpot_ms: Summary | None
    itl_ms: Summary | None
    e2e_ms: Summary | None


def pool(runs: Sequence[tuple[SteadyState, Window]]) -> Pooled | None:
    """One rate's runs pooled: each run's steady state and its window; None without any."""
    if not runs:
        return None
    requests: list[Record] = []
    blocks: list[int] = []
    for _, w in runs:
        sent = sorted(w.sent_ok, key=lambda r: r.scheduled)
        edges = np.linspace(w.start, w.end, BLOCKS + 1)[1:-1]
        blocks += [int(n) for n in np.bincount(np.searchsorted(edges, [r.scheduled for r in sent], side="right"),
                                               minlength=BLOCKS) if n]  # fmt: skip
        requests += sent
    seconds = sum(s.seconds for s, _ in runs)
    arrivals = sum(s.arrivals for s, _ in runs)
    return Pooled(
        runs=len(runs), seconds=seconds, arrivals=arrivals, completions=sum(s.completions for s, _ in runs),
        failed=arrivals - len(requests), offered_per_s=arrivals / seconds,
        requests_per_s=sum(s.completions for s, _ in runs) / seconds,
        output_tokens_per_s=sum(s.output_tokens_per_s * s.seconds for s, _ in runs) / seconds,
        growth_share=sum(s.in_system_growth_per_s * s.seconds for s, _ in runs) / arrivals if arrivals else 0.0,
        **latencies(requests, blocks),
    )  # fmt: skip
