"""Composes the platform features of a lab onto the base platform (see stacks/context.py):
observability, GPU sharing, Kueue + JobSet, Training Operator, checkpoints, tenancy, in that order
(later ones wait for what earlier ones install, e.g. the ServiceMonitor CRD).

Stack outputs added here: `prometheus`, `grafana`, `endpoints.{prometheus,grafana}`, `gpu_sharing`,
`artifact_bucket`, `namespaces`, `versions`, and per feature a section of `benchmark`:
`benchmark.{observability,gpu_sharing,kueue,training,checkpoints,tenancy}`.
"""

from __future__ import annotations

from typing import Any

from components import versions
from components.checkpoints import Checkpoints, CheckpointsArgs, checkpoint_summary
from components.gpu_sharing import GpuOperator, GpuOperatorArgs, pool_labels, pool_sharing, sharing_summary
from components.kueue import Kueue, KueueArgs, queue_summary
from components.kueue import JOBSET_NAMESPACE, NAMESPACE as KUEUE_NAMESPACE
from components.observability import GRAFANA, PROMETHEUS, Observability, ObservabilityArgs, dashboard_ids
from components.tenancy import PRIORITY_CLASSES, Tenancy, TenancyArgs
from components.training_operator import OPERATOR_NAMESPACE, TrainingOperator, TrainingOperatorArgs, job_summary
from stacks.config import LabConfig
from stacks.context import PlatformContext


def _nvidia_mode(cfg: LabConfig) -> bool:
    return cfg.gpu_sharing.enabled and cfg.gpu_sharing.mode == "nvidia"


def apis(cfg: LabConfig) -> list[str]:
    """Google APIs these features need besides the base ones."""
    return ["storage.googleapis.com"] if cfg.checkpoints.enabled else []


def cluster_overrides(cfg: LabConfig) -> dict[str, Any]:
    """GkeClusterArgs fields these features decide."""
    overrides: dict[str, Any] = {}
    if cfg.observability.enabled:
        # Our own exporter feeds our own Prometheus; GKE-managed DCGM would be a second exporter whose
        # data lands in Cloud Monitoring, where the benchmarks do not look.
        overrides["managed_dcgm"] = False
    if cfg.tenancy.enabled and cfg.tenancy.security_group:
        overrides["security_group"] = cfg.tenancy.security_group
    return overrides


def gpu_pool_overrides(cfg: LabConfig) -> dict[str, Any]:
    """GpuNodePoolArgs fields these features decide (sharing, node labels). The driver install is the
    base key gpu_driver_version, which validation ties to the sharing mode."""
    overrides: dict[str, Any] = {}
    sharing = pool_sharing(cfg)
    if sharing is not None:
        overrides["sharing"] = sharing
    labels = pool_labels(cfg)
    if labels:
        overrides["extra_labels"] = labels
    return overrides


def compose(ctx: PlatformContext) -> None:
    """Register these features' components and add their stack outputs to ctx.outputs."""
    cfg, out = ctx.cfg, ctx.outputs
    placement = ctx.gpu.placement

    if cfg.observability.enabled:
        obs = Observability(
            "observability",
            ObservabilityArgs(cfg=cfg, placement=placement, standalone_dcgm=not _nvidia_mode(cfg)),
            opts=ctx.k8s_opts(),
        )
        ctx.ready["prometheus"] = obs.ready
        out.prometheus = dict(PROMETHEUS)
        out.grafana = {**GRAFANA, "dashboards": dashboard_ids()} if cfg.observability.grafana else None
        out.endpoints["prometheus"] = {**PROMETHEUS, "path": "/", "protocol": "http"}
        if cfg.observability.grafana:
            out.endpoints["grafana"] = {**GRAFANA, "path": "/", "protocol": "http"}
        out.namespaces.append(PROMETHEUS["namespace"])
        out.versions["kube-prometheus-stack"] = versions.KUBE_PROMETHEUS_STACK.version
        dcgm = "gpu-operator" if _nvidia_mode(cfg) else "dcgm-exporter chart"
        if not _nvidia_mode(cfg):
            out.versions["dcgm-exporter"] = versions.DCGM_EXPORTER.version
        out.benchmark["observability"] = {
            "dcgm_exporter": dcgm, "scrape_interval_s": cfg.observability.scrape_interval_s
        }

    if cfg.gpu_sharing.enabled:
        if _nvidia_mode(cfg):
            GpuOperator("gpu-operator", GpuOperatorArgs(cfg=cfg, prometheus=ctx.ready.get("prometheus")),
                        opts=ctx.k8s_opts())
            out.namespaces.append("gpu-operator")
            out.versions["gpu-operator"] = versions.GPU_OPERATOR.version
        out.gpu_sharing = sharing_summary(cfg)
        out.benchmark["gpu_sharing"] = sharing_summary(cfg)

    if cfg.kueue.enabled:
        kueue = Kueue("kueue", KueueArgs(cfg=cfg, placement=placement, prometheus=ctx.ready.get("prometheus")),
                      opts=ctx.k8s_opts())
        ctx.ready["kueue"] = kueue
        out.namespaces.extend([KUEUE_NAMESPACE, JOBSET_NAMESPACE, cfg.kueue.namespace])
        out.versions.update({"kueue": versions.KUEUE.version, "jobset": versions.JOBSET.version})
        out.benchmark["kueue"] = queue_summary(cfg)

    if cfg.training_operator.enabled:
        TrainingOperator("training-operator", TrainingOperatorArgs(cfg=cfg), opts=ctx.k8s_opts())
        out.namespaces.extend([OPERATOR_NAMESPACE, cfg.training_operator.namespace])
        out.versions["training-operator"] = versions.TRAINING_OPERATOR_VERSION
        out.benchmark["training"] = job_summary(cfg)

    if cfg.checkpoints.enabled:
        ckpt = Checkpoints("checkpoints", CheckpointsArgs(cfg=cfg, cluster=ctx.cluster.cluster), opts=ctx.k8s_opts())
        out.artifact_bucket = ckpt.bucket.name
        out.namespaces.append(cfg.checkpoints.namespace)
        out.benchmark["checkpoints"] = {**checkpoint_summary(cfg, ckpt.bucket.name), "image": versions.PYTORCH_IMAGE}

    if cfg.tenancy.enabled:
        Tenancy("tenancy", TenancyArgs(cfg=cfg, kueue=ctx.ready.get("kueue")), opts=ctx.k8s_opts())
        out.namespaces.extend(t.name for t in cfg.tenancy.tenants)
        out.benchmark["tenancy"] = {
            "tenants": [t.name for t in cfg.tenancy.tenants],
            "priority_classes": {name: value for name, (value, _, _) in PRIORITY_CLASSES.items()},
        }
