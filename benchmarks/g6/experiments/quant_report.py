"""The quant experiment's Markdown report and plot, pure functions of a saved QuantResult."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from benchmarks.g6.experiments.divergence import RESAMPLES, Estimate, QualityScore  # noqa: E402
from benchmarks.g6.experiments.quality import TOP_K  # noqa: E402
from benchmarks.g6.experiments.quant import QuantFigures, QuantResult, VariantResult  # noqa: E402
from benchmarks.g6.price import Run  # noqa: E402
from benchmarks.g6.report import (  # noqa: E402
    context_lines, cost_sections, errors_section, in_flight_cell, latency_pair, price_cell, reading_notes, rerun_cell,
    rerun_note, throughput_cell, title,
)  # fmt: skip
from benchmarks.g6.shape import asked_text  # noqa: E402
from benchmarks.harness.markdown import table  # noqa: E402
from benchmarks.kube.evidence import markdown as evidence_section  # noqa: E402
from benchmarks.kube.phases_report import waited_first  # noqa: E402

PLOTS = ("quant-tradeoffs.png",)
GIB = 1024**3


def _at(v: VariantResult, concurrency: int) -> QuantFigures | None:
    """The variant's figures at `concurrency`, over its repeats."""
    return next((f for f in v.across if f.concurrency == concurrency), None)


def _tok(f: QuantFigures | None) -> float:
    return f.output_tokens_per_s.mean if f is not None and f.output_tokens_per_s is not None else 0.0


def _levels(r: QuantResult) -> tuple[int, int]:
    """(lowest, highest) concurrency the variants ran at."""
    levels = sorted({p.concurrency for v in r.variants for p in v.points if p.concurrency is not None})
    return (levels[0], levels[-1]) if levels else (1, 1)


def _setting(v: VariantResult) -> str:
    return f"`{v.model}`" + (f" `--quantization {v.quantization}`" if v.quantization else "")


def _header(r: QuantResult) -> str:
    m, p, q = r.meta, r.params, r.quant
    method = (
        f"{q.quality_prompts} prompts of the project's own set (seed {p.seed}, no data set downloaded); the baseline "
        f"samples up to {q.quality_tokens} tokens from each at temperature 1 (seed {p.seed} + the prompt's index), "
        f"listing its top-{TOP_K} log-probabilities at every position; every variant scores the same token ids "
        f"through vLLM's `prompt_logprobs` (top-{TOP_K}). KL(baseline || variant) per position over the tokens both "
        "list, the rest of the vocabulary as one bucket (a lower bound of the full KL); top-1 agreement: both would "
        f"pick the same greedy token. Intervals: bootstrap 95% over prompts ({RESAMPLES:,} resamples). Noise floor: "
        "the baseline scoring its own continuations"
    )
    scored = next((v.quality for v in r.variants if v.quality is not None), None)
    quality = (
        "not measured (simulator): the pipeline below ran end to end against the simulator's toy model"
        + (f" ({scored.positions:,} positions of {scored.prompts} prompts per variant)" if scored else "")
        + ", whose log-probabilities are one made-up distribution shared by every variant, so no quality figure "
        f"is reported. The pipeline: {method}"
        if p.target_kind == "sim"
        else method
    )
    lines = [
        evidence_section(m.evidence),
        "## What was run",
        "",
        f"- Variants, the first the baseline: {', '.join(f'{v.variant} ({_setting(v)})' for v in r.variants)}",
        f"- Per variant: closed-loop points at concurrency {p.concurrency or list(_levels(r))}, {p.repeats} run(s) of "
        f"each, {p.requests if p.requests is not None else 'max(64, 8 x concurrency)'} counted requests per run after a "
        f"warm-up, {asked_text(p)}; every variant sent the same requests, run by run (its own seed per run); server at "
        f"gpu-memory-utilization {p.gpu_memory_utilization:g}"
        + (f", max-model-len {p.max_model_len}" if p.max_model_len else ""),
        f"- Quality: {quality}",
        *context_lines(m, p, [point for v in r.variants for point in v.points]),
    ]
    return "\n".join(lines) + "\n"


def _kv_tokens(v: VariantResult) -> str | None:
    vllm = f"{v.cache.kv_cache_tokens:,}" if v.cache else "—"
    predicted = f"{v.sizing.kv_cache_tokens:,}" if v.sizing else "—"
    return f"{vllm} / {predicted}"


def _g(e: Estimate, sign: str = "") -> str:
    lo, hi = e.ci95
    return f"{e.value:{sign}.3g} [{lo:{sign}.3g}, {hi:{sign}.3g}]"


def _pct(e: Estimate) -> str:
    lo, hi = e.ci95
    return f"{e.value:.1%} [{lo:.1%}, {hi:.1%}]"


