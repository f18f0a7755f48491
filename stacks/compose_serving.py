"""Composes the serving features of a lab onto the base platform (see stacks/context.py):
Knative Serving + KServe (g5, g7), vLLM (g6), Argo Workflows (g7)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pulumi

from components import argo, cert_manager, keda, kserve, versions, vllm
from components.helm_release import ChartSource
from components.image_cache import DockerHubLogin, ImageCache, ImageCacheArgs, cached_image
from components.naming import resource_name
from components.knative import KnativeArgs, KnativeServing
from components.observability import PROMETHEUS
from components.placement import GpuPlacement, Placement
from stacks.config import LabConfig
from stacks.context import PlatformContext, stack_id


def apis(cfg: LabConfig) -> list[str]:
    """Google APIs these features need besides the base ones."""
    v = cfg.vllm
    needed = ["storage.googleapis.com"] if cfg.argo.enabled or (v.enabled and v.weights == "gcs") else []
    if v.enabled and v.image_streaming:
        # Image streaming reads images through the Container File System API, from Artifact Registry.
        needed += ["artifactregistry.googleapis.com", "containerfilesystem.googleapis.com"]
        if v.dockerhub_token_secret is not None:
            needed.append("secretmanager.googleapis.com")  # the cache's Docker Hub token
    return needed


def cluster_overrides(cfg: LabConfig) -> dict[str, Any]:
    """GkeClusterArgs fields these features decide: the GCS FUSE CSI add-on for weights from a bucket."""
    return {"gcs_fuse": True} if cfg.vllm.enabled and cfg.vllm.weights == "gcs" else {}


def gpu_pool_overrides(cfg: LabConfig) -> dict[str, Any]:
    """GpuNodePoolArgs fields these features decide: image streaming on the GPU pool."""
    return {"image_streaming": True} if cfg.vllm.enabled and cfg.vllm.image_streaming else {}


def image_cache_args(cfg: LabConfig, node_email: pulumi.Input[str]) -> ImageCacheArgs:
    v = cfg.vllm
    login = None if v.dockerhub_username is None or v.dockerhub_token_secret is None else DockerHubLogin(
        username=v.dockerhub_username, password_secret_version=v.dockerhub_token_secret)  # fmt: skip
    return ImageCacheArgs(project=cfg.project, region=cfg.region, repository_id=resource_name(stack_id(cfg), "dockerhub"),
                          labels=cfg.billing_labels, reader_email=node_email, login=login)  # fmt: skip


def inference_service_args(cfg: LabConfig) -> kserve.InferenceServiceArgs:
    """The g5 example as configured: `serving`'s model, or the canary's while one rolls out."""
    ks = cfg.kserve
    return kserve.InferenceServiceArgs(
        namespace=ks.namespace,
        name=ks.name,
        runtime=ks.runtime,
        model_format=ks.model_format,
        served_model=ks.served_model(),
        storage_uri=ks.storage_uri(),
        min_replicas=ks.min_replicas,
        max_replicas=ks.max_replicas,
        scale_metric=ks.scale_metric,
        scale_target=ks.scale_target,
        progress_deadline_min=ks.progress_deadline_min,
        scale_to_zero_retention_s=ks.scale_to_zero_retention_s,
        gpu=ks.gpu,
        canary_traffic_percent=ks.canary_traffic_percent if ks.canary is not None else None,
    )


def kserve_args(
    cfg: LabConfig, placement: Placement, after: list[pulumi.Resource], charts: ChartSource = "install"
) -> kserve.KServeArgs:
    return kserve.KServeArgs(
        stack_id=stack_id(cfg),
        domain=cfg.kserve.domain,
        placement=placement,
        example=inference_service_args(cfg) if cfg.kserve.deploy_example else None,
        after=after,
        charts=charts,
    )


def _kserve(ctx: PlatformContext) -> kserve.KServe:
    cfg, ks, target = ctx.cfg, ctx.cfg.kserve, ctx.target
    knative = KnativeServing(
        "knative",
        KnativeArgs(
            domain=ks.domain,
            progress_deadline_min=ks.progress_deadline_min,
            request_timeout_s=ks.request_timeout_s,
            scale_to_zero_grace_s=ks.scale_to_zero_grace_s,
            charts=target.charts,
        ),
        opts=ctx.k8s_opts(),
    )
    args = kserve_args(cfg, target.placement, after=[knative], charts=target.charts)
    component = kserve.KServe("kserve", args, opts=ctx.k8s_opts())
    out = ctx.outputs
    out.versions.update(
        {
            "kserve": versions.KSERVE_RESOURCES.version,
            "knative_serving": versions.KNATIVE_SERVING_VERSION,
            "cert_manager": versions.CERT_MANAGER.version,
        }
    )
    out.namespaces.extend([*knative.namespaces, cert_manager.NAMESPACE, kserve.NAMESPACE])
    if args.example is not None:
        out.namespaces.append(ks.namespace)
        out.endpoints["kserve"] = kserve.endpoint(args.example, ks.domain, knative.gateway)
        out.benchmark.update(
            {
                "inference_service": ks.name,
                "inference_namespace": ks.namespace,
                "model_versions": dict(ks.versions),
                "serving_version": ks.serving,
                "canary_version": ks.canary,
                "canary_traffic_percent": ks.canary_traffic_percent if ks.canary else 0,
                "min_replicas": ks.min_replicas,
                "gpu_predictor": ks.gpu,
                "runtime": ks.runtime,
                "served_model": ks.served_model(),
                "max_replicas": ks.max_replicas,
                "scale_metric": ks.scale_metric,
                "scale_target": ks.scale_target,
                "scale_to_zero_grace_s": ks.scale_to_zero_grace_s,
                "scale_to_zero_retention_s": ks.scale_to_zero_retention_s,
                "request_timeout_s": ks.request_timeout_s,
            }
        )
        if ks.runtime == "triton":
            out.versions["triton"] = versions.TRITON_IMAGE.rsplit(":", 1)[1]
    ctx.ready["kserve"] = component
    return component


def vllm_args(
    cfg: LabConfig,
    placement: GpuPlacement,
    hf_token: pulumi.Output[str] | None = None,
    prometheus: pulumi.Resource | None = None,
    *,
    image: str | None = None,
    after: list[pulumi.Resource] | None = None,
    system_node_selector: dict[str, str] | None = None,
    cluster: pulumi.Resource | None = None,
    keda_release: pulumi.Resource | None = None,
) -> vllm.VllmServerArgs:
    """The server as configured; `image` is the vLLM image's reference (its Artifact Registry cache with
    image streaming; default: the pinned image of `vllm.cuda`), `after` what it waits for,
    `system_node_selector` where the weights' copy runs, `keda_release` what its ScaledObject waits for."""
    v = cfg.vllm
    weights = None
    if v.weights == "gcs":
        weights = vllm.WeightsBucket(project=cfg.project, region=cfg.region, billing_labels=cfg.billing_labels,
                                     system_node_selector=system_node_selector or {}, cluster=cluster)  # fmt: skip
    return vllm.VllmServerArgs(
        stack_id=stack_id(cfg),
        placement=placement,
        namespace=v.namespace,
        model=v.model,
        dtype=v.dtype,
        max_model_len=v.max_model_len,
        gpu_memory_utilization=v.gpu_memory_utilization,
        max_num_seqs=v.max_num_seqs,
        startup_timeout_min=v.startup_timeout_min,
        cpu=v.cpu,
        quantization=v.quantization,
        enable_prefix_caching=v.enable_prefix_caching,
        hf_token=hf_token,
        prometheus=prometheus,
        scrape_interval_s=cfg.observability.scrape_interval_s,
        image=image or versions.VLLM_IMAGES[v.cuda],
        weights=weights,
        after=list(after or []),
        autoscaling=scaling(cfg),
        keda=keda_release,
    )


