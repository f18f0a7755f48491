"""Markdown helpers for reports."""

from __future__ import annotations

from collections.abc import Sequence


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub-flavoured Markdown table; None cells print as an em dash."""

    def cell(value: object) -> str:
        return "—" if value is None else str(value).replace("|", "\\|")

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def num(value: float | None, digits: int = 1) -> str | None:
    """A number rounded for a table, or None."""
    return None if value is None else f"{value:,.{digits}f}"