def _against_floor(r: QuantResult, v: VariantResult, q: QualityScore) -> str:
    """Whether the variant's difference from the baseline stands above the noise floor."""
    f = q.floor
    if f is None:
        return "the floor" if v is r.variants[0] else "no floor to compare with (the baseline's own score is missing)"
    kl = f"KL {'resolved' if f.kl_resolved else 'below the floor'}: {_g(f.kl_excess, '+')} nats/token above it"
    top1 = f"top-1 {'resolved' if f.top1_resolved else 'below the floor'}: {_pct(f.top1_drop)} lower agreement"
    return f"{kl}; {top1}"


def _quality_cells(r: QuantResult, v: VariantResult) -> list[str | None]:
    q = v.quality
    if q is None or r.params.target_kind == "sim":
        return [v.quality_note or None, None, None, None]
    return [_g(q.kl), _pct(q.top1_agreement), _g(q.logprob_delta, "+"), _against_floor(r, v, q)]


def _table(r: QuantResult) -> str:
    low, high = _levels(r)
    rows = []
    for v in r.variants:
        if v.error is not None:
            rows.append([v.variant, _setting(v), f"**failed**: {v.error}", *[None] * 12])
            continue
        a, b = _at(v, low), _at(v, high)
        rows.append([
            v.variant, _setting(v), v.kernel,
            None if v.sizing is None else f"{v.sizing.weight_bytes / GIB:.2f}", _kv_tokens(v),
            None if a is None else rerun_cell(a.output_tokens_per_s, 0), None if a is None else rerun_cell(a.itl_p50_ms, 2),
            None if b is None else rerun_cell(b.output_tokens_per_s, 0), None if b is None else rerun_cell(b.itl_p99_ms, 2),
            None if b is None else rerun_cell(b.ttft_p99_ms), None if b is None else rerun_cell(b.usd_per_million_output_tokens, 3),
            *_quality_cells(r, v),
        ])  # fmt: skip
    runs = max((f.runs for v in r.variants for f in v.across), default=1)
    return "## The answer: what each variant buys and costs\n\n" + table(
        ["variant", "served as", "weight kernel (vLLM's log)", "weights GiB (predicted)", "KV tokens vLLM / predicted",
         f"out tok/s c={low}", f"ITL p50 ms c={low}", f"out tok/s c={high}", f"ITL p99 ms c={high}",
         f"TTFT p99 ms c={high}", f"$ per M output tokens c={high} (GPU node spot)",
         "KL nats/token [95% CI]", "top-1 agreement [95% CI]", "log-prob delta per sampled token [95% CI]",
         "against the noise floor"],
        rows,
    ) + "\n" + rerun_note(runs) + "Quality's brackets are bootstrap intervals over prompts.\n"  # fmt: skip


# What the simulator's costs leave out for a quantized server, and the model's own error (docs/calibration.md:
# its in-sample L4 residuals), which the intervals of repeated runs cannot show.
SIMULATED_QUANTIZATION = (
    "- **On the simulator these are the model's figures, not a measurement.** Its decode step is charged the "
    "bytes of weights it streams and nothing else: the dequantisation an AWQ or GPTQ checkpoint does on every "
    "step (its int4 or int8 weights unpacked to bf16 in vLLM's Marlin kernels) is not modelled, so their "
    "throughput here is an upper bound; fp8 prefill runs at the L4's fp8 FLOPs, twice bf16's. The calibration's "
    "own residuals on the L4 (docs/calibration.md: output tok/s -0.8% to +12%, TTFT p50 -16% to +12%) are not "
    "in the brackets, which hold only the spread between seeds (none on the virtual clock): a difference between "
    "variants smaller than those residuals is not resolved by this run."
)


