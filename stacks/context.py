"""What the Kubernetes half hands to each lab feature: the config, the cluster target (stacks/cluster_target.py),
the cloud half's objects where the cluster is GKE's, and the stack outputs the feature fills in."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pulumi

from components.naming import StackId
from stacks.cluster_target import ClusterTarget
from stacks.config import LabConfig
from stacks.loader import Secrets

if TYPE_CHECKING:
    from stacks.cloud import GkeCloud


def stack_id(cfg: LabConfig) -> StackId:
    return StackId(lab=cfg.lab, stack=cfg.stack)


@dataclass
class StackOutputs:
    """The parts of the stack-outputs contract (DESIGN.md) that lab features add to."""

    namespaces: list[str] = field(default_factory=list)
    endpoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    prometheus: dict[str, Any] | None = None
    grafana: dict[str, Any] | None = None
    artifact_bucket: pulumi.Input[str] | None = None
    versions: dict[str, str] = field(default_factory=dict)
    benchmark: dict[str, Any] = field(default_factory=dict)
    gpu_sharing: dict[str, Any] | None = None


@dataclass
class PlatformContext:
    cfg: LabConfig
    secrets: Secrets
    target: ClusterTarget
    # The cloud half, for the features that need Google (the config refuses them on an existing
    # cluster, where this is None).
    cloud: GkeCloud | None
    outputs: StackOutputs = field(default_factory=StackOutputs)
    # Resources later features wait for, by role (e.g. "prometheus": the release serving the
    # ServiceMonitor CRD), so a custom resource is never created before its CRD and controller.
    ready: dict[str, pulumi.Resource] = field(default_factory=dict)

    @property
    def stack_id(self) -> StackId:
        return stack_id(self.cfg)

    @property
    def google(self) -> GkeCloud:
        """The cloud half, for a feature that needs Google (the config refuses it without one)."""
        if self.cloud is None:
            raise AssertionError("a feature that needs Google ran on an existing cluster: stacks.cluster_config.check lets none")
        return self.cloud

    @property
    def workload_identity_pool(self) -> pulumi.Resource | None:
        """What makes the Workload Identity pool exist: the GKE cluster, or None on an existing cluster
        (whose pool, if any, exists already)."""
        return self.cloud.cluster.cluster if self.cloud is not None else None

    def k8s_opts(self, depends_on: list[pulumi.Resource] | None = None) -> pulumi.ResourceOptions:
        """Options for a feature component: the target's provider, handed down to every child, and what
        the target says to wait for (the project's APIs on GKE; its children wait for them through it)."""
        return pulumi.ResourceOptions(
            providers={"kubernetes": self.target.provider},
            depends_on=[*self.target.waits_for, *(depends_on or [])],
        )
