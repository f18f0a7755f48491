"""What serving costs: the price of a million output tokens at the GPU node's list price, per point,
and the cheapest point that meets the SLOs given.

The price is the one the stack's cost estimate uses (stacks.cost_estimate: the dated table of facts/prices.py,
spot or on-demand as the stack configures its GPU pool, boot disk included): the node is paid for by
the hour whatever it serves, so a point's price is that hourly rate over the output tokens an hour
at the point's throughput. A simulated run is priced as Pulumi.g6.yaml configures the stack, at the
throughput the real GPU would have (the simulator's divided by its speedup).
"""

from __future__ import annotations

from collections.abc import Sequence

from benchmarks.g6.config import G6Params
from benchmarks.g6.result import G6Point, GpuPrice
from stacks.cost_estimate import CostEstimate

SECONDS_PER_HOUR = 3600
TOKENS_PER_PRICE = 1_000_000


def gpu_price(est: CostEstimate, source: str) -> GpuPrice:
    """The GPU node's price from the stack's cost estimate (machine and boot disk, spot or on-demand)."""
    return GpuPrice(
        usd_per_hour=est.gpu_node.unit_per_hour,
        node=est.gpu_node.item,
        region=est.region,
        price_date=est.price_date,
        source=source,
    )


def usd_per_million_output_tokens(price: GpuPrice | None, output_tokens_per_s: float, speedup: float) -> float | None:
    """The node's hourly price over the output tokens it would serve in an hour at this throughput."""
    real_tokens_per_s = output_tokens_per_s / speedup
    if price is None or real_tokens_per_s <= 0:
        return None
    return price.usd_per_hour / (real_tokens_per_s * SECONDS_PER_HOUR) * TOKENS_PER_PRICE


def slo_misses(point: G6Point, params: G6Params) -> list[str]:
    """Each SLO the point's p99 breaks, in words; the latencies as the real GPU would show them."""
    measured = {"TTFT": point.ttft_ms, "ITL": point.itl_ms, "TPOT": point.tpot_ms, "E2E": point.e2e_ms}
    misses = []
    for name, limit in _limits(params).items():
        summary = measured[name]
        if summary is None:
            misses.append(f"no {name} measured")
        elif summary.p99 * params.speedup > limit:
            misses.append(f"{name} p99 {summary.p99 * params.speedup:,.1f} ms > {limit:g} ms")
    if point.failed:
        misses.append(f"{point.failed} failed requests")
    return misses


def _limits(params: G6Params) -> dict[str, float]:
    limits = {"TTFT": params.slo.ttft_ms, "ITL": params.slo_itl_ms, "TPOT": params.slo.tpot_ms, "E2E": params.slo.e2e_ms}
    return {name: limit for name, limit in limits.items() if limit is not None}


def slo_text(params: G6Params) -> str:
    given = [f"{name} p99 <= {limit:g} ms" for name, limit in _limits(params).items()]
    return ", ".join(given) if given else "none given (--slo-ttft-ms, --slo-itl-ms, --slo-tpot-ms, --slo-e2e-ms)"


def _describe(label: str, p: G6Point, speedup: float) -> str:
    return (
        f"**{label}**: **${p.usd_per_million_output_tokens:.3f} per million output tokens** "
        f"({p.output_tokens_per_s / speedup:,.0f} output tokens/s on the GPU"
        + (f", TTFT p99 {p.ttft_ms.p99 * speedup:,.0f} ms" if p.ttft_ms else "")
        + (f", ITL p99 {p.itl_ms.p99 * speedup:,.1f} ms" if p.itl_ms else "")
        + ")"
    )


def cheapest(points: Sequence[tuple[str, G6Point]], params: G6Params) -> str:
    """One Markdown paragraph: the cheapest labelled point that meets the SLOs, or why none does."""
    priced = [(label, p) for label, p in points if p.usd_per_million_output_tokens is not None]
    if not priced:
        return "No point has a price: the run has no GPU price (a server given by URL) or no throughput.\n"

    def price(lp: tuple[str, G6Point]) -> float:
        return lp[1].usd_per_million_output_tokens or 0.0

    if not _limits(params):
        return f"SLOs: {slo_text(params)}. The cheapest point is {_describe(*min(priced, key=price), params.speedup)}.\n"
    meeting = [(label, p) for label, p in priced if not slo_misses(p, params)]
    if not meeting:
        label, p = min(priced, key=price)
        return (
            f"SLOs: {slo_text(params)}. No point meets them. The cheapest point overall, {label}, costs "
            f"${p.usd_per_million_output_tokens:.3f} per million output tokens but misses: "
            f"{'; '.join(slo_misses(p, params))}.\n"
        )
    return (
        f"SLOs: {slo_text(params)}. The cheapest point that meets them is "
        f"{_describe(*min(meeting, key=price), params.speedup)}.\n"
    )
