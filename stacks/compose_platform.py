"""Composes the platform features of a lab onto the base platform (see stacks/context.py):
observability, GPU sharing, Kueue + JobSet, Training Operator, checkpoints, tenancy, in that order
(later ones wait for what earlier ones install, e.g. the ServiceMonitor CRD).

Stack outputs added here: `prometheus`, `grafana`, `endpoints.{prometheus,grafana}`, `gpu_sharing`,
`artifact_bucket`, `namespaces`, `versions`, and per feature a section of `benchmark`:
`benchmark.{observability,gpu_sharing,kueue,training,checkpoints,tenancy}`.
"""

from __future__ import annotations

from typing import Any

import pulumi

from components import versions
from components.checkpoints import Checkpoints, CheckpointsArgs
from components.gpu_pool import GpuSharing
from components.gpu_sharing import NO_GKE_DEVICE_PLUGIN_LABEL, GpuOperator, GpuOperatorArgs
from components.helm_release import ChartSource
from components.kueue import JOBSET_NAMESPACE, Kueue, KueueArgs
from components.kueue import NAMESPACE as KUEUE_NAMESPACE
from components.observability import GRAFANA, PROMETHEUS, Observability, ObservabilityArgs, dashboard_ids
from components.placement import GPU_RESOURCE, Placement
from components.tenancy import PRIORITY_CLASSES, Tenancy, TenancyArgs, Tenant
from components.training_operator import OPERATOR_NAMESPACE, TORCH_RUNTIME, TrainingOperator, TrainingOperatorArgs
from stacks.config import LabConfig
from stacks.context import PlatformContext, stack_id


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
    sharing = cfg.gpu_sharing
    if sharing.enabled and sharing.mode == "gke":
        overrides["sharing"] = GpuSharing(strategy="TIME_SHARING", max_shared_clients_per_gpu=sharing.replicas)
    if _nvidia_mode(cfg):
        # GKE's own device plugin stays off: the GPU Operator's advertises the shared GPUs.
        overrides["extra_labels"] = dict(NO_GKE_DEVICE_PLUGIN_LABEL)
    return overrides


def observability_args(cfg: LabConfig, placement: Placement, charts: ChartSource = "install") -> ObservabilityArgs:
    obs = cfg.observability
    return ObservabilityArgs(
        stack_id=stack_id(cfg),
        placement=placement,
        retention=obs.retention,
        scrape_interval_s=obs.scrape_interval_s,
        grafana=obs.grafana,
        standalone_dcgm=not _nvidia_mode(cfg),
        charts=charts,
    )


def gpu_operator_args(
    cfg: LabConfig, system_node_selector: dict[str, str], prometheus: pulumi.Resource | None = None
) -> GpuOperatorArgs:
    return GpuOperatorArgs(
        stack_id=stack_id(cfg),
        replicas=cfg.gpu_sharing.replicas,
        nvidia_driver=cfg.gpu_sharing.nvidia_driver,
        scrape_interval_s=cfg.observability.scrape_interval_s,
        system_node_selector=system_node_selector,
        prometheus=prometheus,
    )


def sharing_summary(cfg: LabConfig) -> dict[str, Any]:
    """What the g2 benchmark needs: mode, replicas and the resulting allocatable nvidia.com/gpu."""
    pool = cfg.pool_capacity
    return {
        "mode": cfg.gpu_sharing.mode,
        "strategy": "TIME_SHARING",
        "replicas": cfg.gpu_sharing.replicas,
        "physical_gpus_per_node": cfg.gpus_per_node,
        "allocatable_gpus_per_node": pool.per_node,
        "max_allocatable_gpus": pool.total,
        "resource": GPU_RESOURCE,
    }


def kueue_args(
    cfg: LabConfig, placement: Placement, prometheus: pulumi.Resource | None = None, charts: ChartSource = "install"
) -> KueueArgs:
    q = cfg.kueue
    return KueueArgs(
        stack_id=stack_id(cfg),
        placement=placement,
        namespace=q.namespace,
        cluster_queue=q.cluster_queue,
        local_queue=q.local_queue,
        flavor=q.flavor,
        quota_gpus=q.quota_gpus,
        quota_cpu=q.quota_cpu,
        quota_memory_gib=q.quota_memory_gib,
        pods_ready_timeout_min=q.pods_ready_timeout_min,
        block_admission=q.block_admission,
        prometheus=prometheus,
        charts=charts,
    )


