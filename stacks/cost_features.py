"""Config of cost safety: budget, idle guard, cost exporter."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from stacks.config import LabConfig


class _Feature(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    enabled: bool = False


class Budget(_Feature):
    pass


class IdleGuard(_Feature):
    pass


class CostExporter(_Feature):
    pass


def check(cfg: LabConfig) -> list[str]:
    """Cross-field rules of these features; each problem names its keys and what is allowed."""
    return []