def _reading(r: QuantResult) -> str:
    lines = ["## What the numbers mean", ""]
    ran = [v for v in r.variants if v.error is None]
    low, high = _levels(r)
    base = ran[0] if ran and ran[0].variant == r.variants[0].variant else None
    lines.append(
        "Decode streams every weight once per step, so smaller weights make each step shorter: that is the "
        "throughput quantization buys at low concurrency. The memory they free goes to the KV cache "
        "(vLLM sizes the cache from what is left of its budget), which is the batch it buys at high concurrency. "
        "Quality is measured on text sampled from the baseline: KL(baseline || variant) says how far the variant's "
        "next-token distribution is from the baseline's where the baseline itself writes (0: the same), top-1 "
        "agreement how often both would choose the same greedy token, the log-prob delta how much less likely the "
        "variant finds the sampled tokens (exp(-delta) is the perplexity ratio). The same model scored twice differs "
        "too (other kernels for decode and prefill, other batches): a difference is resolved only when its interval, "
        "paired prompt by prompt against that noise floor, lies wholly above it."
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
            if _tok(v_low) and _tok(b_low):
                parts.append(f"{_tok(v_low) / _tok(b_low):.2f}x its output tokens/s at c={low} (means over the runs)")
            if _tok(v_high) and _tok(b_high):
                parts.append(f"{_tok(v_high) / _tok(b_high):.2f}x at c={high}")
            if v.quality is not None and r.params.target_kind != "sim":
                parts.append(f"KL {_g(v.quality.kl)} nats/token, top-1 agreement {_pct(v.quality.top1_agreement)} "
                             f"({_against_floor(r, v, v.quality)})")  # fmt: skip
            else:
                parts.append(f"quality {v.quality_note}")
            lines.append(f"- **{v.variant}**: " + "; ".join(parts) + ".")
    for v in r.variants:
        if v.error is not None:
            lines.append(f"- **{v.variant}** did not run: {v.error}")
    if r.params.target_kind == "sim":
        lines.append(SIMULATED_QUANTIZATION)
    if base is not None and base.quality is not None and r.params.target_kind != "sim":
        q = base.quality
        lines.append(
            f"- The noise floor, the baseline against itself over {q.positions:,} positions of {q.prompts} prompts: "
            f"KL {_g(q.kl)} nats/token, top-1 agreement {_pct(q.top1_agreement)}: its log-probabilities as it "
            "generated (decode) against the same tokens scored again (prefill)."
        )
    return "\n".join(lines) + "\n"


def _points(r: QuantResult) -> str:
    rows = []
    for v in r.variants:
        for p in v.points:
            rows.append([v.variant, p.concurrency, p.repeat + 1, in_flight_cell(p), p.completed, p.failed,
                         latency_pair(p.ttft_ms), latency_pair(p.itl_ms), latency_pair(p.tpot_ms), throughput_cell(p),
                         p.bound, price_cell(p)])  # fmt: skip
    return "## Every run of every point\n\n" + table(
        ["variant", "concurrency", "run", "in flight (mean)", "ok", "failed", "TTFT p50/p99 ms", "ITL p50/p99 ms",
         "TPOT p50/p99 ms", "output tok/s", "bound", "$ per M output tokens (GPU node spot)"],
        rows,
    ) + "\n" + reading_notes(r.params)  # fmt: skip


def render_quant_report(r: QuantResult) -> str:
    plots = "## Plots\n\n" + "\n".join(f"![{name}]({name})" for name in PLOTS) + "\n"
    runs = [Run(f"{v.variant} c={p.concurrency}", p.repeat, p) for v in r.variants for p in v.points]
    return waited_first("\n".join([title("what quantization buys and what it costs", r.meta, r.params), _table(r),
                                   _header(r), _reading(r), _points(r), cost_sections(
        runs, r.params, r.gpu_price, r.cost), errors_section(r.meta.errors), plots]), r.waited)  # fmt: skip


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
        values = [_tok(_at(v, level)) for v in r.variants]
        bars = speed.bar([i + offset for i in x], values, width, color=colour, label=f"c={level}")
        speed.bar_label(bars, [f"{value:,.0f}" if value else "" for value in values], fontsize=7)
    speed.set_ylabel(f"output tokens/s ({r.params.time_scale})")
    speed.set_title("throughput")
    speed.legend(fontsize=8)
    scored = [v for v in r.variants if v.quality is not None] if r.params.target_kind != "sim" else []
    if scored:
        kl = [v.quality.kl if v.quality else None for v in r.variants]
        quality.bar(x, [e.value if e else 0 for e in kl], color="#de2d26", label="KL(baseline || variant)",
                    yerr=[[e.value - e.ci95[0] if e else 0 for e in kl], [e.ci95[1] - e.value if e else 0 for e in kl]],
                    capsize=4)  # fmt: skip
        if r.variants[0].quality is not None:
            quality.axhline(r.variants[0].quality.kl.value, color="#636363", linestyle="--", linewidth=1,
                            label="noise floor (the baseline against itself)")  # fmt: skip
        agree = quality.twinx()
        top1 = [v.quality.top1_agreement if v.quality else None for v in r.variants]
        agree.errorbar(x, [e.value if e else float("nan") for e in top1], fmt="o", color="#31a354", markersize=8,
                       yerr=[[e.value - e.ci95[0] if e else 0 for e in top1], [e.ci95[1] - e.value if e else 0 for e in top1]],
                       capsize=4, label="top-1 agreement")  # fmt: skip
        agree.set_ylim(0, 1.05)
        agree.set_ylabel("top-1 agreement")
        quality.set_ylabel("KL nats per token (95% CI)")
        quality.legend(handles=quality.get_legend_handles_labels()[0] + agree.get_legend_handles_labels()[0],
                       fontsize=7, loc="upper left")  # fmt: skip
    else:
        note = next((v.quality_note for v in r.variants if v.quality_note), "not measured")
        if r.params.target_kind == "sim" and any(v.quality for v in r.variants):
            note += "\n\nthe pipeline ran end to end on the\nsimulator's toy model, one made-up\ndistribution for every variant"
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
