"""The kv experiment's Markdown report and plots, pure functions of a saved KvResult."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from benchmarks.g6.experiments.kv import REQUESTS_PER_SLOT, KvParams, KvResult  # noqa: E402
from benchmarks.g6.price import Run  # noqa: E402
from benchmarks.g6.report import (  # noqa: E402
    context_lines, cost_sections, errors_section, host_flags, latency_pair, price_cell, reading_notes, rerun_cell,
    rerun_note, title,
)  # fmt: skip
from benchmarks.g6.shape import SIM_EOS, realised_section  # noqa: E402
from benchmarks.harness.markdown import num, table  # noqa: E402
from benchmarks.kube.evidence import markdown as evidence_section  # noqa: E402
from benchmarks.kube.phases_report import waited_first  # noqa: E402
from benchmarks.loadgen.steady import RAMP_E2E  # noqa: E402

PLOTS = ("kv-max-batch.png", "kv-probes.png")
GIB = 1024**3


def _gib(value: float | None) -> str | None:
    return None if value is None else f"{value / GIB:.2f}"


def _server(r: KvResult) -> str:
    """Whose block count the figures are: only a real server's are vLLM's."""
    return "the simulated server's" if r.params.target_kind == "sim" else "vLLM's"


def _header(r: KvResult) -> str:
    m, p = r.meta, r.params
    cache = r.cache
    reported = (
        f"{cache.num_gpu_blocks:,} blocks of {cache.block_size} tokens = {cache.kv_cache_tokens:,} tokens "
        f"(`vllm:cache_config_info`, at gpu-memory-utilization {cache.gpu_memory_utilization})"
        if cache
        else "not reported (no `vllm:cache_config_info`): the predictions below use the sizing's blocks"
    )
    if r.sizing is None:
        predicted = "no sizing (model or GPU not in the catalogue)"
    elif cache is not None and p.target_kind == "sim":
        # The simulator allocates what the sizing model says: comparing the two compares the model with itself.
        predicted = "the same blocks: the simulator allocates what the sizing model computes (no measurement of vLLM)"
    else:
        predicted = f"{r.sizing.num_gpu_blocks:,} blocks ({r.sizing.kv_cache_tokens:,} tokens" + (
            f", {100 * (r.sizing.num_gpu_blocks - cache.num_gpu_blocks) / cache.num_gpu_blocks:+.1f}% against vLLM's)"
            if cache else ")")  # fmt: skip
    prompt, output = KvParams.shape(r.kv.context_lens[0])
    search = (
        f"fixed concurrencies {r.kv.concurrency}"
        if r.kv.concurrency
        else f"a search from the predicted batch (up 25% after a fit, down 20% after a preemption, then halving the "
        f"gap; at most {r.kv.max_probes} probes, stopping within {r.kv.tolerance:.0%} of the prediction, never above "
        f"{r.kv.max_concurrency} sequences)"
    )
    lines = [
        evidence_section(m.evidence),
        "## What was run",
        "",
        f"- Server: max-model-len {p.max_model_len}, gpu-memory-utilization {p.gpu_memory_utilization:g}, "
        f"max-num-seqs {r.max_num_seqs}. A utilisation this low stands in for a bigger model or a smaller GPU: "
        "the cache binds at batches a client can drive in seconds per probe.",
        f"- {_server(r).capitalize()} KV cache: {reported}; the sizing predicted {predicted}",
        f"- Each probe is a closed loop of C sequences (a finished request replaced at once), {REQUESTS_PER_SLOT} "
        f"requests per slot, no warm-up, read at steady state ({RAMP_E2E:g} E2E after the first send, the first "
        "requests all starting together, to the last send). Traffic like production: at context length L, prompts "
        f"lognormal around L/2 (at {r.kv.context_lens[0]} tokens: {prompt.describe()} token ids) and outputs capped "
        f"at L/2 ({output} tokens, max_tokens), stopping at EOS"
        + (f" (the simulator stops each at a length {SIM_EOS})" if p.target_kind == "sim" else "")
        + f", so no server knows in advance where one ends. Context lengths {r.kv.context_lens}; concurrency: {search}; "
        f"the largest C that fitted, and each contiguous baseline's C, {r.kv.seeds} runs each (each its own seed)",
        *context_lines(m, p, [probe.point for probe in r.probes]),
    ]
    return "\n".join(lines) + "\n"


def _answer(r: KvResult) -> str:
    rows = [
        [x.context_len, x.blocks_per_sequence, x.predicted_max_batch, x.sizing_max_batch, x.measured_max_batch,
         rerun_cell(x.held, 1), x.preemption_from, x.binding, rerun_cell(x.tokens_per_sequence_at_peak, 0),
         rerun_cell(x.kv_peak, 0, percent=True), rerun_cell(x.output_tokens_per_s, 0)]
        for x in r.lengths
    ]  # fmt: skip
    runs = max((x.held.n for x in r.lengths if x.held), default=1)
    out = "## The answer: the largest batch at each context length, at steady state\n\n" + table(
        ["context length L (mean prompt + cap)", "blocks per sequence at L", f"predicted max batch ({_server(r)} "
         "blocks, every sequence to L)", "sizing's prediction", "largest C without a preemption",
         "sequences running there (mean)", "preemption from (C)", "what binds", "tokens each held at the KV peak",
         "KV peak", "output tok/s there"],
        rows,
    ) + "\n" + rerun_note(runs, "deciding probe")  # fmt: skip
    lines = [""]
    if r.sizing is not None:
        gpu = r.sizing.gpu_total_memory_bytes
        tokens = r.kv_cache_tokens
        kv_pool = tokens * r.sizing.kv_bytes_per_token
        lines.append(
            f"The weights take {r.sizing.weight_bytes / GIB:.2f} GiB ({r.sizing.weight_bytes / gpu:.0%} of the GPU's "
            f"{gpu / GIB:.2f} GiB) at every length; they never change. The KV cache holds {tokens:,} tokens "
            f"({kv_pool / GIB:.2f} GiB, {kv_pool / gpu:.0%}) at {r.sizing.kv_bytes_per_token:,} bytes per token."
        )
    for x in r.lengths:
        if x.measured_max_batch is None:
            lines.append(f"- {x.context_len:,} tokens: no concurrency ran without a preemption.")
            continue
        held = f"{rerun_cell(x.tokens_per_sequence_at_peak, 0)} tokens each at the KV peak, of the {x.context_len:,} a " \
               "sequence holds at its cap"  # fmt: skip
        if x.preemption_from is not None:
            lines.append(
                f"- {x.context_len:,} tokens: {x.measured_max_batch} sequences ran at steady state without a preemption "
                f"({held}); {x.preemption_from} preempted (the server freed the newest sequences' blocks so the others "
                "could grow, and recomputed them later)."
            )  # fmt: skip
        elif x.binding in ("max-num-seqs", "concurrency cap"):
            lines.append(f"- {x.context_len:,} tokens: {x.binding} bound first: {x.measured_max_batch} ran without a "
                         f"preemption ({held}).")  # fmt: skip
    return out + "\n".join(lines) + "\n"


def _paging(r: KvResult) -> str:
    p = r.params
    rows = []
    for x in r.lengths:
        for b in x.baselines:
            rows.append([x.context_len, b.reserves, f"{b.tokens_per_sequence:,}", b.max_batch,
                         rerun_cell(b.output_tokens_per_s, 0), x.measured_max_batch, rerun_cell(x.output_tokens_per_s, 0),
                         rerun_cell(b.gain, 2)])  # fmt: skip
    kv_pool = None if r.sizing is None else r.kv_cache_tokens * r.sizing.kv_bytes_per_token
    return (
        "## PagedAttention against the reservations a server without paging must make\n\n"
        f"Paging keeps each sequence's KV in blocks of {r.block_size} tokens, allocated as the sequence grows and "
        "freed when it ends, so it holds only the tokens that exist. A server without paging must reserve a "
        "sequence's region when it admits it, not knowing where the request will stop: max-model-len "
        f"({p.max_model_len:,}) tokens per sequence, or at best the request's own prompt + max_tokens (L on average). "
        f"In the same {_gib(kv_pool) or '?'} GiB of KV that holds pool / reservation sequences at once. The same "
        "traffic ran at each of those concurrencies on this server (paging with room to spare: the throughput a "
        "contiguous server of the same compute would at best get), and paging's gain is the measured throughput at "
        "the largest batch that fitted over it, run k against run k.\n\n"
        + table(
            ["context length L", "a server without paging reserves", "tokens per sequence", "sequences it holds",
             "output tok/s at that many", "paging's largest batch", "output tok/s there", "paging's gain"],
            rows,
        )  # fmt: skip
        + "\nSteady-state output tokens/s (GPU time), mean (95% rerun interval) over the runs.\n"
    )


def _probes(r: KvResult) -> str:
    rows = []
    kv_tokens = r.kv_cache_tokens
    for probe in r.probes:
        pt, s, st = probe.point, probe.point.steady_server, probe.point.steady
        lag = pt.client_lag_ms
        rows.append([
            probe.context_len, probe.concurrency, probe.role, probe.run + 1, pt.completed, pt.failed,
            None if st is None else f"{st.in_system_mean:.1f}" + (" **below load**" if st.in_system_mean < 0.9 * probe.concurrency else ""),
            None if s is None or s.running is None else f"{s.running.mean:.1f} / {s.running.max:.0f}",
            None if s is None or s.waiting is None else f"{s.waiting.max:.0f}",
            None if s is None or s.kv_cache_usage is None else f"{s.kv_cache_usage.max:.0%}",
            num(probe.tokens_per_sequence_at_peak(kv_tokens), 0), None if s is None else num(s.preemptions, 0),
            latency_pair(st.ttft_ms if st else None), latency_pair(st.itl_ms if st else None),
            num(probe.output_tokens_per_s, 0), price_cell(pt),
            None if lag is None else f"{lag.p99:.1f}" + host_flags(pt),
        ])  # fmt: skip
    return (
        "## Every probe\n\n"
        + table(
            ["context length", "C", "role", "run", "ok", "failed", "in system (steady mean)",
             "running mean / max", "waiting max", "KV peak", "tokens per sequence at the peak", "preemptions",
             "TTFT p50/p99 ms", "ITL p50/p99 ms", "output tok/s", "$ per M output tokens (GPU node spot)",
             "client lag p99 ms"],
            rows,
        )
        + "\nEvery figure but ok/failed, the price and the lag is the steady window's (the server's gauges and "
        "counters over it). **below load**: fewer than 90% of C in the system at steady state, so its throughput is "
        "of a smaller batch than its label. "
        + reading_notes(r.params)
    )


def render_kv_report(r: KvResult) -> str:
    runs = [Run(f"{p.context_len:,} tokens x {p.concurrency} ({p.role})", p.run, p.point) for p in r.probes]
    plots = "## Plots\n\n" + "\n".join(f"![{name}]({name})" for name in PLOTS) + "\n"
    return waited_first("\n".join([title("the KV cache as the binding constraint", r.meta, r.params), _answer(r),
                                   _paging(r), _header(r), _probes(r), realised_section([(x.label, x.point) for x in runs]), cost_sections(
        runs, r.params, r.gpu_price, r.cost), errors_section(r.meta.errors), plots]), r.waited)  # fmt: skip


def max_batch_plot(r: KvResult, path: Path) -> None:
    """Left: the largest batch against length. Right: where the GPU's memory goes at each length."""
    fig, (ax, mem) = plt.subplots(1, 2, figsize=(12, 4.8), gridspec_kw={"width_ratios": [1.25, 1]})
    lens = [x.context_len for x in r.lengths]
    ax.plot(lens, [x.predicted_max_batch for x in r.lengths], color="#3182bd", marker="s",
            label=f"predicted at the cap ({_server(r)} blocks)")  # fmt: skip
    measured = [(x.context_len, x.measured_max_batch) for x in r.lengths if x.measured_max_batch]
    if measured:
        ax.plot(*zip(*measured), linestyle="none", marker="o", markersize=9, color="#31a354",
                label="measured: steady state without a preemption")  # fmt: skip
    over = [(x.context_len, x.preemption_from) for x in r.lengths if x.preemption_from]
    if over:
        ax.plot(*zip(*over), linestyle="none", marker="x", markersize=9, color="#de2d26", label="the smallest C that preempted")
    for reserves, style in (("prompt + max_tokens", ":"), ("max-model-len", "--")):
        ax.plot(lens, [next(b.max_batch for b in x.baselines if b.reserves == reserves) for x in r.lengths],
                color="#636363", linestyle=style, label=f"contiguous, reserving {reserves} per sequence")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xticks(lens, [f"{n:,}" for n in lens])
    ax.minorticks_off()
    ax.set_xlabel("context length per sequence (tokens)")
    ax.set_ylabel("sequences side by side")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Largest batch against context length")
    if r.sizing is None:
        mem.text(0.5, 0.5, "no sizing for this model and GPU", ha="center", va="center", transform=mem.transAxes)
    else:
        s = r.sizing
        gpu = s.gpu_total_memory_bytes / GIB
        weights = s.weight_bytes / GIB
        reserve = (s.activation_peak_bytes + s.non_torch_bytes) / GIB
        pool = r.kv_cache_tokens * s.kv_bytes_per_token / GIB
        held = [(x.kv_peak.mean if x.kv_peak else 0.0) * pool for x in r.lengths]
        x = list(range(len(lens)))
        mem.bar(x, [weights] * len(x), color="#756bb1", label=f"weights: {weights:.2f} GiB, {weights / gpu:.0%} at every length")
        mem.bar(x, [reserve] * len(x), bottom=[weights] * len(x), color="#bdbdbd", label="activations, CUDA (vLLM's reserve)")
        mem.bar(x, held, bottom=[weights + reserve] * len(x), color="#fd8d3c", label="KV held by the measured batch (peak)")
        mem.bar(x, [pool - h for h in held], bottom=[weights + reserve + h for h in held], color="#fdd0a2",
                label=f"KV pool left ({pool:.2f} GiB in all)")  # fmt: skip
        mem.axhline(s.memory_budget_bytes / GIB, color="#636363", linestyle="--", linewidth=1,
                    label=f"vLLM's budget (utilisation {s.gpu_memory_utilization:g})")  # fmt: skip
        mem.set_xticks(x, [f"{n:,} x {b.measured_max_batch or '?'}" for n, b in zip(lens, r.lengths)])
        mem.set_xlabel("context length x sequences that fit")
        mem.set_ylabel("GiB")
        mem.set_ylim(0, gpu)
        mem.legend(fontsize=7, loc="upper right")
        mem.text(0.5 * (len(x) - 1), (s.memory_budget_bytes / GIB + gpu) / 2, "outside vLLM's budget",
                 ha="center", va="center", color="#636363", fontsize=9)  # fmt: skip
        mem.set_title(f"GPU memory ({gpu:.1f} GiB): KV fills up, weights stay put")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def probes_plot(r: KvResult, path: Path) -> None:
    """Steady output tokens/s of every probe against its concurrency, preempting ones marked."""
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for x in r.lengths:
        probes = sorted((p for p in r.probes if p.context_len == x.context_len and p.output_tokens_per_s is not None),
                        key=lambda p: p.concurrency)  # fmt: skip
        if not probes:
            continue
        (line,) = ax.plot([p.concurrency for p in probes], [p.output_tokens_per_s for p in probes], marker="o",
                          linestyle="none", label=f"{x.context_len:,} tokens")  # fmt: skip
        over = [p for p in probes if p.fits is False]
        ax.plot([p.concurrency for p in over], [p.output_tokens_per_s for p in over], marker="x", markersize=10,
                color="black", linestyle="none")  # fmt: skip
        if x.measured_max_batch is not None:
            ax.axvline(x.measured_max_batch, color=line.get_color(), linestyle=":", linewidth=1)
    ax.set_xlabel("sequences in the closed loop (C); dotted: the largest without a preemption; x: preempted")
    ax.set_ylabel(f"output tokens/s at steady state ({r.params.time_scale})")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title("Throughput against the batch: what each baseline's batch leaves")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render_kv_plots(r: KvResult, folder: Path) -> list[Path]:
    paths = [folder / name for name in PLOTS]
    max_batch_plot(r, paths[0])
    probes_plot(r, paths[1])
    return paths
