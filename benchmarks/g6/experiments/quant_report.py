"""The quant experiment's Markdown report and plot, pure functions of a saved QuantResult."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from benchmarks.g6.experiments.quant import QuantResult, VariantResult  # noqa: E402
from benchmarks.g6.report import context_lines, cost_sections, errors_section, latency_pair, price_cell, target_text  # noqa: E402
from benchmarks.g6.result import G6Point  # noqa: E402
from benchmarks.g6.shape import asked_text  # noqa: E402
from benchmarks.harness.markdown import num, table  # noqa: E402

PLOTS = ("quant-tradeoffs.png",)
GIB = 1024**3


def _at(v: VariantResult, concurrency: int) -> G6Point | None:
    return next((p for p in v.points if p.concurrency == concurrency), None)


def _levels(r: QuantResult) -> tuple[int, int]:
    """(lowest, highest) concurrency the variants ran at."""
    levels = sorted({p.concurrency for v in r.variants for p in v.points if p.concurrency is not None})
    return (levels[0], levels[-1]) if levels else (1, 1)


def _setting(v: VariantResult) -> str:
    return f"`{v.model}`" + (f" `--quantization {v.quantization}`" if v.quantization else "")


def _header(r: QuantResult) -> str:
    m, p, q = r.meta, r.params, r.quant
    quality = (
        "not measured (simulator): the simulator has no model, so it has no log-probabilities to compare, and "
        "none are invented"
        if p.target_kind == "sim"
        else f"{q.quality_prompts} prompts of the project's own set (seed {p.seed}), greedy continuations of up to "
        f"{q.quality_tokens} tokens by the baseline, scored by every variant through the completions API's prompt "
        "log-probabilities (`echo` + `logprobs`, or vLLM's `prompt_logprobs`); no data set downloaded"
    )
    lines = [
        "# Lab g6: what quantization buys and what it costs",
        "",
        f"Model `{p.model}` served by {target_text(p)}; {m.started_at.isoformat()} to {m.finished_at.isoformat()}.",
        "",
        "## What was run",
        "",
        f"- Variants, the first the baseline: {', '.join(f'{v.variant} ({_setting(v)})' for v in r.variants)}",
        f"- Per variant: closed-loop points at concurrency {p.concurrency or list(_levels(r))}, {p.requests} counted "
        f"requests each after a warm-up, {asked_text(p)}; server at gpu-memory-utilization {p.gpu_memory_utilization:g}"
        + (f", max-model-len {p.max_model_len}" if p.max_model_len else ""),
        f"- Quality: {quality}",
        *context_lines(m, p, [point for v in r.variants for point in v.points]),
    ]
    return "\n".join(lines) + "\n"


def _kv_tokens(v: VariantResult) -> str | None:
    vllm = f"{v.cache.kv_cache_tokens:,}" if v.cache else "—"
    predicted = f"{v.sizing.kv_cache_tokens:,}" if v.sizing else "—"
    return f"{vllm} / {predicted}"


def _quality_cells(v: VariantResult) -> list[str | None]:
    q = v.quality
    if q is None:
        return [v.quality_note or None, None, None, None]
    return [
        f"{q.mean_logprob_delta:+.4f}",
        f"{q.perplexity_ratio:.4f}",
        None if q.top1_agreement is None else f"{q.top1_agreement:.1%} ({q.aligned_share:.0%} aligned)",
        f"{q.identical_share:.0%}",
    ]


def _table(r: QuantResult) -> str:
    low, high = _levels(r)
    rows = []
    for v in r.variants:
        if v.error is not None:
            rows.append([v.variant, _setting(v), f"**failed**: {v.error}", *[None] * 10])
            continue
        a, b = _at(v, low), _at(v, high)
        rows.append([
            v.variant, _setting(v),
            None if v.sizing is None else f"{v.sizing.weight_bytes / GIB:.2f}", _kv_tokens(v),
            None if a is None else num(a.output_tokens_per_s, 0), None if a is None else latency_pair(a.itl_ms),
            None if b is None else num(b.output_tokens_per_s, 0), None if b is None else latency_pair(b.itl_ms),
            None if b is None else latency_pair(b.ttft_ms), None if b is None else price_cell(b),
            *_quality_cells(v),
        ])  # fmt: skip
    return "## What each variant buys and costs\n\n" + table(
        ["variant", "served as", "weights GiB (predicted)", "KV tokens vLLM / predicted",
         f"out tok/s c={low}", f"ITL p50/p99 ms c={low}", f"out tok/s c={high}", f"ITL p50/p99 ms c={high}",
         f"TTFT p50/p99 ms c={high}", f"$ per M output tokens c={high}",
         "log-likelihood delta per token", "perplexity ratio", "top-1 agreement", "identical greedy continuations"],
        rows,
    )  # fmt: skip


def _reading(r: QuantResult) -> str:
    lines = ["## What the numbers mean", ""]
    ran = [v for v in r.variants if v.error is None]
    low, high = _levels(r)
    base = ran[0] if ran and ran[0].variant == r.variants[0].variant else None
    lines.append(
        "Decode streams every weight once per step, so smaller weights make each step shorter: that is the "
        "throughput quantization buys at low concurrency. The memory they free goes to the KV cache "
        "(vLLM sizes the cache from what is left of its budget), which is the batch it buys at high concurrency. "
        "Quality is measured on the baseline's own text: a log-likelihood delta of 0 and a perplexity ratio of 1 "
        "mean the variant finds the baseline's continuations exactly as likely as the baseline does."
    )
    lines.append("")
    if base is not None and base.sizing is not None:
        b_low, b_high = _at(base, low), _at(base, high)
        for v in ran[1:]:
            parts = []
            if v.sizing is not None:
                parts.append(f"weights {v.sizing.weight_bytes / GIB:.2f} GiB against {base.sizing.weight_bytes / GIB:.2f}")
                tokens = (v.cache or v.sizing).kv_cache_tokens
                base_tokens = (base.cache or base.sizing).kv_cache_tokens
                parts.append(f"KV cache {tokens / base_tokens:.2f}x the baseline's tokens")
            v_low, v_high = _at(v, low), _at(v, high)
            if v_low and b_low and b_low.output_tokens_per_s:
                parts.append(f"{v_low.output_tokens_per_s / b_low.output_tokens_per_s:.2f}x its output tokens/s at c={low}")
            if v_high and b_high and b_high.output_tokens_per_s:
                parts.append(f"{v_high.output_tokens_per_s / b_high.output_tokens_per_s:.2f}x at c={high}")
            if v.quality is not None:
                parts.append(f"perplexity x{v.quality.perplexity_ratio:.3f} on the baseline's text, "
                             f"{v.quality.identical_share:.0%} of greedy continuations unchanged")  # fmt: skip
            else:
                parts.append(f"quality {v.quality_note}")
            lines.append(f"- **{v.variant}**: " + "; ".join(parts) + ".")
    for v in r.variants:
        if v.error is not None:
            lines.append(f"- **{v.variant}** did not run: {v.error}")
    if base is not None and base.quality is not None:
        lines.append(
            f"- The baseline rescored by itself: delta {base.quality.mean_logprob_delta:+.4f}, "
            f"{base.quality.identical_share:.0%} identical: the noise floor of running the same model twice "
            "(batch composition changes floating-point sums)."
        )
    return "\n".join(lines) + "\n"


def _points(r: QuantResult) -> str:
    rows = []
    for v in r.variants:
        for p in v.points:
            rows.append([v.variant, p.concurrency, p.completed, p.failed, latency_pair(p.ttft_ms), latency_pair(p.itl_ms),
                         latency_pair(p.tpot_ms), num(p.output_tokens_per_s), p.bound, price_cell(p)])  # fmt: skip
    return "## Every point\n\n" + table(
        ["variant", "concurrency", "ok", "failed", "TTFT p50/p99 ms", "ITL p50/p99 ms", "TPOT p50/p99 ms",
         "output tok/s", "bound", "$ per M output tokens"],
        rows,
    )  # fmt: skip


def render_quant_report(r: QuantResult) -> str:
    labelled = [(f"{v.variant} c={p.concurrency}", p) for v in r.variants for p in v.points]
    plots = "## Plots\n\n" + "\n".join(f"![{name}]({name})" for name in PLOTS) + "\n"
    return "\n".join([_header(r), _table(r), _reading(r), _points(r),
                      cost_sections(labelled, r.params, r.gpu_price, r.cost), errors_section(r.meta.errors), plots])  # fmt: skip


def tradeoffs_plot(r: QuantResult, path: Path) -> None:
    """Three panels on the same variants: memory (buys), throughput (buys), quality (costs)."""
    names = [v.variant for v in r.variants]
    x = list(range(len(names)))
    low, high = _levels(r)
    fig, (mem, speed, quality) = plt.subplots(1, 3, figsize=(13, 4.4))
    # vLLM's budget, stacked: the weights, the KV cache sized from what they leave, the reserve for
    # activations; the KV cache in vLLM's own tokens where it said, else the sizing's.
    weights, kv, reserve, labels = [], [], [], []
    for v in r.variants:
        s = v.sizing if v.error is None else None
        tokens = v.cache.kv_cache_tokens if v.cache else s.kv_cache_tokens if s else 0
        weights.append(s.weight_bytes / GIB if s else 0)
        kv.append(tokens * s.kv_bytes_per_token / GIB if s else 0)
        reserve.append((s.activation_peak_bytes + s.non_torch_bytes) / GIB if s else 0)
        labels.append(f"{tokens / 1000:,.0f}k tokens" if s else "")
    mem.bar(x, weights, color="#756bb1", label="weights")
    mem.bar(x, kv, bottom=weights, color="#fd8d3c", label="KV cache (vLLM's tokens where it said)")
    mem.bar(x, reserve, bottom=[a + b for a, b in zip(weights, kv)], color="#bdbdbd", label="activations, CUDA")
    for i, (w, k, label) in enumerate(zip(weights, kv, labels)):
        mem.text(i, w + k / 2, label, ha="center", va="center", fontsize=8)
    mem.set_ylabel("GiB of vLLM's memory budget")
    mem.set_ylim(0, 1.4 * max((a + b + c for a, b, c in zip(weights, kv, reserve)), default=1.0))
    mem.set_title("memory: the weights freed become KV cache")
    mem.legend(fontsize=7, loc="upper center")
    width = 0.38
    for offset, level, colour in ((-width / 2, low, "#9ecae1"), (width / 2, high, "#3182bd")):
        values = [(_at(v, level).output_tokens_per_s / r.params.speedup if _at(v, level) else 0) for v in r.variants]
        bars = speed.bar([i + offset for i in x], values, width, color=colour, label=f"c={level}")
        speed.bar_label(bars, [f"{value:,.0f}" if value else "" for value in values], fontsize=7)
    speed.set_ylabel("output tokens/s on the GPU")
    speed.set_title("throughput")
    speed.legend(fontsize=8)
    scored = [v for v in r.variants if v.quality is not None]
    if scored:
        quality.bar(x, [v.quality.perplexity_ratio if v.quality else 0 for v in r.variants], color="#de2d26",
                    label="perplexity ratio on the baseline's text")  # fmt: skip
        quality.axhline(1.0, color="#636363", linestyle="--", linewidth=1)
        agree = quality.twinx()
        agree.plot(x, [v.quality.top1_agreement if v.quality and v.quality.top1_agreement is not None else float("nan")
                       for v in r.variants], "o", color="#31a354", markersize=9, label="top-1 agreement")  # fmt: skip
        agree.set_ylim(0, 1.05)
        agree.set_ylabel("top-1 agreement")
        quality.set_ylabel("perplexity ratio (1 = baseline)")
        quality.legend(handles=quality.get_legend_handles_labels()[0] + agree.get_legend_handles_labels()[0],
                       fontsize=7, loc="lower left")  # fmt: skip
    else:
        note = next((v.quality_note for v in r.variants if v.quality_note), "not measured")
        quality.text(0.5, 0.5, note.replace(": ", ":\n", 1), ha="center", va="center", transform=quality.transAxes,
                     fontsize=10, wrap=True)  # fmt: skip
        quality.set_yticks([])
    quality.set_title("quality against the baseline")
    for ax in (mem, speed, quality):
        ax.set_xticks(x, [n + ("\n(failed)" if v.error else "") for n, v in zip(names, r.variants)])
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"{r.params.model}: what each variant buys and costs", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render_quant_plots(r: QuantResult, folder: Path) -> list[Path]:
    path = folder / PLOTS[0]
    tradeoffs_plot(r, path)
    return [path]
