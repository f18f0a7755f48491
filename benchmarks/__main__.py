"""`python -m benchmarks <lab> ...`: run one lab's benchmark.

A lab is a module with `main(argv: list[str]) -> int`; adding a lab is one line in LABS.
"""

from __future__ import annotations

import importlib
import sys

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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in LABS:
        given = f"unknown lab {argv[0]!r}" if argv and not argv[0].startswith("-") else "no lab given"
        print(f"{given}; usage: python -m benchmarks <lab> [options]; labs: {', '.join(LABS)}", file=sys.stderr)
        return 2
    return importlib.import_module(LABS[argv[0]]).main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
