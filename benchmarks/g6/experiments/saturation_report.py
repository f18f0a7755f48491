"""The saturation experiment's Markdown report and knee plot, pure functions of a saved SaturationResult."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from benchmarks.g6.experiments.saturation import (  # noqa: E402
    GROWTH, KEEP_UP, SaturationPoint, SaturationResult, SaturationRun, steady_view,
)  # fmt: skip
from benchmarks.g6.price import slo_text  # noqa: E402
from benchmarks.g6.report import context_lines, cost_sections, errors_section, rerun_cell, title  # noqa: E402
from benchmarks.g6.result import G6Point  # noqa: E402
from benchmarks.g6.shape import asked_text, realised_section  # noqa: E402
from benchmarks.harness.evidence import markdown as evidence_section  # noqa: E402
from benchmarks.harness.markdown import num, table  # noqa: E402
from benchmarks.labs.phases_report import waited_first  # noqa: E402
from benchmarks.loadgen.reruns import Rerun  # noqa: E402
from benchmarks.loadgen.steady import RAMP_E2E, RAMP_SHARE  # noqa: E402

PLOTS = ("saturation-knee.png",)


def _verdict(x: SaturationPoint) -> str:
    return f"{'passed' if x.passed else 'failed'} ({x.passes} of {len(x.runs)} runs passed)"


def _header(r: SaturationResult) -> str:
    m, p, s = r.meta, r.params, r.saturation
    lines = [
        evidence_section(m.evidence),
        "## What was run",
        "",
        f"- Open-loop Poisson arrivals at offered rates doubling from {s.start_rate:g} requests/s until one fails, "
        f"then a bisection between the highest rate that passed and the lowest that failed, until they are within "
        f"{s.tolerance:.0%}; those two rates then ran again, each with its own seed, until each had {s.seeds} runs "
        f"(a rate passes when most of its runs do). At most {s.max_points} runs and no new run after "
        f"{s.max_seconds:g} s. Each run sends at least {s.point_seconds:g} s of arrivals, and at least "
        f"{s.e2e_multiple:g} times the E2E p99 of the rate below it, after one second's warm-up.",
        f"- Every figure is the steady state's: completions and output tokens counted from {RAMP_E2E:g} end-to-end "
        f"latencies after the first send (at least {RAMP_SHARE:.0%} of the arrivals' span) to the last arrival, "
        "over that window; latencies of the requests sent in it.",
        f"- A run passes when the server kept up (the requests in the system, sent and not ended, grew across the "
        f"window by at most {1 - KEEP_UP:.0%} of the arrivals: past capacity they grow at offered - served per "
        f"second) and every SLO's p99 is met: {slo_text(p)}.",
        f"- Requests: {asked_text(p)}, `/v1/{'chat/completions' if p.api == 'chat' else 'completions'}` streaming; "
        f"max-num-seqs {p.max_num_seqs[0] if p.max_num_seqs[0] is not None else 'the server default'}",
        f"- Rates and latencies: {p.time_scale}" + (f" (the simulator was sent {p.speedup:g}x each rate)"
                                                   if p.speedup != 1.0 else ""),
        *context_lines(m, p, [run.point for x in r.points for run in x.runs]),
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def _cell(value: Rerun | None, digits: int = 1) -> str:
    return rerun_cell(value, digits) or "—"


def _answer(r: SaturationResult) -> str:
    at, fail = r.at_saturation, r.first_failing
    if at is None:
        first = r.points[0] if r.points else None
        text = (f"No rate passed: the lowest tried, {first.rate:g} requests/s, {_verdict(first)}: "
                f"{'; '.join(first.runs[0].misses)}." if first is not None else "No rate was measured.")  # fmt: skip
        return "## The answer\n\n" + text + "\n"
    lines = [
        "## The answer",
        "",
        f"**The server served {_cell(at.served, 2)} requests/s and {_cell(at.output_tokens_per_s, 0)} output "
        f"tokens/s at steady state** when offered {at.rate:,.2f} requests/s, the highest rate that passed "
        f"({at.passes} of {len(at.runs)} runs); TTFT p50 / p99 {_cell(at.ttft_p50_ms, 0)} / {_cell(at.ttft_p99_ms, 0)} ms, "
        f"TPOT p99 {_cell(at.tpot_p99_ms, 1)} ms"
        + (f", goodput {_cell(at.goodput_per_s, 2)} requests/s" if at.goodput_per_s is not None else "") + ".",
    ]  # fmt: skip
    if fail is not None:
        lines.append(
            f"Offered {fail.rate:,.2f} requests/s it failed ({fail.passes} of {len(fail.runs)} runs passed: "
            + "; ".join(f"run {run.run + 1} {', '.join(run.misses)}" for run in fail.runs if not run.passed)
            + f") and served {_cell(fail.served, 2)} requests/s, the requests in the system growing by "
            f"{rerun_cell(fail.queue_growth_share, 1, percent=True)} of the arrivals (keeping up: at most "
            f"{1 - KEEP_UP:.0%}): what the server holds lies between the two."
        )  # fmt: skip
    else:
        lines.append("No rate failed within the budget: the server holds at least this.")
    cost = at.usd_per_million_output_tokens
    if cost is not None:
        lines.append(f"At that rate a million output tokens cost **${_cell(cost, 3)}** on the GPU node at spot "
                     "(every basis under What serving costs).")  # fmt: skip
    runs = max((len(x.runs) for x in (at, fail) if x is not None), default=1)
    lines += ["", f"Figures are means over the rate's runs, each with its own seed; brackets are the 95% interval a "
              f"rerun's mean of {runs} falls in (mean ± t·s·√(2/n), Student's t)."]  # fmt: skip
    return "\n".join(lines) + "\n"


def _rates(r: SaturationResult) -> str:
    rows = [
        [f"{x.rate:,.3g}", len(x.runs), _cell(x.offered, 2), _cell(x.served, 2), _cell(x.output_tokens_per_s, 0),
         rerun_cell(x.queue_growth_share, 1, percent=True), _cell(x.ttft_p50_ms, 0), _cell(x.ttft_p99_ms, 0), _cell(x.tpot_p99_ms, 1),
         _cell(x.usd_per_million_output_tokens, 3), _verdict(x)]
        for x in r.points
    ]  # fmt: skip
    return "## Every rate\n\n" + table(
        ["offered req/s (planned)", "runs", "offered req/s (steady window)", "served req/s", "output tok/s",
         "queue growth % of arrivals", "TTFT p50 ms", "TTFT p99 ms", "TPOT p99 ms", "$ per M output tokens",
         "verdict"],
        rows,
    ) + "\nSteady-state figures, mean (95% rerun interval) over each rate's runs; one run shows its figure alone.\n"


def _lag(point: G6Point) -> str | None:
    lag = point.client_lag_ms
    return None if lag is None else f"{lag.p99:.1f}" + (" **client-bound**" if point.client_bound else "")


def _growth(run: SaturationRun) -> str | None:
    s = run.steady
    if s is None:
        return None
    ttft = "" if s.ttft_growth_ms_per_s is None else f"; TTFT {s.ttft_growth_ms_per_s:+,.1f} ms/s"
    return f"{s.in_system_growth_per_s:+,.2f}/s ({s.growth_share:+.1%}){ttft}"


def _runs(r: SaturationResult) -> str:
    rows = []
    for x in r.points:
        for run in x.runs:
            s, hits = run.steady, run.point.server.prefix_cache_hit_rate if run.point.server else None
            rows.append([
                f"{x.rate:,.3g}", run.run + 1, run.point.seed, f"{run.arrivals_s:,.0f}",
                None if s is None else f"{s.start_s:,.1f}–{s.end_s:,.1f}", None if s is None else s.completions,
                None if s is None else f"{s.offered_per_s:,.2f}", None if s is None else f"{s.requests_per_s:,.2f}",
                None if s is None else f"{s.output_tokens_per_s:,.0f}", _growth(run),
                None if s is None else f"{s.in_system_mean:,.1f}",
                None if s is None or s.ttft_ms is None else f"{s.ttft_ms.p99:,.0f}",
                None if run.point.server is None or run.point.server.waiting is None else f"{run.point.server.waiting.max:.0f}",
                None if hits is None else f"{hits:.1%}", _lag(run.point),
                "passed" if run.passed else "; ".join(run.misses),
            ])  # fmt: skip
    return "## Every run\n\n" + table(
        ["offered req/s", "run", "seed", "arrivals s", "steady window s", "completions in it", "offered req/s",
         "served req/s", "output tok/s", "in-system growth (share of arrivals); TTFT trend", "in system (mean)",
         "TTFT p99 ms", "waiting max", "prefix-cache hits", "client lag p99 ms", "verdict"],
        rows,
    ) + (
        "\nThe steady window runs from the first counted send (0 s). A **client-bound** run's lag p99 passed the "
        "limit the sweep uses (--max-client-lag-ms, or 5% of its TTFT p50): the load generator, not the server, may "
        "have shaped it. The simulator shares this machine's CPUs with the load generator: on a busy machine a run "
        "finds what the CPUs serve, not the simulated GPU, which the rerun intervals then show.\n"
    )  # fmt: skip


def _priced(r: SaturationResult) -> list[tuple[str, G6Point]]:
    """Each run as the cost section reads it: its steady figures, priced at them."""
    return [(f"{x.rate:,.3g} req/s run {run.run + 1}", steady_view(run.point, run.steady, run.usd_per_million_output_tokens))
            for x in r.points for run in x.runs if run.steady is not None]  # fmt: skip


def _passing(r: SaturationResult) -> set[str]:
    return {f"{x.rate:,.3g} req/s run {run.run + 1}" for x in r.points if x.passed for run in x.runs if run.passed}


def render_saturation_report(r: SaturationResult) -> str:
    labelled = [(f"{x.rate:,.3g} req/s run {run.run + 1}", run.point) for x in r.points for run in x.runs]
    plots = "## Plots\n\n" + "\n".join(f"![{name}]({name})" for name in PLOTS) + "\n"
    costs = cost_sections(_priced(r), r.params, r.gpu_price, r.cost, passing=_passing(r))
    return waited_first("\n".join([title("the request rate this server holds within the SLOs", r.meta, r.params),
                                   _answer(r), _rates(r), _header(r), _runs(r), realised_section(labelled), costs,
                                   errors_section(r.meta.errors), plots]), r.waited)  # fmt: skip


def _errors(values: list[Rerun | None]) -> list[list[float]]:
    lows = [0.0 if v is None or v.lo is None else v.mean - v.lo for v in values]
    highs = [0.0 if v is None or v.hi is None else v.hi - v.mean for v in values]
    return [lows, highs]


def knee_plot(r: SaturationResult, path: Path) -> None:
    """Served rate and TTFT p99 against the offered rate (steady state, rerun intervals), the answer marked."""
    fig, ax = plt.subplots(figsize=(8, 4.8))
    rates = [x.rate for x in r.points]
    served = [x.served.mean if x.served else 0.0 for x in r.points]
    ax.errorbar(rates, served, yerr=_errors([x.served for x in r.points]), marker="o", color="#3182bd", capsize=3,
                label="served requests/s (steady state)")  # fmt: skip
    ax.plot(rates, rates, color="#bdbdbd", linestyle=":", label="offered = served")
    ax.set_xlabel("offered requests/s (Poisson, GPU time)")
    ax.set_ylabel("served requests/s", color="#3182bd")
    ax.set_xscale("log", base=GROWTH)
    ttft = ax.twinx()
    ttft.errorbar(rates, [x.ttft_p99_ms.mean if x.ttft_p99_ms else float("nan") for x in r.points],
                  yerr=_errors([x.ttft_p99_ms for x in r.points]), marker="s", color="#de2d26", capsize=3,
                  label="TTFT p99 (ms)")  # fmt: skip
    ttft.set_ylabel("TTFT p99 ms (GPU time)", color="#de2d26")
    ttft.set_yscale("log")
    if r.params.slo.ttft_ms is not None:
        ttft.axhline(r.params.slo.ttft_ms, color="#de2d26", linestyle="--", linewidth=1, label="TTFT SLO")
    for x, y in zip(r.points, served):
        if not x.passed:
            ax.plot([x.rate], [y], marker="x", color="black", markersize=9, linestyle="none")
    if r.saturation_rate is not None:
        ax.axvline(r.saturation_rate, color="#31a354", linewidth=2, label=f"held: {r.saturation_rate:,.2f} req/s offered")
    lines = ax.get_legend_handles_labels()
    more = ttft.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="upper left")
    ax.grid(True, alpha=0.3)
    ax.set_title("The knee: served rate stops following the offered rate (x: failed)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render_saturation_plots(r: SaturationResult, folder: Path) -> list[Path]:
    paths = [folder / name for name in PLOTS]
    knee_plot(r, paths[0])
    return paths
