"""report.md and the results folder of a lab run, rendered only from the saved result.

The common frame (verdict, the evidence of what ran and what failed first time, versions, timestamps,
cost) is here; each lab adds
its own body and plots.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from benchmarks.harness import save_result
from benchmarks.kube.evidence import markdown as evidence_section
from benchmarks.kube.evidence import simulation_markdown
from benchmarks.kube.record import Recording, save_recording
from benchmarks.labs.result import LabResult


class LabModule(Protocol):
    """What a lab module offers the report (each of benchmarks/labs/g*.py)."""

    LAB: str
    TITLE: str

    def report_body(self, result: LabResult) -> str: ...

    def plots(self, result: LabResult, folder: Path) -> list[str]: ...


def render_report(result: LabResult, title: str, body: str, plot_files: list[str]) -> str:
    took = (result.finished_at - result.started_at).total_seconds()
    lines = [
        f"# {result.lab}: {title}",
        "",
        f"- run id: `{result.run_id}`; stack: `{result.stack or '?'}`; source: {result.source}",
        f"- started {result.started_at:%Y-%m-%d %H:%M:%S} UTC, finished {result.finished_at:%H:%M:%S} UTC "
        f"({took / 60:.1f} min)",
        f"- verdict: **{'PASS' if result.passed else 'FAIL'}** ({sum(c.passed for c in result.checks)} of "
        f"{len(result.checks)} checks)",
        "",
        *([simulation_markdown(result.meta.simulation)] if result.meta.simulation else []),
        evidence_section(result.meta.evidence),
        "## Checks",
        "",
        "| check | result | evidence |",
        "|---|---|---|",
        *(f"| {c.name} | {'pass' if c.passed else '**FAIL**'} | {_cell(c.evidence)} |" for c in result.checks),
        "",
        body.strip(),
        "",
    ]
    if plot_files:
        lines += ["## Plots", "", *(f"![{Path(p).stem}]({p})" for p in plot_files), ""]
    v = result.versions
    lines += [
        "## Versions (read from the cluster)",
        "",
        f"- Kubernetes (API server): {v.kubernetes or 'unknown'}",
        f"- kubelet: {', '.join(v.kubelet) or 'unknown'}; node image: {', '.join(v.node_images) or 'unknown'}",
        f"- GPU driver: {v.gpu_driver or 'unknown (no GPU node seen)'}",
        f"- Helm charts: {', '.join(f'{k} ({c})' for k, c in v.charts.items()) or 'none found'}",
        f"- pinned by the stack: {', '.join(f'{k} {x}' for k, x in v.deployed.items()) or 'none listed'}",
        "",
    ]
    if result.cost:
        lines += ["## Cost", "", result.cost.strip(), ""]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def write_results(folder: Path, rec: Recording | None, result: LabResult, lab: LabModule) -> Path:
    """recording.json (unless None: an example made from a fixture points at it), result.json, plots
    and report.md in `folder` (created)."""
    folder.mkdir(parents=True, exist_ok=True)
    if rec is not None:
        save_recording(rec, folder / "recording.json")
    save_result(result, folder)
    plot_files = lab.plots(result, folder)
    (folder / "report.md").write_text(render_report(result, lab.TITLE, lab.report_body(result), plot_files))
    return folder
