"""Registers a Kubernetes object built as a plain dict (the form tests validate against the schemas)
as the matching typed pulumi_kubernetes resource, or as a CustomResource for a CRD's kind.

Components build bodies in pure functions (`def cluster_queue(cfg) -> dict`) and hand them here, so
what is validated is exactly what is deployed.
"""

from __future__ import annotations

import re
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

# The core kinds the platform components create, by (apiVersion, kind).
TYPED: dict[tuple[str, str], type[pulumi.CustomResource]] = {
    ("v1", "Namespace"): k8s.core.v1.Namespace,
    ("v1", "ConfigMap"): k8s.core.v1.ConfigMap,
    ("v1", "ServiceAccount"): k8s.core.v1.ServiceAccount,
    ("v1", "Service"): k8s.core.v1.Service,
    ("v1", "Secret"): k8s.core.v1.Secret,
    ("apps/v1", "Deployment"): k8s.apps.v1.Deployment,
    ("v1", "ResourceQuota"): k8s.core.v1.ResourceQuota,
    ("v1", "LimitRange"): k8s.core.v1.LimitRange,
    ("networking.k8s.io/v1", "NetworkPolicy"): k8s.networking.v1.NetworkPolicy,
    ("rbac.authorization.k8s.io/v1", "Role"): k8s.rbac.v1.Role,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): k8s.rbac.v1.RoleBinding,
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): k8s.rbac.v1.ClusterRole,
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): k8s.rbac.v1.ClusterRoleBinding,
    ("batch/v1", "CronJob"): k8s.batch.v1.CronJob,
    ("batch/v1", "Job"): k8s.batch.v1.Job,
    ("scheduling.k8s.io/v1", "PriorityClass"): k8s.scheduling.v1.PriorityClass,
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): k8s.apiextensions.v1.CustomResourceDefinition,
}
CORE_API_VERSIONS = {api for api, _ in TYPED} | {"v1"}


class K8sObjectError(Exception):
    """An object body this module cannot register."""


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def create(name: str, obj: dict[str, Any], opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    """Register `obj` (apiVersion, kind, metadata, ...) under the Pulumi name `name`."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    fields = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    typed = TYPED.get((api_version, kind))
    if typed is not None:
        # Top-level fields become keyword arguments (snake_case); nested dicts keep Kubernetes' camelCase.
        return typed(name, **{_snake(k): v for k, v in fields.items()}, opts=opts)
    if api_version in CORE_API_VERSIONS or "." not in (api_version or "").split("/")[0]:
        raise K8sObjectError(
            f"{name}: {api_version} {kind} is a built-in kind with no typed resource here; "
            f"add it to components.k8s_objects.TYPED (known: {', '.join(k for _, k in TYPED)})"
        )
    return k8s.apiextensions.CustomResource(name, api_version=api_version, kind=kind, opts=opts, **fields)