def scaling(cfg: LabConfig) -> keda.Scaling | None:
    """The vLLM server's autoscaling as configured, reading the in-cluster Prometheus; None: one replica."""
    a = cfg.autoscaling
    if not a.enabled:
        return None
    prometheus = f"http://{PROMETHEUS['service']}.{PROMETHEUS['namespace']}.svc:{PROMETHEUS['port']}"
    return keda.Scaling(
        metric=a.metric,
        target=a.target,
        min_replicas=a.min_replicas,
        max_replicas=a.max_replicas,
        polling_interval_s=a.polling_interval_s,
        scale_up_stabilization_s=a.scale_up_stabilization_s,
        scale_down_stabilization_s=a.scale_down_stabilization_s,
        prometheus_url=prometheus,
    )


def vllm_benchmark(cfg: LabConfig) -> dict[str, Any]:
    """Every server parameter the g6 benchmark reads, and its sweep grid."""
    v = cfg.vllm
    return {
        "model": v.model,
        "gpu": cfg.gpu_accelerator.removeprefix("nvidia-"),  # the benchmark's GPU catalogue name (l4)
        "dtype": v.dtype,
        "max_num_seqs": v.max_num_seqs,
        "max_model_len": v.max_model_len,
        "gpu_memory_utilization": v.gpu_memory_utilization,
        "quantization": v.quantization,
        "image": versions.VLLM_IMAGES[v.cuda],
        "image_streaming": v.image_streaming,
        "weights": v.weights,
        "sweep": {"max_num_seqs": v.sweep_max_num_seqs, "concurrency": v.sweep_concurrency},
        # None: one fixed replica. Else what the autoscale experiment reads: the policy and its query.
        "autoscaling": _scaling_output(cfg),
    }


