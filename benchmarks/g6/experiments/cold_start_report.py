"""The cold-start experiment's Markdown report and stacked-bar plot, pure functions of a saved
ColdStartResult."""

from __future__ import annotations

from pathlib import Path
from statistics import median

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from benchmarks.g6.experiments.cold_start import ColdStartResult, ColdStartRun, pull_verdict  # noqa: E402
from benchmarks.g6.report import errors_section, title  # noqa: E402
from benchmarks.harness.markdown import num, table  # noqa: E402
from benchmarks.kube.evidence import markdown as evidence_section  # noqa: E402
from benchmarks.kube.phases_report import waited_section  # noqa: E402

PLOT = "cold-start-phases.png"
# The cluster autoscaler's defaults (scale-down-unneeded-time 10m): how long an unneeded node stays
# after its last pod went, used when the run did not see a node go.
DEFAULT_TAIL_S = 600.0
# Gaps between sessions the break-even table prices (an hour's pause, an afternoon, overnight).
GAPS_H = (1.0, 4.0, 16.0)
_NODE_PHASES = ("scale-up triggered", "node created", "node ready", "GPU allocatable", "pod sandbox", "image pulled")


def _spread(values: list[float]) -> str | None:
    if not values:
        return None
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def _by_setting(r: ColdStartResult) -> dict[str, list[ColdStartRun]]:
    out: dict[str, list[ColdStartRun]] = {}
    for run in r.runs:
        out.setdefault(run.setting, []).append(run)
    return out


def _served(runs: list[ColdStartRun]) -> list[ColdStartRun]:
    return [x for x in runs if x.failure is None and x.total_s is not None]


def _nearest_median(runs: list[ColdStartRun], median_s: float) -> ColdStartRun | None:
    """The served run whose total is nearest the median (the shorter of two equally near)."""
    return min(_served(runs), key=lambda x: (abs((x.total_s or 0.0) - median_s), x.total_s or 0.0), default=None)


def _spread_table(r: ColdStartResult) -> str:
    groups = _by_setting(r)
    names = [p.name for p in r.runs[0].phases]
    rows = []
    for name in [*names, "total"]:
        row: list[object] = [name]
        for runs in groups.values():
            served = _served(runs)
            values = [x.total_s or 0.0 for x in served] if name == "total" else [
                s for x in served if (s := next(p.seconds for p in x.phases if p.name == name)) is not None]  # fmt: skip
            row.append(_spread(values))
        rows.append(row)
    return table(["phase", *(f"{s} (n={len(_served(v))})" for s, v in groups.items())], rows)


def _runs_table(r: ColdStartResult) -> str:
    rows = [(x.setting, x.repeat + 1, num(x.total_s), None if x.cost_usd is None else f"${x.cost_usd:.3f}",
             None if x.image_bytes is None else f"{x.image_bytes / 1e9:.2f}", num(x.tail_s, 0),
             x.node or "—", x.failure or "served") for x in r.runs]  # fmt: skip
    return table(["setting", "repeat", "waited s", "node cost", "image size GB (kubelet)", "previous node's tail s",
                  "node", "outcome"], rows) + (  # fmt: skip
        "\nThe image size is what the kubelet's Pulled event reports: the image's size, not the bytes it moved in the "
        "'image pulled' phase. With `image-streaming` (GKE image streaming) the image is mounted in seconds and its "
        "files are read over the network as the container reads them, so those bytes arrive in the phases after it "
        "(server start, weights loaded), not in its short pull.\n"
    )


