"""The seam between a lab's two halves (DESIGN.md): the cluster target its Kubernetes half is applied to.

The cloud half makes one for `cluster: gke` (stacks/cloud.py), a kubeconfig context for `cluster:
existing` (stacks/kube_target.py). The Kubernetes half (stacks/compose_*.py) takes the target's provider,
placement and chart source and never reaches into GKE objects; the few features that need Google take
the cloud half's own objects (`PlatformContext.cloud`), which an existing cluster has none of.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi

from components.helm_release import ChartSource
from components.placement import Placement


@dataclass(frozen=True)
class TargetOutputs:
    """The target's part of the stack outputs (DESIGN.md's contract); None where an existing cluster's
    kubeconfig cannot say (a name of GKE's that it does not carry)."""

    project: str | None
    region: str | None
    zones: list[str]
    cluster_name: pulumi.Input[str] | None
    kubeconfig: pulumi.Output[str]  # secret
    system_pool: pulumi.Input[str] | None  # the system nodes' pool name
    gpu_pool: pulumi.Input[str] | None  # the GPU nodes' pool name
    gpu_spot: bool | None
    gpu_min_nodes: int | None


@dataclass(frozen=True)
class ClusterTarget:
    provider: pulumi.ProviderResource  # the Kubernetes provider every Kubernetes object is applied through
    placement: Placement  # where system pods and GPU pods land
    charts: ChartSource  # charts and manifests installed, or their pinned CRDs in their place (offline)
    outputs: TargetOutputs
    # What every Kubernetes feature waits for first: on GKE the project's APIs, which a feature's own
    # cloud resources (a bucket, a service account) call; nothing on an existing cluster.
    waits_for: list[pulumi.Resource] = field(default_factory=list)
