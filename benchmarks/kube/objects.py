"""Builders of the Kubernetes objects the lab benchmarks create, as plain dicts, and the reading of what the
API says of them that every lab needs (a node's allocatable GPUs).

One place for metadata, ConfigMaps of files, containers and pods, so every lab's objects look alike
(and carry the run labels, which RunScope adds at creation). A pod's scripts are mounted from a ConfigMap
(benchmarks.labs.workloads holds the labs'), so what runs in the cluster is readable (and testable) here.
Every pod meets the restricted Pod Security Standard (podspec.security), as the lab namespaces enforce.
"""

from __future__ import annotations

import base64
from typing import Any

from podspec.security import TMP, Scratch, restricted

GPU = "nvidia.com/gpu"  # the NVIDIA device plugin's extended resource
SCRIPT_MOUNT = "/scripts"
def meta(name: str, namespace: str | None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "labels": dict(labels or {})}
    if namespace is not None:
        out["namespace"] = namespace
    return out


def config_map(name: str, namespace: str, files: dict[str, str], binary: dict[str, bytes] | None = None) -> dict[str, Any]:
    """A ConfigMap of files (key = file name; `binary`: files that are not text), mounted at SCRIPT_MOUNT by
    `pod_spec`."""
    out = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(name, namespace), "data": dict(files)}
    if binary:
        out["binaryData"] = {key: base64.b64encode(value).decode() for key, value in binary.items()}
    return out


def container(
    name: str,
    image: str,
    command: list[str],
    *,
    env: dict[str, str] | None = None,
    field_env: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    with_scripts: bool = False,
    ports: list[int] | None = None,
) -> dict[str, Any]:
    """`field_env`: variables from the pod's own fields (downward API), name -> fieldPath."""
    out: dict[str, Any] = {"name": name, "image": image, "command": command}
    variables = [{"name": k, "value": v} for k, v in (env or {}).items()]
    variables += [{"name": k, "valueFrom": {"fieldRef": {"fieldPath": f}}} for k, f in (field_env or {}).items()]
    if variables:
        out["env"] = variables
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = dict(requests)
    if limits:
        resources["limits"] = dict(limits)
    if resources:
        out["resources"] = resources
    if with_scripts:
        out["volumeMounts"] = [{"name": "scripts", "mountPath": SCRIPT_MOUNT, "readOnly": True}]
    if ports:
        out["ports"] = [{"containerPort": p} for p in ports]
    return out


def pod_spec(
    containers: list[dict[str, Any]],
    *,
    node_selector: dict[str, str],
    tolerations: list[dict[str, str]] | None = None,
    scripts_config_map: str | None = None,
    restart_policy: str = "Never",
    service_account: str | None = None,
    scratch: tuple[Scratch, ...] = (TMP,),
    home: str | None = TMP.path,
) -> dict[str, Any]:
    """A restricted pod spec (as nobody, read-only root with `scratch` writable and HOME there, no
    token: benchmark pods never call the API); GPU pods pass the GPU pool's selector and tolerations,
    everything else the system pool's selector (both from the stack outputs: benchmarks.kube.stack)."""
    spec: dict[str, Any] = {
        "restartPolicy": restart_policy,
        "nodeSelector": dict(node_selector),
        "containers": containers,
        "terminationGracePeriodSeconds": 5,
    }
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    if scripts_config_map:
        spec["volumes"] = [{"name": "scripts", "configMap": {"name": scripts_config_map}}]
    if service_account:
        spec["serviceAccountName"] = service_account
    return restricted(spec, scratch=scratch, home=home)


def namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta(name, None, labels)}


def pod(name: str, namespace: str, spec: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta(name, namespace, labels), "spec": spec}


def job(
    name: str,
    namespace: str,
    spec: dict[str, Any],
    *,
    labels: dict[str, str] | None = None,
    pod_labels: dict[str, str] | None = None,
    backoff_limit: int = 0,
    suspend: bool | None = None,
    active_deadline_s: int | None = None,
    ttl_after_finished_s: int | None = None,
) -> dict[str, Any]:
    """A batch Job running `spec` once (no retries unless asked: a retry would blur the timing)."""
    job_spec: dict[str, Any] = {
        "backoffLimit": backoff_limit,
        "template": {"metadata": {"labels": dict(pod_labels or {})}, "spec": spec},
    }
    if suspend is not None:
        job_spec["suspend"] = suspend
    if active_deadline_s is not None:
        job_spec["activeDeadlineSeconds"] = active_deadline_s
    if ttl_after_finished_s is not None:
        job_spec["ttlSecondsAfterFinished"] = ttl_after_finished_s
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta(name, namespace, labels), "spec": job_spec}


def allocatable_gpus(node: dict[str, Any]) -> int | None:
    """The GPUs a node offers to pods (status.allocatable nvidia.com/gpu; 0: none), or None while its status
    reports nothing allocatable yet (a node just registered)."""
    allocatable = (node.get("status") or {}).get("allocatable")
    return None if allocatable is None else int(allocatable.get(GPU) or 0)
