"""The operator commands' view of the stack files: which stacks exist, and each one's LabConfig,
read from `Pulumi.<stack>.yaml` with no Pulumi CLI (the same parsing `pulumi up` uses)."""

from __future__ import annotations

from pathlib import Path

from stacks.config import LabConfig
from stacks.loader import PROJECT, decode, parse
from stacks.mockrun import OFFLINE_PROJECT, REPO, stack_config, stack_names

__all__ = ["load_config", "stack_names"]


def load_config(stack: str, project: str | None = None, directory: Path = REPO) -> LabConfig:
    """The stack's LabConfig; `project` overrides gcp:project (a stack file often leaves it unset)."""
    config, _ = stack_config(stack, directory)
    prefix = f"{PROJECT}:"
    raw = {k[len(prefix) :]: decode(v) for k, v in config.items() if k.startswith(prefix)}
    return parse(
        raw,
        stack=stack,
        project=project or config.get("gcp:project") or OFFLINE_PROJECT,
        region=config.get("gcp:region"),
    )
