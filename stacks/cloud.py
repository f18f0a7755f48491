"""The cloud half of a lab for `cluster: gke`: the project's APIs, the network, the GKE cluster with its
system pool, and the L4 GPU pool; and the cluster target the Kubernetes half is applied to.

Each feature group (stacks/compose_*.py) says which APIs it needs and which cluster and GPU pool
settings it decides; nothing of the Kubernetes half happens here.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import pulumi

from components.apis import ProjectApis, ProjectApisArgs
from components.cluster import GkeCluster, GkeClusterArgs
from components.gpu_pool import GpuNodePool, GpuNodePoolArgs
from components.naming import StackId, resource_name
from components.network import Network, NetworkArgs
from components.placement import Placement
from stacks.cluster_target import ClusterTarget, TargetOutputs
from stacks.config import LabConfig

BASE_APIS = [
    "compute.googleapis.com",
    "container.googleapis.com",
    "iam.googleapis.com",
    "cloudresourcemanager.googleapis.com",
]


@dataclass(frozen=True)
class GkeCloud:
    """The cloud half's objects, for the features that need Google (buckets, Workload Identity, the
    image cache, the budget)."""

    apis: ProjectApis
    network: Network
    cluster: GkeCluster
    gpu: GpuNodePool


def build(cfg: LabConfig, groups: tuple[ModuleType, ...]) -> tuple[GkeCloud, ClusterTarget]:
    """Create the cloud half; `groups` are the feature groups whose APIs and settings it applies."""
    name = resource_name(StackId(lab=cfg.lab, stack=cfg.stack))
    services = BASE_APIS + [api for group in groups for api in group.apis(cfg)]
    apis = ProjectApis("apis", ProjectApisArgs(project=cfg.project, services=services))
    after_apis = pulumi.ResourceOptions(depends_on=[apis])

    network = Network(
        "network",
        NetworkArgs(
            project=cfg.project,
            region=cfg.region,
            network_name=name,
            subnet_cidr=cfg.subnet_cidr,
            pods_cidr=cfg.pods_cidr,
            services_cidr=cfg.services_cidr,
        ),
        opts=after_apis,
    )
    cluster = GkeCluster(
        "gke",
        GkeClusterArgs(
            project=cfg.project,
            zone=cfg.cluster_zone,
            cluster_name=name,
            network=network.network.id,
            subnetwork=network.subnet.id,
            release_channel=cfg.release_channel,
            resource_labels=cfg.billing_labels,
            system_machine_type=cfg.system_machine_type,
            system_min_nodes=cfg.system_min_nodes,
            system_max_nodes=cfg.system_max_nodes,
            system_spot=cfg.system_spot,
            **{k: v for group in groups for k, v in group.cluster_overrides(cfg).items()},
        ),
        opts=after_apis,
    )
    gpu = GpuNodePool(
        "gpu",
        GpuNodePoolArgs(
            pool_defaults=cluster.pool_defaults,
            node_locations=cfg.gpu_node_zones,
            machine_type=cfg.gpu_machine_type,
            accelerator=cfg.gpu_accelerator,
            gpus_per_node=cfg.gpus_per_node,
            spot=cfg.gpu_spot,
            min_nodes=cfg.gpu_min_nodes,
            max_nodes=cfg.gpu_max_nodes,
            driver_version=cfg.gpu_driver_version,
            disk_gb=cfg.gpu_disk_gb,
            **{k: v for group in groups for k, v in group.gpu_pool_overrides(cfg).items()},
        ),
        opts=after_apis,
    )
    target = ClusterTarget(
        provider=cluster.provider,
        placement=Placement(system_node_selector=cluster.system_node_selector, gpu=gpu.placement),
        charts="install",
        outputs=TargetOutputs(
            project=cfg.project,
            region=cfg.region,
            zones=sorted({cfg.cluster_zone, *cfg.gpu_node_zones}),
            cluster_name=cluster.cluster.name,
            kubeconfig=cluster.kubeconfig,
            system_pool=cluster.system_pool.name,
            gpu_pool=gpu.pool.name,
            gpu_spot=cfg.gpu_spot,
            gpu_min_nodes=cfg.gpu_min_nodes,
        ),
        waits_for=[apis],
    )
    return GkeCloud(apis=apis, network=network, cluster=cluster, gpu=gpu), target
