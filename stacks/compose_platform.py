"""Composes the platform features of a lab onto the base platform (see stacks/context.py)."""

from __future__ import annotations

from typing import Any

from stacks.config import LabConfig
from stacks.context import PlatformContext


def apis(cfg: LabConfig) -> list[str]:
    """Google APIs these features need besides the base ones."""
    return []


def compose(ctx: PlatformContext) -> None:
    """Register these features' components and add their stack outputs to ctx.outputs."""


def cluster_overrides(cfg: LabConfig) -> dict[str, Any]:
    """GkeClusterArgs fields these features decide (e.g. GKE-managed DCGM)."""
    return {}


def gpu_pool_overrides(cfg: LabConfig) -> dict[str, Any]:
    """GpuNodePoolArgs fields these features decide (sharing, driver install, labels)."""
    return {}
