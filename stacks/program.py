"""Composes the platform for one lab config and returns the stack outputs (the contract: stacks/outputs.py).

A lab has two halves and one seam (stacks/cluster_target.py): the cluster target comes from the cloud
half for `cluster: gke` (stacks/cloud.py) or from a kubeconfig for `cluster: existing`
(stacks/kube_target.py), and the Kubernetes half, the feature groups below, is applied to it.
`__main__.py` calls `build`; tests and the offline plan call it under Pulumi mocks.
"""

from __future__ import annotations

from typing import Any

from stacks import cloud, compose_cost, compose_platform, compose_serving, kube_target
from stacks.config import LabConfig
from stacks.context import PlatformContext
from stacks.cost_estimate import estimate_or_none
from stacks.labs import LABS
from stacks.loader import Secrets
from stacks.outputs import StackOutputs

# Each group of lab features: the APIs and cluster settings it needs from the cloud half, then its
# components (in this order, so serving and cost can wait for what the platform group installs, e.g.
# Prometheus).
FEATURE_GROUPS = (compose_platform, compose_serving, compose_cost)


def build(cfg: LabConfig, secrets: Secrets) -> dict[str, Any]:
    if cfg.cluster.existing:
        google, target = None, kube_target.build(cfg)
    else:
        google, target = cloud.build(cfg, FEATURE_GROUPS)

    ctx = PlatformContext(cfg=cfg, secrets=secrets, target=target, cloud=google)
    for group in FEATURE_GROUPS:
        group.compose(ctx)
    out, where, placement = ctx.outputs, target.outputs, target.placement

    return StackOutputs.contract(**{
        "lab": cfg.lab,
        "lab_title": LABS[cfg.lab].title,
        "config_sha256": cfg.sha256,
        "project": where.project,
        "region": where.region,
        "zones": where.zones,
        "cluster_name": where.cluster_name,
        "cluster_target": cfg.cluster.target,
        "kubeconfig": where.kubeconfig,
        "system_pool": {"name": where.system_pool, "node_selector": placement.system_node_selector},
        "gpu_pool": {
            "name": where.gpu_pool,
            "machine_type": cfg.gpu_machine_type,
            "accelerator": cfg.gpu_accelerator,
            "gpus_per_node": cfg.gpus_per_node,
            "spot": where.gpu_spot,
            "min_nodes": where.gpu_min_nodes,
            "max_nodes": cfg.gpu_max_nodes,
            "sharing": out.gpu_sharing,
            "node_selector": placement.gpu.node_selector,
            "tolerations": placement.gpu.tolerations,
        },
        "namespaces": out.namespaces,
        "endpoints": out.endpoints,
        "prometheus": out.prometheus,
        "grafana": out.grafana,
        "artifact_bucket": out.artifact_bucket,
        "labels": cfg.billing_labels,
        "versions": out.versions,
        "benchmark": out.benchmark,
        "cost_estimate": cost.model_dump() if (cost := estimate_or_none(cfg)) else None,
    })
