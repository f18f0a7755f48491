"""Shared fixtures: run any stack file's whole program under Pulumi mocks."""

from __future__ import annotations

import pytest

from stacks.mockrun import MockRun, run_stack
from stacks.stackfile import stack_names

STACKS = stack_names()


@pytest.fixture(scope="session")
def stack_runs() -> dict[tuple[str, bool], MockRun]:
    """Every stack file run once per session, in update and preview mode, keyed (stack, preview)."""
    return {(s, p): run_stack(s, preview=p) for s in STACKS for p in (False, True)}
