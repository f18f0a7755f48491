"""Checks of what we send to a cluster against the upstream schemas of the pinned versions.

Tests import this module (`import schemas`) to assert that:
- a custom resource validates against its CRD of the pinned version (`validate_custom_resource`),
- a core Kubernetes object validates against the Kubernetes OpenAPI schema (`validate_core`),
- either of the two, chosen by API group (`validate_object`),
- every Helm value we set exists in the chart's default values.yaml (`assert_helm_values_exist`).

Every failure is an AssertionError whose message names each offending path. The upstream files
(CRDs, chart defaults) are those of tests/upstream.lock.tsv, reached through `upstream.path`.
"""

from __future__ import annotations

import copy
import difflib
import json
import functools
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from components import upstream


# The newest minor that GKE's Regular channel offers (available 1.34 to 1.36, default 1.35.7 for
# new clusters, per the GKE release notes' "Current versions" table read 2026-11); kubernetes-validate
# 1.37.0 ships schemas for 1.25 to 1.37.
K8S_VERSION = "1.36"

# API groups served by Kubernetes itself; everything else is a custom resource. An explicit list,
# because CRD groups may also end in .k8s.io (gateway.networking.k8s.io, snapshot.storage.k8s.io).
CORE_GROUPS = frozenset(
    {
        "",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "apps",
        "autoscaling",
        "batch",
        "certificates.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "networking.k8s.io",
        "node.k8s.io",
        "policy",
        "rbac.authorization.k8s.io",
        "scheduling.k8s.io",
        "storage.k8s.io",
    }
)

# Helm values whose content is free-form (Kubernetes objects or maps the chart copies verbatim):
# any key below them is accepted even where the default has content, e.g. resources.limits.cpu.
FREE_FORM_VALUE_KEYS = frozenset(
    {"nodeSelector", "tolerations", "affinity", "resources", "podLabels", "podAnnotations",
     "annotations", "labels", "extraArgs", "env", "extraEnv", "securityContext",
     "podSecurityContext", "containerSecurityContext", "topologySpreadConstraints"}
)


# ---------------------------------------------------------------------------------------------
# Custom resources


