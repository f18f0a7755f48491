"""Names and labels: one helper, no random suffixes (a lab's resources are found by name and label)."""

from __future__ import annotations

from dataclasses import dataclass

PART_OF = "gke-ml-labs"


@dataclass(frozen=True)
class StackId:
    """The lab and the Pulumi stack a resource belongs to: what its names and labels are made of."""

    lab: str
    stack: str


def resource_name(stack_id: StackId, suffix: str = "") -> str:
    """A GCP resource name for this stack: lowercase, starts with a letter, short enough for GKE (40)."""
    base = f"gml-{stack_id.stack}".lower().replace("_", "-")
    return f"{base}-{suffix}" if suffix else base


def k8s_labels(stack_id: StackId, component: str) -> dict[str, str]:
    """Labels on every Kubernetes object we create: who made it, for which lab, which concern."""
    return {
        "app.kubernetes.io/part-of": PART_OF,
        "app.kubernetes.io/managed-by": "pulumi",
        "app.kubernetes.io/component": component,
        "gke-ml-labs/lab": stack_id.lab,
        "gke-ml-labs/stack": stack_id.stack,
    }
