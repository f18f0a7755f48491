"""The stack files read offline: which stacks exist, each one's config as the CLI would hand it to the
program, and its LabConfig, read from `Pulumi.<stack>.yaml` with no Pulumi CLI (the same parsing
`pulumi up` uses). The offline plan, the operator commands and the benchmarks read stack files here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from stacks.cluster_config import GKE_ONLY_KEYS
from stacks.config import LabConfig
from stacks.loader import PROJECT, ConfigError, decode, parse, unknown_gcp_keys

REPO = Path(__file__).resolve().parents[1]
OFFLINE_PROJECT = "offline-plan-project"
# A stand-in for each secret (real values are encrypted in the stack file and need the CLI).
_SECRET_PLACEHOLDER = "offline-secret-value"


def stack_names(directory: Path = REPO) -> list[str]:
    """Every stack with a `Pulumi.<stack>.yaml` in the project."""
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in directory.glob("Pulumi.*.yaml"))


class StackFileError(ConfigError):
    """The stack file itself cannot be read (YAML syntax, wrong shape): one line, with file:line:column."""

    def __init__(self, where: str, problem: str):
        self.stack_file, self.problems = where.split(":", 1)[0], [f"{where}: {problem}"]
        Exception.__init__(self, f"{where}: {problem}")


def _read(path: Path) -> dict:
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{path.name}:{mark.line + 1}:{mark.column + 1}" if mark else path.name
        opened = e.context_mark if e.context and e.context_mark is not mark else None
        context = f" ({e.context} from line {opened.line + 1}, column {opened.column + 1})" if opened else ""
        raise StackFileError(where, f"not valid YAML: {e.problem or e.context}{context}") from None
    except yaml.YAMLError as e:
        raise StackFileError(path.name, f"not valid YAML: {e}") from None
    if document is None:
        return {}
    if not isinstance(document, dict) or not isinstance(document.get("config") or {}, dict):
        raise StackFileError(
            path.name, "expected a mapping with a `config:` mapping of keys (as `pulumi config set` writes)"
        )
    return document


def stack_config(stack: str, directory: Path = REPO) -> tuple[dict[str, str], list[str]]:
    """A stack file's config as the CLI would hand it to the program: JSON text per key."""
    path = directory / f"Pulumi.{stack}.yaml"
    if not path.exists():
        raise FileNotFoundError(f"no stack file {path.name}; stacks here: {', '.join(stack_names(directory))}")
    document = _read(path)
    problems = unknown_gcp_keys(document.get("config") or {})
    if problems:
        raise StackFileError(path.name, "; ".join(problems))
    config, secret_keys = {}, []
    for key, value in (document.get("config") or {}).items():
        if isinstance(value, dict) and set(value) == {"secure"}:
            config[key], secret_keys = _SECRET_PLACEHOLDER, [*secret_keys, key]
        else:
            config[key] = value if isinstance(value, str) else json.dumps(value)
    return config, secret_keys


def existing_keys(stack: str, cluster: dict[str, Any], directory: Path = REPO) -> dict[str, Any]:
    """The stack's own keys (decoded, without the project prefix) as a user on their own cluster writes
    them: the GKE-only keys removed, `cluster` (`target: existing`, kubeconfig, context, ...) set."""
    config, _ = stack_config(stack, directory)
    keys = {k.removeprefix(f"{PROJECT}:"): decode(v) for k, v in config.items() if k.startswith(f"{PROJECT}:")}
    return {**{k: v for k, v in keys.items() if k not in GKE_ONLY_KEYS}, "cluster": cluster}


def load_config(
    stack: str, project: str | None = None, directory: Path = REPO, overrides: dict[str, Any] | None = None
) -> LabConfig:
    """The stack's LabConfig; `project` overrides gcp:project (a stack file often leaves it unset),
    `overrides` the project's own keys (without the `gke-ml-labs:` prefix)."""
    config, _ = stack_config(stack, directory)
    prefix = f"{PROJECT}:"
    raw = {k[len(prefix) :]: decode(v) for k, v in config.items() if k.startswith(prefix)} | (overrides or {})
    return parse(
        raw,
        stack=stack,
        project=project or config.get("gcp:project") or OFFLINE_PROJECT,
        region=config.get("gcp:region"),
    )
