"""Lab g6's plots, drawn only from a saved result (PNG, matplotlib's Agg backend)."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from benchmarks.g6.result import G6Point, G6Result  # noqa: E402
from benchmarks.serving.sizing import roofline  # noqa: E402

PLOTS = ("ttft-vs-throughput.png", "itl-vs-batch.png", "gpu-over-time.png")
# (series, legend, factor to percent): DCGM's GPU util is a percentage already; the rest are fractions.
_GPU_SERIES = (("gpu_util", "GPU util (kernel running)", 1.0), ("sm_active", "SM active", 100.0),
               ("dram_active", "DRAM active", 100.0), ("kv_cache_usage", "KV cache used", 100.0))  # fmt: skip


def _by_mns(result: G6Result) -> dict[int | None, list[G6Point]]:
    groups: dict[int | None, list[G6Point]] = {}
    for p in result.points:
        groups.setdefault(p.max_num_seqs, []).append(p)
    return groups


def _mns_label(mns: int | None) -> str:
    return f"max-num-seqs {mns}" if mns is not None else "max-num-seqs unknown"


def ttft_vs_throughput(result: G6Result, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for mns, pts in _by_mns(result).items():
        # In order of offered load, so the curve shows what more load did to both axes.
        pts = sorted((p for p in pts if p.ttft_ms is not None), key=lambda p: p.concurrency or p.rate or 0)
        x = [p.output_tokens_per_s for p in pts]
        (line,) = ax.plot(x, [p.ttft_ms.p50 for p in pts], marker="o", label=f"{_mns_label(mns)} p50")
        ax.plot(x, [p.ttft_ms.p99 for p in pts], marker="^", linestyle="--", color=line.get_color(), label=f"{_mns_label(mns)} p99")
        for p in pts:
            load = f"c{p.concurrency}" if p.concurrency else f"{p.rate}/s"
            ax.annotate(load, (p.output_tokens_per_s, p.ttft_ms.p50), textcoords="offset points", xytext=(4, -10), fontsize=7)
    ax.set_xlabel(f"output tokens/s (whole server; {result.params.time_scale})")
    ax.set_ylabel(f"TTFT (ms; {result.params.time_scale})")
    ax.set_yscale("log")
    ax.set_title("Time to first token against throughput")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def itl_vs_batch(result: G6Result, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for mns, pts in _by_mns(result).items():
        pts = sorted((p for p in pts if p.itl_ms is not None and p.observed_batch is not None), key=lambda p: p.observed_batch or 0)
        ax.plot([p.observed_batch for p in pts], [p.itl_ms.p50 for p in pts], marker="o", label=f"{_mns_label(mns)} ITL p50")
    batches = [p.observed_batch for p in result.points if p.observed_batch is not None]
    if result.sizing and batches:
        grid = list(range(1, max(2, math.ceil(max(batches))) + 1))
        rf = roofline(result.sizing[0], grid, result.params.context_len)
        ax.plot(grid, [r.step_time_s * 1000.0 for r in rf], color="black",
                linestyle=":", label="roofline decode step")  # fmt: skip
    ax.set_xlabel("observed batch (mean requests decoding)")
    ax.set_ylabel(f"inter-token latency (ms; {result.params.time_scale})")
    ax.set_title("ITL against batch size")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _point_label(p: G6Point) -> str:
    load = f"c={p.concurrency}" if p.concurrency is not None else f"{p.rate:g}/s"
    return load if p.max_num_seqs is None else f"{p.max_num_seqs} / {load}"


def gpu_over_time(result: G6Result, path: Path) -> None:
    """The server's GPU and KV series in GPU time: each point's window laid end to end (a simulator run
    faster has its wall-clock seconds multiplied by its speed-up; the time between points is left out)."""
    fig, ax = plt.subplots(figsize=(9, 4.8))
    k = result.params.speedup
    windows, offset = [], 0.0
    for p in result.points:
        if p.window is not None:
            windows.append((p, offset))
            offset += p.window.seconds
    for name, label, scale in _GPU_SERIES:
        xs, ys = [], []
        for p, at in windows:
            start, end = p.window.start.timestamp(), p.window.end.timestamp()  # type: ignore[union-attr]
            for s in (p.server.series if p.server is not None else []):
                if s.name == name:
                    inside = [(t, v) for t, v in s.points if start <= t <= end]
                    xs += [at + (t - start) * k for t, _ in inside] + [float("nan")]
                    ys += [v * scale for _, v in inside] + [float("nan")]
        if xs:
            ax.plot(xs, ys, label=label, linewidth=1.2)
    # Each point's window, shaded in turn and named at the top: which segment is which point.
    for i, (p, at) in enumerate(windows):
        width = p.window.seconds  # type: ignore[union-attr]
        ax.axvspan(at, at + width, color="0.9" if i % 2 else "0.96", zorder=0)
        ax.text(at + width / 2, 103, _point_label(p), ha="center", va="bottom", fontsize=7, rotation=90)
    if not ax.lines:
        ax.text(0.5, 0.5, "no server metrics in this result", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel(f"GPU seconds, the points' windows end to end ({result.params.time_scale}; shaded: one point each, "
                  "labelled max-num-seqs / load)")
    ax.set_ylabel("% (of time, of KV blocks)")
    ax.set_ylim(-2, 140)  # room above 100% for the points' names
    ax.set_yticks(range(0, 101, 20))
    ax.set_title("GPU and KV cache over the run", pad=4)
    ax.grid(True, axis="y", alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render_plots(result: G6Result, folder: Path) -> list[Path]:
    paths = [folder / name for name in PLOTS]
    for draw, path in zip((ttft_vs_throughput, itl_vs_batch, gpu_over_time), paths):
        draw(result, path)
    return paths
