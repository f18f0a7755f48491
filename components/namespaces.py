"""Namespace-level objects several platform components need: the namespace itself (with its Pod
Security Admission labels) and GKE's critical-pod quota.

GKE admits pods with the `system-node-critical` / `system-cluster-critical` PriorityClasses outside
kube-system only in a namespace holding a ResourceQuota scoped to those classes (Google's and NVIDIA's
GKE instructions for the GPU Operator create exactly this). The DCGM exporter chart and the GPU
Operator's DaemonSets use `system-node-critical` so they are the last to be evicted from a GPU node.
"""

from __future__ import annotations

from components.naming import StackId, k8s_labels
from podspec.security import PodSecurityLevel, pod_security_labels

CRITICAL_PRIORITY_CLASSES = ["system-node-critical", "system-cluster-critical"]
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by Kubernetes on every namespace


def namespace(
    stack_id: StackId,
    name: str,
    component: str,
    pod_security: PodSecurityLevel,
    extra_labels: dict[str, str] | None = None,
) -> dict:
    """A namespace that enforces `pod_security`: the strictest level every pod we put there meets."""
    labels = {**k8s_labels(stack_id, component), **pod_security_labels(pod_security), **(extra_labels or {})}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def critical_pods_quota(stack_id: StackId, ns: str, component: str) -> dict:
    """The ResourceQuota that lets `ns` run pods of the node/cluster-critical PriorityClasses on GKE."""
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gke-critical-pods", "namespace": ns, "labels": k8s_labels(stack_id, component)},
        "spec": {
            "hard": {"pods": "100"},
            "scopeSelector": {
                "matchExpressions": [
                    {"scopeName": "PriorityClass", "operator": "In", "values": CRITICAL_PRIORITY_CLASSES}
                ]
            },
        },
    }
