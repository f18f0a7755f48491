"""What a Pulumi stack declared, and what the API server says about it.

The objects come from the stack's own state (every `kubernetes:*` resource with its live outputs), so
the checks need no list of their own: what `pulumi up` created is what is looked up, dry-run admitted
and, after `pulumi destroy`, looked for again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException

PSA_ENFORCE = "pod-security.kubernetes.io/enforce"
# A pod no Pod Security level but privileged admits: a namespace that enforces baseline or restricted
# must refuse it (the API server's own answer that the label is enforced, not merely written).
PRIVILEGED_PROBE = {
    "containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10", "securityContext": {"privileged": True}}]
}


@dataclass(frozen=True)
class Declared:
    """One Kubernetes object a stack's state holds."""

    urn: str
    type: str  # the Pulumi resource type, kubernetes:core/v1:Namespace
    api_version: str
    kind: str
    name: str
    namespace: str | None
    outputs: dict[str, Any]

    @property
    def logical_name(self) -> str:
        """The name the program gave the resource (the last part of its URN)."""
        return self.urn.rpartition("::")[2]

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"


def declared(deployment: dict[str, Any]) -> list[Declared]:
    """Every Kubernetes object in an exported stack (components and providers are not objects)."""
    found = []
    for resource in deployment.get("resources", []):
        outputs = resource.get("outputs") or {}
        # Components (a Helm chart: its objects are its children) and the provider itself are not objects.
        if not resource.get("custom") or not resource["type"].startswith("kubernetes:") or "kind" not in outputs:
            continue
        meta = outputs["metadata"]
        found.append(Declared(resource["urn"], resource["type"], outputs["apiVersion"], outputs["kind"], meta["name"], meta.get("namespace"), outputs))
    return found


def live(kinds: dynamic.DynamicClient, obj: Declared) -> dict[str, Any] | None:
    """The object as the API server has it now, None when it (or its kind) does not exist. `kinds` is a
    DynamicClient made after the last CRD change: it knows the kinds the server served then."""
    try:
        resource = kinds.resources.get(api_version=obj.api_version, kind=obj.kind)
        return resource.get(name=obj.name, namespace=obj.namespace).to_dict()
    except (dynamic.exceptions.NotFoundError, dynamic.exceptions.ResourceNotFoundError):
        return None


def pod_templates(value: Any) -> Iterator[dict[str, Any]]:
    """Every pod template ({metadata, spec: {containers}}) or pod spec anywhere inside an object."""
    if isinstance(value, dict):
        spec = value.get("spec")
        if isinstance(spec, dict) and isinstance(spec.get("containers"), list):
            yield {"metadata": value.get("metadata") or {}, "spec": spec}
        for child in value.values():
            yield from pod_templates(child)
    elif isinstance(value, list):
        for child in value:
            yield from pod_templates(child)


def dry_run_pod(api: client.ApiClient, namespace: str, template: dict[str, Any]) -> str | None:
    """Create the pod server-side in dry-run mode: None when admitted, else the API server's message."""
    labels = (template.get("metadata") or {}).get("labels") or {}
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "admission-check-", "labels": labels}, "spec": template["spec"]}
    try:
        client.CoreV1Api(api).create_namespaced_pod(namespace, body, dry_run="All")
    except ApiException as e:
        return f"{e.status} {e.reason}: {_message(e)}"
    return None


def dry_run_create(kinds: dynamic.DynamicClient, obj: dict[str, Any]) -> str | None:
    """Create any object server-side in dry-run mode (schema, CEL rules, quota, admission): None when
    accepted, else the API server's message."""
    try:
        resource = kinds.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        resource.create(body=obj, namespace=obj["metadata"].get("namespace"), dry_run="All")
    except dynamic.exceptions.ResourceNotFoundError as e:
        return f"the API server serves no {obj['apiVersion']} {obj['kind']}: {e}"
    except ApiException as e:
        return f"{e.status} {e.reason}: {_message(e)}"
    return None


def _message(error: ApiException) -> str:
    try:
        return json.loads(error.body)["message"]
    except (ValueError, KeyError, TypeError):
        return str(error.body)


def unordered_custom_resources(deployment: dict[str, Any], objects: list[Declared]) -> list[str]:
    """Custom resources whose CRD the same stack creates but that do not depend on it (DESIGN: a custom
    resource is created only after its CRD), read from the engine's dependency graph in the state."""
    by_urn = {r["urn"]: r for r in deployment.get("resources", [])}
    crds = {}
    for obj in objects:
        if obj.kind == "CustomResourceDefinition":
            spec = obj.outputs.get("spec") or {}
            crds[(spec.get("group"), (spec.get("names") or {}).get("kind"))] = obj.urn

    def upstream(urn: str) -> set[str]:
        seen, todo = set(), [urn]
        while todo:
            resource = by_urn.get(todo.pop())
            if resource is None:
                continue
            for nxt in [*resource.get("dependencies", []), *([resource["parent"]] if resource.get("parent") else [])]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    problems = []
    for obj in objects:
        crd = crds.get((obj.api_version.rpartition("/")[0], obj.kind))
        if crd and crd not in upstream(obj.urn):
            problems.append(f"{obj} does not depend on its CRD ({crd.rpartition('::')[2]})")
    return problems