def _scaling_output(cfg: LabConfig) -> dict[str, Any] | None:
    s = scaling(cfg)
    if s is None:
        return None
    policy = {k: v for k, v in dataclasses.asdict(s).items() if k not in ("metric", "prometheus_url")}
    return {"scaled_object": vllm.NAME, "metric": f"vllm:{s.metric}", "query": keda.query(s, cfg.vllm.namespace, vllm.NAME),
            **policy}  # fmt: skip


def argo_args(
    cfg: LabConfig,
    system_node_selector: dict[str, str],
    cluster: pulumi.Resource | None = None,
    serving: pulumi.Resource | None = None,
    charts: ChartSource = "install",
) -> argo.ArgoWorkflowsArgs:
    """The pipeline as configured; on an existing cluster its artefacts go to the user's own bucket
    (cluster.bucket)."""
    a = cfg.argo
    return argo.ArgoWorkflowsArgs(
        stack_id=stack_id(cfg),
        project=cfg.project,
        region=cfg.region,
        billing_labels=cfg.billing_labels,
        namespace=a.namespace,
        workflow_namespace=a.workflow_namespace,
        template_name=a.template_name,
        model_name=a.model_name,
        fail_step=a.fail_step,
        retry_limit=a.retry_limit,
        retry_policy=a.retry_policy,
        artifact_retention_days=a.artifact_retention_days,
        system_node_selector=system_node_selector,
        cluster=cluster,
        kserve=serving,
        bucket=cfg.cluster.bucket,
        charts=charts,
    )


def compose(ctx: PlatformContext) -> None:
    """Register these features' components and add their stack outputs to ctx.outputs."""
    cfg, out, target = ctx.cfg, ctx.outputs, ctx.target
    serving = _kserve(ctx) if cfg.kserve.enabled else None
    if cfg.vllm.enabled:
        prometheus = ctx.ready.get("prometheus")  # set by the platform group when observability is on
        image, after = versions.VLLM_IMAGES[cfg.vllm.cuda], []
        if cfg.vllm.image_streaming:
            cloud = ctx.google
            cache_args = image_cache_args(cfg, cloud.cluster.node_service_account.email)
            cache = ImageCache("vllm-image-cache", cache_args, opts=pulumi.ResourceOptions(depends_on=[cloud.apis]))
            image, after = cached_image(cache_args, image), cache.grants
        release = None
        if cfg.autoscaling.enabled:
            scaler = keda.Keda("keda", keda.KedaArgs(stack_id(cfg), target.placement.system_node_selector, target.charts),
                               opts=ctx.k8s_opts())  # fmt: skip
            release = scaler.release
            out.namespaces.append(keda.NAMESPACE)
            out.versions["keda"] = versions.KEDA.version
        server = vllm_args(cfg, target.placement.gpu, ctx.secrets.hf_token, prometheus, image=image, after=after,
                           system_node_selector=target.placement.system_node_selector,
                           cluster=ctx.workload_identity_pool, keda_release=release)  # fmt: skip
        vllm.VllmServer("vllm", server, opts=ctx.k8s_opts())
        out.namespaces.append(cfg.vllm.namespace)
        out.endpoints["vllm"] = vllm.endpoint(server)
        out.versions["vllm"] = server.image.rsplit(":", 1)[1]
        out.benchmark.update(vllm_benchmark(cfg))
    if cfg.argo.enabled and serving is not None:  # the config check guarantees KServe with Argo
        pipeline = argo_args(cfg, target.placement.system_node_selector, ctx.workload_identity_pool, serving, target.charts)
        workflows = argo.ArgoWorkflows("argo", pipeline, opts=ctx.k8s_opts())
        out.artifact_bucket = workflows.bucket_name
        out.namespaces.extend([cfg.argo.namespace, cfg.argo.workflow_namespace])
        out.endpoints["argo"] = argo.endpoint(pipeline)
        out.versions["argo_workflows_chart"] = versions.ARGO_WORKFLOWS.version
        out.benchmark.update(argo.benchmark(pipeline, workflows.bucket_name))
