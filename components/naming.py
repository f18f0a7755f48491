"""Names and labels: one helper, no random suffixes (a lab's resources are found by name and label)."""

from __future__ import annotations

from stacks.config import LabConfig

PART_OF = "gke-ml-labs"


def resource_name(cfg: LabConfig, suffix: str = "") -> str:
    """A GCP resource name for this stack: lowercase, starts with a letter, short enough for GKE (40)."""
    base = f"gml-{cfg.stack}".lower().replace("_", "-")
    return f"{base}-{suffix}" if suffix else base


def k8s_labels(cfg: LabConfig, component: str) -> dict[str, str]:
    """Labels on every Kubernetes object we create: who made it, for which lab, which concern."""
    return {
        "app.kubernetes.io/part-of": PART_OF,
        "app.kubernetes.io/managed-by": "pulumi",
        "app.kubernetes.io/component": component,
        "gke-ml-labs/lab": cfg.lab,
        "gke-ml-labs/stack": cfg.stack,
    }
