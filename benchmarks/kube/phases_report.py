"""The phases of one cold start as a Markdown section ("What the user waited for"), shared by the g5
report and every g6 report (which opens with it when its run had to bring a GPU node up)."""

from __future__ import annotations

from benchmarks.harness.markdown import num, table
from benchmarks.kube.phases import ColdStartPhases, Phase

WAITED_TITLE = "## What the user waited for"


def _cell(p: Phase) -> str:
    return f"skipped: {p.skipped}" if p.seconds is None else f"{p.start:%H:%M:%S} -> {p.end:%H:%M:%S}"


def waited_section(phases: list[Phase], total_s: float | None, failure: str | None, where: str) -> str:
    """The phases of one cold start as a table: seconds, share of the wait, when; skipped ones with why."""
    rows = [(p.name, num(p.seconds), None if p.seconds is None or not total_s else f"{100 * p.seconds / total_s:.0f}%",
             _cell(p)) for p in phases]  # fmt: skip
    lines = [
        WAITED_TITLE,
        "",
        f"{where} API times (Events, conditions) are whole seconds, the server's log lines too; each phase ends at "
        "one observed moment and starts where the one before it ended, so the phases add up to the wait.",
        "",
        table(["phase (ends when)", "seconds", "share", "UTC"], rows),
        f"Total: **{num(total_s)} s**" + (f"; it did not finish: **{failure}**." if failure else "."),
        "",
    ]
    return "\n".join(lines)


def waited_first(report: str, waited: ColdStartPhases | None) -> str:
    """`report` with the waited-for section right under its title, when the run brought a node up."""
    if waited is None:
        return report
    title, _, rest = report.partition("\n")
    where = (f"The run began with no GPU node: pod {waited.pod} waited for node {waited.node or '(none)'} "
             "(the run's own requests are not timed here: see `--experiment cold-start` for the first token).")  # fmt: skip
    return f"{title}\n\n{waited_section(waited.phases, waited.total_s, waited.failure, where)}{rest.lstrip(chr(10))}"
