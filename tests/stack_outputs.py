"""Stack outputs as the program exports them (a lab's stack file run under Pulumi mocks, stacks.mockrun),
with a test's own sections over them: fixtures shaped like what `pulumi stack output` returns, which the
kit reads through the contract (stacks/outputs.py)."""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

from stacks.mockrun import run_stack


@cache
def _exported(lab: str) -> dict[str, Any]:
    return run_stack(lab).stack_output()


def program_outputs(lab: str, **sections: Any) -> dict[str, Any]:
    """The outputs of Pulumi.<lab>.yaml, each of `sections` (a top-level key) replaced by the test's."""
    return {**copy.deepcopy(_exported(lab)), **sections}
