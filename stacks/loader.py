"""Reads the stack's Pulumi config once and turns it into a `LabConfig`, or a `ConfigError` that names
the stack file, each bad key and what is allowed. Nothing else reads Pulumi config."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

import pulumi
from pulumi.runtime import config as runtime_config
from pydantic import BaseModel, ValidationError

from stacks.config import LabConfig
from stacks.labs import with_lab_defaults

PROJECT = "gke-ml-labs"
# Keys that may only be given as Pulumi secrets (`pulumi config set --secret`); never in LabConfig.
SECRET_KEYS = ("hf_token",)


class ConfigError(Exception):
    """The stack's config is wrong; raised before any resource is registered."""

    def __init__(self, stack_file: str, problems: list[str]):
        self.stack_file = stack_file
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(
            f"{stack_file}: {len(problems)} problem(s) in the lab config; nothing was created:\n{lines}"
        )


@dataclass(frozen=True)
class Secrets:
    hf_token: pulumi.Output[str] | None = None


def decode(value: Any) -> Any:
    # The CLI hands every value over as a string; objects, numbers and booleans arrive as JSON text.
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def raw_project_config() -> dict[str, Any]:
    """Every `gke-ml-labs:*` key the engine passed, decoded, without the namespace."""
    merged = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    prefix = f"{PROJECT}:"
    return {k[len(prefix) :]: decode(v) for k, v in merged.items() if k.startswith(prefix)}


def _fields_at(loc: tuple[Any, ...]) -> list[str]:
    """Field names allowed at a location of the config, for 'did you mean' hints."""
    model: type[BaseModel] | None = LabConfig
    for part in loc:
        field = model.model_fields.get(part) if model else None
        annotation = field.annotation if field else None
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    return list(model.model_fields) if model else []


def _key(loc: tuple[Any, ...]) -> str:
    head, *rest = loc
    return f"{PROJECT}:{head}" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in rest)


def describe(error: ValidationError) -> list[str]:
    problems = []
    for e in error.errors():
        loc = tuple(e["loc"])
        if not loc:
            problems.extend(e["msg"].removeprefix("Value error, ").split("; "))
            continue
        if e["type"] == "extra_forbidden":
            allowed = [f for f in _fields_at(loc[:-1]) if f not in ("stack", "project", "region")]
            near = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
            hint = f"did you mean '{near[0]}'? " if near else ""
            problems.append(f"{_key(loc)}: unknown key; {hint}allowed here: {', '.join(allowed)}")
            continue
        got = f" (got {e['input']!r})" if "input" in e and not isinstance(e["input"], dict) else ""
        problems.append(f"{_key(loc)}: {e['msg'].removeprefix('Value error, ')}{got}")
    return problems


@cache
def gcp_provider_keys() -> frozenset[str]:
    """The `gcp:*` keys the pinned Pulumi GCP provider reads: its config module's properties, read
    under camelCase names (access_token -> gcp:accessToken)."""
    import pulumi_gcp.config

    props = [n for n, v in vars(pulumi_gcp.config._ExportableConfig).items() if isinstance(v, property)]
    return frozenset(re.sub(r"_([a-z0-9])", lambda m: m.group(1).upper(), p) for p in props)


def unknown_gcp_keys(keys: Iterable[str]) -> list[str]:
    """A misspelt gcp:* key is silently ignored by the provider (gcp:regoin leaves the default region)."""
    problems = []
    for key in keys:
        name = key.removeprefix("gcp:")
        if key.startswith("gcp:") and name not in gcp_provider_keys():
            near = difflib.get_close_matches(name, sorted(gcp_provider_keys()), n=1)
            hint = f"did you mean gcp:{near[0]}? " if near else ""
            problems.append(
                f"{key}: not a key of the Pulumi GCP provider, which would ignore it; {hint}"
                "the labs read gcp:project and gcp:region"
            )
    return problems


def _existing_target(raw: dict[str, Any]) -> bool:
    """Whether the stack targets an existing cluster, which needs no gcp:project (the model checks the
    key itself)."""
    cluster = raw.get("cluster")
    return (cluster if isinstance(cluster, str) else (cluster or {}).get("target") if isinstance(cluster, dict) else None) == "existing"


def parse(raw: dict[str, Any], *, stack: str, project: str | None, region: str | None) -> LabConfig:
    """Validate decoded config keys; pure, so tests and the offline plan share it."""
    stack_file = f"Pulumi.{stack}.yaml"
    problems = []
    for key in ("stack", "project", "region"):
        if key in raw:
            problems.append(f"{PROJECT}:{key}: not set here; use gcp:{key} (stack name for 'stack')")
    for key in SECRET_KEYS:
        raw = {k: v for k, v in raw.items() if k != key}
    if not project and not _existing_target(raw):
        problems.append(f"gcp:project is not set: run `pulumi config set gcp:project YOUR_PROJECT -s {stack}`")
    if problems:
        raise ConfigError(stack_file, problems)
    values = {**with_lab_defaults(raw), "stack": stack, "project": project}
    if region:
        values["region"] = region
    try:
        return LabConfig.model_validate(values)
    except ValidationError as e:
        raise ConfigError(stack_file, describe(e)) from None


def load() -> tuple[LabConfig, Secrets]:
    """The edge: read this stack's config (and secrets) from the Pulumi engine."""
    stack = pulumi.get_stack()
    problems = unknown_gcp_keys({**runtime_config.get_config_env(), **runtime_config.CONFIG.get()})
    if problems:
        raise ConfigError(f"Pulumi.{stack}.yaml", problems)
    gcp = pulumi.Config("gcp")
    cfg = parse(raw_project_config(), stack=stack, project=gcp.get("project"), region=gcp.get("region"))
    own = pulumi.Config(PROJECT)
    for key in SECRET_KEYS:
        if own.get(key) is not None and not runtime_config.is_config_secret(f"{PROJECT}:{key}"):
            raise ConfigError(
                f"Pulumi.{stack}.yaml",
                [f"{PROJECT}:{key} is stored in plain text: set it with `pulumi config set --secret {key} ...`"],
            )
    return cfg, Secrets(hf_token=own.get_secret("hf_token"))
