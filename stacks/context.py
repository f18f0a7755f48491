"""What the base platform hands to each lab feature: the config, the cluster, the GPU pool, the
Kubernetes provider, and the stack outputs the feature fills in."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi

from components.cluster import GkeCluster
from components.gpu_pool import GpuNodePool
from components.naming import StackId
from stacks.config import LabConfig
from stacks.loader import Secrets


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
    cluster: GkeCluster
    gpu: GpuNodePool
    # The project's Google APIs: features that create cloud resources of their own (buckets, service
    # accounts) must not call an API before it is enabled on an empty project.
    apis: pulumi.Resource
    outputs: StackOutputs = field(default_factory=StackOutputs)
    # Resources later features wait for, by role (e.g. "prometheus": the release serving the
    # ServiceMonitor CRD), so a custom resource is never created before its CRD and controller.
    ready: dict[str, pulumi.Resource] = field(default_factory=dict)

    @property
    def stack_id(self) -> StackId:
        return stack_id(self.cfg)

    def k8s_opts(self, depends_on: list[pulumi.Resource] | None = None) -> pulumi.ResourceOptions:
        """Options for a feature component: the cluster's provider, handed down to every child, and the
        project's APIs enabled first (its children wait for them through it)."""
        return pulumi.ResourceOptions(
            providers={"kubernetes": self.cluster.provider}, depends_on=[self.apis, *(depends_on or [])]
        )
