"""The stack files read offline: which stacks exist, each one's config as the CLI would hand it to the
program, and its LabConfig, read from `Pulumi.<stack>.yaml` with no Pulumi CLI (the same parsing
`pulumi up` uses). The offline plan, the operator commands and the benchmarks read stack files here."""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

import yaml

from stacks.cluster_config import GKE_ONLY_KEYS
from stacks.config import LabConfig
from stacks.loader import (
    PROJECT, ConfigError, decode, parse, plaintext_secrets, unknown_gcp_keys, unknown_namespaces,
)

REPO = Path(__file__).resolve().parents[1]
OFFLINE_PROJECT = "offline-plan-project"
# A stand-in for each secret (real values are encrypted in the stack file and need the CLI).
_SECRET_PLACEHOLDER = "offline-secret-value"


# The top-level keys of a stack file (the Pulumi SDK's workspace.ProjectStack, v3.276.0).
TOP_LEVEL_KEYS = ("config", "secretsprovider", "encryptedkey", "encryptionsalt", "environment")
# Byte-order marks of the encodings a stack file must not be in (Pulumi reads UTF-8, a UTF-8 mark stripped).
_FOREIGN_MARKS = {b"\xff\xfe\x00\x00": "UTF-32", b"\x00\x00\xfe\xff": "UTF-32", b"\xff\xfe": "UTF-16",
                  b"\xfe\xff": "UTF-16"}  # fmt: skip
_UTF8_MARK = b"\xef\xbb\xbf"


def stack_names(directory: Path = REPO) -> list[str]:
    """Every stack with a `Pulumi.<stack>.yaml` in the project."""
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in directory.glob("Pulumi.*.yaml"))


def _yml_hint(name: str) -> str:
    return (f"{name}: Pulumi reads only Pulumi.<stack>.yaml (the extension of Pulumi.yaml) and ignores it: "
            f"rename it to {name.removesuffix('.yml')}.yaml")  # fmt: skip


def misnamed_stack_files(directory: Path = REPO) -> list[str]:
    """One line per `Pulumi.<stack>.yml`: a stack file Pulumi would never read (its project unchecked)."""
    return [_yml_hint(p.name) for p in sorted(directory.glob("Pulumi.*.yml"))]


class StackFileError(ConfigError):
    """The stack file itself cannot be read (YAML syntax, wrong shape): one line, with file:line:column."""

    def __init__(self, where: str, problem: str):
        self.stack_file, self.problems = where.split(":", 1)[0], [f"{where}: {problem}"]
        Exception.__init__(self, f"{where}: {problem}")


class _UniqueKeys(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys; Pulumi's YAML reader refuses them, and so does this one."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {seen[key].line + 1}): Pulumi refuses it; keep one",
                    key_node.start_mark)  # fmt: skip
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep)


def _text(path: Path) -> str:
    """The file as UTF-8 text, or one line saying what encoding it is in instead."""
    data = path.read_bytes()
    for mark, encoding in _FOREIGN_MARKS.items():
        if data.startswith(mark):
            raise StackFileError(path.name, f"the file is {encoding} (it starts with a {encoding} byte-order mark); "
                                 f"Pulumi reads UTF-8: `iconv -f {encoding} -t UTF-8 {path.name} > x && mv x {path.name}`")  # fmt: skip
    if b"\x00" in data:
        raise StackFileError(path.name, "the file holds NUL bytes (UTF-16 without a byte-order mark?); Pulumi reads UTF-8")
    try:
        return data.removeprefix(_UTF8_MARK).decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise StackFileError(f"{path.name}:{line}", f"not UTF-8 (byte {data[e.start]:#04x} at offset {e.start}); "
                             "Pulumi reads UTF-8: save the file as UTF-8") from None  # fmt: skip


def _read(path: Path) -> dict:
    text = _text(path)
    try:
        document = yaml.load(text, Loader=_UniqueKeys)  # noqa: S506 (a SafeLoader)
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
    for key in document:
        if key not in TOP_LEVEL_KEYS:
            near = difflib.get_close_matches(str(key), TOP_LEVEL_KEYS, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise StackFileError(path.name, f"{key}: not a key of a stack file, Pulumi would ignore it and all it holds; "
                                 f"{hint}a stack file holds {', '.join(TOP_LEVEL_KEYS)}")  # fmt: skip
    return document


def _missing(path: Path, directory: Path) -> FileNotFoundError:
    """No such stack file: a .yml one is named; otherwise the folder and the stacks it does have."""
    yml = path.with_suffix(".yml")
    if yml.exists():
        return FileNotFoundError(f"no stack file {path.name}: {_yml_hint(yml.name)}")
    if not directory.is_dir():
        return FileNotFoundError(f"no stack file {path.name}: there is no folder {directory}")
    stacks = stack_names(directory)
    there = f"stacks there: {', '.join(stacks)}" if stacks else "it holds no Pulumi.<stack>.yaml at all"
    return FileNotFoundError(f"no stack file {path.name} in {directory} ({there})")


def stack_config(stack: str, directory: Path = REPO) -> tuple[dict[str, str], list[str]]:
    """A stack file's config as the CLI would hand it to the program: JSON text per key."""
    path = directory / f"Pulumi.{stack}.yaml"
    if not path.exists():
        raise _missing(path, directory)
    document = _read(path)
    # Pulumi puts a key without a namespace in the project's (workspace.stackConfigNamespacedWithProject).
    given = {(str(k) if ":" in str(k) else f"{PROJECT}:{k}"): v for k, v in (document.get("config") or {}).items()}
    problems = unknown_namespaces(given) + unknown_gcp_keys(given)
    if problems:
        raise StackFileError(path.name, "; ".join(problems))
    config, secret_keys = {}, []
    for key, value in given.items():
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


def load_config(stack: str, project: str | None = None, directory: Path = REPO,
                changes: dict[str, dict] | None = None, overrides: dict[str, Any] | None = None) -> LabConfig:  # fmt: skip
    """The stack's LabConfig; `project` overrides gcp:project (a stack file often leaves it unset);
    `changes` sets fields of object keys over the stack file's (a variant the docs price: g5 on Triton),
    `overrides` replaces the project's own keys (without the `gke-ml-labs:` prefix)."""
    config, secret_keys = stack_config(stack, directory)
    plain = plaintext_secrets(stack, config, secret_keys)
    if plain:
        raise ConfigError(f"Pulumi.{stack}.yaml", plain)
    prefix = f"{PROJECT}:"
    raw = {k[len(prefix) :]: decode(v) for k, v in config.items() if k.startswith(prefix)} | (overrides or {})
    for key, fields in (changes or {}).items():
        raw[key] = {**(raw.get(key) or {}), **fields}
    return parse(
        raw,
        stack=stack,
        project=project or config.get("gcp:project") or OFFLINE_PROJECT,
        region=config.get("gcp:region"),
    )
