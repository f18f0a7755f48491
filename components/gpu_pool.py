"""The L4 GPU node pool: spot, scaled from zero, tainted so only GPU workloads keep a node alive; its
`placement` is how the Kubernetes half's GPU pods select and tolerate it (components.placement)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pulumi
import pulumi_gcp as gcp

from components.cluster import POOL_LABEL, PoolDefaults
from components.placement import GPU_RESOURCE, GpuPlacement, Taint

# Declared explicitly: GKE adds it to GPU nodes anyway, and leaving it out shows a permanent diff.
GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
GPU_POOL_NAME = "gpu"
# How a GPU pod lands on this pool: its label and its taint.
POOL_PLACEMENT = GpuPlacement(node_selector={POOL_LABEL: GPU_POOL_NAME}, taints=(Taint(**GPU_TAINT),))


@dataclass(frozen=True)
class GpuSharing:
    """GKE-native GPU sharing on the pool (`gpu_sharing_config`)."""

    strategy: Literal["TIME_SHARING", "MPS"]
    max_shared_clients_per_gpu: int


@dataclass(frozen=True)
class GpuNodePoolArgs:
    pool_defaults: PoolDefaults
    node_locations: list[str]
    machine_type: str
    accelerator: str
    gpus_per_node: int
    spot: bool
    min_nodes: int
    max_nodes: int
    driver_version: str
    disk_gb: int
    sharing: GpuSharing | None = None
    extra_labels: dict[str, str] = field(default_factory=dict)
    # GKE image streaming (gcfs_config): images from Artifact Registry stream instead of pulling whole.
    image_streaming: bool = False


class GpuNodePool(pulumi.ComponentResource):
    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:platform:GpuNodePool", name, None, opts)
        self.placement = POOL_PLACEMENT
        sharing = (
            gcp.container.NodePoolNodeConfigGuestAcceleratorGpuSharingConfigArgs(
                gpu_sharing_strategy=args.sharing.strategy,
                max_shared_clients_per_gpu=args.sharing.max_shared_clients_per_gpu,
            )
            if args.sharing
            else None
        )
        self.pool = args.pool_defaults.node_pool(
            f"{name}-pool",
            name=GPU_POOL_NAME,
            node_locations=args.node_locations,
            min_nodes=args.min_nodes,
            max_nodes=args.max_nodes,
            # ANY: take whichever zone has L4 stock; lowers spot preemption and stock-out risk.
            location_policy="ANY",
            parent=self,
            machine_type=args.machine_type,
            spot=args.spot,
            disk_size_gb=args.disk_gb,
            labels={**args.extra_labels, POOL_LABEL: GPU_POOL_NAME},
            gcfs_config=gcp.container.NodePoolNodeConfigGcfsConfigArgs(enabled=True) if args.image_streaming else None,
            taints=[
                gcp.container.NodePoolNodeConfigTaintArgs(key=GPU_TAINT["key"], value=GPU_TAINT["value"], effect="NO_SCHEDULE")
            ],
            guest_accelerators=[
                gcp.container.NodePoolNodeConfigGuestAcceleratorArgs(
                    type=args.accelerator,
                    count=args.gpus_per_node,
                    gpu_driver_installation_config=gcp.container.NodePoolNodeConfigGuestAcceleratorGpuDriverInstallationConfigArgs(
                        gpu_driver_version=args.driver_version
                    ),
                    gpu_sharing_config=sharing,
                )
            ],
        )
        self.register_outputs({"pool": self.pool.name})
