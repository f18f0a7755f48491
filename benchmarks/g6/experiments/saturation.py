"""`--experiment saturation`: the request rate one server holds within the SLOs, found for the user.

Open-loop Poisson arrivals (no coordinated omission: a slow server cannot slow the arrivals down), in two
stages. **Locate**: one short run (`point_seconds`) per rate, doubling from `start_rate` until a rate
fails, then bisecting between the highest that passed and the lowest that failed until they are within
`tolerance`. **Hold**: from the located answer, each rate runs `seeds` times for `hold_seconds` with seeds
of its own, and is judged on its runs' steady windows pooled (benchmarks.loadgen.steady.pool): the p99
a user meets over hours. The hold bisects until the highest held rate that passed and the lowest that
failed above it are within `fine_tolerance`; the answer is that highest held rate.

Why both: near capacity the p99 is a cliff (Qwen2.5-1.5B on the simulated L4, 30 minutes replayed at 31
and 32 req/s: TTFT p99 266 and 713 ms), and one minute's p99 scatters across it (a third of the 60-s
windows at 32 req/s miss 500 ms, and some at 31 do). Three runs of 300 s pool about 20,000 requests, 200
above the p99; the stretches that make the tail last tens of seconds, so the pooled p99's interval
resamples blocks of consecutive sends whole, and a held rate passes only when that interval's upper end
meets the SLO: the margin the answer carries.

A held rate also passes only at steady state, two-sided: the requests in the system (sent, not ended)
neither grew nor fell across its windows by more than BALANCE of the arrivals (growing: past capacity;
falling: draining a backlog, which would lift the served rate above what was offered); and it may not
offer more than the server served when overloaded (the most any run that fell behind served): where
served stops following offered, a rate is past what the server holds whatever the latency says. A
located run passes on its own window: it kept up (the requests in the system grew by at most 1 - KEEP_UP
of the arrivals) and every SLO's p99 is met.

Every figure is what the server measurably did at steady state (benchmarks.loadgen.steady): the
completions and output tokens counted between the ramp (two end-to-end latencies from the first send)
and the last arrival, over that window's length; never the offered rate divided by anything. Each run
sends at least `e2e_multiple` end-to-end latencies of the rate below it too, so its window holds many
request lifetimes.

Rates are requests per second of the GPU: with --sim the simulator is sent `speedup` times as many
(a point's own `rate` is what was sent); its latencies, like every point's, are the GPU's.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Literal

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
from benchmarks.loadgen.steady import Pooled, SteadyState, Window, pool, window

KEEP_UP = 0.95  # a located run: the requests in the system may grow by at most 1 - KEEP_UP of the arrivals
# A held rate: the requests in the system may neither grow nor fall by more than this share of the
# arrivals across its windows. Pooled over ~20,000 arrivals a queue that keeps up moves by a few tenths of
# a percent; one 2% past capacity grows by 2%.
BALANCE = 0.02
DEFAULT_POINT_SECONDS = 60.0
DEFAULT_HOLD_SECONDS = 300.0
DEFAULT_START_RATE = 2.0
DEFAULT_SEEDS = 3
GROWTH = 2.0
Stage = Literal["locate", "hold"]


class SaturationParams(BaseModel):
    """How the saturation search runs (the SLOs are G6Params')."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    start_rate: float = Field(DEFAULT_START_RATE, gt=0, description="first offered rate, requests/s of the GPU")
    tolerance: float = Field(0.1, gt=0, lt=1, description="locate until pass and fail rates are this close (share)")
    fine_tolerance: float = Field(0.02, gt=0, lt=1, description="hold until pass and fail rates are this close")
    # 40: about 8 located rates, then 5 or 6 held rates of 3 runs, and room for a held answer that moves.
    max_points: int = Field(40, ge=2, description="runs in all, both stages")
    max_seconds: float = Field(7200.0, gt=0, description="no new run after this much wall time")
    point_seconds: float = Field(DEFAULT_POINT_SECONDS, gt=0, description="seconds of arrivals per located run, at least")
    hold_seconds: float = Field(DEFAULT_HOLD_SECONDS, gt=0, description="seconds of arrivals per held run, at least")
    e2e_multiple: float = Field(10.0, gt=0, description="and at least this many end-to-end latencies of the rate below")
    seeds: int = Field(DEFAULT_SEEDS, ge=1, description="runs of each held rate, each with its own seed")


class SaturationRun(BaseModel):
    """One run (one seed) at one offered rate: its steady state and the verdict on it alone."""

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
    """One offered rate in one stage over its runs: each figure's mean over the runs and the 95% interval
    a rerun's mean falls in; a held rate's verdict rests on its runs pooled."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stage: Stage
    rate: float = Field(description="offered requests/s of the GPU (Poisson), as planned")
    passed: bool = Field(description="located: its run passed; held: its runs pooled did")
    misses: list[str] = Field(description="why it failed (held: the pooled verdict's reasons)")
    runs: list[SaturationRun]
    pooled: Pooled | None = Field(description="held: its runs' steady windows as one")
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
    saturation_rate: float | None = Field(description="the highest held rate that passed, requests/s of the GPU")
    first_failing_rate: float | None = Field(description="the lowest held rate that failed above it")
    capacity_per_s: float | None = Field(description="the most any run that fell behind served: what the server "
                                         "serves overloaded, requests/s")  # fmt: skip
    usd_per_million_output_tokens: TokenPrices | None = Field(description="at the answer, its runs pooled")
    points: list[SaturationPoint]

    def held(self, rate: float | None) -> SaturationPoint | None:
        return next((p for p in self.points if p.stage == "hold" and p.rate == rate), None)

    @property
    def at_saturation(self) -> SaturationPoint | None:
        return self.held(self.saturation_rate)

    @property
    def first_failing(self) -> SaturationPoint | None:
        return self.held(self.first_failing_rate)

    @property
    def utilisation(self) -> float | None:
        """The answer's served rate over what the server serves overloaded."""
        at = self.at_saturation
        if at is None or at.pooled is None or not self.capacity_per_s:
            return None
        return at.pooled.requests_per_s / self.capacity_per_s


def steady_view(point: G6Point, steady: SteadyState | Pooled, price: TokenPrices | None = None) -> G6Point:
    """`point` with the figures its verdict and price rest on taken from its steady window (or its rate's
    windows pooled): rates, goodput and latencies (for judging and pricing; the saved point keeps its own)."""
    goodput = None
    good = steady.goodput_per_s if isinstance(steady, SteadyState) else None
    if point.goodput is not None and good is not None:
        share = good / steady.requests_per_s if steady.requests_per_s else 0.0
        goodput = Goodput(slo=point.goodput.slo, requests_per_s=good, fraction=share)
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


def balance(arrivals: int) -> float:
    """How far (a share of the arrivals) a held rate's requests in the system may move either way: BALANCE,
    or three Poisson deviations of the arrivals (3/sqrt(n)) where fewer arrivals cannot tell less apart
    from none (past capacity the overloaded served rate still bounds the rate)."""
    return max(BALANCE, 3 / math.sqrt(arrivals)) if arrivals else 1.0


def held_misses(rate: float, pooled: Pooled | None, params: G6Params, capacity: float | None) -> list[str]:
    """Why a held rate fails, its runs pooled: not at steady state (either way), above what the server
    serves overloaded, or an SLO's p99 not met with 95% confidence."""
    if pooled is None:
        return ["too few completions for a steady window"]
    misses = []
    band = balance(pooled.arrivals)
    if pooled.growth_share > band:
        misses.append(f"did not keep up: the requests in the system grew by {pooled.growth_share:.1%} of the "
                      f"arrivals across its {pooled.runs} runs (at most {band:.1%})")  # fmt: skip
    elif pooled.growth_share < -band:
        misses.append(f"not at steady state: the requests in the system fell by {-pooled.growth_share:.1%} of the "
                      f"arrivals across its {pooled.runs} runs, a backlog draining (at most {band:.1%})")  # fmt: skip
    if capacity is not None and rate > capacity:
        misses.append(f"offered above the {capacity:,.2f} req/s the server served when overloaded")
    return misses + slo_misses(pooled, params, confident=True)


def rate_point(stage: Stage, rate: float, runs: list[SaturationRun], windows: list[Window | None],
               params: G6Params, capacity: float | None) -> SaturationPoint:  # fmt: skip
    """A rate's figures over its runs. Located: it passes when its run did; held: when its runs pooled do
    (`windows`: each run's steady window, in the runs' order, None for a run without one)."""
    steady = [r.steady for r in runs if r.steady is not None]

    def of(name: str, which: str | None = None) -> Rerun | None:
        values = [getattr(s, name) for s in steady]
        return rerun([None if v is None else getattr(v, which) for v in values] if which else values)

    pooled = None
    if stage == "hold":
        pairs = zip(runs, windows, strict=True)
        pooled = pool([(r.steady, w) for r, w in pairs if r.steady is not None and w is not None])
        misses = held_misses(rate, pooled, params, capacity)
    else:
        misses = [m for r in runs for m in r.misses]
    return SaturationPoint(
        stage=stage, rate=rate, passed=not misses, misses=misses, runs=runs, pooled=pooled,
        offered=of("offered_per_s"), served=of("requests_per_s"), output_tokens_per_s=of("output_tokens_per_s"),
        goodput_per_s=of("goodput_per_s"), queue_growth_share=rerun([s.growth_share for s in steady], signed=True),
        ttft_p50_ms=of("ttft_ms", "p50"), ttft_p99_ms=of("ttft_ms", "p99"), tpot_p99_ms=of("tpot_ms", "p99"),
        e2e_p99_ms=of("e2e_ms", "p99"),
        usd_per_million_output_tokens=rerun([r.usd_per_million_output_tokens.gpu_node_spot
                                             if r.usd_per_million_output_tokens else None for r in runs]),
    )  # fmt: skip


def bracket(points: list[SaturationPoint]) -> tuple[SaturationPoint | None, SaturationPoint | None]:
    """The highest rate that passed and the lowest that failed above it: the rates that decide the answer."""
    best = max((p for p in points if p.passed), key=lambda p: p.rate, default=None)
    above = [p for p in points if not p.passed and (best is None or p.rate > best.rate)]
    return best, min(above, key=lambda p: p.rate, default=None)


def next_rate(points: list[SaturationPoint], sat: SaturationParams) -> float | None:
    """The next located rate: double until a failure, then bisect between the highest pass and the lowest
    failure above it; None when they are within the tolerance (or nothing passes above the lowest rate's)."""
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


def next_held(located: list[SaturationPoint], held: list[SaturationPoint], sat: SaturationParams) -> float | None:
    """The next held rate: the located answer first; below the lowest held rate while none passes; the
    located failure (then further up) while none fails above the best; then bisection to `fine_tolerance`.
    None when settled, or when nothing located passed."""
    lo, hi = bracket(located)
    if lo is None:
        return None
    if not held:
        return lo.rate
    best, fail = bracket(held)
    tried = {p.rate for p in held}
    if best is None:
        lower = min(tried) * (1 - sat.tolerance)
        return lower if lower >= sat.start_rate / 64 else None
    if fail is None:
        if hi is not None and hi.rate > best.rate and hi.rate not in tried:
            return hi.rate
        return best.rate * (1 + sat.tolerance)
    if (fail.rate - best.rate) / best.rate <= sat.fine_tolerance:
        return None
    return (best.rate + fail.rate) / 2


def arrival_seconds(points: list[SaturationPoint], rate: float, at_least: float, sat: SaturationParams) -> float:
    """Seconds of arrivals at `rate`: at least `at_least`, and `e2e_multiple` times the end-to-end p99 of the
    highest rate below it that passed (a rate past capacity has no E2E to size by)."""
    below = [p for p in points if p.rate < rate and p.passed and p.e2e_p99_ms is not None]
    e2e_s = max(below, key=lambda p: p.rate).e2e_p99_ms.mean / 1000.0 if below else 0.0  # type: ignore[union-attr]
    return max(at_least, sat.e2e_multiple * e2e_s)


def point_spec(params: G6Params, base_url: str, rate: float, seconds: float, run: int = 0,
               stage: Stage = "locate") -> LoadSpec:  # fmt: skip
    """One open-loop run at `rate` requests/s of the GPU for `seconds` (GPU time) of counted arrivals; the
    simulator is sent `speedup` times the rate for seconds / speedup. Seeded by its stage, rate and run."""
    sent = rate * params.speedup
    requests = max(params.requests_at(None), round(rate * seconds))
    key = ("rate", rate, "run", run) if stage == "locate" else ("hold", rate, "run", run)
    # Bounded in time too: a server far past capacity ends the run soon after its arrivals are sent.
    return load_spec(params, base_url, rate=sent, requests=requests, seed=point_seed(params.seed, *key),
                     duration_s=params.duration_s or 2 * seconds / params.speedup + 10)  # fmt: skip


@dataclass
class SaturationOutcome(Outcome):
    points: list[SaturationPoint] = field(default_factory=list)
    max_points: int = 0
    # Each held rate's runs' steady windows in the runs' order (None: a run without one), for pooling (not
    # saved: the pooled figures are).
    windows: dict[float, list[Window | None]] = field(default_factory=dict)

    @property
    def measured(self) -> int:
        return sum(len(p.runs) for p in self.points)

    def stage(self, stage: Stage) -> list[SaturationPoint]:
        return [p for p in self.points if p.stage == stage]

    @property
    def capacity(self) -> float | None:
        """The most any run that fell behind served: what the server serves overloaded."""
        behind = [r.steady.requests_per_s for p in self.points for r in p.runs if r.steady is not None and not r.kept_up]
        return max(behind, default=None)

    def done(self) -> str:
        return (f"{self.measured} of at most {self.max_points} runs ({len(self.stage('locate'))} rates located, "
                f"{len(self.stage('hold'))} held)")  # fmt: skip


def _to_run(outcome: SaturationOutcome, sat: SaturationParams) -> tuple[Stage, float, int] | None:
    """The next (stage, rate, run index): a located rate, else the held rate short of its seeds, else a new
    held rate; None when the answer is settled."""
    located, held = outcome.stage("locate"), outcome.stage("hold")
    rate = next_rate(located, sat)
    if rate is not None:
        return "locate", rate, 0
    # No run fell behind (the SLO failed the rates first): one a little past the located failure measures what
    # the server serves overloaded, for the cap and the answer's utilisation. Only a little: far past capacity
    # a vLLM-like server preempts and serves less (the simulated L4 at 64 requests/s: 30, at 36-40: 33.2-33.6).
    _, fail = bracket(located)
    probe = None if fail is None else fail.rate * (1 + 2 * sat.tolerance)
    if outcome.capacity is None and probe is not None and all(p.rate < probe for p in located):
        return "locate", probe, 0
    short = next((p for p in held if len(p.runs) < sat.seeds), None)
    if short is not None:
        return "hold", short.rate, len(short.runs)
    rate = next_held(located, held, sat)
    return None if rate is None else ("hold", rate, 0)


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
            stage, rate, run = todo
            earlier = next((p for p in outcome.stage(stage) if p.rate == rate), None)
            at_least = sat.point_seconds if stage == "locate" else sat.hold_seconds
            seconds = earlier.runs[0].arrivals_s if earlier else arrival_seconds(outcome.points, rate, at_least, sat)
            label = f"{stage} rate={rate:,.4g}/s" + (f" run {run + 1} of {sat.seeds}" if stage == "hold" else "")
            how.progress.log(f"g6: {label}: {seconds:,.0f} s of arrivals ({outcome.measured + 1} of at most "
                             f"{sat.max_points} runs, {time.monotonic() - started:,.0f} of {sat.max_seconds:,.0f} s)")  # fmt: skip
            spec = point_spec(params, server.base_url, rate, seconds, run, stage)
            measured = measure_point(params, spec, server, label, PointContext(mns, sizing), how, steady=True)
            outcome.errors += measured.errors
            judged = judge(measured.point, run, seconds, params, how.price)
            runs = [*(earlier.runs if earlier else []), judged]
            if stage == "hold":
                outcome.windows.setdefault(rate, []).append(window(measured.run, params.speedup))
            point = rate_point(stage, rate, runs, outcome.windows.get(rate, []) if stage == "hold" else [], params,
                               outcome.capacity)  # fmt: skip
            outcome.points = sorted([p for p in outcome.points if (p.stage, p.rate) != (stage, rate)] + [point],
                                    key=lambda p: (p.stage != "locate", p.rate))  # fmt: skip
            verdict = point if stage == "hold" and len(runs) == sat.seeds else judged
            how.progress.log(f"g6: {label}: {'passed' if verdict.passed else 'failed: ' + '; '.join(verdict.misses)}"
                             + (" (its runs pooled)" if verdict is point else ""))  # fmt: skip
        if _to_run(outcome, sat) is not None:
            outcome.errors.append(f"the search stopped at its budget ({sat.max_points} runs, {sat.max_seconds:g} s) "
                                  "before the held pass and fail were within the tolerance, each with its seeds")  # fmt: skip


def saturation_result(meta: RunMeta, params: G6Params, sat: SaturationParams, outcome: SaturationOutcome,
                      price: GpuPrice | None, cost: str | None) -> SaturationResult:  # fmt: skip
    held = [p for p in outcome.stage("hold") if len(p.runs) == sat.seeds]
    best, fail = bracket(held)
    tokens = None
    if best is not None and best.pooled is not None:
        tokens = prices_per_million(price, steady_view(best.runs[0].point, best.pooled))
    return SaturationResult(
        meta=meta, params=params, saturation=sat, saturation_rate=best.rate if best else None,
        first_failing_rate=fail.rate if fail else None, capacity_per_s=outcome.capacity,
        usd_per_million_output_tokens=tokens, points=outcome.points, gpu_price=price, cost=cost,
    )  # fmt: skip