def _break_even(r: ColdStartResult) -> str:
    price = r.gpu_price
    groups = _by_setting(r)
    # The baseline is the stack as configured; without such runs, every cold start from zero.
    zero = [x for x in _served(groups.get("as-configured", [])) if not x.node_was_up]
    baseline = "the as-configured cold start"
    if not zero:
        zero = [x for runs in groups.values() for x in _served(runs) if not x.node_was_up]
        baseline = "the cold starts from zero of every setting"
    if price is None or not zero:
        return ("Not priced: " + ("no GPU price in the stack's outputs." if price is None else
                "no cold start from zero was served.")) + "\n"  # fmt: skip
    waited = median(x.total_s or 0.0 for x in zero)
    node_h = median((x.cost_usd or 0.0) / price.gpu_node for x in zero)
    tails = [x.tail_s for x in r.runs if x.tail_s is not None]
    tail_s = median(tails) if tails else DEFAULT_TAIL_S
    tail_text = (f"the idle tail this run measured (median {tail_s / 60:.1f} min over {len(tails)} node(s), from its pod "
                 "gone to the node gone)" if tails else
                 f"the autoscaler's default idle tail ({DEFAULT_TAIL_S / 60:.0f} min, scale-down-unneeded-time; not "
                 "measured in this run)")  # fmt: skip
    warm = [x for x in _served(groups.get("warm-pool", [])) if x.node_was_up]
    if warm:
        saved_s = waited - median(x.total_s or 0.0 for x in warm)
        saved_text = (f"{saved_s / 60:.1f} min ({baseline}, median {waited / 60:.1f} min over {len(zero)}, against the "
                      "warm pool's measured start)")  # fmt: skip
    else:
        saved_s = sum(median(s for x in zero if (s := _seconds(x, n)) is not None) for n in _NODE_PHASES
                      if any(_seconds(x, n) is not None for x in zero))  # fmt: skip
        saved_text = (f"{saved_s / 60:.1f} min (estimated from {baseline}: the phases a warm node skips, scale-up to "
                      "image pulled; measure it with `--settings as-configured,warm-pool`)")  # fmt: skip
    even_h = node_h + tail_s / 3600
    rows = []
    for gap in GAPS_H:
        extra = max(0.0, gap - even_h) * price.gpu_node
        per_min = None if saved_s <= 0 else f"${extra / (saved_s / 60):.3f}"
        rows.append((f"{gap:g} h", f"${gap * price.gpu_node:.2f}", f"${extra:.2f}", per_min))
    return "\n".join([
        f"A warm node (`gpu_min_nodes: 1`) costs {price.describe()}. It saves each session's first request "
        f"{saved_text}.",
        "",
        f"Scaling to zero is not free either: each session pays the node while it comes up (median {node_h * 60:.1f} "
        f"min before the server answered) and {tail_text} after its last request. So a warm node is the cheaper "
        f"one outright whenever sessions are less than **{even_h * 60:.0f} min** apart (break-even gap); beyond "
        "that it buys the minutes of waiting at the price below.",
        "",
        table(["gap between sessions", "warm node over the gap", "more than scaling to zero", "per minute of waiting saved"],
              rows),
    ])  # fmt: skip


def _seconds(run: ColdStartRun, name: str) -> float | None:
    return next((p.seconds for p in run.phases if p.name == name), None)


def _costs(r: ColdStartResult) -> str:
    """The node's price per served cold start, per setting; a failed one's node time said apart."""
    if r.gpu_price is None:
        return "No GPU price: the run's stack outputs carry no cost estimate.\n"
    lines = []
    for setting, runs in _by_setting(r).items():
        served = [x.cost_usd for x in _served(runs) if x.cost_usd is not None]
        failed = [x.cost_usd for x in runs if x.failure and x.cost_usd]
        if served and all(x.node_was_up for x in _served(runs)):
            lines.append(f"- {setting}: $0 per cold start: the node was already up (its hours are the warm pool's).")
        elif served:
            lines.append(f"- {setting}: ${median(served):.3f} per cold start (median of {len(served)} served; "
                         f"${min(served):.3f}-{max(served):.3f}): the GPU node from its creation to the first answer.")  # fmt: skip
        if failed:
            lines.append(f"- {setting}: ${sum(failed):.3f} of node time in {len(failed)} failed cold start(s).")
    return "\n".join(lines) + "\n" if lines else "No cold start was served.\n"


def _image_streaming(r: ColdStartResult) -> str | None:
    """Whether each image-streaming repeat streamed its image, read from the kubelet's pull; the first
    repeat said apart from the rest. None without such runs."""
    runs = sorted((x for x in r.runs if x.setting == "image-streaming"), key=lambda x: x.repeat)
    if not runs:
        return None
    rows = [(x.repeat + 1, num(x.pull_s), None if x.image_bytes is None else f"{x.image_bytes / 1e9:.2f}",
             None if x.image_bytes is None or not x.pull_s else f"{x.image_bytes / x.pull_s / 1e9:.2f}",
             pull_verdict(x) or "no pull seen", num(x.total_s)) for x in runs]  # fmt: skip
    out = ["Each repeat's image pull as the kubelet reported it (its Pulled event: the time, the image size). A "
           "streamed pull ends once the image is mounted, in seconds whatever its size; a whole pull moves every "
           "byte first, at the node's network and disk speed.\n",
           table(["repeat", "pull s", "image GB", "GB/s", "the image was", "waited s"], rows)]  # fmt: skip
    first, later = runs[0], [x for x in _served(runs[1:])]
    if first.repeat == 0:
        text = (f"Repeat 1 is the image's first pull through the cache: Artifact Registry fetches it from Docker Hub, "
                "and GKE's image-streaming page says the first pull of an eligible image may show no benefit. It "
                f"waited {num(first.total_s)} s (pull {num(first.pull_s)} s)")  # fmt: skip
        if later:
            text += (f"; the later repeats waited {_spread([x.total_s or 0.0 for x in later])} s (median, min-max of "
                     f"{len(later)}), pulls {_spread([x.pull_s for x in later if x.pull_s is not None]) or '—'} s")
        out.append(text + ".\n")
    whole = [x for x in runs[1:] if pull_verdict(x) == "whole pull"]
    if whole:
        out.append(
            f"**Image streaming did not take effect in repeat(s) {', '.join(str(x.repeat + 1) for x in whole)}**: the "
            "kubelet pulled the whole image, as if streaming were off, so those repeats measure a plain pull. GKE falls "
            "back silently when the node's service account lacks roles/serviceusage.serviceUsageConsumer in the "
            "image's project (the stack grants it), the Container File System API is disabled, or the image is not "
            "in Artifact Registry; GKE's ImageStreaming event on the node says when an image is streamed.\n")
    return "\n".join(out)


