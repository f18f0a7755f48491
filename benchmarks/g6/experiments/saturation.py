"""`--experiment saturation`: the request rate one server holds within the SLOs, found for the user.

Open-loop Poisson arrivals (no coordinated omission: a slow server cannot slow the arrivals down) at
rates that double from `start_rate` until a point fails, then a bisection between the last rate that
passed and the first that failed, until the two are within `tolerance` of each other or the point or
time budget is spent. The saturation rate is the highest rate that passed.

A point passes when the server kept up with it and, with SLOs given, every SLO's p99 is met (the
same test as the cheapest point's, price.slo_misses). Keeping up: the counted requests' completions
kept pace with their arrivals (the least-squares slope of end time against scheduled send time at
most 1/KEEP_UP). A server that keeps up ends requests as they come; past its capacity requests queue
and end at its own pace (the slope is offered rate / capacity), so throughput stops rising with the
offered rate and TTFT grows along the queue. Without SLOs, keeping up is the test.

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
from benchmarks.g6.result import ExperimentResult, G6Point, GpuPrice
from benchmarks.g6.sweep import Measurement, Outcome, PointContext, Target, interruptible, load_spec, measure_point
from benchmarks.g6.targets import ServerSettings
from benchmarks.harness import RunMeta
from benchmarks.harness.server import server_versions
from benchmarks.loadgen import LoadSpec

KEEP_UP = 0.95  # completions at least this share of the arrivals' pace: the server kept up
# A point sends at least this many seconds of arrivals (more requests at higher rates), so the queue
# of a rate past capacity has time to show; never fewer than --requests.
DEFAULT_POINT_SECONDS = 8.0
DEFAULT_START_RATE = 2.0
GROWTH = 2.0


class SaturationParams(BaseModel):
    """How the saturation search runs (the SLOs are G6Params')."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    start_rate: float = Field(DEFAULT_START_RATE, gt=0, description="first offered rate, requests/s of the GPU")
    tolerance: float = Field(0.1, gt=0, lt=1, description="stop when pass and fail rates are this close (share)")
    max_points: int = Field(12, ge=2)
    max_seconds: float = Field(900.0, gt=0, description="no new point after this much wall time")
    point_seconds: float = Field(DEFAULT_POINT_SECONDS, gt=0, description="seconds of arrivals per point, at least")


class SaturationPoint(BaseModel):
    """One offered rate and what it did."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rate: float = Field(description="offered requests/s of the GPU (Poisson)")
    served_rate: float | None = Field(description="requests/s the server finished them at, of the GPU")
    kept_up: bool
    passed: bool
    misses: list[str]
    point: G6Point


class SaturationResult(ExperimentResult):
    saturation: SaturationParams
    saturation_rate: float | None = Field(description="the highest offered rate that passed, requests/s of the GPU")
    first_failing_rate: float | None
    points: list[SaturationPoint]

    @property
    def at_saturation(self) -> SaturationPoint | None:
        return next((p for p in self.points if p.rate == self.saturation_rate), None)


def at_served_rate(point: G6Point, served: float, price: GpuPrice | None) -> G6Point:
    """`point` with its rates at the pace the server finished its requests, and priced at it. Its window
    (first answer to last end) also holds the tail after the arrivals stop, one end-to-end latency in
    which nothing new arrives, so over a few seconds of arrivals it reads low by that share; what the
    server sustained is the served rate. Tokens per second are that rate times the tokens each request
    returned (the server's counts), goodput its share of that rate; the window's relative interval is kept."""
    if not point.completed or point.requests_per_s <= 0:
        return point
    scale = served / point.requests_per_s
    ci = {name: None if (iv := getattr(point, name)) is None else (iv[0] * scale, iv[1] * scale)
          for name in ("requests_per_s_ci95", "output_tokens_per_s_ci95")}  # fmt: skip
    tokens_per_request = point.output_tokens_per_s / point.requests_per_s
    goodput = point.goodput and point.goodput.model_copy(update={"requests_per_s": served * point.goodput.fraction})
    served_point = point.model_copy(
        update={"requests_per_s": served, "output_tokens_per_s": served * tokens_per_request, "goodput": goodput, **ci}
    )
    return served_point.model_copy(update={"usd_per_million_output_tokens": prices_per_million(price, served_point)})


def judge(point: G6Point, rate: float, params: G6Params, price: GpuPrice | None) -> SaturationPoint:
    """Whether the server kept up with `rate` and met the SLOs (latencies in GPU time); the point's rates
    and prices at the pace it served."""
    slope = point.end_slope
    kept_up = slope is not None and slope <= 1 / KEEP_UP
    served = None if not slope else rate / slope
    if served is not None:
        point = at_served_rate(point, served, price)
    # The point's latencies are the GPU's already (sweep.measure_point converts them once).
    misses = [] if kept_up else [f"did not keep up: finished {served or 0:,.2f} req/s of the {rate:,.2f} offered"]
    misses += slo_misses(point, params)
    return SaturationPoint(rate=rate, served_rate=served, kept_up=kept_up, passed=not misses, misses=misses, point=point)


def next_rate(points: list[SaturationPoint], sat: SaturationParams) -> float | None:
    """Double until a failure, then bisect between the highest pass and the lowest failure above it;
    None when they are within the tolerance (or nothing passes above the lowest rate's failure)."""
    if not points:
        return sat.start_rate
    passed = [p.rate for p in points if p.passed]
    failed = [p.rate for p in points if not p.passed]
    if not failed:
        return max(passed) * GROWTH
    if not passed:
        low = min(failed)
        # Below the start: halve towards a rate that passes, as far as the budget goes.
        return low / GROWTH if low / GROWTH >= sat.start_rate / 64 else None
    best = max(passed)
    above = [r for r in failed if r > best]
    if not above:
        return best * GROWTH
    fail = min(above)
    if (fail - best) / best <= sat.tolerance:
        return None
    return (best + fail) / 2


def point_spec(params: G6Params, sat: SaturationParams, base_url: str, rate: float) -> LoadSpec:
    """One open-loop point at `rate` requests/s of the GPU (the simulator's `speedup` times that)."""
    sent = rate * params.speedup
    requests = max(params.requests_at(None), round(sent * sat.point_seconds))
    # Bounded in time too: a server far past capacity ends the point soon after its arrivals are sent.
    return load_spec(params, base_url, rate=sent, requests=requests, duration_s=params.duration_s or 3 * sat.point_seconds)


@dataclass
class SaturationOutcome(Outcome):
    points: list[SaturationPoint] = field(default_factory=list)
    max_points: int = 0

    @property
    def measured(self) -> int:
        return len(self.points)

    def done(self) -> str:
        return f"{self.measured} of at most {self.max_points} rates"


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
        while len(outcome.points) < sat.max_points and time.monotonic() - started < sat.max_seconds:
            rate = next_rate(outcome.points, sat)
            if rate is None:
                break
            label = f"rate={rate:,.3g}/s"
            point, errors = measure_point(params, point_spec(params, sat, server.base_url, rate), server, label,
                                          PointContext(mns, sizing), how)  # fmt: skip
            outcome.errors += errors
            judged = judge(point, rate, params, how.price)
            outcome.points.append(judged)
            how.progress.log(f"g6: {label}: {'passed' if judged.passed else 'failed: ' + '; '.join(judged.misses)}")
        if next_rate(outcome.points, sat) is not None:
            outcome.errors.append(f"the search stopped at its budget ({sat.max_points} points, {sat.max_seconds:g} s) "
                                  "before pass and fail were within the tolerance")  # fmt: skip


def saturation_result(meta: RunMeta, params: G6Params, sat: SaturationParams, outcome: SaturationOutcome,
                      price: GpuPrice | None, cost: str | None) -> SaturationResult:  # fmt: skip
    passed = [p.rate for p in outcome.points if p.passed]
    best = max(passed, default=None)
    failing = [p.rate for p in outcome.points if not p.passed and (best is None or p.rate > best)]
    return SaturationResult(
        meta=meta, params=params, saturation=sat, saturation_rate=best, first_failing_rate=min(failing, default=None),
        points=sorted(outcome.points, key=lambda p: p.rate), gpu_price=price, cost=cost,
    )  # fmt: skip
