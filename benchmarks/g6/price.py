"""What serving costs: the price of a million output tokens per point, on every basis (the GPU node
spot and on-demand, the whole cluster hour, GKE Inference Quickstart's convention), the cheapest
setting that meets the SLOs given in every run (priced at its runs' mean throughput), and what a session
costs.

The prices are those of the stack's cost estimate (stacks.cost_estimate: the dated table of
facts/prices.py, boot disk included): a node is paid for by the hour whatever it serves, so a
point's price is an hourly rate over the output tokens an hour at the point's throughput. A
simulated run is priced as Pulumi.g6.yaml configures the stack; its figures are in GPU time already
(converted where results are made), so nothing here rescales them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from benchmarks.g6.config import LAB, G6Params
from benchmarks.g6.result import G6Point, GpuPrice, TokenPrices
from benchmarks.loadgen import PointStats
from benchmarks.loadgen.steady import Pooled
from facts import prices
from stacks.cost_estimate import CostEstimate, estimate_or_none, estimate_section, markdown
from stacks.stackfile import load_config

SECONDS_PER_HOUR = 3600
TOKENS_PER_PRICE = 1_000_000
# GKE Inference Quickstart (GKE Recommender API, `Cost`): "$/output token = GPU $/s / (1/output-to-input-
# cost-ratio * input tokens/s + output tokens/s)", the ratio 4.0 when not given, spot pricing by default.
GIQ_OUTPUT_TO_INPUT_COST_RATIO = 4.0
# A session's GPU node is paid for beyond its measurements: from the scale-up (the cluster autoscaler
# adding a node from zero, driver install, image pull, model load: "minutes, up to ~15" before the GPU
# is allocatable) to the scale-down (the cluster autoscaler removes a node unneeded for 10 minutes, its
# default scale-down-unneeded-time). Assumed, not measured: a session's own timeline would say.
SCALE_UP_S = 15 * 60
IDLE_TAIL_S = 10 * 60


def gpu_price(est: CostEstimate, machine_type: str, spot: bool, source: str) -> GpuPrice:
    """The prices of the stack's cost estimate: its GPU node spot and on-demand (the boot disk as the
    estimate prices it), and the rest of the cluster; PricingError for a machine not in the table."""
    machine = prices.machine_price(est.region, machine_type)
    disk = est.gpu_node.unit_per_hour - machine.hourly(spot)
    return GpuPrice(
        gpu_node_spot=machine.spot + disk,
        gpu_node_on_demand=machine.on_demand + disk,
        rest_of_cluster=est.base_per_hour,
        configured="spot" if spot else "on-demand",
        node=est.gpu_node.item.removeprefix("GPU node ").split(" (")[0],
        region=est.region,
        price_date=est.price_date,
        source=source,
    )


def _per_million(usd_per_hour: float, tokens_per_s: float) -> float:
    return usd_per_hour / (tokens_per_s * SECONDS_PER_HOUR) * TOKENS_PER_PRICE


def prices_per_million(price: GpuPrice | None, stats: PointStats) -> TokenPrices | None:
    """Each hourly price over the output tokens an hour at the point's throughput (GPU time)."""
    out = stats.output_tokens_per_s
    if price is None or out <= 0:
        return None
    # Input tokens per request as the server counted them (chat template included), else as asked.
    counted = stats.realised.input_tokens if stats.realised is not None else None
    prompt = counted.mean if counted is not None else stats.input_len.mean
    giq_tokens = out + stats.requests_per_s * prompt / GIQ_OUTPUT_TO_INPUT_COST_RATIO
    return TokenPrices(
        gpu_node_spot=_per_million(price.gpu_node_spot, out),
        gpu_node_on_demand=_per_million(price.gpu_node_on_demand, out),
        cluster_spot=_per_million(price.gpu_node_spot + price.rest_of_cluster, out),
        cluster_on_demand=_per_million(price.gpu_node_on_demand + price.rest_of_cluster, out),
        giq_convention=_per_million(price.gpu_node_spot, giq_tokens),
    )


