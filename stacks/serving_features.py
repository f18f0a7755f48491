"""Config of the platform features of labs g5-g7: KServe, vLLM, Argo Workflows."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from stacks.config import LabConfig


class _Feature(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    enabled: bool = False


class KServe(_Feature):
    pass


class Vllm(_Feature):
    pass


class Argo(_Feature):
    pass


def check(cfg: LabConfig) -> list[str]:
    """Cross-field rules of these features; each problem names its keys and what is allowed."""
    return []
