"""The prefix experiment's Markdown report and plot, pure functions of a saved PrefixResult."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from benchmarks.g6.experiments.prefix import PrefixArm, PrefixResult, roofline_s_per_prefix_token  # noqa: E402
from benchmarks.g6.report import context_lines, cost_sections, errors_section, price_cell, target_text  # noqa: E402
from benchmarks.g6.shape import asked_text, realised_section  # noqa: E402
from benchmarks.harness.evidence import markdown as evidence_section  # noqa: E402
from benchmarks.harness.markdown import num, table  # noqa: E402
from benchmarks.labs.phases_report import waited_first  # noqa: E402

PLOTS = ("prefix-ttft-kv.png",)


def _name(a: PrefixArm) -> str:
    return {True: "on", False: "off", None: "as the server runs (not known)"}[a.prefix_caching]


def _blocks(a: PrefixArm, which: str) -> float | None:
    """The KV blocks in use (mean or peak of the server's gauge) during the arm's point."""
    usage = a.points[0].server.kv_cache_usage if a.points and a.points[0].server else None
    if usage is None or a.cache is None:
        return None
    return getattr(usage, which) * a.cache.num_gpu_blocks


def _hit_cell(a: PrefixArm) -> str | None:
    if a.prefix_cache_hit_rate is not None:
        return f"{a.prefix_cache_hit_rate:.1%}"
    server = a.points[0].server if a.points else None
    # Counters present and still at zero: the cache was never asked (off), not a figure missing.
    return "none: no lookups" if server is not None and server.prefix_cache_queries == 0 else None


def _header(r: PrefixResult) -> str:
    m, p, x = r.meta, r.params, r.prefix
    lines = [
        "# Lab g6: shared prefixes and the prefix cache",
        "",
        f"Model `{p.model}` served by {target_text(p)}; {m.started_at.isoformat()} to {m.finished_at.isoformat()}.",
        "",
        evidence_section(m.evidence),
        "## What was run",
        "",
        f"- {x.groups} groups of requests, dealt in turn; every prompt of a group starts with the group's "
        f"{x.prefix_len:,}-token prefix (a system prompt), then {asked_text(p)}",
        f"- One closed-loop point per arm at concurrency {p.concurrency[0]}, {p.requests_at(p.concurrency[0])} counted requests after "
        f"a warm-up; the arms: prefix caching {', '.join(_name(a) for a in r.arms) or 'none measured'}, each on "
        "its own server start (" + {"sim": "the simulator with --enable-/--disable-prefix-caching",
                                    "stack": "the stack's vllm.enable_prefix_caching and `pulumi up`, restored after",
                                    "url": "the server given, as it runs"}[p.target_kind] + ")",  # fmt: skip
        "- Hit rate: the server's own counters `vllm:prefix_cache_hits` / `vllm:prefix_cache_queries` (tokens, "
        "vLLM v0.33.0's names) over the point, warm-up included"
        + ("; the simulator counts as vLLM does, at admission" if p.target_kind == "sim" else ""),
        *context_lines(m, p, [a.points[0] for a in r.arms if a.points]),
    ]
    return "\n".join(lines) + "\n"


def _arms(r: PrefixResult) -> str:
    rows = []
    for a in r.arms:
        pt = a.points[0]
        rows.append([
            _name(a), _hit_cell(a),
            num(a.cached_tokens_per_request, 0),
            None if pt.ttft_ms is None else f"{pt.ttft_ms.p50:,.1f} / {pt.ttft_ms.p99:,.1f}",
            None if pt.e2e_ms is None else f"{pt.e2e_ms.p50:,.0f}",
            f"{pt.output_tokens_per_s:,.0f}", num(_blocks(a, "mean"), 0), num(_blocks(a, "max"), 0),
            price_cell(pt),
        ])  # fmt: skip
    return "## Prefix caching on and off\n\n" + table(
        ["prefix caching", "hit rate (server counters)", "cached tokens per request", "TTFT p50 / p99 ms (GPU)",
         "E2E p50 ms (GPU)", "output tok/s (GPU)", "KV blocks held, mean", "KV blocks held, peak",
         "$ per M output tokens"],
        rows,
    )  # fmt: skip


def _reading(r: PrefixResult) -> str:
    on, off = r.arm(True), r.arm(False)
    lines = ["## What the numbers mean", ""]
    if on is None or off is None:
        lines.append("Only one arm ran: no comparison of on with off.")
        return "\n".join(lines) + "\n"
    a, b = on.points[0], off.points[0]
    cached = on.cached_tokens_per_request
    floor = roofline_s_per_prefix_token(r.sizing, r.prefix.prefix_len)
    if a.ttft_ms and b.ttft_ms and cached:
        saved_ms = b.ttft_ms.p50 - a.ttft_ms.p50
        per_token_us = 1000 * saved_ms / cached
        lines.append(
            f"- TTFT p50 fell by {saved_ms:,.1f} ms with the cache on ({b.ttft_ms.p50:,.1f} -> "
            f"{a.ttft_ms.p50:,.1f} ms): {per_token_us:,.2f} us per cached token"
            + (f", against a prefill roofline of {floor * 1e6:,.2f} us per token (the prefix's FLOPs at the GPU's "
               f"peak: the least a skipped token can save; queueing behind other prefills adds to what it does save)"
               if floor is not None else "") + "."  # fmt: skip
        )
    blocks_on, blocks_off = _blocks(on, "max"), _blocks(off, "max")
    if blocks_on is not None and blocks_off is not None and on.cache is not None:
        block = on.cache.block_size
        mean_prompt = a.realised.input_tokens.mean if a.realised and a.realised.input_tokens else None
        held = f"- KV blocks held at the peak: {blocks_on:,.0f} with sharing, {blocks_off:,.0f} without"
        if mean_prompt is not None and a.server and a.server.running:
            running = a.server.running.mean
            own = math.ceil((mean_prompt - r.prefix.prefix_len) / block)
            shared = r.prefix.groups * r.prefix.prefix_len // block
            unshared = running * math.ceil(mean_prompt / block)
            held += (
                f". At {running:.1f} sequences running, the prompts alone hold about {unshared:,.0f} blocks unshared, "
                f"and {shared + running * own:,.0f} when the {r.prefix.groups} prefixes ({shared:,} blocks) are held "
                "once (output blocks come on top in both)"
            )
        lines.append(held + ".")
    if r.params.target_kind == "sim":
        lines.append("- These are the simulator's figures: its prefix cache follows vLLM's rules (whole blocks, chained "
                     "hashes, at least the last prompt token computed, LRU eviction), not a measurement of vLLM.")  # fmt: skip
    return "\n".join(lines) + "\n"


def render_prefix_report(r: PrefixResult) -> str:
    labelled = [(f"prefix caching {_name(a)}", a.points[0]) for a in r.arms if a.points]
    plots = "## Plots\n\n" + "\n".join(f"![{name}]({name})" for name in PLOTS) + "\n"
    return waited_first("\n".join([_header(r), _arms(r), _reading(r), realised_section(labelled),
                      cost_sections(labelled, r.params, r.gpu_price, r.cost), errors_section(r.meta.errors), plots]), r.waited)  # fmt: skip


def prefix_plot(r: PrefixResult, path: Path) -> None:
    """Left: TTFT p50 and p99 per arm. Right: KV blocks held (mean and peak) per arm."""
    arms = [a for a in r.arms if a.points]
    fig, (ttft, kv) = plt.subplots(1, 2, figsize=(10, 4.2))
    x = list(range(len(arms)))
    names = [f"caching {_name(a)}" for a in arms]
    for k, (q, color) in enumerate((("p50", "#3182bd"), ("p99", "#9ecae1"))):
        values = [getattr(a.points[0].ttft_ms, q) if a.points[0].ttft_ms else 0 for a in arms]
        ttft.bar([i + 0.38 * k for i in x], values, width=0.38, color=color, label=f"TTFT {q}")
    ttft.set_xticks([i + 0.19 for i in x], names)
    ttft.set_ylabel("ms (GPU time)")
    ttft.legend(fontsize=8)
    ttft.set_title("TTFT: a cached prefix skips its prefill")
    for k, (which, color) in enumerate((("mean", "#fd8d3c"), ("max", "#fdd0a2"))):
        kv.bar([i + 0.38 * k for i in x], [_blocks(a, which) or 0 for a in arms], width=0.38, color=color,
               label=f"KV blocks held, {'peak' if which == 'max' else which}")  # fmt: skip
    kv.set_xticks([i + 0.19 for i in x], names)
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
