"""Composes the serving features of a lab onto the base platform (see stacks/context.py)."""

from __future__ import annotations

from stacks.config import LabConfig
from stacks.context import PlatformContext


def apis(cfg: LabConfig) -> list[str]:
    """Google APIs these features need besides the base ones."""
    return []


def compose(ctx: PlatformContext) -> None:
    """Register these features' components and add their stack outputs to ctx.outputs."""