def session_cost(price: GpuPrice, measured_gpu_s: float) -> str:
    """What a session of `measured_gpu_s` seconds of measurements costs with the GPU node's scale-up
    and idle tail, as Markdown lines."""
    hours = (SCALE_UP_S + measured_gpu_s + IDLE_TAIL_S) / SECONDS_PER_HOUR
    gpu_up = price.gpu_node + price.rest_of_cluster
    return (
        f"This session: {measured_gpu_s / 60:.1f} min of measurements on the GPU, plus an assumed "
        f"{SCALE_UP_S // 60} min scale-up from zero (node, driver, image, model load) and the "
        f"{IDLE_TAIL_S // 60} min idle tail before the cluster autoscaler removes the node: the GPU node up "
        f"about {hours * 60:.0f} min, **${hours * gpu_up:.2f}** with the rest of the cluster "
        f"(${hours * price.gpu_node:.2f} of it the GPU node, {price.configured}); the measurements alone "
        f"${measured_gpu_s / SECONDS_PER_HOUR * gpu_up:.2f}.\n"
    )


def stack_gpu_price(outputs: dict[str, Any] | None, params: G6Params) -> GpuPrice | None:
    """The prices the stack's cost estimate uses; for the simulator, Pulumi.g6.yaml's."""
    if outputs is not None:
        saved, pool = outputs.get("cost_estimate"), outputs.get("gpu_pool")
        if not isinstance(saved, dict) or not isinstance(pool, dict) or "machine_type" not in pool:
            return None
        return gpu_price(CostEstimate.model_validate(saved), pool["machine_type"], bool(pool.get("spot", True)),
                         "from the stack's outputs")  # fmt: skip
    if params.target_kind != "sim":
        return None
    cfg = load_config(LAB)
    est = estimate_or_none(cfg)
    if est is None:
        return None
    return gpu_price(est, cfg.gpu_machine_type, cfg.gpu_spot, "as Pulumi.g6.yaml configures the g6 stack")


def cost_section(outputs: dict[str, Any] | None, params: G6Params, seconds: float, price: GpuPrice | None,
                 session: bool = True) -> str | None:  # fmt: skip
    """What the stack costs per hour and what this session cost (Markdown); for a simulated run, what
    the same session would cost on the g6 stack as Pulumi.g6.yaml configures it, the GPU up for the
    run's length in GPU time. `session`: False for a run that prices its own scale-ups and idle tail."""
    # A virtual run's wall time is its engine's, not the GPU's: no session to price.
    assumed = price is not None and session and not params.virtual
    priced = "\n" + session_cost(price, seconds * params.speedup) if assumed and price is not None else ""
    if outputs is not None:
        return (estimate_section(outputs) + priced) or None
    if params.target_kind != "sim":
        return None
    est = estimate_or_none(load_config(LAB))
    if est is None:
        return None
    if params.virtual:
        return markdown(est) + "\nThis run replayed its points on the simulator's virtual clock: no GPU time to price.\n"
    return markdown(est) + (
        f"\nThis run took {seconds / 60:.1f} min against the simulator at x{params.speedup:g}: "
        f"{seconds * params.speedup / 60:.1f} min of GPU time on the real L4 (server starts and the gaps between "
        "points included, priced as measurements below).\n"
    ) + priced


def slo_misses(point: G6Point | Pooled, params: G6Params, confident: bool = False) -> list[str]:
    """Each SLO the p99 of `point` (one point, or one rate's runs pooled) breaks, in words (GPU time, as every
    figure of a point); `confident`: each p99 must be met with 95% confidence, its interval's upper end too."""
    measured = {"TTFT": point.ttft_ms, "ITL": point.itl_ms, "TPOT": point.tpot_ms, "E2E": point.e2e_ms}
    misses = []
    for name, limit in _limits(params).items():
        summary = measured[name]
        if summary is None:
            misses.append(f"no {name} measured")
        elif summary.p99 > limit:
            misses.append(f"{name} p99 {summary.p99:,.1f} ms > {limit:g} ms")
        elif confident and summary.ci95["p99"][1] > limit:
            misses.append(f"{name} p99 {summary.p99:,.1f} ms, its 95% interval up to {summary.ci95['p99'][1]:,.1f} ms "
                          f"> {limit:g} ms")  # fmt: skip
    if point.failed:
        misses.append(f"{point.failed} failed requests")
    return misses


def _limits(params: G6Params) -> dict[str, float]:
    limits = {"TTFT": params.slo.ttft_ms, "ITL": params.slo_itl_ms, "TPOT": params.slo.tpot_ms, "E2E": params.slo.e2e_ms}
    return {name: limit for name, limit in limits.items() if limit is not None}


