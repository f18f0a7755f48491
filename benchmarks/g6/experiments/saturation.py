"""`--experiment saturation`: the request rate one server holds within the SLOs, found for the user.

Open-loop Poisson arrivals (no coordinated omission: a slow server cannot slow the arrivals down) at
rates that double from `start_rate` until a rate fails, then a bisection between the highest rate that
passed and the lowest that failed, until the two are within `tolerance` of each other. Those two rates
decide the answer, so each is then run again with other seeds until it has `seeds` runs (the search
goes on if a rerun turns a verdict); a rate passes when most of its runs pass.

Every figure is what the server measurably did at steady state (benchmarks.loadgen.steady): the
completions and output tokens counted between the ramp (two end-to-end latencies from the first send)
and the last arrival, over that window's length; never the offered rate divided by anything. Each
point sends at least `point_seconds` of arrivals, and at least `e2e_multiple` end-to-end latencies of
the rate below it, so its steady window holds many request lifetimes.

A run passes when the server kept up and, with SLOs given, every SLO's p99 over the window's arrivals
is met (the same test as the cheapest point's, price.slo_misses). Keeping up: the requests in the
system (sent, not ended) did not grow across the window by more than 1 - KEEP_UP of the arrivals:
past capacity they grow at (offered - served) per second whatever the SLOs say.

Rates are requests per second of the GPU: with --sim the simulator is sent `speedup` times as many
(a point's own `rate` is what was sent); its latencies, like every point's, are the GPU's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from benchmarks.g6.analysis import predict
from benchmarks.g6.config import G6Params
from benchmarks.g6.price import prices_per_million, slo_misses
from benchmarks.g6.result import ExperimentResult, G6Point, GpuPrice, TokenPrices
from benchmarks.g6.sweep import (
    Measurement,
    Outcome,
    PointContext,
    Target,
    interruptible,
    load_spec,
    measure_point,
    point_seed,
)
from benchmarks.g6.targets import ServerSettings
from benchmarks.harness import RunMeta
from benchmarks.harness.server import server_versions
from benchmarks.loadgen import Goodput, LoadSpec
from benchmarks.loadgen.reruns import Rerun, rerun
from benchmarks.loadgen.steady import SteadyState

KEEP_UP = 0.95  # the requests in the system may grow by at most 1 - KEEP_UP of the arrivals
DEFAULT_POINT_SECONDS = 60.0
DEFAULT_START_RATE = 2.0
DEFAULT_SEEDS = 3
GROWTH = 2.0


class SaturationParams(BaseModel):
    """How the saturation search runs (the SLOs are G6Params')."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    start_rate: float = Field(DEFAULT_START_RATE, gt=0, description="first offered rate, requests/s of the GPU")
    tolerance: float = Field(0.1, gt=0, lt=1, description="stop when pass and fail rates are this close (share)")
    # 24: room for a search whose answer moves after its reruns (a rate that passes on rerun sends it on up).
    max_points: int = Field(24, ge=2, description="runs in all, reruns of the deciding rates included")
    max_seconds: float = Field(2400.0, gt=0, description="no new run after this much wall time")
    point_seconds: float = Field(DEFAULT_POINT_SECONDS, gt=0, description="seconds of arrivals per point, at least")
    e2e_multiple: float = Field(10.0, gt=0, description="and at least this many end-to-end latencies of the rate below")
    seeds: int = Field(DEFAULT_SEEDS, ge=1, description="runs of each deciding rate, each with its own seed")


class SaturationRun(BaseModel):
    """One run (one seed) at one offered rate: its steady state and the verdict on it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run: int = Field(description="which run of this rate, from 0 (each with its own seed)")
    arrivals_s: float = Field(description="seconds of counted arrivals sent, GPU time")
    kept_up: bool
    passed: bool
    misses: list[str]
    usd_per_million_output_tokens: TokenPrices | None = Field(description="priced at the steady output tokens/s")
    point: G6Point = Field(description="every counted request of the run, ramp and drain included; its steady "
                           "state (`point.steady`) is what the verdict and the figures rest on")

    @property
    def steady(self) -> SteadyState | None:
        return self.point.steady


class SaturationPoint(BaseModel):
    """One offered rate over its runs; every figure at steady state, the mean over the runs and the 95%
    interval a rerun's mean falls in."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rate: float = Field(description="offered requests/s of the GPU (Poisson), as planned")
    passed: bool = Field(description="most of its runs passed")
    runs: list[SaturationRun]
    offered: Rerun | None = Field(description="requests/s the steady window was really offered")
    served: Rerun | None = Field(description="completions per second in the steady window")
    output_tokens_per_s: Rerun | None
    goodput_per_s: Rerun | None
    queue_growth_share: Rerun | None = Field(description="the requests in the system's growth over the arrivals")
    ttft_p50_ms: Rerun | None
    ttft_p99_ms: Rerun | None
    tpot_p99_ms: Rerun | None
    e2e_p99_ms: Rerun | None
    usd_per_million_output_tokens: Rerun | None = Field(description="the GPU node at spot")

    @property
    def passes(self) -> int:
        return sum(r.passed for r in self.runs)


class SaturationResult(ExperimentResult):
    saturation: SaturationParams
    saturation_rate: float | None = Field(description="the highest offered rate that passed, requests/s of the GPU")
    first_failing_rate: float | None
    points: list[SaturationPoint]

    @property
    def at_saturation(self) -> SaturationPoint | None:
        return next((p for p in self.points if p.rate == self.saturation_rate), None)

    @property
    def first_failing(self) -> SaturationPoint | None:
        return next((p for p in self.points if p.rate == self.first_failing_rate), None)


def steady_view(point: G6Point, steady: SteadyState, price: TokenPrices | None = None) -> G6Point:
    """`point` with the figures its verdict and price rest on taken from its steady window: rates,
    goodput and latencies (for judging and pricing; the saved point keeps its own)."""
    goodput = None
    if point.goodput is not None and steady.goodput_per_s is not None:
        share = steady.goodput_per_s / steady.requests_per_s if steady.requests_per_s else 0.0
        goodput = Goodput(slo=point.goodput.slo, requests_per_s=steady.goodput_per_s, fraction=share)
    return point.model_copy(update={
        "output_tokens_per_s": steady.output_tokens_per_s, "requests_per_s": steady.requests_per_s,
        "goodput": goodput, "ttft_ms": steady.ttft_ms, "tpot_ms": steady.tpot_ms, "itl_ms": steady.itl_ms,
        "e2e_ms": steady.e2e_ms, "usd_per_million_output_tokens": price,
    })  # fmt: skip


def judge(point: G6Point, run: int, arrivals_s: float, params: G6Params, price: GpuPrice | None) -> SaturationRun:
    """Whether the server kept up with the run's arrivals and met the SLOs over its steady window
    (latencies in GPU time), and what a million output tokens cost at the pace it served."""
    steady = point.steady
    if steady is None:
        return SaturationRun(run=run, arrivals_s=arrivals_s, kept_up=False, passed=False,
                             misses=["too few completions for a steady window"], usd_per_million_output_tokens=None,
                             point=point)  # fmt: skip
    kept_up = steady.growth_share <= 1 - KEEP_UP
    misses = [] if kept_up else [
        f"did not keep up: the requests in the system grew {steady.in_system_growth_per_s:,.2f}/s "
        f"({steady.growth_share:.0%} of the {steady.offered_per_s:,.2f} req/s arriving) across the steady window"]
    view = steady_view(point, steady)
    misses += slo_misses(view, params)
    tokens = prices_per_million(price, view)
    return SaturationRun(run=run, arrivals_s=arrivals_s, kept_up=kept_up, passed=not misses,
                         misses=misses, usd_per_million_output_tokens=tokens, point=point)  # fmt: skip


def rate_point(rate: float, runs: list[SaturationRun]) -> SaturationPoint:
    """A rate's figures over its runs; it passes when more than half of them did."""
    steady = [r.steady for r in runs if r.steady is not None]

    def of(name: str, which: str | None = None) -> Rerun | None:
        values = [getattr(s, name) for s in steady]
        return rerun([None if v is None else getattr(v, which) for v in values] if which else values)

    return SaturationPoint(
        rate=rate, passed=2 * sum(r.passed for r in runs) > len(runs), runs=runs, offered=of("offered_per_s"),
        served=of("requests_per_s"), output_tokens_per_s=of("output_tokens_per_s"), goodput_per_s=of("goodput_per_s"),
        queue_growth_share=rerun([s.growth_share for s in steady], signed=True), ttft_p50_ms=of("ttft_ms", "p50"),
        ttft_p99_ms=of("ttft_ms", "p99"), tpot_p99_ms=of("tpot_ms", "p99"), e2e_p99_ms=of("e2e_ms", "p99"),
        usd_per_million_output_tokens=rerun([r.usd_per_million_output_tokens.gpu_node_spot
                                             if r.usd_per_million_output_tokens else None for r in runs]),
    )  # fmt: skip


def bracket(points: list[SaturationPoint]) -> tuple[SaturationPoint | None, SaturationPoint | None]:
    """The highest rate that passed and the lowest that failed above it: the rates that decide the answer."""
    best = max((p for p in points if p.passed), key=lambda p: p.rate, default=None)
    above = [p for p in points if not p.passed and (best is None or p.rate > best.rate)]
    return best, min(above, key=lambda p: p.rate, default=None)


def next_rate(points: list[SaturationPoint], sat: SaturationParams) -> float | None:
    """Double until a failure, then bisect between the highest pass and the lowest failure above it;
    None when they are within the tolerance (or nothing passes above the lowest rate's failure)."""
    if not points:
        return sat.start_rate
    best, fail = bracket(points)
    if best is None:
        assert fail is not None
        # Below the start: halve towards a rate that passes, as far as the budget goes.
        return fail.rate / GROWTH if fail.rate / GROWTH >= sat.start_rate / 64 else None
    if fail is None:
        return best.rate * GROWTH
    if (fail.rate - best.rate) / best.rate <= sat.tolerance:
        return None
    return (best.rate + fail.rate) / 2


def arrival_seconds(points: list[SaturationPoint], rate: float, sat: SaturationParams) -> float:
    """Seconds of arrivals at `rate`: at least `point_seconds`, and `e2e_multiple` times the end-to-end
    p99 of the highest rate below it that passed (a rate past capacity has no E2E to size by)."""
    below = [p for p in points if p.rate < rate and p.passed and p.e2e_p99_ms is not None]
    e2e_s = max(below, key=lambda p: p.rate).e2e_p99_ms.mean / 1000.0 if below else 0.0  # type: ignore[union-attr]
    return max(sat.point_seconds, sat.e2e_multiple * e2e_s)


def point_spec(params: G6Params, base_url: str, rate: float, seconds: float, run: int = 0) -> LoadSpec:
    """One open-loop run at `rate` requests/s of the GPU for `seconds` (GPU time) of counted arrivals; the
    simulator is sent `speedup` times the rate for seconds / speedup."""
    sent = rate * params.speedup
    requests = max(params.requests_at(None), round(rate * seconds))
    # Bounded in time too: a server far past capacity ends the run soon after its arrivals are sent.
    return load_spec(params, base_url, rate=sent, requests=requests, seed=point_seed(params.seed, "rate", rate, "run", run),
                     duration_s=params.duration_s or 2 * seconds / params.speedup + 10)  # fmt: skip


@dataclass
class SaturationOutcome(Outcome):
    points: list[SaturationPoint] = field(default_factory=list)
    max_points: int = 0

    @property
    def measured(self) -> int:
        return sum(len(p.runs) for p in self.points)

    def done(self) -> str:
        return f"{self.measured} of at most {self.max_points} runs ({len(self.points)} rates)"


def _to_run(outcome: SaturationOutcome, sat: SaturationParams) -> tuple[float, int] | None:
    """The next (rate, run index): a new rate of the search, else another run of a deciding rate short of
    its seeds; None when the answer is settled."""
    rate = next_rate(outcome.points, sat)
    if rate is not None:
        return rate, 0
    short = [p for p in bracket(outcome.points) if p is not None and len(p.runs) < sat.seeds]
    return (short[0].rate, len(short[0].runs)) if short else None


def run_saturation(params: G6Params, sat: SaturationParams, target: Target, how: Measurement,
                   outcome: SaturationOutcome) -> None:  # fmt: skip
    """The search into `outcome`, against one server. The caller holds `target.session()` and the
    runner's context around it."""
    mns = params.max_num_seqs[0]
    sizing = predict(params, mns)
    outcome.max_points = sat.max_points
    started = time.monotonic()
    settings = ServerSettings() if mns is None or params.target_kind != "sim" else ServerSettings(max_num_seqs=mns)
    with interruptible(outcome), target.serving(settings) as server:
        outcome.server_versions = server_versions(server)
        while outcome.measured < sat.max_points and time.monotonic() - started < sat.max_seconds:
            todo = _to_run(outcome, sat)
            if todo is None:
                break
            rate, run = todo
            earlier = next((p for p in outcome.points if p.rate == rate), None)
            seconds = earlier.runs[0].arrivals_s if earlier else arrival_seconds(outcome.points, rate, sat)
            label = f"rate={rate:,.3g}/s run {run + 1}"
            how.progress.log(f"g6: {label}: {seconds:,.0f} s of arrivals ({outcome.measured + 1} of at most "
                             f"{sat.max_points} runs, {time.monotonic() - started:,.0f} of {sat.max_seconds:,.0f} s)")  # fmt: skip
            spec = point_spec(params, server.base_url, rate, seconds, run)
            measured = measure_point(params, spec, server, label, PointContext(mns, sizing), how, steady=True)
            outcome.errors += measured.errors
            judged = judge(measured.point, run, seconds, params, how.price)
            runs = [*(earlier.runs if earlier else []), judged]
            outcome.points = sorted([p for p in outcome.points if p.rate != rate] + [rate_point(rate, runs)],
                                    key=lambda p: p.rate)  # fmt: skip
            how.progress.log(f"g6: {label}: {'passed' if judged.passed else 'failed: ' + '; '.join(judged.misses)}")
        if _to_run(outcome, sat) is not None:
            outcome.errors.append(f"the search stopped at its budget ({sat.max_points} runs, {sat.max_seconds:g} s) "
                                  "before pass and fail were within the tolerance, each run its seeds")  # fmt: skip


def saturation_result(meta: RunMeta, params: G6Params, sat: SaturationParams, outcome: SaturationOutcome,
                      price: GpuPrice | None, cost: str | None) -> SaturationResult:  # fmt: skip
    best, fail = bracket(outcome.points)
    return SaturationResult(
        meta=meta, params=params, saturation=sat, saturation_rate=best.rate if best else None,
        first_failing_rate=fail.rate if fail else None, points=outcome.points, gpu_price=price, cost=cost,
    )  # fmt: skip
