"""Composes the platform for one lab config and returns the stack outputs (the contract in DESIGN.md).

`__main__.py` calls `build`; tests and the offline plan call it under Pulumi mocks.
"""

from __future__ import annotations

from typing import Any

import pulumi

from components.apis import ProjectApis, ProjectApisArgs
from components.cluster import GkeCluster, GkeClusterArgs
from components.gpu_pool import GpuNodePool, GpuNodePoolArgs
from components.naming import resource_name
from components.network import Network, NetworkArgs
from stacks.cost_estimate import estimate_or_none
from stacks import compose_cost, compose_platform, compose_serving
from stacks.config import LabConfig
from stacks.context import PlatformContext, stack_id
from stacks.labs import LABS
from stacks.loader import Secrets

# Each group of lab features: the APIs it needs, then its components (in this order, so serving
# and cost can wait for what the platform group installs, e.g. Prometheus).
FEATURE_GROUPS = (compose_platform, compose_serving, compose_cost)

BASE_APIS = [
    "compute.googleapis.com",
    "container.googleapis.com",
    "iam.googleapis.com",
    "cloudresourcemanager.googleapis.com",
]


def build(cfg: LabConfig, secrets: Secrets) -> dict[str, Any]:
    labels = cfg.billing_labels
    name = resource_name(stack_id(cfg))
    services = BASE_APIS + [api for group in FEATURE_GROUPS for api in group.apis(cfg)]
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
            resource_labels=labels,
            system_machine_type=cfg.system_machine_type,
            system_min_nodes=cfg.system_min_nodes,
            system_max_nodes=cfg.system_max_nodes,
            system_spot=cfg.system_spot,
            **compose_platform.cluster_overrides(cfg),
            **compose_serving.cluster_overrides(cfg),
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
            **compose_platform.gpu_pool_overrides(cfg),
            **compose_serving.gpu_pool_overrides(cfg),
        ),
        opts=after_apis,
    )

    ctx = PlatformContext(cfg=cfg, secrets=secrets, cluster=cluster, gpu=gpu, apis=apis)
    for group in FEATURE_GROUPS:
        group.compose(ctx)
    out = ctx.outputs

    return {
        "lab": cfg.lab,
        "lab_title": LABS[cfg.lab].title,
        "project": cfg.project,
        "region": cfg.region,
        "zones": sorted({cfg.cluster_zone, *cfg.gpu_node_zones}),
        "cluster_name": cluster.cluster.name,
        "kubeconfig": cluster.kubeconfig,
        "system_pool": {"name": cluster.system_pool.name, "node_selector": cluster.system_node_selector},
        "gpu_pool": {
            "name": gpu.pool.name,
            "machine_type": cfg.gpu_machine_type,
            "accelerator": cfg.gpu_accelerator,
            "gpus_per_node": cfg.gpus_per_node,
            "spot": cfg.gpu_spot,
            "min_nodes": cfg.gpu_min_nodes,
            "max_nodes": cfg.gpu_max_nodes,
            "sharing": out.gpu_sharing,
            "node_selector": gpu.placement.node_selector,
            "tolerations": gpu.placement.tolerations,
        },
        "namespaces": out.namespaces,
        "endpoints": out.endpoints,
        "prometheus": out.prometheus,
        "grafana": out.grafana,
        "artifact_bucket": out.artifact_bucket,
        "labels": labels,
        "versions": out.versions,
        "benchmark": out.benchmark,
        "cost_estimate": cost.model_dump() if (cost := estimate_or_none(cfg)) else None,
    }
