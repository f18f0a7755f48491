"""`python -m benchmarks <lab> ...`: run one lab's benchmark.

A lab is a module with `main(argv: list[str]) -> int`; adding a lab is one line in LABS.
"""

from __future__ import annotations

import importlib
import sys

from stacks.labs import LABS as CATALOGUE

LABS = {
    "g6": "benchmarks.g6",
    "g1": "benchmarks.labs.g1",
    "g2": "benchmarks.labs.g2",
    "g3": "benchmarks.labs.g3",
    "g4": "benchmarks.labs.g4",
    "g5": "benchmarks.labs.g5",
    "g7": "benchmarks.labs.g7",
    "g8": "benchmarks.labs.g8",
}
USAGE = "usage: python -m benchmarks <lab> [options]"


def usage() -> str:
    """The help text: what each lab's benchmark measures, from the lab catalogue."""
    rows = [f"  {lab}  {CATALOGUE[lab].title}: {CATALOGUE[lab].measures}" for lab in sorted(LABS)]
    return "\n".join(
        [
            USAGE,
            "",
            "Runs one lab's benchmark against its stack (--stack NAME, or --outputs FILE) or, for g6, the",
            "simulated L4 (--sim). Each writes a results folder: result.json, report.md and its PNG plots.",
            "",
            "labs:",
            *rows,
            "",
            "A lab's own options: python -m benchmarks <lab> --help",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["-h"], ["--help"]):
        print(usage())
        return 0
    if not argv or argv[0] not in LABS:
        given = f"unknown lab {argv[0]!r}" if argv and not argv[0].startswith("-") else "no lab given"
        print(f"{given}; {USAGE}; labs: {', '.join(sorted(LABS))} (--help says what each measures)", file=sys.stderr)
        return 2
    return importlib.import_module(LABS[argv[0]]).main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
