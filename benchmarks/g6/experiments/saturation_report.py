"""The saturation experiment's Markdown report and knee plot, pure functions of a saved SaturationResult."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from benchmarks.g6.experiments.saturation import (  # noqa: E402
    BALANCE, GROWTH, KEEP_UP, SaturationPoint, SaturationResult, SaturationRun, steady_view,
)  # fmt: skip
from benchmarks.g6.price import Run, slo_text  # noqa: E402
from benchmarks.g6.report import (  # noqa: E402
    context_lines, cost_sections, errors_section, host_flags, latency_pair, rerun_cell, title, with_interval,
)  # fmt: skip
from benchmarks.g6.result import G6Point  # noqa: E402
from benchmarks.g6.shape import asked_text, realised_section  # noqa: E402
from benchmarks.harness.markdown import table  # noqa: E402
from benchmarks.kube.evidence import markdown as evidence_section  # noqa: E402
from benchmarks.kube.phases_report import waited_first  # noqa: E402
from benchmarks.loadgen.reruns import Rerun  # noqa: E402
from benchmarks.loadgen.stats import Summary  # noqa: E402
from benchmarks.loadgen.steady import BLOCKS, RAMP_E2E, RAMP_SHARE  # noqa: E402

PLOTS = ("saturation-cliff.png", "saturation-knee.png")


def _verdict(x: SaturationPoint) -> str:
    if x.stage == "hold":
        return "passed" if x.passed else "failed: " + "; ".join(x.misses)
    return "passed" if x.passed else "failed"


def _header(r: SaturationResult) -> str:
    m, p, s = r.meta, r.params, r.saturation
    lines = [
        evidence_section(m.evidence),
        "## What was run",
        "",
        f"- Open-loop Poisson arrivals in two stages. Located: one run of at least {s.point_seconds:g} s of arrivals "
        f"per rate, doubling from {s.start_rate:g} requests/s until one fails, then a bisection until the highest "
        f"that passed and the lowest that failed are within {s.tolerance:.0%} (and, if no run fell behind, one "
        f"{2 * s.tolerance:.0%} past the failure, for what the server serves overloaded). Held: from the located answer, "
        f"{s.seeds} runs of at least {s.hold_seconds:g} s of arrivals per rate, each with its own seed, judged on "
        f"their steady windows pooled, bisecting until the highest held rate that passed and the lowest that "
        f"failed above it are within {s.fine_tolerance:.0%}. Every run sends at least {s.e2e_multiple:g} times "
        f"the E2E p99 of the rate below it, after one second's warm-up. At most {s.max_points} runs and no new "
        f"run after {s.max_seconds:g} s.",
        f"- Every figure is the steady state's: completions and output tokens counted from {RAMP_E2E:g} end-to-end "
        f"latencies after the first send (at least {RAMP_SHARE:.0%} of the arrivals' span) to the last arrival, "
        "over that window; latencies of the requests sent in it.",
        f"- A held rate passes when, its runs pooled, the requests in the system (sent, not ended) neither grew "
        f"nor fell by more than {BALANCE:.0%} of the arrivals (or 3/√arrivals, three Poisson deviations, where "
        f"larger; growing: past capacity; falling: a backlog draining), it offers no more than the server "
        f"served when overloaded, and every SLO's p99 is met with 95% confidence: {slo_text(p)}, the p99's interval drawn by resampling blocks of consecutive sends "
        f"whole ({BLOCKS} per run), as near capacity a slow stretch delays many requests at once. A located run "
        f"passes when the requests in the system grew by at most {1 - KEEP_UP:.0%} of the arrivals and every "
        f"SLO's p99 over its window is met.",
        f"- Requests: {asked_text(p)}, `/v1/{'chat/completions' if p.api == 'chat' else 'completions'}` streaming; "
        f"max-num-seqs {p.max_num_seqs[0] if p.max_num_seqs[0] is not None else 'the server default'}",
        f"- Rates and latencies: {p.time_scale}" + (f" (the simulator was sent {p.speedup:g}x each rate)"
                                                   if p.speedup != 1.0 else ""),
        *context_lines(m, p, [run.point for x in r.points for run in x.runs]),
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def _cell(value: Rerun | None, digits: int = 1) -> str:
    return rerun_cell(value, digits) or "—"


def _p99(s: Summary | None, digits: int = 0) -> str:
    return "—" if s is None else with_interval(s.p99, s.ci95["p99"], digits)


def _answer(r: SaturationResult) -> str:
    at, fail, p = r.at_saturation, r.first_failing, r.params
    if at is None or at.pooled is None:
        located = [x for x in r.points if x.stage == "locate"]
        first = located[0] if located else None
        text = ("No rate was measured." if first is None else
                f"No rate held: the lowest tried, {first.rate:g} requests/s, {_verdict(first)}: "
                f"{'; '.join(first.misses) or 'its runs pooled failed'}." if not any(x.passed for x in located) else
                "No rate held for its runs (see Held rates): the search stopped before it settled.")  # fmt: skip
        return "## The answer\n\n" + text + "\n"
    q, s = at.pooled, r.saturation
    slo = slo_text(p) if p.slo.is_set() or p.slo_itl_ms is not None else None
    use = r.utilisation
    lines = [
        "## The answer",
        "",
        f"**Provision for at most {at.rate:,.2f} requests/s** (offered, Poisson arrivals): held for {q.runs} runs "
        f"of {at.runs[0].arrivals_s:,.0f} s, their steady windows pooled ({q.seconds:,.0f} s, {q.arrivals:,} "
        f"requests), the server served {q.requests_per_s:,.2f} requests/s and {q.output_tokens_per_s:,.0f} output "
        f"tokens/s; TTFT p50 / p99 {latency_pair(q.ttft_ms) or '—'} ms"
        + (f", TPOT p99 {_p99(q.tpot_ms, 1)} ms" if q.tpot_ms is not None else "")
        + (f" (95% intervals), within {slo} with 95% confidence" if slo else " (95% intervals)")
        + (f"; utilisation {use:.0%} of the {r.capacity_per_s:,.2f} requests/s it served overloaded" if use else "")
        + ".",
    ]  # fmt: skip
    if fail is not None:
        lines.append(f"Held at {fail.rate:,.2f} requests/s ({fail.rate / at.rate - 1:+.1%}) it failed: "
                     f"{'; '.join(fail.misses)}.")  # fmt: skip
    else:
        lines.append("No held rate failed above it within the budget: the server holds at least this.")
    if slo is None:
        lines.append("No latency SLO was given: this is where served stops following offered, and near it the "
                     "queue, and every latency, has no bound. Give one (--slo-ttft-ms) for a rate to provision.")  # fmt: skip
    else:
        lines.append(f"The margin: a rate passes only when its pooled p99's 95% interval lies within the SLO. Near "
                     f"capacity one minute's p99 scatters across the SLO (Every run), and the p99 climbs steeply "
                     f"with the rate (saturation-cliff.png): the located rates, one {s.point_seconds:g}-s run each, "
                     "do not decide the answer.")  # fmt: skip
    cost = r.usd_per_million_output_tokens
    if cost is not None:
        lines.append(f"At that rate a million output tokens cost **${cost.gpu_node_spot:,.3f}** on the GPU node at "
                     "spot (every basis under What serving costs).")  # fmt: skip
    return "\n".join(lines) + "\n"


def _held(r: SaturationResult) -> str:
    rows = []
    for x in r.points:
        q = x.pooled
        if x.stage != "hold" or q is None:
            continue
        rows.append([f"{x.rate:,.4g}", len(x.runs), f"{q.seconds:,.0f}", f"{q.arrivals:,}", f"{q.offered_per_s:,.2f}",
                     f"{q.requests_per_s:,.2f}", f"{q.output_tokens_per_s:,.0f}", f"{q.growth_share:+.2%}",
                     latency_pair(q.ttft_ms), _p99(q.tpot_ms, 1), _p99(q.e2e_ms), _verdict(x)])  # fmt: skip
    return "## Held rates\n\n" + table(
        ["offered req/s (planned)", "runs", "steady s (pooled)", "requests in it", "offered req/s", "served req/s",
         "output tok/s", "in-system change (share of arrivals)", "TTFT p50 / p99 ms", "TPOT p99 ms", "E2E p99 ms",
         "verdict"],
        rows,
    ) + ("\nEach held rate's runs pooled: sums over their steady windows, latencies over every request sent in "
         f"them, with 95% intervals from resampling blocks of consecutive sends whole ({BLOCKS} per run).\n")  # fmt: skip


def _located(r: SaturationResult) -> str:
    rows = [
        [f"{x.rate:,.4g}", _cell(x.offered, 2), _cell(x.served, 2), _cell(x.output_tokens_per_s, 0),
         rerun_cell(x.queue_growth_share, 1, percent=True), _cell(x.ttft_p50_ms, 0), _cell(x.ttft_p99_ms, 0),
         _cell(x.tpot_p99_ms, 1), _cell(x.usd_per_million_output_tokens, 3), _verdict(x)]
        for x in r.points if x.stage == "locate"
    ]  # fmt: skip
    return "## Located rates\n\n" + table(
        ["offered req/s (planned)", "offered req/s (steady window)", "served req/s", "output tok/s",
         "queue growth % of arrivals", "TTFT p50 ms", "TTFT p99 ms", "TPOT p99 ms", "$ per M output tokens",
         "verdict"],
        rows,
    ) + "\nOne short run each, steady-state figures: where the knee is, not the answer.\n"


def _lag(point: G6Point) -> str | None:
    lag = point.client_lag_ms
    return None if lag is None else f"{lag.p99:.1f}" + host_flags(point)


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
                x.stage, f"{x.rate:,.4g}", run.run + 1, run.point.seed, f"{run.arrivals_s:,.0f}",
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
        ["stage", "offered req/s", "run", "seed", "arrivals s", "steady window s", "completions in it", "offered req/s",
         "served req/s", "output tok/s", "in-system growth (share of arrivals); TTFT trend", "in system (mean)",
         "TTFT p99 ms", "waiting max", "prefix-cache hits", "client lag p99 ms", "verdict"],
        rows,
    ) + (
        "\nThe steady window runs from the first counted send (0 s). A held run's verdict here is its own window's; "
        "its rate's rests on its runs pooled (Held rates). A **client-bound** run's lag p99 passed the "
        "limit the sweep uses (--max-client-lag-ms, or 5% of its TTFT p50): the load generator, not the server, may "
        "have shaped it. The simulator shares this machine's CPUs with the load generator: on a busy machine a run "
        "finds what the CPUs serve, not the simulated GPU; a **host-slowed** run had more than 1% of the "
        "simulator's steps delivered late, its tails the host's.\n"
    )  # fmt: skip


def _setting(x: SaturationPoint) -> str:
    return f"{x.stage} {x.rate:,.4g} req/s"


def _priced(r: SaturationResult) -> list[Run]:
    """Each run as the cost section reads it: its steady figures, priced at them."""
    return [Run(_setting(x), run.run, steady_view(run.point, run.steady, run.usd_per_million_output_tokens))
            for x in r.points for run in x.runs if run.steady is not None]  # fmt: skip


def _passing(r: SaturationResult) -> set[str]:
    """The rates the search held within the SLOs, over their runs pooled."""
    return {_setting(x) for x in r.points if x.passed}


def render_saturation_report(r: SaturationResult) -> str:
    labelled = [(f"{x.stage} {x.rate:,.4g} req/s run {run.run + 1}", run.point) for x in r.points for run in x.runs]
    plots = "## Plots\n\n" + "\n".join(f"![{name}]({name})" for name in PLOTS) + "\n"
    costs = cost_sections(_priced(r), r.params, r.gpu_price, r.cost, passing=_passing(r))
    return waited_first("\n".join([title("the request rate this server holds within the SLOs", r.meta, r.params),
                                   _answer(r), _held(r), _located(r), _header(r), _runs(r), realised_section(labelled), costs,
                                   errors_section(r.meta.errors), plots]), r.waited)  # fmt: skip


def knee_plot(r: SaturationResult, path: Path) -> None:
    """The located runs: served rate and TTFT p99 against the offered rate (steady state), held rates marked."""
    located = [x for x in r.points if x.stage == "locate"]
    fig, ax = plt.subplots(figsize=(8, 4.8))
    rates = [x.rate for x in located]
    served = [x.served.mean if x.served else 0.0 for x in located]
    ax.plot(rates, served, marker="o", color="#3182bd", label="served requests/s (steady state)")
    ax.plot(rates, rates, color="#bdbdbd", linestyle=":", label="offered = served")
    ax.set_xlabel("offered requests/s (Poisson, GPU time)")
    ax.set_ylabel("served requests/s", color="#3182bd")
    ax.set_xscale("log", base=GROWTH)
    ttft = ax.twinx()
    ttft.plot(rates, [x.ttft_p99_ms.mean if x.ttft_p99_ms else float("nan") for x in located], marker="s",
              color="#de2d26", label="TTFT p99 (ms)")  # fmt: skip
    ttft.set_ylabel("TTFT p99 ms (GPU time)", color="#de2d26")
    ttft.set_yscale("log")
    if r.params.slo.ttft_ms is not None:
        ttft.axhline(r.params.slo.ttft_ms, color="#de2d26", linestyle="--", linewidth=1, label="TTFT SLO")
    for x, y in zip(located, served):
        if not x.passed:
            ax.plot([x.rate], [y], marker="x", color="black", markersize=9, linestyle="none")
    if r.capacity_per_s is not None:
        ax.axhline(r.capacity_per_s, color="#756bb1", linewidth=1, label=f"served overloaded: {r.capacity_per_s:,.2f}")
    if r.saturation_rate is not None:
        ax.axvline(r.saturation_rate, color="#31a354", linewidth=2, label=f"held: {r.saturation_rate:,.2f} req/s offered")
    lines = ax.get_legend_handles_labels()
    more = ttft.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="upper left")
    ax.grid(True, alpha=0.3)
    ax.set_title("Located (one short run a rate): served stops following offered (x: failed)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def cliff_plot(r: SaturationResult, path: Path) -> None:
    """The held rates: pooled TTFT p99 with its 95% interval against the offered rate (linear: the cliff as
    steep as it is), each run's own p99 beside it, the SLO, the answer and what the server serves overloaded."""
    held = [x for x in r.points if x.stage == "hold" and x.pooled is not None and x.pooled.ttft_ms is not None]
    fig, ax = plt.subplots(figsize=(8, 4.8))
    if held:
        p99 = [x.pooled.ttft_ms for x in held]  # type: ignore[union-attr]
        ax.errorbar([x.rate for x in held], [s.p99 for s in p99],
                    yerr=[[s.p99 - s.ci95["p99"][0] for s in p99], [s.ci95["p99"][1] - s.p99 for s in p99]],
                    marker="o", color="#de2d26", capsize=4, label="TTFT p99, runs pooled (95% interval)")  # fmt: skip
        runs = [(x.rate, run.steady.ttft_ms.p99) for x in held for run in x.runs
                if run.steady is not None and run.steady.ttft_ms is not None]  # fmt: skip
        ax.plot([a for a, _ in runs], [b for _, b in runs], linestyle="none", marker=".", color="#fc9272",
                label="one run's p99")  # fmt: skip
        for x in held:
            if not x.passed:
                ax.plot([x.rate], [x.pooled.ttft_ms.p99], marker="x", color="black", markersize=10)  # type: ignore[union-attr]
    if r.params.slo.ttft_ms is not None:
        ax.axhline(r.params.slo.ttft_ms, color="black", linestyle="--", linewidth=1, label="TTFT SLO")
    if r.saturation_rate is not None:
        ax.axvline(r.saturation_rate, color="#31a354", linewidth=2, label=f"provision at most {r.saturation_rate:,.2f}")
    if r.capacity_per_s is not None:
        ax.axvline(r.capacity_per_s, color="#756bb1", linewidth=1, linestyle=":",
                   label=f"served overloaded: {r.capacity_per_s:,.2f}")  # fmt: skip
    ax.set_xlabel("offered requests/s (Poisson, GPU time)")
    ax.set_ylabel("TTFT p99 ms (GPU time)")
    ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title("Held (runs pooled): the p99 against the rate near capacity (x: failed)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render_saturation_plots(r: SaturationResult, folder: Path) -> list[Path]:
    paths = [folder / name for name in PLOTS]
    cliff_plot(r, paths[0])
    knee_plot(r, paths[1])
    return paths