def render_cold_start_report(r: ColdStartResult) -> str:
    m, p, cs = r.meta, r.params, r.cold_start
    groups = _by_setting(r)
    out = [title("cold start from zero, phase by phase", m, p)]
    if r.source != "live":
        out.append(f"**Source: {r.source}.**\n")
    head = next((s for s in r.summary if s.median_total_s is not None), None)
    first = _nearest_median(groups[head.setting], head.median_total_s) if head and head.median_total_s is not None else None
    if head is not None and first is not None:
        spread = "" if head.served < 2 else f" ({head.min_total_s:.1f}-{head.max_total_s:.1f})"
        out.append(f"**Setting `{head.setting}`: a cold start took a median {head.median_total_s:.1f} s{spread} from the "
                   f"request to its first token, over {head.served} served of {head.measured} measured ({head.asked} "
                   "asked).**\n")  # fmt: skip
        where = (f"Below, the phases of the served run nearest that median (repeat {first.repeat + 1}, "
                 f"{first.total_s:.1f} s): from the request sent as the Deployment was scaled to one, to its first token.")  # fmt: skip
        out.append(waited_section(first.phases, first.total_s, first.failure, where))
    elif r.runs:
        out.append(waited_section(r.runs[0].phases, r.runs[0].total_s, r.runs[0].failure, "No cold start was served."))
    out.append(evidence_section(m.evidence))
    failed = [x for x in r.runs if x.failure]
    streaming = _image_streaming(r)
    out += [
        "## What was run\n",
        f"- Command: `{' '.join(m.command)}`",
        f"- Settings (cold starts measured of {cs.repeats} asked): "
        f"{', '.join(f'`{s.setting}` {s.measured}' for s in r.summary)}. Each: the Deployment scaled "
        "to zero, the experiment waiting until its pod and (from a pool at zero) the GPU node were gone, then scaled "
        f"to one with one request (max_tokens 1) sent at once and again every {cs.poll_s:g} s until vLLM answered "
        f"(so a first token is up to {cs.poll_s:g} s late, plus the API server proxy's round trip).",
        "- Config each setting put in place: " + "; ".join(
            f"`{s}`: {', '.join(f'{k}={v}' for k, v in runs[0].settings.items()) or 'the stack as configured'}"
            for s, runs in groups.items()) + ".",  # fmt: skip
        f"- Server versions: {', '.join(f'{k} {v}' for k, v in m.server_versions.items()) or 'not reported'}",
        "",
        "## Spread across runs\n",
        "Seconds per phase, median (min-max) over the served repeats of each setting:\n",
        _spread_table(r) if r.runs else "No run.\n",
        f"Plot: `{PLOT}` (one stacked bar per run).\n",
        "## Every run\n",
        _runs_table(r),
        *(["## Image streaming: did it take effect\n", streaming] if streaming else []),
        "## Failed cold starts\n",
        "\n".join(f"- {x.setting} repeat {x.repeat + 1}: {x.failure}" for x in failed) + "\n" if failed else "None.\n",
        "## What a cold start costs\n",
        _costs(r),
        "## Warm pool or scale to zero\n",
        _break_even(r),
        errors_section(m.errors),
    ]
    if r.cost:
        out.append(f"## Cost\n\n{r.cost.replace('### ', '')}")
    return "\n".join(out)


def render_cold_start_plots(r: ColdStartResult, folder: Path) -> list[Path]:
    """One horizontal stacked bar per run, a colour per phase; skipped phases take no width."""
    if not r.runs:
        return []
    names = [p.name for p in r.runs[0].phases]
    colours = {n: plt.get_cmap("tab20")(i % 20) for i, n in enumerate(names)}
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(r.runs) + 2.2), layout="constrained")
    labels = []
    for i, run in enumerate(r.runs):
        left = 0.0
        for p in run.phases:
            if p.seconds:
                ax.barh(i, p.seconds, left=left, color=colours[p.name], height=0.6,
                        label=p.name if p.name not in ax.get_legend_handles_labels()[1] else None)  # fmt: skip
                left += p.seconds
        ax.text(left, i, f" {left:.0f}s" + (" (failed)" if run.failure else ""), va="center", fontsize=8)
        labels.append(f"{run.setting} #{run.repeat + 1}")
    ax.set_yticks(range(len(r.runs)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("seconds from the request (scale to one) to the first token")
    ax.set_title("Cold start from zero: where the wait goes"
                 + ("" if r.source == "live" else "\n(constructed fixture, not measured on a cluster)"))
    fig.legend(loc="outside lower center", ncol=4, fontsize=8)
    path = folder / PLOT
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