def validate_custom_resource(obj: dict) -> None:
    """Validate `obj` against the CRD of its group and kind, at its version, from the upstream lock."""
    group, version = _split_api_version(obj)
    kind = obj.get("kind")
    path = _crd_index().get((group, kind))
    if path is None:
        same_group = sorted(k for g, k in _crd_index() if g == group)
        available = same_group or sorted(f"{k} ({g})" for g, k in _crd_index())
        where = f"in group {group!r}" if same_group else "in any group"
        raise AssertionError(
            f"no CRD for kind {kind!r} in group {group!r} in tests/upstream.lock.tsv; "
            f"kinds available {where}: {', '.join(available)}"
        )
    served = _served_versions(path)
    if version not in served:
        raise AssertionError(
            f"{kind} {group}/{version} is not served by {path}; "
            f"served versions: {', '.join(sorted(served))}"
        )
    errors = sorted(_crd_validator(path, version).iter_errors(obj), key=lambda e: e.json_path)
    lines = [f"  {e.json_path}: {_explain(e)}" for e in errors]
    if "metadata" in obj:
        # The CRD leaves metadata to the API server: check it as Kubernetes' own ObjectMeta.
        problem = _core_problem({"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]}, K8S_VERSION)
        if problem:
            lines.append(f"  {problem}")
    if lines:
        raise AssertionError(f"{_describe(obj)} does not match {path}:\n" + "\n".join(lines))


def _split_api_version(obj: dict) -> tuple[str, str]:
    api_version = obj.get("apiVersion")
    if not isinstance(api_version, str) or not api_version:
        raise AssertionError(f"{_describe(obj)}: apiVersion missing; expected 'group/version' or 'v1'")
    group, _, version = api_version.rpartition("/")
    return group, version


def _describe(obj: dict) -> str:
    name = (obj.get("metadata") or {}).get("name", "<unnamed>")
    return f"{obj.get('apiVersion')} {obj.get('kind')} {name!r}"


def _explain(error: jsonschema.ValidationError) -> str:
    """The validator's message, plus the nearest allowed field name for a misspelt one."""
    if error.validator != "additionalProperties" or not isinstance(error.instance, dict):
        return error.message
    allowed = list(error.schema.get("properties", {}))
    hints = []
    for key in sorted(set(error.instance) - set(allowed)):
        close = difflib.get_close_matches(key, allowed, n=1)
        hints.append(f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key))
    return f"unknown field(s) {', '.join(hints)}; allowed here: {', '.join(sorted(allowed)) or 'none'}"


# Kinds whose only locked CRD is a minimal one (spec open), checked with a full schema that
# differs only in scope and names (argo's ClusterWorkflowTemplate: the full CRD of the chart differs from
# the WorkflowTemplate one in its names, scope and descriptions only).
_STAND_INS = {("argoproj.io", "ClusterWorkflowTemplate"): ("argoproj.io", "WorkflowTemplate")}


@functools.cache
def _crd_index() -> dict[tuple[str, str], str]:
    """(group, kind) -> the locked CRD file (its local path), read from the head of each CRD file."""
    index: dict[tuple[str, str], str] = {}
    for path in (p for p in upstream.locked_paths() if "/crds/" in p and p.endswith(".yaml")):
        identity = _crd_identity(upstream.path(path))
        if identity is None:
            continue
        known = index.get(identity)
        # argo-workflows ships a minimal and a full CRD set; its chart installs the full one by
        # default (crds.full: true), so the full schema wins where both exist.
        if known is None or "/minimal/" in known:
            index[identity] = path
        elif "/minimal/" not in path:
            raise AssertionError(f"{identity} is defined twice: {known} and {path}")
    for identity, stand_in in _STAND_INS.items():
        if identity in index and "/minimal/" in index[identity] and stand_in in index:
            index[identity] = index[stand_in]
    return index


def _crd_identity(path: Path) -> tuple[str, str] | None:
    """spec.group and spec.names.kind of the CRD in `path`, or None if it holds no CRD.

    Reads YAML events only up to those two fields (they precede the schema), so indexing does not
    parse megabytes of schema. Each locked CRD file holds one CRD.
    """
    wanted = {("kind",): None, ("spec", "group"): None, ("spec", "names", "kind"): None}
    for key_path, value in _scalars(path):
        if key_path in wanted:
            wanted[key_path] = value
            if key_path == ("kind",) and value != "CustomResourceDefinition":
                return None
            if all(v is not None for v in wanted.values()):
                return wanted[("spec", "group")], wanted[("spec", "names", "kind")]
    return None


def _scalars(path: Path) -> Iterator[tuple[tuple[str, ...], str]]:
    """(mapping-key path, value) of each scalar mapping value in a YAML file, in document order."""
    # One frame per open collection: [is_mapping, expecting_key, current_key].
    frames: list[list[Any]] = []

    def key_path() -> tuple[str, ...]:
        return tuple(f[2] for f in frames if f[0])

    with path.open() as stream:
        for event in yaml.parse(stream, Loader=yaml.CSafeLoader):
            top = frames[-1] if frames else None
            if isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent)):
                value = getattr(event, "value", None)  # an alias's value is elsewhere: not needed
                if top is not None and top[0] and top[1]:
                    top[1], top[2] = False, value
                    continue
                if top is not None and top[0]:
                    yield key_path(), value
                    top[1] = True
            elif isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                frames.append([isinstance(event, yaml.MappingStartEvent), True, None])
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                frames.pop()
                if frames and frames[-1][0]:
                    frames[-1][1] = True


@functools.cache
def _crd(path: str) -> dict:
    """The parsed CRD: each file is read once per test session."""
    with upstream.path(path).open() as stream:
        return next(d for d in yaml.load_all(stream, Loader=yaml.CSafeLoader) if d)


def _served_versions(path: str) -> set[str]:
    return {v["name"] for v in _crd(path)["spec"]["versions"] if v.get("served")}


def _list_type(validator, list_type, instance, schema) -> Iterator[jsonschema.ValidationError]:
    """x-kubernetes-list-type: the API server rejects duplicate set items and duplicate map keys."""
    if not validator.is_type(instance, "array"):
        return
    if list_type == "set":
        keys = [repr(item) for item in instance]
    elif list_type == "map":
        names = schema.get("x-kubernetes-list-map-keys", [])
        keys = [repr(tuple(item.get(n) for n in names)) for item in instance if isinstance(item, dict)]
    else:
        return
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        yield jsonschema.ValidationError(f"duplicate entries in a list of type {list_type}: {', '.join(duplicates)}")


# Draft 7 plus the one Kubernetes extension that constrains values and is cheap to check. CEL rules
# (x-kubernetes-validations) are not evaluated. No format checker: int32/int64/quantity/date-time
# formats are accepted as the API server's type checks would (leniently).
_CrdValidator = jsonschema.validators.extend(
    jsonschema.Draft7Validator, {"x-kubernetes-list-type": _list_type}
)


@functools.cache
def _crd_validator(path: str, version: str) -> jsonschema.protocols.Validator:
    entry = next(v for v in _crd(path)["spec"]["versions"] if v["name"] == version)
    schema = copy.deepcopy(entry.get("schema", {}).get("openAPIV3Schema", {}))
    return _CrdValidator(_structural(schema, resource=True))


