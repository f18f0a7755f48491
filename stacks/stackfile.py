"""The stack files read offline: which stacks exist, each one's config as the CLI would hand it to the
program, and its LabConfig, read from `Pulumi.<stack>.yaml` with no Pulumi CLI (the same parsing
`pulumi up` uses). The offline plan, the operator commands and the benchmarks read stack files here."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from stacks.config import LabConfig
from stacks.loader import PROJECT, decode, parse

REPO = Path(__file__).resolve().parents[1]
OFFLINE_PROJECT = "offline-plan-project"
# A stand-in for each secret (real values are encrypted in the stack file and need the CLI).
_SECRET_PLACEHOLDER = "offline-secret-value"


def stack_names(directory: Path = REPO) -> list[str]:
    """Every stack with a `Pulumi.<stack>.yaml` in the project."""
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in directory.glob("Pulumi.*.yaml"))


def stack_config(stack: str, directory: Path = REPO) -> tuple[dict[str, str], list[str]]:
    """A stack file's config as the CLI would hand it to the program: JSON text per key."""
    path = directory / f"Pulumi.{stack}.yaml"
    if not path.exists():
        raise FileNotFoundError(f"no stack file {path.name}; stacks here: {', '.join(stack_names(directory))}")
    document = yaml.safe_load(path.read_text()) or {}
    config, secret_keys = {}, []
    for key, value in (document.get("config") or {}).items():
        if isinstance(value, dict) and set(value) == {"secure"}:
            config[key], secret_keys = _SECRET_PLACEHOLDER, [*secret_keys, key]
        else:
            config[key] = value if isinstance(value, str) else json.dumps(value)
    return config, secret_keys


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