def slo_text(params: G6Params) -> str:
    given = [f"{name} p99 <= {limit:g} ms" for name, limit in _limits(params).items()]
    return ", ".join(given) if given else "none given (--slo-ttft-ms, --slo-itl-ms, --slo-tpot-ms, --slo-e2e-ms)"


class Run(NamedTuple):
    """One measured run as the cost section prices it: its setting (what a user would deploy: a server's
    settings and its load) and which of the setting's repeats it was (None for a setting run once)."""

    setting: str
    repeat: int | None
    point: G6Point

    @property
    def label(self) -> str:
        return self.setting if self.repeat is None else f"{self.setting} run {self.repeat + 1}"


class _Setting(NamedTuple):
    """A setting's runs, priced together: at their mean throughput (the harmonic mean of the runs' prices,
    since a price is an hourly rate over the tokens an hour), so that one lucky run does not make it cheap."""

    name: str
    runs: list[G6Point]
    usd: float


def _settings(runs: Sequence[Run]) -> list[_Setting]:
    grouped: dict[str, list[G6Point]] = {}
    for run in runs:
        grouped.setdefault(run.setting, []).append(run.point)
    out = []
    for name, points in grouped.items():
        spots = [tp.gpu_node_spot for p in points if (tp := p.usd_per_million_output_tokens) is not None]
        if spots and len(spots) == len(points) and all(spots):
            out.append(_Setting(name, points, len(spots) / sum(1 / usd for usd in spots)))
    return out


def _describe(s: _Setting) -> str:
    n = len(s.runs)
    upto = "up to " if n > 1 else ""  # each tail the highest of the runs'
    ttft = [p.ttft_ms.p99 for p in s.runs if p.ttft_ms]
    itl = [p.itl_ms.p99 for p in s.runs if p.itl_ms]
    return (
        f"**{s.name}**: **${s.usd:.3f} per million output tokens** on a spot GPU node "
        f"({sum(p.output_tokens_per_s for p in s.runs) / n:,.0f} output tokens/s"
        + (f" on average over {n} runs" if n > 1 else "")
        + (f"; TTFT p99 {upto}{max(ttft):,.0f} ms" if ttft else "")
        + (f", ITL p99 {upto}{max(itl):,.1f} ms" if itl else "")
        + "; GPU time)"
    )


def cheapest(runs: Sequence[Run], params: G6Params, passing: set[str] | None = None) -> str:
    """One Markdown paragraph: the cheapest setting that meets the SLOs in every one of its runs, priced at
    its runs' mean throughput, or why none does, at the GPU node's spot price (every basis ranks the
    settings alike but GIQ's, which counts input tokens too). With `passing`, the settings an experiment
    has judged itself (a saturation rate held within the SLOs over its pooled runs): those, and only those,
    meet them."""
    priced = _settings(runs)
    if passing is not None:
        kept = [s for s in priced if s.name in passing]
        if not kept:
            return "No setting passed (see the verdicts above): none is priced as one to serve at.\n"
        return f"SLOs: {slo_text(params)}. The cheapest setting that passed is {_describe(min(kept, key=_usd))}.\n"
    if not priced:
        return "No point has a price: the run has no GPU price (a server given by URL) or no throughput.\n"
    if not _limits(params):
        return f"SLOs: {slo_text(params)}. The cheapest setting is {_describe(min(priced, key=_usd))}.\n"
    meeting = [s for s in priced if not any(slo_misses(p, params) for p in s.runs)]
    if not meeting:
        s = min(priced, key=_usd)
        misses = [f"{f'run {i + 1}: ' if len(s.runs) > 1 else ''}{'; '.join(m)}"
                  for i, p in enumerate(s.runs) if (m := slo_misses(p, params))]  # fmt: skip
        return (
            f"SLOs: {slo_text(params)}. No setting meets them in every run. The cheapest setting overall, "
            f"{s.name}, costs ${s.usd:.3f} per million output tokens but misses: {' / '.join(misses)}.\n"
        )
    return (f"SLOs: {slo_text(params)}. The cheapest setting that meets them in every run is "
            f"{_describe(min(meeting, key=_usd))}.\n")  # fmt: skip


def _usd(s: _Setting) -> float:
    return s.usd
