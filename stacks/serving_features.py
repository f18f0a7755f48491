"""Config of the serving and pipeline features of labs g5-g7: KServe (Knative mode), vLLM, Argo Workflows.

Each model is one object key of the stack file (`gke-ml-labs:vllm: {...}`); `check` holds the rules
that span several keys (GPU demand against the pool, a model's context limit, Argo needing KServe).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from facts.catalogue import MODELS
from stacks.platform_features import DNS_LABEL, PREFIX, PoolCapacity

# Quantization methods the pinned vLLM accepts (`--quantization`) that also run on an L4 (Ada,
# sm_89): names from vLLM's QuantizationMethods; others there target TPUs, CPUs or other vendors.
Quantization = Literal["awq", "awq_marlin", "gptq", "gptq_marlin", "fp8", "bitsandbytes", "compressed-tensors"]
# KServe's public example models (the canary sample of KServe v0.20.0 uses these two).
SKLEARN_IRIS_V1 = "gs://kfserving-examples/models/sklearn/1.0/model"
SKLEARN_IRIS_V2 = "gs://kfserving-examples/models/sklearn/1.0/model-2"
# While Knative shifts traffic (a canary, or any rollout) the old and the new revision both run.
LIVE_REVISIONS_IN_ROLLOUT = 2


class _Feature(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    enabled: bool = False


class KServe(_Feature):
    """KServe in Knative mode (scale to zero, canary) with cert-manager and Knative Serving + Kourier.

    The g5 InferenceService serves `versions[serving]`; setting `canary` to another version rolls that
    one out to `canary_traffic_percent` of the requests while `serving` keeps the rest (KServe keeps
    the last fully rolled-out revision). A canary therefore needs a previous `up` that rolled out
    `serving`: first `pulumi up` with canary unset, then set canary and `up` again.
    """

    namespace: str = Field("models", pattern=DNS_LABEL, description="namespace of the InferenceService")
    deploy_example: bool = Field(True, description="deploy the g5 InferenceService (g7's workflow deploys its own)")
    name: str = Field("iris", pattern=DNS_LABEL, description="InferenceService name")
    model_format: Literal["sklearn", "xgboost"] = "sklearn"
    versions: dict[str, str] = Field(
        default_factory=lambda: {"v1": SKLEARN_IRIS_V1, "v2": SKLEARN_IRIS_V2},
        description="model version name -> storageUri",
    )
    serving: str = Field("v1", description="the version that holds the traffic not sent to the canary")
    canary: str | None = Field(None, description="the version under test; None: no canary")
    canary_traffic_percent: int = Field(10, ge=0, le=100, description="share of requests the canary gets")
    min_replicas: int = Field(0, ge=0, description="0: scale to zero when idle")
    max_replicas: int = Field(1, ge=1, le=8)
    gpu: bool = Field(False, description="predictors request one GPU each (needs quota for two revisions)")
    domain: str = Field("example.com", description="Knative route domain; reached through the ClusterIP gateway")
    # Knative's defaults (10 min progress deadline, 5 min request timeout) expire before a GPU node
    # from zero is ready (up to ~15 min, kserve#1247/#1641).
    progress_deadline_min: int = Field(20, ge=10, le=60, description="Knative config-deployment progress-deadline")
    request_timeout_s: int = Field(1200, ge=300, le=3600, description="Knative revision timeout (cold start included)")
    scale_to_zero_grace_s: int = Field(60, ge=6, le=600, description="Knative scale-to-zero-grace-period")

    def storage_uri(self) -> str:
        """The storageUri the InferenceService spec names: the canary's when one is set."""
        return self.versions[self.canary or self.serving]


class Vllm(_Feature):
    """A vLLM OpenAI-compatible server on the L4. Every field maps to one server flag."""

    namespace: str = Field("llm", pattern=DNS_LABEL)
    # 1.5B in bf16 is ~3.1 GB of weights: ~16 GB of the L4 is left for KV cache at 0.9 utilisation.
    model: str = Field("Qwen/Qwen2.5-1.5B-Instruct", description="Hugging Face model id (--model)")
    max_position_embeddings: int | None = Field(
        None, ge=1, description="the model's context limit; needed only for models outside the catalogue"
    )
    dtype: Literal["auto", "bfloat16", "float16"] = "bfloat16"
    max_model_len: int = Field(4096, ge=128, description="--max-model-len")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=0.95, description="--gpu-memory-utilization")
    # vLLM's own default on GPUs under 70 GiB is 256.
    max_num_seqs: int = Field(256, ge=1, le=4096, description="--max-num-seqs (the g6 sweep changes it)")
    quantization: Quantization | None = Field(None, description="--quantization; None: the checkpoint's own")
    startup_timeout_min: int = Field(30, ge=5, le=120, description="image pull + model download allowance")
    sweep_max_num_seqs: list[int] = Field(default_factory=lambda: [16, 32, 64, 128, 256])
    sweep_concurrency: list[int] = Field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64, 128])

    def context_limit(self) -> int | None:
        """The model's max_position_embeddings: from the catalogue, else the configured one."""
        spec = MODELS.get(self.model)
        return spec.max_position_embeddings if spec else self.max_position_embeddings


