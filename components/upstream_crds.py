"""The offline stand-in of a chart or manifest (`cluster.charts: upstream-crds`): the CustomResourceDefinitions
of its pinned version, parsed from the locked upstream files (components.upstream), applied in its place.

For a cluster that reaches no network and runs no containers (the local control plane of the tests):
the charts and manifest URLs cannot be fetched, and their controllers and webhooks could not run, but
the custom resources the labs create (ClusterQueue, InferenceService, WorkflowTemplate, ServiceMonitor,
...) are still checked by the real API server against the schemas of the pinned versions. What each
chart's stand-in applies is its `Chart.crds` folders of the lock; docs/existing-cluster.md lists them.

Each CRD is applied as its file has it except for the schemas' `description`s, which validate nothing:
without them Argo's Workflow CRD is 0.5 MB of JSON instead of 1.2 MB, well inside etcd's default
1.5 MiB request limit with the managed fields server-side apply adds.
"""

from __future__ import annotations

import functools
from typing import Any

import pulumi
import yaml

from components import k8s_objects, upstream

KIND = "CustomResourceDefinition"
# The OpenAPI v3 keywords whose value is a map of names to schemas, one schema, or a list of schemas:
# the walk goes into those only, so a property that is itself named `description` is kept.
_SCHEMA_MAPS = ("properties", "patternProperties", "definitions", "dependencies")
_ONE_SCHEMA = ("items", "additionalProperties", "not", "additionalItems")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf")


def without_descriptions(schema: Any) -> Any:
    """An OpenAPI v3 schema with every `description` keyword removed, all else as it was."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "description":
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: without_descriptions(s) for name, s in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [without_descriptions(s) for s in value]
        else:
            out[key] = without_descriptions(value) if key in _ONE_SCHEMA else value
    return out


def _applied(crd: dict[str, Any]) -> dict[str, Any]:
    """The CRD as the stand-in applies it: no `status` (the API server's), no schema descriptions."""
    spec = dict(crd["spec"])
    spec["versions"] = [
        {**v, "schema": {**v["schema"], "openAPIV3Schema": without_descriptions(v["schema"]["openAPIV3Schema"])}}
        if "openAPIV3Schema" in (v.get("schema") or {})
        else v
        for v in spec.get("versions") or []
    ]
    return {**{k: v for k, v in crd.items() if k != "status"}, "spec": spec}


@functools.cache
def crds(folder: str) -> tuple[dict[str, Any], ...]:
    """Every CRD in the locked files under `folder` (<component>/<version>/crds/...), as applied."""
    files = [p for p in upstream.locked_paths() if p.startswith(folder) and p.endswith((".yaml", ".yml"))]
    if not files:
        raise upstream.UpstreamError(f"no CRD file under {folder} in the upstream lock")
    found = []
    for local in files:
        with upstream.path(local).open() as stream:
            found += [_applied(d) for d in yaml.load_all(stream, Loader=yaml.CSafeLoader) if isinstance(d, dict) and d.get("kind") == KIND]
    return tuple(found)


class UpstreamCrds(pulumi.ComponentResource):
    """The CRDs of the lock folders `folders`, one CustomResourceDefinition resource each."""

    def __init__(self, name: str, folders: tuple[str, ...], opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:platform:UpstreamCrds", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        bodies = [crd for folder in folders for crd in crds(folder)]
        self.crds = [k8s_objects.create(f"{name}-{crd['metadata']['name']}", crd, child) for crd in bodies]
        self.register_outputs({"crds": [crd["metadata"]["name"] for crd in bodies]})
