"""The few plot shapes the lab reports use (matplotlib, Agg: no display needed), from saved results."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402


def timeline_plot(points: list[tuple[str, float]], title: str, path: Path) -> None:
    """Named moments on one time axis (seconds), one row each, earliest at the top."""
    points = sorted(points, key=lambda p: p[1])
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(points) + 1.2))
    for i, (name, t) in enumerate(points):
        ax.barh(i, t, color="#9ecae1", height=0.5)
        ax.text(t, i, f" {t:.0f}s", va="center", fontsize=8)
    ax.set_yticks(range(len(points)), [p[0] for p in points])
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@dataclass(frozen=True)
class StepPanel:
    """One panel of `step_panels`: named step functions [(x, y from x on)], shaded spans, level lines."""

    title: str
    series: dict[str, list[tuple[float, float]]]
    spans: list[tuple[float, float, str]] = field(default_factory=list)  # (start, end, label)
    levels: list[tuple[float, str]] = field(default_factory=list)  # (y, label)
    x_end: float | None = None  # where the last step of every series ends
    marks: list[tuple[float, str]] = field(default_factory=list)  # (x, series): a moment on that series' line
    marks_label: str = ""


def step_figure(panels: list[StepPanel], xlabel: str, ylabel: str) -> Figure:
    """Panels side by side; one colour per series name across all panels; the legend below the
    panels, outside every axes, so it never covers data. Integer y ticks (counts)."""
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.2), sharey=True, layout="constrained")
    axes = list(np.atleast_1d(axes))
    names = list(dict.fromkeys(n for panel in panels for n in panel.series))
    colours = {n: plt.get_cmap("tab10")(i % 10) for i, n in enumerate(names)}
    for ax, panel in zip(axes, panels):
        for start, end, label in panel.spans:
            ax.axvspan(start, end, color="#de2d26", alpha=0.12, label=label)
        for y, label in panel.levels:
            ax.axhline(y, color="#636363", linestyle="--", linewidth=1, label=label)
        for k, (name, points) in enumerate(panel.series.items()):
            xs = [x for x, _ in points] + ([panel.x_end] if panel.x_end is not None else [])
            # A small offset per series keeps equal counts of different jobs from hiding each other.
            ys = [y + 0.04 * (k - 1) for _, y in points]
            ys += ys[-1:] if panel.x_end is not None else []
            ax.step(xs, ys, where="post", color=colours[name], linewidth=2, label=name)
            for x, series in panel.marks:
                if series == name:
                    y = next((y for px, y in reversed(list(zip(xs, ys))) if px <= x), ys[0])
                    ax.plot([x], [y], marker="v", markersize=9, color=colours[name], linestyle="none",
                            markeredgecolor="black")
        if panel.marks:  # one legend entry for every series' marks
            ax.plot([], [], marker="v", markersize=9, color="white", markeredgecolor="black", linestyle="none",
                    label=panel.marks_label)
        ax.set_title(panel.title, fontsize=10)
        ax.set_xlabel(xlabel)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(ylabel)
    handles: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncol=min(len(handles), 6), fontsize=8)
    return fig


def step_panels(panels: list[StepPanel], xlabel: str, ylabel: str, path: Path) -> None:
    fig = step_figure(panels, xlabel, ylabel)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def xy_plot(
    series: dict[str, list[tuple[float, float]]], title: str, xlabel: str, ylabel: str, path: Path,
    integer_x: bool = False,
) -> None:
    """One line with markers per named series; `integer_x` for counts (pods), which have no 1.5."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, pts in series.items():
        pts = sorted(pts)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    if integer_x:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def ramp_plot(
    rate_steps: list[tuple[float, float]],
    achieved: list[tuple[float, float]],
    replicas: dict[str, list[tuple[float, float]]],
    latency: dict[str, list[tuple[float, float]]],
    title: str,
    path: Path,
    marks: list[tuple[float, str]] = (),
    latency_points: dict[str, list[tuple[float, float]]] | None = None,
) -> None:
    """Three panels on one time axis: offered and answered request rate, replica counts (step lines,
    as the counts hold until they change), latency (log scale; `latency_points` as single markers).
    `marks` are labelled vertical lines."""
    fig, (ax_rate, ax_rep, ax_lat) = plt.subplots(3, 1, figsize=(9, 7.5), sharex=True)
    xs = [t for t, _ in rate_steps]
    ax_rate.step(xs, [r for _, r in rate_steps], where="post", color="#3182bd", label="offered (the ramp)")
    if achieved:
        ax_rate.plot([t for t, _ in achieved], [r for _, r in achieved], ".", color="#9ecae1", label="answered 200")
    ax_rate.set_ylabel("requests/s")
    colours = ["#e6550d", "#31a354", "#756bb1", "#636363"]
    for (name, pts), colour in zip(replicas.items(), colours):
        ax_rep.step([t for t, _ in pts], [v for _, v in pts], where="post", color=colour, label=name)
    ax_rep.set_ylabel("replicas")
    ax_rep.yaxis.get_major_locator().set_params(integer=True)
    for (name, pts), colour in zip(latency.items(), colours):
        ax_lat.plot([t for t, _ in pts], [v for _, v in pts], marker=".", color=colour, label=name)
    for name, pts in (latency_points or {}).items():
        ax_lat.plot([t for t, _ in pts], [v for _, v in pts], "*", markersize=11, color="#de2d26", label=name)
    ax_lat.set_yscale("log")
    ax_lat.set_ylabel("latency (ms)")
    ax_lat.set_xlabel("seconds from the start of the ramp")
    for ax in (ax_rate, ax_rep, ax_lat):
        for t, label in marks:
            ax.axvline(t, color="#bdbdbd", linestyle="--", linewidth=0.8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper right")
    for t, label in marks:
        ax_rate.annotate(label, (t, 1.0), xycoords=("data", "axes fraction"), fontsize=7, rotation=90,
                         va="top", ha="right", color="#636363")
    ax_rate.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@dataclass(frozen=True)
class Panel:
    """One panel of `panels_plot`: each segment is drawn as its own line (no line across a gap between
    segments), each mark is a labelled vertical line, each span a shaded, labelled interval."""

    title: str
    segments: list[list[tuple[float, float]]]
    marks: list[tuple[float, str]] = field(default_factory=list)
    spans: list[tuple[float, float, str]] = field(default_factory=list)


def panels_plot(panels: list[Panel], title: str, xlabel: str, ylabel: str, path: Path) -> None:
    """Panels stacked on one shared time axis, one per variant."""
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.6 * len(panels) + 0.8), sharex=True, squeeze=False)
    for ax, panel in zip(axes[:, 0], panels):
        for i, seg in enumerate(panel.segments):
            ax.plot([p[0] for p in seg], [p[1] for p in seg], marker="o", markersize=3, color="#3182bd",
                    label="steps logged (one line per pod)" if i == 0 else None)
        for start, end, label in panel.spans:
            ax.axvspan(start, end, color="#fdae6b", alpha=0.35, label=label)
        for x, label in panel.marks:
            ax.axvline(x, color="#de2d26", linestyle="--", linewidth=1.2, label=label)
        ax.set_title(panel.title, fontsize=10)
        ax.set_ylabel(ylabel)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
    axes[-1, 0].set_xlabel(xlabel)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
