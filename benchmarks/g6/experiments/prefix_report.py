"""The prefix experiment's Markdown report and plot, pure functions of a saved PrefixResult."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from benchmarks.g6.experiments.prefix import PrefixArm, PrefixResult, roofline_s_per_prefix_token  # noqa: E402
from benchmarks.g6.price import Run  # noqa: E402
from benchmarks.g6.report import (  # noqa: E402
    context_lines, cost_sections, errors_section, latency_pair, price_cell, rerun_cell, rerun_note, title,
)  # fmt: skip
from benchmarks.g6.shape import asked_text, realised_section  # noqa: E402
from benchmarks.harness.markdown import num, table  # noqa: E402
from benchmarks.kube.evidence import markdown as evidence_section  # noqa: E402
from benchmarks.kube.phases_report import waited_first  # noqa: E402
from benchmarks.loadgen.reruns import Rerun  # noqa: E402

PLOTS = ("prefix-ttft-kv.png",)


def _name(a: PrefixArm) -> str:
    return {True: "on", False: "off", None: "as the server runs (not known)"}[a.prefix_caching]


def _hit_cell(a: PrefixArm) -> str | None:
    if a.prefix_cache_hit_rate is not None:
        return rerun_cell(a.prefix_cache_hit_rate, 1, percent=True)
    servers = [r.point.server for r in a.runs]
    # Counters present and still at zero: the cache was never asked (off), not a figure missing.
    return "none: no lookups" if servers and all(s is not None and s.prefix_cache_queries == 0 for s in servers) else None


def _header(r: PrefixResult) -> str:
    m, p, x = r.meta, r.params, r.prefix
    sources = sorted({run.prefill_source for a in r.arms for run in a.runs if run.prefill_source})
    lines = [
        evidence_section(m.evidence),
        "## What was run",
        "",
        f"- {x.groups} groups of requests, dealt in turn; every prompt of a group starts with the group's "
        f"{x.prefix_len:,}-token prefix (a system prompt), then {asked_text(p)}",
        f"- Both arms offered the same open-loop Poisson arrivals at {x.rate:g} requests/s of the GPU, "
        f"{p.requests_at(None)} counted requests per run after a second's warm-up, {p.repeats} run(s) per arm, run k "
        f"of each arm with the same seed (the same prompts, prefixes and arrivals); the arms: prefix caching "
        f"{', '.join(_name(a) for a in r.arms) or 'none measured'}, each on its own server start ("
        + {"sim": "the simulator with --enable-/--disable-prefix-caching",
           "stack": "the stack's vllm.enable_prefix_caching and `pulumi up`, restored after",
           "url": "the server given, as it runs"}[p.target_kind] + ")",  # fmt: skip
        "- Hit rate: the server's own counters `vllm:prefix_cache_hits` / `vllm:prefix_cache_queries` (tokens, "
        "vLLM v0.33.0's names) over each run, warm-up included"
        + ("; the simulator counts as vLLM does, at admission" if p.target_kind == "sim" else ""),
        f"- Prefill time per request: the server's own timings ({'; '.join(sources) or 'none'}), its mean over "
        "each run; saved per cached token: (off - on) / cached tokens per request, run k against run k",
        *context_lines(m, p, [run.point for a in r.arms for run in a.runs]),
    ]
    return "\n".join(lines) + "\n"


def _answer(r: PrefixResult) -> str:
    rows = []
    for a in r.arms:
        f = a.figures
        rows.append([
            _name(a), len(a.runs), _hit_cell(a), rerun_cell(a.cached_tokens_per_request, 0), rerun_cell(a.prefill_ms),
            rerun_cell(f.ttft_p50_ms), rerun_cell(f.ttft_p99_ms), rerun_cell(f.e2e_p50_ms, 0),
            rerun_cell(f.output_tokens_per_s, 0), rerun_cell(a.kv_blocks_peak, 0),
            rerun_cell(f.usd_per_million_output_tokens, 3),
        ])  # fmt: skip
    runs = max((len(a.runs) for a in r.arms), default=1)
    out = "## The answer: prefix caching on and off\n\n" + table(
        ["prefix caching", "runs", "hit rate (server counters)", "cached tokens per request",
         "server prefill ms per request", "TTFT p50 ms", "TTFT p99 ms", "E2E p50 ms", "output tok/s",
         "KV blocks held, peak", "$ per M output tokens"],
        rows,
    ) + "\n" + rerun_note(runs, "arm") + f"Times and rates are {r.params.time_scale}.\n"  # fmt: skip
    return out + "\n" + _reading(r)


def _reading(r: PrefixResult) -> str:
    on, off = r.arm(True), r.arm(False)
    lines = []
    if on is None or off is None:
        return "Only one arm ran: no comparison of on with off.\n"
    saved, floor = r.prefill_saved_us_per_cached_token, roofline_s_per_prefix_token(r.sizing, r.prefix.prefix_len)
    if saved is not None and on.cached_tokens_per_request is not None:
        lines.append(
            f"- **The server's prefill took {rerun_cell(saved, 2)} us less per token the cache served** "
            f"({rerun_cell(off.prefill_ms)} ms per request off, {rerun_cell(on.prefill_ms)} ms on, "
            f"{rerun_cell(on.cached_tokens_per_request, 0)} of its prompt tokens cached)"
            + (f", against a prefill roofline of {floor * 1e6:,.2f} us per token (the prefix's FLOPs at the GPU's "
               "peak: the least a skipped token can save)" if floor is not None else "") + "."  # fmt: skip
        )
    if r.ttft_p50_saved_ms is not None:
        lines.append(f"- TTFT p50 fell by {rerun_cell(r.ttft_p50_saved_ms)} ms with the cache on, at the same "
                     "arrivals: the prefill saved plus the queueing it no longer causes.")  # fmt: skip
    a = on.runs[0].point
    block = on.cache.block_size if on.cache else None
    if on.prefix_cache_hit_rate is not None and block and a.realised and a.realised.input_tokens:
        cacheable = r.prefix.prefix_len // block * block
        ceiling = cacheable / a.realised.input_tokens.mean
        lines.append(
            f"- The hit rate is the workload's before it is the server's: of the {a.realised.input_tokens.mean:,.0f} "
            f"prompt tokens of a request, only the prefix's whole blocks ({cacheable:,} tokens) can be shared, so "
            f"no cache serves more than {ceiling:.1%} of them; and the first request of each of the "
            f"{r.prefix.groups} prefixes finds nothing, so a run of n requests (warm-up included) reads at most "
            f"(1 - {r.prefix.groups}/n) of that. The {on.prefix_cache_hit_rate.mean:.1%} measured is "
            f"{on.prefix_cache_hit_rate.mean / ceiling:.1%} of the ceiling: the run's length, not a property of "
            "the cache; a longer run tends to the ceiling."
        )  # fmt: skip
    if on.kv_blocks_peak and off.kv_blocks_peak and block and a.realised and a.realised.input_tokens and a.server and a.server.running:
        mean_prompt, running = a.realised.input_tokens.mean, a.server.running.mean
        own = math.ceil((mean_prompt - r.prefix.prefix_len) / block)
        shared = r.prefix.groups * r.prefix.prefix_len // block
        lines.append(
            f"- KV blocks held at the peak: {rerun_cell(on.kv_blocks_peak, 0)} with sharing, "
            f"{rerun_cell(off.kv_blocks_peak, 0)} without. At {running:.1f} sequences running (run 1), the prompts "
            f"alone hold about {running * math.ceil(mean_prompt / block):,.0f} blocks unshared, and "
            f"{shared + running * own:,.0f} when the {r.prefix.groups} prefixes ({shared:,} blocks) are held once "
            "(output blocks come on top in both)."
        )  # fmt: skip
    if r.params.target_kind == "sim":
        lines.append("- These are the simulator's figures: its prefix cache follows vLLM's rules (whole blocks, chained "
                     "hashes, at least the last prompt token computed, LRU eviction), not a measurement of vLLM.")  # fmt: skip
    return "\n".join(lines) + "\n"


def _runs(r: PrefixResult) -> str:
    rows = []
    for a in r.arms:
        for run in a.runs:
            pt = run.point
            rows.append([
                _name(a), run.run + 1, pt.seed, None if run.prefix_cache_hit_rate is None else f"{run.prefix_cache_hit_rate:.1%}",
                num(run.cached_tokens_per_request, 0), num(run.prefill_ms, 1), latency_pair(pt.ttft_ms),
                f"{pt.output_tokens_per_s:,.0f}", f"{pt.requests_per_s:,.2f}", f"{pt.in_flight_mean:.1f}", price_cell(pt),
            ])  # fmt: skip
    return "## Every run\n\n" + table(
        ["prefix caching", "run", "seed", "hit rate", "cached tokens per request", "server prefill ms",
         "TTFT p50/p99 ms (within-run bootstrap)", "output tok/s", "req/s", "in flight (mean)", "$ per M output tokens"],
        rows,
    )  # fmt: skip


def render_prefix_report(r: PrefixResult) -> str:
    runs = [Run(f"prefix caching {_name(a)}", run.run, run.point) for a in r.arms for run in a.runs]
    plots = "## Plots\n\n" + "\n".join(f"![{name}]({name})" for name in PLOTS) + "\n"
    return waited_first("\n".join([title("shared prefixes and the prefix cache", r.meta, r.params), _answer(r),
                                   _header(r), _runs(r), realised_section([(x.label, x.point) for x in runs]),
                                   cost_sections(runs, r.params, r.gpu_price, r.cost), errors_section(r.meta.errors),
                                   plots]), r.waited)  # fmt: skip


def _bar(ax: plt.Axes, x: list[float], values: list[Rerun | None], **kw: object) -> None:
    means = [v.mean if v else 0.0 for v in values]
    err = [[v.mean - v.lo if v and v.lo is not None else 0.0 for v in values],
           [v.hi - v.mean if v and v.hi is not None else 0.0 for v in values]]  # fmt: skip
    ax.bar(x, means, yerr=err, capsize=3, **kw)


def prefix_plot(r: PrefixResult, path: Path) -> None:
    """Left: TTFT p50 and p99 per arm. Right: KV blocks held at the peak per arm (rerun intervals)."""
    arms = [a for a in r.arms if a.runs]
    fig, (ttft, kv) = plt.subplots(1, 2, figsize=(10, 4.2))
    x = list(range(len(arms)))
    names = [f"caching {_name(a)}" for a in arms]
    for k, (q, color) in enumerate((("ttft_p50_ms", "#3182bd"), ("ttft_p99_ms", "#9ecae1"))):
        _bar(ttft, [i + 0.38 * k for i in x], [getattr(a.figures, q) for a in arms], width=0.38, color=color,
             label=f"TTFT {q.split('_')[1]}")  # fmt: skip
    ttft.set_xticks([i + 0.19 for i in x], names)
    ttft.set_ylabel("ms (GPU time)")
    ttft.legend(fontsize=8)
    ttft.set_title("TTFT at the same arrivals: a cached prefix skips its prefill")
    _bar(kv, x, [a.kv_blocks_peak for a in arms], width=0.5, color="#fd8d3c", label="KV blocks held, peak")
    kv.set_xticks(x, names)
    kv.set_ylabel("blocks")
    kv.legend(fontsize=8)
    kv.set_title("KV: a shared prefix is held once")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render_prefix_plots(r: PrefixResult, folder: Path) -> list[Path]:
    paths = [folder / name for name in PLOTS]
    prefix_plot(r, paths[0])
    return paths
