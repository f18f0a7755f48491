"""A point run on the real-time simulator through the real client, beside the virtual-clock oracle's
answer to the very same plan (benchmarks/sim/virtual.py), and the bands their figures agree within.

An experiment's agreement check: build its LoadSpec with the experiment's own function (sweep.load_spec,
a saturation point, a kv wave, a prefix arm) and call `side_by_side(target, settings, spec_at)`; then
`outside(real, oracle, bands)` lists what disagrees. The bands are measured (docs/testing.md, "The
virtual-clock oracle"): what a real-time run adds is the host's (client lag, the loopback hop, stream
chunks coalescing, event-loop and timer delays), so latencies are bounded more loosely above the oracle
than below it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from benchmarks.g6.targets import ServerSettings, SimTarget
from benchmarks.loadgen import LoadSpec, PointStats, run_load, summarize
from benchmarks.sim.virtual import replay


class Band(NamedTuple):
    """real / oracle must lie in [low, high]."""

    low: float
    high: float


FIGURES: dict[str, Callable[[PointStats], float]] = {
    "req/s": lambda p: p.requests_per_s,
    "output tok/s": lambda p: p.output_tokens_per_s,
    "TTFT p50": lambda p: p.ttft_ms.p50,
    "TTFT p90": lambda p: p.ttft_ms.p90,
    "TTFT p99": lambda p: p.ttft_ms.p99,
    "ITL p50": lambda p: p.itl_ms.p50,
    "ITL p90": lambda p: p.itl_ms.p90,
    "ITL p99": lambda p: p.itl_ms.p99,
    "ITL mean": lambda p: p.itl_ms.mean,
    "E2E p50": lambda p: p.e2e_ms.p50,
}


def side_by_side(target: SimTarget, settings: ServerSettings, spec_at: Callable[[str], LoadSpec]) -> tuple[PointStats, PointStats]:
    """(real-time, oracle) figures of one point, both in GPU time: the plan `spec_at(base_url)` makes, run
    by the load generator against the simulator `target.serving(settings)` starts, and replayed."""
    config = target.config(settings)
    with target.serving(settings) as server:
        spec = spec_at(server.base_url)
        real = summarize(run_load(spec), spec, config.speedup)
    oracle, _ = replay(spec.plan(), config).point(spec)
    return real, oracle


def ratios(real: PointStats, oracle: PointStats) -> dict[str, float]:
    return {name: figure(real) / figure(oracle) for name, figure in FIGURES.items()}


def outside(real: PointStats, oracle: PointStats, bands: dict[str, Band]) -> list[str]:
    """Each banded figure whose real / oracle ratio falls outside its band, in words."""
    found = ratios(real, oracle)
    return [f"{name}: real {FIGURES[name](real):,.2f} / oracle {FIGURES[name](oracle):,.2f} = {found[name]:.3f}, "
            f"outside [{band.low}, {band.high}]" for name, band in bands.items()
            if not band.low <= found[name] <= band.high]  # fmt: skip