class Argo(_Feature):
    """Argo Workflows (controller + server) and the g7 train -> register -> deploy WorkflowTemplate."""

    namespace: str = Field("argo", pattern=DNS_LABEL, description="controller and server")
    workflow_namespace: str = Field("pipelines", pattern=DNS_LABEL, description="where the workflows run")
    template_name: str = Field("train-register-deploy", pattern=DNS_LABEL)
    model_name: str = Field("iris-argo", pattern=DNS_LABEL, description="InferenceService the deploy step creates")
    fail_step: Literal["none", "train", "register", "deploy"] = Field(
        "none", description="default of the workflow parameter that makes one step exit non-zero"
    )
    retry_limit: int = Field(1, ge=0, le=10, description="retryStrategy.limit of each step")
    retry_policy: Literal["Always", "OnFailure", "OnError", "OnTransientError"] = "OnFailure"
    artifact_retention_days: int = Field(7, ge=1, le=365, description="bucket objects are deleted after this")


def _kserve_problems(ks: KServe) -> list[str]:
    if not ks.enabled:
        return []
    problems = []
    names = ", ".join(ks.versions) or "none"
    if ks.serving not in ks.versions:
        problems.append(f"{PREFIX}:kserve.serving {ks.serving!r} is not one of kserve.versions ({names})")
    if ks.canary is not None:
        if ks.canary not in ks.versions:
            problems.append(f"{PREFIX}:kserve.canary {ks.canary!r} is not one of kserve.versions ({names})")
        elif ks.canary == ks.serving:
            problems.append(
                f"{PREFIX}:kserve.canary {ks.canary!r} equals kserve.serving: a canary needs another version"
            )
    if ks.min_replicas > ks.max_replicas:
        problems.append(f"{PREFIX}:kserve.min_replicas ({ks.min_replicas}) is above max_replicas ({ks.max_replicas})")
    return problems


def gpu_demand(kserve: KServe, vllm: Vllm) -> dict[str, int]:
    """GPUs each enabled serving feature may hold at once (shared GPUs count one each)."""
    demand = {}
    if kserve.enabled and kserve.deploy_example and kserve.gpu:
        demand["kserve"] = LIVE_REVISIONS_IN_ROLLOUT * kserve.max_replicas
    if vllm.enabled:
        # One replica; the Deployment uses the Recreate strategy, so an update never needs a second GPU.
        demand["vllm"] = 1
    return demand


def _gpu_problems(kserve: KServe, vllm: Vllm, pool: PoolCapacity) -> list[str]:
    demand = gpu_demand(kserve, vllm)
    total, capacity = sum(demand.values()), pool.total
    if total <= capacity:
        return []
    parts = " + ".join(f"{k} {v}" for k, v in demand.items())
    hints = "raise gke-ml-labs:gpu_max_nodes, enable gke-ml-labs:gpu_sharing (replicas >= 2)"
    if "kserve" in demand:
        hints += ", or set gke-ml-labs:kserve.gpu: false (CPU predictors)"
    return [
        f"{PREFIX}:kserve.gpu / {PREFIX}:vllm: the serving GPU demand ({parts} = {total}, a KServe GPU "
        f"predictor counting {LIVE_REVISIONS_IN_ROLLOUT} x max_replicas as two revisions run during a canary or "
        f"rollout) exceeds what the pool can hold: {capacity} nvidia.com/gpu (gpu_max_nodes {pool.max_nodes} x "
        f"{pool.gpus_per_node} GPU(s) per node x sharing replicas), so {hints}"
    ]


def _vllm_problems(v: Vllm) -> list[str]:
    if not v.enabled:
        return []
    limit = v.context_limit()
    if limit is None:
        return [
            f"{PREFIX}:vllm.model {v.model!r} is not in the model catalogue ({', '.join(MODELS)}), so set "
            f"{PREFIX}:vllm.max_position_embeddings to its config.json value so max_model_len can be checked"
        ]
    if v.max_model_len > limit:
        return [
            f"{PREFIX}:vllm.max_model_len {v.max_model_len} is above {v.model}'s max_position_embeddings "
            f"({limit}), allowed: 128..{limit}"
        ]
    return []


def _argo_problems(argo: Argo, kserve: KServe) -> list[str]:
    if argo.enabled and not kserve.enabled:
        return [
            f"{PREFIX}:argo is enabled but {PREFIX}:kserve is not: the workflow's deploy step creates a KServe "
            "InferenceService, so set kserve.enabled: true"
        ]
    if argo.enabled and argo.workflow_namespace == argo.namespace:
        return [f"{PREFIX}:argo.workflow_namespace must differ from argo.namespace (the controller's)"]
    return []


def check(*, kserve: KServe, vllm: Vllm, argo: Argo, pool: PoolCapacity) -> list[str]:
    """Cross-field rules of these features; each problem names its keys and what is allowed."""
    problems = _kserve_problems(kserve) + _vllm_problems(vllm)
    return problems + _gpu_problems(kserve, vllm, pool) + _argo_problems(argo, kserve)