def queue_summary(cfg: LabConfig) -> dict[str, Any]:
    """What the g3 benchmark needs: where to submit, the quota, and the shape of one job (workers,
    each one shared GPU)."""
    q = cfg.kueue
    return {
        "namespace": q.namespace,
        "local_queue": q.local_queue,
        "cluster_queue": q.cluster_queue,
        "flavor": q.flavor,
        "quota": {"gpus": q.quota_gpus, "cpu": q.quota_cpu, "memory_gib": q.quota_memory_gib},
        "jobs": q.jobs,
        "workers": q.workers,
        "worker": {"gpus": 1, "cpu": q.worker_cpu, "memory_gib": q.worker_memory_gib},
        "expected_admitted": min(q.jobs, q.quota_gpus // q.workers),
        "pods_ready_timeout_min": q.pods_ready_timeout_min,
        # The g3 report attributes each wait to quota or to blockAdmission, and says which was on.
        "block_admission": q.block_admission,
        "queue_label": "kueue.x-k8s.io/queue-name",
    }


def job_summary(cfg: LabConfig) -> dict[str, Any]:
    """What the g4 benchmark needs to submit and judge its TrainJob or PyTorchJob."""
    t = cfg.training_operator
    v2 = t.api == "trainer-v2"
    return {
        "api": t.api,
        "namespace": t.namespace,
        "workers": t.workers,
        "world_size": t.workers,
        "gpus_per_worker": t.gpus_per_worker,
        "clean_pod_policy": t.clean_pod_policy,
        "runtime": TORCH_RUNTIME if v2 else None,
        "image": versions.PYTORCH_IMAGE,
        "operator_version": versions.KUBEFLOW_TRAINER.version if v2 else versions.TRAINING_OPERATOR_VERSION,
    }


def checkpoints_args(cfg: LabConfig, cluster: pulumi.Resource | None = None) -> CheckpointsArgs:
    """The checkpoints as configured; on an existing cluster in the user's own bucket (cluster.bucket)."""
    c = cfg.checkpoints
    return CheckpointsArgs(
        stack_id=stack_id(cfg),
        project=cfg.project,
        region=cfg.region,
        billing_labels=cfg.billing_labels,
        namespace=c.namespace,
        service_account=c.service_account,
        delete_after_days=c.delete_after_days,
        cluster=cluster,
        bucket=cfg.cluster.bucket,
    )


def checkpoint_summary(cfg: LabConfig, bucket: pulumi.Input[str]) -> dict[str, Any]:
    c = cfg.checkpoints
    return {
        "bucket": bucket,
        "namespace": c.namespace,
        "service_account": c.service_account,
        "interval_s": c.interval_s,
        "delete_after_days": c.delete_after_days,
        "image": versions.PYTORCH_IMAGE,
    }


def tenancy_args(cfg: LabConfig, kueue: pulumi.Resource | None = None) -> TenancyArgs:
    return TenancyArgs(
        stack_id=stack_id(cfg),
        tenants=[Tenant(**t.model_dump()) for t in cfg.tenancy.tenants],
        kueue=kueue,
        local_queue=cfg.kueue.local_queue,
        cluster_queue=cfg.kueue.cluster_queue,
    )


def compose(ctx: PlatformContext) -> None:
    """Register these features' components and add their stack outputs to ctx.outputs."""
    cfg, out, target = ctx.cfg, ctx.outputs, ctx.target
    placement, system = target.placement, target.placement.system_node_selector

    if cfg.observability.enabled:
        obs = Observability("observability", observability_args(cfg, placement, target.charts), opts=ctx.k8s_opts())
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
            operator = gpu_operator_args(cfg, system, ctx.ready.get("prometheus"))
            GpuOperator("gpu-operator", operator, opts=ctx.k8s_opts())
            out.namespaces.append("gpu-operator")
            out.versions["gpu-operator"] = versions.GPU_OPERATOR.version
        out.gpu_sharing = sharing_summary(cfg)
        out.benchmark["gpu_sharing"] = sharing_summary(cfg)

    if cfg.kueue.enabled:
        queues = kueue_args(cfg, placement, ctx.ready.get("prometheus"), target.charts)
        kueue = Kueue("kueue", queues, opts=ctx.k8s_opts())
        ctx.ready["kueue"] = kueue
        out.namespaces.extend([KUEUE_NAMESPACE, JOBSET_NAMESPACE, cfg.kueue.namespace])
        out.versions.update({"kueue": versions.KUEUE.version, "jobset": versions.JOBSET.version})
        out.benchmark["kueue"] = queue_summary(cfg)

    if cfg.training_operator.enabled:
        t = cfg.training_operator
        kueue_jobset = ctx.ready["kueue"].jobset if "kueue" in ctx.ready else None
        TrainingOperator(
            "training-operator",
            TrainingOperatorArgs(stack_id=ctx.stack_id, namespace=t.namespace, system_node_selector=system, api=t.api,
                                 jobset=kueue_jobset, charts=target.charts),  # fmt: skip
            opts=ctx.k8s_opts(),
        )
        out.namespaces.extend([OPERATOR_NAMESPACE[t.api], t.namespace])
        if t.api == "trainer-v2":
            # The chart's JobSet dependency is 0.12.0, the version Kueue's JobSet release pins too.
            out.versions.update({"kubeflow-trainer": versions.KUBEFLOW_TRAINER.version, "jobset": versions.JOBSET.version})
        else:
            out.versions["training-operator"] = versions.TRAINING_OPERATOR_VERSION
        out.benchmark["training"] = job_summary(cfg)

    if cfg.checkpoints.enabled:
        ckpt = Checkpoints("checkpoints", checkpoints_args(cfg, ctx.workload_identity_pool), opts=ctx.k8s_opts())
        out.artifact_bucket = ckpt.bucket_name
        out.namespaces.append(cfg.checkpoints.namespace)
        out.benchmark["checkpoints"] = checkpoint_summary(cfg, ckpt.bucket_name)

    if cfg.tenancy.enabled:
        Tenancy("tenancy", tenancy_args(cfg, ctx.ready.get("kueue")), opts=ctx.k8s_opts())
        out.namespaces.extend(t.name for t in cfg.tenancy.tenants)
        out.benchmark["tenancy"] = {
            "tenants": [t.name for t in cfg.tenancy.tenants],
            "priority_classes": {name: value for name, (value, _, _) in PRIORITY_CLASSES.items()},
        }
