"""Config of the platform features of labs g1-g4 and g8: observability, GPU sharing, Kueue,
Training Operator, checkpoints, tenancy."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from stacks.config import LabConfig


class _Feature(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    enabled: bool = False


class Observability(_Feature):
    pass


class GpuSharing(_Feature):
    pass


class Kueue(_Feature):
    pass


class TrainingOperator(_Feature):
    pass


class Checkpoints(_Feature):
    pass


class Tenancy(_Feature):
    pass


def check(cfg: LabConfig) -> list[str]:
    """Cross-field rules of these features; each problem names its keys and what is allowed."""
    return []
