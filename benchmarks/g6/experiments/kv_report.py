"""The kv experiment's Markdown report and plots, pure functions of a saved KvResult."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from benchmarks.g6.experiments.kv import KvLength, KvParams, KvResult  # noqa: E402
from benchmarks.g6.report import (  # noqa: E402
    context_lines, cost_sections, errors_section, in_flight_cell, latency_pair, price_cell, reading_notes, target_text,
    throughput_cell,
)  # fmt: skip
from benchmarks.g6.shape import SIM_EOS  # noqa: E402
from benchmarks.harness.evidence import markdown as evidence_section  # noqa: E402
from benchmarks.harness.markdown import num, table  # noqa: E402
from benchmarks.labs.phases_report import waited_first  # noqa: E402

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
        f"fixed waves of {r.kv.concurrency}"
        if r.kv.concurrency
        else f"a search from the predicted batch (up 25% after a fit, down 20% after a preemption, then halving the "
        f"gap; at most {r.kv.max_probes} waves, stopping within {r.kv.tolerance:.0%} of the prediction, never above "
        f"{r.kv.max_concurrency} sequences)"
    )
    lines = [
        "# Lab g6: the KV cache as the binding constraint",
        "",
        f"Model `{p.model}` served by {target_text(p)}; {m.started_at.isoformat()} to {m.finished_at.isoformat()}.",
        "",
        evidence_section(m.evidence),
        "## What was run",
        "",
        f"- Server: max-model-len {p.max_model_len}, gpu-memory-utilization {p.gpu_memory_utilization:g}, "
        f"max-num-seqs {r.max_num_seqs}. A utilisation this low stands in for a bigger model or a smaller GPU: "
        "the cache binds at batches a client can drive in seconds per wave.",
        f"- {_server(r).capitalize()} KV cache: {reported}; the sizing predicted {predicted}",
        f"- Each probe is one wave: C sequences sent at once (C workers, one request each, no warm-up), half "
        f"prompt and half output cap (at {r.kv.context_lens[0]} tokens: {prompt} prompt token ids + at most {output} "
        f"output tokens, max_tokens), stopping at EOS"
        + (f" (the simulator stops each at a length {SIM_EOS})" if p.target_kind == "sim" else "")
        + f", so the sequences grow in decode and end at lengths the server cannot know in advance. Context lengths "
        f"{r.kv.context_lens}; concurrency: {search}",
        *context_lines(m, p, [probe.point for probe in r.probes]),
    ]
    return "\n".join(lines) + "\n"


def _kv_peak(r: KvResult, length: KvLength) -> str | None:
    probe = next((p for p in r.probes if p.context_len == length.context_len and p.fits
                  and p.held == length.measured_max_batch), None)  # fmt: skip
    usage = None if probe is None or probe.point.server is None else probe.point.server.kv_cache_usage
    return None if usage is None else f"{usage.max:.0%}"


def _answer(r: KvResult) -> str:
    rows = [
        [length.context_len, length.blocks_per_sequence, length.predicted_max_batch, length.sizing_max_batch,
         length.measured_max_batch, length.preemption_from, length.binding, _kv_peak(r, length)]
        for length in r.lengths
    ]  # fmt: skip
    out = "## The answer: the largest batch at each context length\n\n" + table(
        ["context length (prompt + cap, tokens)", "blocks per sequence at its cap",
         f"predicted max batch ({_server(r)} blocks, every sequence to its cap)", "sizing's prediction",
         "measured max batch (no preemption)", "preemption from (sequences)", "what binds", "KV peak at the measured batch"],
        rows,
    )  # fmt: skip
    lines = [""]
    if r.sizing is not None:
        gpu = r.sizing.gpu_total_memory_bytes
        tokens = r.kv_cache_tokens
        pool = tokens * r.sizing.kv_bytes_per_token
        lines.append(
            f"The weights take {r.sizing.weight_bytes / GIB:.2f} GiB ({r.sizing.weight_bytes / gpu:.0%} of the GPU's "
            f"{gpu / GIB:.2f} GiB) at every length; they never change. The KV cache holds {tokens:,} tokens "
            f"({pool / GIB:.2f} GiB, {pool / gpu:.0%}) at {r.sizing.kv_bytes_per_token:,} bytes per token."
        )
    measured = [x for x in r.lengths if x.measured_max_batch]
    if len(measured) >= 2:
        first, last = measured[0], measured[-1]
        lines.append(
            f"{first.measured_max_batch} sequences of {first.context_len:,} tokens fit side by side, "
            f"{last.measured_max_batch} of {last.context_len:,}: {last.context_len / first.context_len:g}x the "
            f"length, 1/{first.measured_max_batch / last.measured_max_batch:.1f} the batch. What limits the batch "
            "is the cache growing with length x batch, not the weights."
        )
    for x in r.lengths:
        if x.preemption_from is not None:
            off = None if x.measured_max_batch is None else x.measured_max_batch / x.predicted_max_batch - 1
            against = f"predicted {x.predicted_max_batch} at the cap" + ("" if off is None else f": {off:+.0%}")
            lines.append(
                f"- {x.context_len:,} tokens: {x.measured_max_batch} sequences ran without a preemption ({against}); "
                f"a wave of {x.preemption_from} preempted (the server freed the newest sequences' blocks so the others "
                "could grow, and recomputed them later)."
            )
        elif x.binding in ("max-num-seqs", "concurrency cap"):
            offered = max(p.concurrency for p in r.probes if p.context_len == x.context_len and p.fits)
            lines.append(f"- {x.context_len:,} tokens: {x.binding} bound first: a wave of {offered} ran without a "
                         f"preemption, {x.measured_max_batch} of them resident at once at the most.")  # fmt: skip
    return out + "\n".join(lines) + "\n"


def _realised_output(r: KvResult, length: KvLength) -> str | None:
    probe = next((p for p in r.probes if p.context_len == length.context_len and p.fits
                  and p.held == length.measured_max_batch), None)  # fmt: skip
    out = None if probe is None or probe.point.realised is None else probe.point.realised.output_tokens
    return None if out is None else f"{out.mean:,.0f} / {out.p99:,.0f} of {KvParams.shape(length.context_len)[1]:,}"


def _gain(measured: int | None, baseline: int) -> str | None:
    return None if not measured or not baseline else f"{measured / baseline:.2f}x"


def _paging(r: KvResult) -> str:
    p = r.params
    block = r.block_size
    rows = [
        [x.context_len, x.measured_max_batch, _realised_output(r, x), _gib(x.held_bytes_at_measured),
         _gib(x.contiguous_request_bytes_for_measured), _gib(x.contiguous_max_len_bytes_for_measured),
         x.contiguous_request_max_batch, x.contiguous_max_len_max_batch,
         _gain(x.measured_max_batch, x.contiguous_request_max_batch), _gain(x.measured_max_batch, x.contiguous_max_len_max_batch)]
        for x in r.lengths
    ]  # fmt: skip
    pool = None if r.sizing is None else r.kv_cache_tokens * r.sizing.kv_bytes_per_token
    return (
        "## PagedAttention against the reservations a server without paging must make\n\n"
        f"Paging keeps each sequence's KV in blocks of {block} tokens, allocated as the sequence grows and freed "
        "when it ends, so it holds only the tokens that exist. A server without paging must reserve a sequence's "
        "region when it admits it, not knowing where the request will stop: max-model-len "
        f"({p.max_model_len:,}) tokens per sequence, or at best the request's own prompt + max_tokens. In the same "
        f"{_gib(pool) or '?'} GiB of KV, the first fits the same batch at every length; the second fits as many "
        "sequences as if every one ran to its cap, which a request that stops at EOS never needs. Paging's gain "
        "over the second is what early stops are worth; over the first, also what short requests are worth.\n\n"
        + table(
            ["context length (prompt + cap)", "measured batch", "output tokens mean / p99 of the cap",
             "KV held at its peak (GiB, server gauge)", "prompt + max_tokens reservation for it (GiB)",
             "max-model-len reservation for it (GiB)", "batch a prompt + max_tokens reservation allows",
             "batch a max-model-len reservation allows", "paging's gain over prompt + max_tokens",
             "paging's gain over max-model-len"],
            rows,
        )  # fmt: skip
        + f"\nKV held is {_server(r)} KV-usage gauge at its peak in the measured wave (sampled every "
        f"{p.scrape_interval_s:g} s) times the pool; the reservations are what the same batch would need.\n"
    )


def _probes(r: KvResult) -> str:
    rows = []
    for probe in r.probes:
        pt, s = probe.point, probe.point.server
        lag = pt.client_lag_ms
        rows.append([
            probe.context_len, probe.concurrency, in_flight_cell(pt), pt.completed, pt.failed,
            None if s is None or s.running is None else f"{s.running.max:.0f}",
            None if s is None or s.waiting is None else f"{s.waiting.max:.0f}",
            None if s is None or s.kv_cache_usage is None else f"{s.kv_cache_usage.max:.0%}",
            None if s is None else num(s.preemptions, 0),
            latency_pair(pt.ttft_ms), latency_pair(pt.itl_ms), throughput_cell(pt), price_cell(pt),
            None if lag is None else f"{lag.p99:.1f}" + (" **client-bound**" if pt.client_bound else ""),
        ])  # fmt: skip
    return (
        "## Every probe\n\n"
        + table(
            ["context length", "sequences (wave)", "in flight (mean)", "ok", "failed", "running max", "waiting max",
             "KV peak", "preemptions", "TTFT p50/p99 ms", "ITL p50/p99 ms", "output tok/s",
             "$ per M output tokens (GPU node spot)", "client lag p99 ms"],
            rows,
        )
        + "\n" + reading_notes(r.params)
        + "\nRequests wait even in waves that fit: chunked prefill admits a few prompts per step (a "
        f"{r.sizing.max_num_batched_tokens if r.sizing else '?'}-token budget), so the last of a wave queues "
        "for its prefill, which shows as TTFT. A wave is sent at once, so the client's lag is that burst "
        "leaving the socket, not a slow client: it shapes TTFT of a few requests, not the cache's use.\n"
    )


def render_kv_report(r: KvResult) -> str:
    labelled = [(f"{p.context_len:,} tokens x {p.concurrency} sequences", p.point) for p in r.probes]
    plots = "## Plots\n\n" + "\n".join(f"![{name}]({name})" for name in PLOTS) + "\n"
    return waited_first("\n".join([_header(r), _answer(r), _paging(r), _probes(r), cost_sections(
        labelled, r.params, r.gpu_price, r.cost), errors_section(r.meta.errors), plots]), r.waited)  # fmt: skip


def max_batch_plot(r: KvResult, path: Path) -> None:
    """Left: the largest batch against length. Right: where the GPU's memory goes at each length."""
    fig, (ax, mem) = plt.subplots(1, 2, figsize=(12, 4.8), gridspec_kw={"width_ratios": [1.25, 1]})
    lens = [x.context_len for x in r.lengths]
    ax.plot(lens, [x.predicted_max_batch for x in r.lengths], color="#3182bd", marker="s",
            label=f"predicted at the cap ({_server(r)} blocks)")  # fmt: skip
    measured = [(x.context_len, x.measured_max_batch) for x in r.lengths if x.measured_max_batch]
    if measured:
        ax.plot(*zip(*measured), linestyle="none", marker="o", markersize=9, color="#31a354",
                label="measured: ran without preemption")  # fmt: skip
    over = [(x.context_len, x.preemption_from) for x in r.lengths if x.preemption_from]
    if over:
        ax.plot(*zip(*over), linestyle="none", marker="x", markersize=9, color="#de2d26", label="a wave that preempted")
    ax.plot(lens, [x.contiguous_request_max_batch for x in r.lengths], color="#636363", linestyle=":",
            label="contiguous prompt + max_tokens reservation per sequence")  # fmt: skip
    ax.plot(lens, [x.contiguous_max_len_max_batch for x in r.lengths], color="#636363", linestyle="--",
            label=f"contiguous {r.params.max_model_len:,}-token reservation per sequence")  # fmt: skip
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
        held = [(x.held_bytes_at_measured or 0) / GIB for x in r.lengths]
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
    """Preemptions per sequence of each wave against its size over the predicted batch."""
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for x in r.lengths:
        probes = sorted((p for p in r.probes if p.context_len == x.context_len and p.preemptions is not None),
                        key=lambda p: p.concurrency)  # fmt: skip
        if not probes:
            continue
        share = [p.concurrency / x.predicted_max_batch for p in probes]
        per_sequence = [(p.preemptions or 0.0) / p.concurrency for p in probes]
        (line,) = ax.plot(share, per_sequence, marker="o", label=f"{x.context_len:,} tokens (predicted {x.predicted_max_batch})")
        for q, v, p in zip(share, per_sequence, probes):
            ax.annotate(str(p.concurrency), (q, v), textcoords="offset points", xytext=(3, 4), fontsize=7,
                        color=line.get_color())  # fmt: skip
    ax.axvline(1.0, color="#636363", linestyle="--", linewidth=1, label="the predicted max batch")
    ax.set_xlabel("sequences in the wave / predicted max batch (labels: sequences)")
    ax.set_ylabel("preemptions per sequence")
    ax.set_ylim(bottom=-0.05)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title("Preemption begins past the predicted batch")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render_kv_plots(r: KvResult, folder: Path) -> list[Path]:
    paths = [folder / name for name in PLOTS]
    max_batch_plot(r, paths[0])
    probes_plot(r, paths[1])
    return paths
