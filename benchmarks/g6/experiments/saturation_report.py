"""The saturation experiment's Markdown report and knee plot, pure functions of a saved SaturationResult."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from benchmarks.g6.experiments.saturation import GROWTH, KEEP_UP, SaturationPoint, SaturationResult  # noqa: E402
from benchmarks.g6.price import slo_text  # noqa: E402
from benchmarks.g6.report import context_lines, cost_sections, errors_section, price_cell, target_text  # noqa: E402
from benchmarks.g6.shape import asked_text, realised_section  # noqa: E402
from benchmarks.harness.evidence import markdown as evidence_section  # noqa: E402
from benchmarks.harness.markdown import num, table  # noqa: E402
from benchmarks.labs.phases_report import waited_first  # noqa: E402

PLOTS = ("saturation-knee.png",)


def _ms(value: float | None) -> str | None:
    return None if value is None else f"{value:,.0f}"


def _header(r: SaturationResult) -> str:
    m, p, s = r.meta, r.params, r.saturation
    lines = [
        "# Lab g6: the request rate this server holds within the SLOs",
        "",
        f"Model `{p.model}` served by {target_text(p)}; {m.started_at.isoformat()} to {m.finished_at.isoformat()}.",
        "",
        evidence_section(m.evidence),
        "## What was run",
        "",
        f"- Open-loop Poisson arrivals at offered rates doubling from {s.start_rate:g} requests/s until one fails, "
        f"then a bisection between the highest rate that passed and the lowest that failed, until they are within "
        f"{s.tolerance:.0%} (at most {s.max_points} points, no new point after {s.max_seconds:g} s). Each point "
        f"sends at least {s.point_seconds:g} s of arrivals (at least {p.requests_at(None)} counted requests) after one second's "
        "warm-up.",
        f"- A rate passes when the server kept up (its counted requests' completions kept pace with their "
        f"arrivals: the least-squares slope of end against scheduled send time at most 1/{KEEP_UP:g}; past "
        f"capacity they queue and finish at the server's pace, offered / slope) and every SLO's p99 is met: "
        f"{slo_text(p)}.",
        f"- Requests: {asked_text(p)}, `/v1/{'chat/completions' if p.api == 'chat' else 'completions'}` streaming; "
        f"max-num-seqs {p.max_num_seqs[0] if p.max_num_seqs[0] is not None else 'the server default'}",
        f"- Rates and latencies: {p.time_scale}" + (f" (the simulator was sent {p.speedup:g}x each rate)"
                                                   if p.speedup != 1.0 else ""),
        *context_lines(m, p, [x.point for x in r.points]),
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def _answer(r: SaturationResult) -> str:
    at = r.at_saturation
    if at is None:
        first = min((x.rate for x in r.points), default=None)
        text = (f"No rate passed: the lowest tried, {first:g} requests/s, failed ({'; '.join(r.points[0].misses)})."
                if first is not None and r.points else "No rate was measured.")  # fmt: skip
        return "## The answer\n\n" + text + "\n"
    p = at.point
    above = f"; {r.first_failing_rate:,.2f} requests/s failed" if r.first_failing_rate is not None else (
        "; no rate failed within the budget: the saturation rate is at least this")
    cost = p.usd_per_million_output_tokens
    price = (f" At that rate a million output tokens cost **${cost.gpu_node_spot:.3f}** on the GPU node at spot "
             f"(${cost.cluster_on_demand:.3f} for the whole cluster on demand; every basis under What serving costs)."
             if cost is not None else "")  # fmt: skip
    return (
        "## The answer\n\n"
        f"**Saturation rate: {r.saturation_rate:,.2f} requests/s**{above}. There it served "
        f"{num(at.served_rate, 2)} requests/s and {p.output_tokens_per_s:,.0f} output tokens/s, TTFT p50/p99 "
        f"{_ms(p.ttft_ms.p50 if p.ttft_ms else None)} / {_ms(p.ttft_ms.p99 if p.ttft_ms else None)} ms, "
        f"TPOT p99 {_ms(p.tpot_ms.p99 if p.tpot_ms else None)} ms.{price}\n"
    )


def _lag(x: SaturationPoint) -> str | None:
    lag = x.point.client_lag_ms
    return None if lag is None else f"{lag.p99:.1f}" + (" **client-bound**" if x.point.client_bound else "")


def _points(r: SaturationResult) -> str:
    rows = [
        [f"{x.rate:,.3g}", num(x.served_rate, 2), f"{x.point.output_tokens_per_s:,.0f}", x.point.completed,
         x.point.failed, _ms(x.point.ttft_ms.p50 if x.point.ttft_ms else None),
         _ms(x.point.ttft_ms.p99 if x.point.ttft_ms else None), _ms(x.point.tpot_ms.p99 if x.point.tpot_ms else None),
         None if x.point.server is None or x.point.server.waiting is None else f"{x.point.server.waiting.max:.0f}",
         _lag(x), price_cell(x.point), "passed" if x.passed else "; ".join(x.misses)]
        for x in r.points
    ]  # fmt: skip
    return "## Every rate\n\n" + table(
        ["offered req/s", "served req/s", "output tok/s", "ok", "failed", "TTFT p50 ms", "TTFT p99 ms", "TPOT p99 ms",
         "waiting max", "client lag p99 ms", "$ per M output tokens", "verdict"],
        rows,
    ) + (
        "\nA **client-bound** point's lag p99 passed the limit the sweep uses (--max-client-lag-ms, or 5% of its "
        "TTFT p50): the load generator, not the server, may have shaped it. The simulator shares this machine's "
        "CPUs with it: on a busy machine the search finds what the CPUs serve, not the simulated GPU.\n"
    )  # fmt: skip


def render_saturation_report(r: SaturationResult) -> str:
    labelled = [(f"{x.rate:,.3g} req/s", x.point) for x in r.points]
    plots = "## Plots\n\n" + "\n".join(f"![{name}]({name})" for name in PLOTS) + "\n"
    return waited_first("\n".join([_header(r), _answer(r), _points(r), realised_section(labelled),
                      cost_sections(labelled, r.params, r.gpu_price, r.cost), errors_section(r.meta.errors), plots]), r.waited)  # fmt: skip


def knee_plot(r: SaturationResult, path: Path) -> None:
    """Throughput and TTFT p99 against the offered rate, the saturation rate marked."""
    fig, ax = plt.subplots(figsize=(8, 4.8))
    rates = [x.rate for x in r.points]
    ax.plot(rates, [x.served_rate or 0 for x in r.points], marker="o", color="#3182bd", label="served requests/s")
    ax.plot(rates, rates, color="#bdbdbd", linestyle=":", label="offered = served")
    ax.set_xlabel("offered requests/s (Poisson, GPU time)")
    ax.set_ylabel("served requests/s", color="#3182bd")
    ax.set_xscale("log", base=GROWTH)
    ttft = ax.twinx()
    ttft.plot(rates, [x.point.ttft_ms.p99 if x.point.ttft_ms else float("nan") for x in r.points],
              marker="s", color="#de2d26", label="TTFT p99 (ms)")  # fmt: skip
    ttft.set_ylabel("TTFT p99 ms (GPU time)", color="#de2d26")
    ttft.set_yscale("log")
    if r.params.slo.ttft_ms is not None:
        ttft.axhline(r.params.slo.ttft_ms, color="#de2d26", linestyle="--", linewidth=1, label="TTFT SLO")
    for x in r.points:
        if not x.passed:
            ax.plot([x.rate], [x.served_rate or 0], marker="x", color="black", markersize=9, linestyle="none")
    if r.saturation_rate is not None:
        ax.axvline(r.saturation_rate, color="#31a354", linewidth=2, label=f"saturation {r.saturation_rate:,.2f} req/s")
    lines = ax.get_legend_handles_labels()
    more = ttft.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="upper left")
    ax.grid(True, alpha=0.3)
    ax.set_title("The knee: served rate stops following the offered rate, TTFT climbs (x: failed)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render_saturation_plots(r: SaturationResult, folder: Path) -> list[Path]:
    paths = [folder / name for name in PLOTS]
    knee_plot(r, paths[0])
    return paths