def _structural(schema: Any, resource: bool = False, in_junctor: bool = False) -> Any:
    """Turn a CRD's OpenAPI v3 schema into a JSON Schema that rejects what the API server prunes.

    `resource`: the node is a whole object (the root, or x-kubernetes-embedded-resource), so
    apiVersion, kind and metadata are always allowed there. `in_junctor`: the node sits in an
    allOf/anyOf/oneOf/not, which may only restate fields of the enclosing schema, so it is left open.
    """
    if not isinstance(schema, dict):
        return schema
    if resource or schema.get("x-kubernetes-embedded-resource"):
        properties = schema.setdefault("properties", {})
        properties.setdefault("apiVersion", {"type": "string"})
        properties.setdefault("kind", {"type": "string"})
        properties.setdefault("metadata", {"type": "object"})
        # ObjectMeta is the API server's to check, not the CRD's: leave metadata open.
        properties["metadata"].setdefault("x-kubernetes-preserve-unknown-fields", True)
    for key in ("properties", "patternProperties", "definitions"):
        if isinstance(schema.get(key), dict):
            schema[key] = {k: _structural(v) for k, v in schema[key].items()}
    for key in ("items", "additionalProperties", "not"):
        if isinstance(schema.get(key), dict):
            schema[key] = _structural(schema[key], in_junctor=in_junctor or key == "not")
    for key in ("allOf", "anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            schema[key] = [_structural(s, in_junctor=True) for s in schema[key]]

    if isinstance(schema.get("pattern"), str):
        schema["pattern"] = _python_pattern(schema["pattern"])
    if schema.get("x-kubernetes-int-or-string"):
        schema.pop("type", None)
        schema.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if schema.get("nullable"):
        if "type" in schema:
            schema["type"] = [schema["type"], "null"]
        if "enum" in schema:
            schema["enum"] = [*schema["enum"], None]
    # OpenAPI 3.0 writes exclusive bounds as booleans beside minimum/maximum; Draft 7 wants numbers.
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(schema.get(bound), bool):
            if schema.pop(bound) and limit in schema:
                schema[bound] = schema.pop(limit)

    is_object = schema.get("type") == "object" or "properties" in schema
    if (
        is_object
        and not in_junctor
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        # A structural schema's unknown fields are pruned silently on a real cluster.
        schema["additionalProperties"] = False
    return schema


def _python_pattern(pattern: str) -> str:
    """A Go (RE2) pattern as Python's re accepts it.

    RE2 allows inline flags mid-pattern ("^(?i)[a-z]+$", as in prometheus-operator's CRDs); Python
    only at the start. Moving them to the front widens them to the whole pattern: lenient, never stricter.
    """
    flags = "".join(sorted(set("".join(re.findall(r"\(\?([ims]+)\)", pattern)))))
    if not flags or pattern.startswith(f"(?{flags})"):
        return pattern
    return f"(?{flags})" + re.sub(r"\(\?[ims]+\)", "", pattern)


# ---------------------------------------------------------------------------------------------
# Core objects


def validate_core(obj: dict, k8s_version: str = K8S_VERSION) -> None:
    """Validate a built-in Kubernetes object strictly (unknown fields fail) with kubernetes-validate.

    kubernetes-validate stops at the first error, so the message names one path.
    """
    problem = _core_problem(obj, k8s_version)
    if problem:
        raise AssertionError(f"{_describe(obj)} is not a valid Kubernetes {k8s_version} object: {problem}")


def _core_problem(obj: dict, k8s_version: str) -> str | None:
    """kubernetes-validate's first error about `obj` as "path: message", or None."""
    try:
        kubernetes_validate.validate(obj, k8s_version, strict=True)
    except kubernetes_validate.ValidationError as error:
        return f"{error.json_path}: {error.message}"
    except kubernetes_validate.SchemaNotFoundError as error:
        return error.message
    return None


def validate_object(obj: dict) -> None:
    """Validate any object: built-in API groups against Kubernetes, the rest against their CRD."""
    group, _ = _split_api_version(obj)
    if group in CORE_GROUPS:
        validate_core(obj)
    else:
        validate_custom_resource(obj)


# ---------------------------------------------------------------------------------------------
# Helm values


class _FreeForm:
    """Marks a subtree of the defaults below which any key is accepted."""

    def __init__(self, reason: str):
        self.reason = reason


def assert_helm_values_exist(values: dict, chart_dir: str, commented_keys: Iterable[str] = ()) -> None:
    """Assert that every key path in `values` exists in the chart's default values.yaml.

    `chart_dir` is a locked folder, e.g. "kueue/v0.19.2" or
    "kserve/v0.20.0/charts/kserve-resources". `commented_keys` names dotted paths that the chart
    documents only as a commented-out example in values.yaml (e.g. dcgm-exporter's
    "customMetrics"); each must really appear there in a comment.
    """
    defaults = _chart_defaults(chart_dir)
    commented = set(commented_keys)
    _check_commented(commented, chart_dir)
    missing = [p for p in _missing_paths(values, defaults, ()) if ".".join(p) not in commented]
    if missing:
        known = _all_paths(defaults, ())
        lines = []
        for path in missing:
            dotted = ".".join(path)
            close = difflib.get_close_matches(dotted, known, n=1, cutoff=0.5)
            lines.append(f"  {dotted}" + (f" (nearest existing: {close[0]})" if close else ""))
        raise AssertionError(
            f"values not in {chart_dir}/values.yaml (Helm would ignore them silently):\n" + "\n".join(lines)
        )


def validate_helm_values(values: dict, chart_dir: str) -> None:
    """Validate `values` merged over the chart's defaults against the chart's values.schema.json, as
    `helm install` does (a wrong type there fails the release before anything is applied)."""
    with upstream.path(f"{chart_dir}/values.schema.json").open() as stream:
        schema = json.load(stream)
    merged = _merged(_load_yaml(f"{chart_dir}/values.yaml") or {}, values)
    errors = sorted(jsonschema.validators.validator_for(schema)(schema).iter_errors(merged), key=lambda e: list(e.path))
    if errors:
        raise AssertionError(f"values against {chart_dir}/values.schema.json: " + "; ".join(_explain(e) for e in errors))


def chart_defaults(chart_dir: str) -> dict:
    """A chart's default values (e.g. to read which image or runtime a pinned chart installs)."""
    return copy.deepcopy(_chart_defaults(chart_dir))


@functools.cache
def _chart_defaults(chart_dir: str) -> dict:
    """The chart's defaults, with subcharts grafted in under their name or alias."""
    locked = upstream.locked_paths()
    if f"{chart_dir}/values.yaml" not in locked:
        charts = sorted(p.removesuffix("/values.yaml") for p in locked if p.endswith("/values.yaml"))
        raise AssertionError(f"no values.yaml of {chart_dir} in tests/upstream.lock.tsv; charts available: {', '.join(charts)}")
    defaults = _load_yaml(f"{chart_dir}/values.yaml") or {}
    chart = _load_yaml(f"{chart_dir}/Chart.yaml") or {}
    for dependency in chart.get("dependencies") or []:
        key = dependency.get("alias") or dependency["name"]
        sub_values = f"{chart_dir}/charts/{dependency['name']}/values.yaml"
        if sub_values in locked:
            defaults[key] = _merged(_load_yaml(sub_values) or {}, defaults.get(key) or {})
        else:
            # A subchart whose values.yaml the lock does not hold (e.g. kube-prometheus-stack's
            # grafana, kube-state-metrics, prometheus-node-exporter): anything below it is accepted.
            defaults[key] = _FreeForm(f"subchart {dependency['name']} (values not locked)")
    return defaults


def _load_yaml(path: str) -> Any:
    with upstream.path(path).open() as stream:
        return yaml.load(stream, Loader=yaml.CSafeLoader)


def _merged(base: dict, override: dict) -> dict:
    merged = dict(base)
    for key, value in override.items():
        both_maps = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = _merged(merged[key], value) if both_maps else value
    return merged


def _missing_paths(values: Any, defaults: Any, path: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    if not isinstance(values, dict) or _free_form(defaults, path):
        return
    if not isinstance(defaults, dict):
        # We set a map where the chart's default is a scalar or a list: every key we set is unknown.
        yield from (path + (str(k),) for k in values)
        return
    for key, value in values.items():
        if key not in defaults:
            yield path + (str(key),)
        else:
            yield from _missing_paths(value, defaults[key], path + (str(key),))


def _free_form(defaults: Any, path: tuple[str, ...]) -> bool:
    return (
        isinstance(defaults, _FreeForm)
        or defaults is None
        or defaults == {}
        or (bool(path) and path[-1] in FREE_FORM_VALUE_KEYS)
    )


def _all_paths(defaults: Any, path: tuple[str, ...]) -> list[str]:
    if not isinstance(defaults, dict):
        return []
    paths = []
    for key, value in defaults.items():
        child = path + (str(key),)
        paths.append(".".join(child))
        paths.extend(_all_paths(value, child))
    return paths


def _check_commented(commented: set[str], chart_dir: str) -> None:
    text = upstream.path(f"{chart_dir}/values.yaml").read_text()
    for dotted in sorted(commented):
        leaf = re.escape(dotted.rsplit(".", 1)[-1])
        if not re.search(rf"^\s*#\s*{leaf}\s*:", text, re.MULTILINE):
            raise AssertionError(
                f"{dotted!r} is not documented in a comment of {chart_dir}/values.yaml; "
                "commented_keys may only name keys the chart documents that way"
            )
