"""Composes the serving features of a lab onto the base platform (see stacks/context.py):
Knative Serving + KServe (g5, g7), vLLM (g6), Argo Workflows (g7)."""

from __future__ import annotations

from components import argo, kserve, versions, vllm
from components.knative import KnativeArgs, KnativeServing
from stacks.config import LabConfig
from stacks.context import PlatformContext


def apis(cfg: LabConfig) -> list[str]:
    """Google APIs these features need besides the base ones."""
    return ["storage.googleapis.com"] if cfg.argo.enabled else []


def _kserve(ctx: PlatformContext) -> kserve.KServe:
    cfg, ks = ctx.cfg, ctx.cfg.kserve
    knative = KnativeServing(
        "knative",
        KnativeArgs(
            domain=ks.domain,
            progress_deadline_min=ks.progress_deadline_min,
            request_timeout_s=ks.request_timeout_s,
            scale_to_zero_grace_s=ks.scale_to_zero_grace_s,
        ),
        opts=ctx.k8s_opts(),
    )
    component = kserve.KServe(
        "kserve", kserve.KServeArgs(cfg=cfg, placement=ctx.gpu.placement, after=[knative]), opts=ctx.k8s_opts()
    )
    out = ctx.outputs
    out.versions.update(
        {
            "kserve": versions.KSERVE_RESOURCES.version,
            "knative_serving": versions.KNATIVE_SERVING_VERSION,
            "cert_manager": versions.CERT_MANAGER.version,
        }
    )
    out.namespaces.extend(["knative-serving", "kourier-system", "cert-manager", kserve.NAMESPACE])
    if ks.deploy_example:
        out.namespaces.append(ks.namespace)
        out.endpoints["kserve"] = kserve.endpoint(cfg, knative.gateway)
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
            }
        )
    ctx.ready["kserve"] = component
    return component


def compose(ctx: PlatformContext) -> None:
    """Register these features' components and add their stack outputs to ctx.outputs."""
    cfg, out = ctx.cfg, ctx.outputs
    serving = _kserve(ctx) if cfg.kserve.enabled else None
    if cfg.vllm.enabled:
        prometheus = ctx.ready.get("prometheus")  # set by the platform group when observability is on
        vllm.VllmServer(
            "vllm",
            vllm.VllmServerArgs(
                cfg=cfg,
                placement=ctx.gpu.placement,
                hf_token=ctx.secrets.hf_token,
                prometheus=prometheus,
                scrape_interval_s=cfg.observability.scrape_interval_s,
            ),
            opts=ctx.k8s_opts(),
        )
        out.namespaces.append(cfg.vllm.namespace)
        out.endpoints["vllm"] = vllm.endpoint(cfg)
        out.versions["vllm"] = versions.VLLM_IMAGE.rsplit(":", 1)[1]
        out.benchmark.update(vllm.benchmark(cfg))
    if cfg.argo.enabled and serving is not None:  # the config check guarantees KServe with Argo
        workflows = argo.ArgoWorkflows(
            "argo", argo.ArgoWorkflowsArgs(cfg=cfg, cluster=ctx.cluster.cluster, kserve=serving), opts=ctx.k8s_opts()
        )
        out.artifact_bucket = workflows.bucket.name
        out.namespaces.extend([cfg.argo.namespace, cfg.argo.workflow_namespace])
        out.endpoints["argo"] = argo.endpoint(cfg)
        out.versions["argo_workflows_chart"] = versions.ARGO_WORKFLOWS.version
        out.benchmark.update(argo.benchmark(cfg, workflows.bucket.name))
