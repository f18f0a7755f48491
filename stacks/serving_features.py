"""Config of the serving and pipeline features of labs g5-g7: KServe (Knative mode), vLLM, Argo Workflows.

Each model is one object key of the stack file (`gke-ml-labs:vllm: {...}`); `check` holds the rules
that span several keys (GPU demand against the pool, a model's context limit, Argo needing KServe).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from components.versions import VLLM_CUDA_MIN_DRIVER_BRANCH, VLLM_VERSION
from facts.catalogue import MODELS
from facts.gke_drivers import DRIVER_BRANCH
from stacks.platform_features import DNS_LABEL, PREFIX, NodeDriver, PoolCapacity

# Quantization methods the pinned vLLM accepts (`--quantization`) that also run on an L4 (Ada,
# sm_89): names from vLLM's QuantizationMethods; others there target TPUs, CPUs or other vendors.
# v0.33.0 and v0.34.0 no longer list bitsandbytes (tests/data/vllm/v0.34.0/quantization-methods.txt).
Quantization = Literal["awq", "awq_marlin", "gptq", "gptq_marlin", "fp8", "compressed-tensors"]
# KServe's public example models (the canary sample of KServe v0.20.0 uses these two).
SKLEARN_IRIS_V1 = "gs://kfserving-examples/models/sklearn/1.0/model"
SKLEARN_IRIS_V2 = "gs://kfserving-examples/models/sklearn/1.0/model-2"
# KServe's public TorchScript CIFAR-10 model for Triton (259 KB, no credentials): KServe v0.20.0's own
# e2e test (test/e2e/predictor/test_triton.py) serves the repository with modelFormat triton. Chosen
# over an ONNX model from g7's pipeline because g5 has no bucket and g7 writes a sklearn joblib. The
# bucket holds this one Triton model, published twice: as a model repository, and as the bare model
# folder that KServe's multi-model Triton sample loads (docs/samples/multimodelserving/triton). v1 and
# v2 name those two copies: the weights are the same, so a canary between them shows the traffic split
# and each revision's scaling, not a model change (point kserve.versions.v2 at your own repository).
TRITON_CIFAR10_REPOSITORY = "gs://kfserving-examples/models/torchscript"
TRITON_CIFAR10_FOLDER = "gs://kfserving-examples/models/torchscript/cifar10"
# While Knative shifts traffic (a canary, or any rollout) the old and the new revision both run.
LIVE_REVISIONS_IN_ROLLOUT = 2
Runtime = Literal["sklearn", "triton"]
# What each runtime serves unless the stack file says otherwise.
_RUNTIME_DEFAULTS: dict[str, dict[str, object]] = {
    "sklearn": {"name": "iris", "versions": {"v1": SKLEARN_IRIS_V1, "v2": SKLEARN_IRIS_V2}, "gpu": False,
                "progress_deadline_min": 20, "request_timeout_s": 1200},
    # A Triton revision from zero waits for a GPU node (up to ~15 min) and pulls a multi-GB image.
    "triton": {"name": "cifar10", "versions": {"v1": TRITON_CIFAR10_REPOSITORY, "v2": TRITON_CIFAR10_FOLDER},
               "gpu": True, "progress_deadline_min": 30, "request_timeout_s": 1800},
}


class _Feature(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    enabled: bool = Field(False, description="switch the feature on (the labs that need it switch it on themselves)")


class KServe(_Feature):
    """KServe in Knative mode (scale to zero, canary) with cert-manager and Knative Serving + Kourier.

    The g5 InferenceService serves `versions[serving]`; setting `canary` to another version rolls that
    one out to `canary_traffic_percent` of the requests while `serving` keeps the rest (KServe keeps
    the last fully rolled-out revision). A canary therefore needs a previous `up` that rolled out
    `serving`: first `pulumi up` with canary unset, then set canary and `up` again.

    `runtime` picks the model server: KServe's sklearn server (CPU by default) or NVIDIA Triton on the
    L4; the name, model versions, GPU and timeouts default to what suits each (`_RUNTIME_DEFAULTS`).
    The autoscaler (Knative's KPA) keeps `scale_target` per replica of `scale_metric`.
    """

    namespace: str = Field("models", pattern=DNS_LABEL, description="namespace of the InferenceService")
    deploy_example: bool = Field(True, description="deploy the g5 InferenceService (g7's workflow deploys its own)")
    runtime: Runtime = Field("sklearn", description="sklearn: KServe's sklearn/xgboost server; triton: NVIDIA Triton")
    name: str = Field(pattern=DNS_LABEL, description="InferenceService name (iris; cifar10 with triton)")
    model_format: Literal["sklearn", "xgboost"] = Field(
        "sklearn", description="runtime sklearn only: the model format the KServe server loads"
    )
    triton_model: str = Field(
        "cifar10", pattern=DNS_LABEL, description="runtime triton only: the model's folder in the repository"
    )
    versions: dict[str, str] = Field(description="model version name -> storageUri")
    serving: str = Field("v1", description="the version that holds the traffic not sent to the canary")
    canary: str | None = Field(None, description="the version under test; None: no canary")
    canary_traffic_percent: int = Field(10, ge=0, le=100, description="share of requests the canary gets")
    min_replicas: int = Field(0, ge=0, description="0: scale to zero when idle")
    max_replicas: int = Field(1, ge=1, le=16, description="the autoscaler's upper bound")
    scale_metric: Literal["concurrency", "rps"] = Field(
        "rps", description="what Knative's autoscaler keeps per replica: in-flight requests or requests/s"
    )
    scale_target: int = Field(10, ge=1, le=1000, description="per replica, of scale_metric")
    gpu: bool = Field(description="predictors request one GPU each (sklearn: false, triton: true)")
    domain: str = Field("example.com", description="Knative route domain; reached through the ClusterIP gateway")
    # Knative's defaults (10 min progress deadline, 5 min request timeout) expire before a GPU node
    # from zero is ready (up to ~15 min, kserve#1247/#1641).
    progress_deadline_min: int = Field(ge=10, le=60, description="Knative progress deadline (config and revision)")
    request_timeout_s: int = Field(ge=300, le=3600, description="Knative revision timeout (cold start included)")
    scale_to_zero_grace_s: int = Field(60, ge=6, le=600, description="Knative scale-to-zero-grace-period")
    scale_to_zero_retention_s: int = Field(
        0, ge=0, le=3600, description="Knative scale-to-zero-pod-retention-period: the last pod stays this long"
    )

    @model_validator(mode="before")
    @classmethod
    def _runtime_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        runtime = data.get("runtime", "sklearn")
        return {**_RUNTIME_DEFAULTS.get(runtime, _RUNTIME_DEFAULTS["sklearn"]), **data}

    def storage_uri(self) -> str:
        """The storageUri the InferenceService spec names: the canary's when one is set."""
        return self.versions[self.canary or self.serving]

    def served_model(self) -> str:
        """The name the model server serves under: Triton's model folder, else the InferenceService's."""
        return self.triton_model if self.runtime == "triton" else self.name


class Vllm(_Feature):
    """A vLLM OpenAI-compatible server on the L4: its server flags, its pod's CPU, its image and weights."""

    namespace: str = Field("llm", pattern=DNS_LABEL, description="namespace of the vLLM server")
    # 1.5B in bf16 is ~3.1 GB of weights: ~16 GB of the L4 is left for KV cache at 0.9 utilisation.
    model: str = Field("Qwen/Qwen2.5-1.5B-Instruct", description="Hugging Face model id (vllm serve's positional "
                       "model argument)")  # fmt: skip
    max_position_embeddings: int | None = Field(
        None, ge=1, description="the model's context limit; needed only for models outside the catalogue"
    )
    dtype: Literal["auto", "bfloat16", "float16"] = Field("bfloat16", description="--dtype")
    max_model_len: int = Field(4096, ge=128, description="--max-model-len")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=0.95, description="--gpu-memory-utilization")
    # vLLM's own default on GPUs under 70 GiB is 256.
    max_num_seqs: int = Field(256, ge=1, le=4096, description="--max-num-seqs (the g6 sweep changes it)")
    quantization: Quantization | None = Field(None, description="--quantization; None: the checkpoint's own")
    cuda: Literal["13", "12"] = Field(
        "13", description="the image's CUDA: 13 (the release's own tag, driver 580+) or 12 (its -cu129 tag)"
    )
    enable_prefix_caching: bool | None = Field(
        None, description="--enable-prefix-caching / --disable-prefix-caching; None: vLLM's default (on in its V1 "
        "engine); the g6 prefix experiment switches it")
    startup_timeout_min: int = Field(30, ge=5, le=120, description="image pull + model download allowance")
    # Its API server and engine core are a process each; g2-standard-4 (one L4) has 4 vCPUs, ~3.9 allocatable.
    cpu: float = Field(2.0, gt=0, le=64, description="CPU cores the server's pod requests (API server and engine "
                       "core; more for heavy tokenisation)")  # fmt: skip
    # What shortens a cold start (measured by `python -m benchmarks g6 --experiment cold-start`).
    image_streaming: bool = Field(False, description="the GPU pool streams the vLLM image from an Artifact "
                                  "Registry cache of Docker Hub (gcfs_config), instead of pulling it whole")  # fmt: skip
    # The cache pulls from Docker Hub anonymously by default, within Docker Hub's limit on anonymous pulls.
    dockerhub_username: str | None = Field(None, min_length=1, description="with image_streaming: the Docker Hub "
                                           "user the image cache pulls as, instead of anonymously")  # fmt: skip
    dockerhub_token_secret: str | None = Field(
        None, pattern=r"^projects/[^/]+/secrets/[^/]+/versions/[^/]+$",
        description="with dockerhub_username: the Secret Manager secret version holding that user's Docker Hub "
        "access token, projects/PROJECT/secrets/SECRET/versions/VERSION")  # fmt: skip
    weights: Literal["huggingface", "gcs"] = Field("huggingface", description="where vLLM reads the weights: "
                                                   "downloaded from Hugging Face, or a Cloud Storage bucket "
                                                   "(GCS FUSE) filled once by a copy Job")  # fmt: skip
    sweep_max_num_seqs: list[int] = Field(
        default_factory=lambda: [16, 32, 64, 128, 256], description="the g6 sweep's max-num-seqs values (stack output benchmark)"
    )
    sweep_concurrency: list[int] = Field(
        default_factory=lambda: [1, 2, 4, 8, 16, 32, 64, 128], description="the g6 sweep's concurrency values"
    )

    def context_limit(self) -> int | None:
        """The model's max_position_embeddings: from the catalogue, else the configured one."""
        spec = MODELS.get(self.model)
        return spec.max_position_embeddings if spec else self.max_position_embeddings


# What KEDA's Prometheus trigger reads: the server's own queue (GKE's guidance to maximise throughput
# within a latency target) or its running batch (for lower latency); gauges of vLLM v0.34.0's /metrics.
AutoscalingMetric = Literal["num_requests_waiting", "num_requests_running"]


class Autoscaling(_Feature):
    """KEDA, and the vLLM server scaled by its own queue: a ScaledObject with a Prometheus trigger on
    `vllm:<metric>` summed over the server's pods, `target` per replica (HPA's AverageValue). The GPU pool's
    node autoscaler adds a node for each replica that finds no GPU.

    The floor is one replica: the queue exists only inside a running server, so with none nothing could
    ever report demand (requests to a Service without endpoints are refused, not queued). Scaling from
    zero needs a proxy that holds requests while the first replica starts (KEDA's HTTP add-on), which this
    platform does not deploy.
    """

    metric: AutoscalingMetric = Field(
        "num_requests_waiting", description="the vLLM gauge scaled on: requests waiting (throughput within a "
        "latency target, GKE's default advice) or running (lower latency)")  # fmt: skip
    # Google's vLLM autoscaling sample (accelerated-platforms) targets num_requests_waiting at 10 per replica.
    target: float = Field(10, gt=0, le=4096, description="the metric's value per replica the autoscaler keeps")
    min_replicas: int = Field(1, ge=0, le=16, description="the floor (at least 1: see the feature's notes)")
    max_replicas: int = Field(2, ge=1, le=16, description="the ceiling: at most the L4s the GPU pool can hold")
    # KEDA's default is 30 s; 15 s is the scrape interval, so each poll can see a new sample.
    polling_interval_s: int = Field(15, ge=5, le=300, description="how often KEDA reads the metric")
    scale_up_stabilization_s: int = Field(0, ge=0, le=3600, description="HPA scale-up stabilisation window "
                                          "(HPA's default 0: add replicas at once)")  # fmt: skip
    scale_down_stabilization_s: int = Field(300, ge=0, le=3600, description="HPA scale-down stabilisation "
                                            "window (HPA's default 300 s)")  # fmt: skip


class Argo(_Feature):
    """Argo Workflows (controller + server) and the g7 train -> register -> deploy WorkflowTemplate."""

    namespace: str = Field("argo", pattern=DNS_LABEL, description="controller and server")
    workflow_namespace: str = Field("pipelines", pattern=DNS_LABEL, description="where the workflows run")
    template_name: str = Field("train-register-deploy", pattern=DNS_LABEL, description="WorkflowTemplate name")
    model_name: str = Field("iris-argo", pattern=DNS_LABEL, description="InferenceService the deploy step creates")
    fail_step: Literal["none", "train", "register", "deploy"] = Field(
        "none", description="default of the workflow parameter that makes one step exit non-zero"
    )
    retry_limit: int = Field(1, ge=0, le=10, description="retryStrategy.limit of each step")
    retry_policy: Literal["Always", "OnFailure", "OnError", "OnTransientError"] = Field(
        "OnFailure", description="retryStrategy.retryPolicy of each step"
    )
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
    # A key that the chosen runtime would ignore is a mistake, not a no-op.
    other = {"sklearn": "triton_model", "triton": "model_format"}[ks.runtime]
    if other in ks.model_fields_set:
        problems.append(
            f"{PREFIX}:kserve.{other} does not apply to kserve.runtime {ks.runtime} "
            f"(model_format is for runtime sklearn, triton_model for runtime triton): remove it"
        )
    return problems


def gpu_demand(kserve: KServe, vllm: Vllm, autoscaling: Autoscaling = Autoscaling()) -> dict[str, int]:
    """GPUs each enabled serving feature may hold at once (shared GPUs count one each)."""
    demand = {}
    if kserve.enabled and kserve.deploy_example and kserve.gpu:
        demand["kserve"] = LIVE_REVISIONS_IN_ROLLOUT * kserve.max_replicas
    if vllm.enabled:
        # Fixed: one replica, Recreate, so an update never needs a second GPU. Autoscaled: up to the
        # ceiling, rolled one replica at a time without surge (components.vllm), so never more.
        demand["vllm"] = autoscaling.max_replicas if autoscaling.enabled else 1
    return demand


def _gpu_problems(kserve: KServe, vllm: Vllm, autoscaling: Autoscaling, pool: PoolCapacity) -> list[str]:
    demand = gpu_demand(kserve, vllm, autoscaling)
    total, capacity = sum(demand.values()), pool.total
    if total <= capacity:
        return []
    parts = " + ".join(f"{k} {v}" for k, v in demand.items())
    pool_text = (
        f"{capacity} nvidia.com/gpu (gpu_max_nodes {pool.max_nodes} x {pool.gpus_per_node} GPU(s) per node x "
        f"{pool.sharing_replicas} sharing replica(s))"
    )
    hints = "raise gke-ml-labs:gpu_max_nodes or gke-ml-labs:gpu_sharing.replicas (time-sharing counts each shared GPU)"
    vllm_key = "autoscaling.max_replicas" if autoscaling.enabled else "vllm"
    keys = f"{PREFIX}:{vllm_key}"
    if "kserve" in demand:
        keys = f"{PREFIX}:kserve.max_replicas" + (f" / {vllm_key}" if "vllm" in demand else "")
        room = (capacity - demand.get("vllm", 0)) // LIVE_REVISIONS_IN_ROLLOUT
        fix = f"lower kserve.max_replicas to {room}, " if room >= 1 else ""
        hints = f"{fix}{hints}" + (", or set kserve.gpu: false" if kserve.runtime == "sklearn" else "")
    return [
        f"{keys}: the serving GPU demand ({parts} = {total}, counting a GPU predictor as {LIVE_REVISIONS_IN_ROLLOUT} "
        f"revisions x max_replicas {kserve.max_replicas} x 1 GPU since two revisions run during a canary or rollout) "
        f"exceeds what the pool can hold: {pool_text}, so {hints}"
    ]


def _dockerhub_problems(v: Vllm) -> list[str]:
    """The Docker Hub login is two keys together, and only the image cache (image_streaming) uses it."""
    keys = [k for k in ("dockerhub_username", "dockerhub_token_secret") if getattr(v, k) is not None]
    if not keys:
        return []
    if len(keys) == 1:
        other = ({"dockerhub_username", "dockerhub_token_secret"} - set(keys)).pop()
        return [f"{PREFIX}:vllm.{keys[0]} is set without vllm.{other}: the image cache logs in to Docker Hub "
                "with both, or pulls anonymously with neither"]
    if not v.image_streaming:
        return [f"{PREFIX}:vllm.dockerhub_username and dockerhub_token_secret are for the image cache, which only "
                "vllm.image_streaming: true creates: set it, or remove them"]
    return []


def _vllm_problems(v: Vllm) -> list[str]:
    if not v.enabled:
        return []
    if problems := _dockerhub_problems(v):
        return problems
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


def _autoscaling_problems(a: Autoscaling, vllm: Vllm, observability: bool, pool: PoolCapacity) -> list[str]:
    if not a.enabled:
        return []
    key = f"{PREFIX}:autoscaling"
    needs = [f"{PREFIX}:{k}.enabled" for k, on in (("vllm", vllm.enabled), ("observability", observability)) if not on]
    if needs:
        return [f"{key}.enabled: scales the vLLM server on its own /metrics, read from the in-cluster Prometheus, "
                f"so it needs {' and '.join(needs)}: turn them on or autoscaling off"]  # fmt: skip
    problems = []
    if a.min_replicas == 0:
        problems.append(
            f"{key}.min_replicas 0: vLLM's queue exists only inside a running server, so at zero replicas nothing "
            "reports demand and requests to its Service are refused, not queued. Scaling from zero needs a proxy "
            "that holds them (KEDA's HTTP add-on, not deployed here): allowed: 1 and up"
        )
    elif a.min_replicas > a.max_replicas:
        problems.append(f"{key}.min_replicas ({a.min_replicas}) is above max_replicas ({a.max_replicas})")
    # Each replica holds a whole L4 (gpu_memory_utilization of its memory): time-sharing cannot seat two.
    gpus = pool.max_nodes * pool.gpus_per_node
    if a.max_replicas > gpus:
        problems.append(
            f"{key}.max_replicas {a.max_replicas} is above the L4s the GPU pool can hold: {gpus} (gpu_max_nodes "
            f"{pool.max_nodes} x {pool.gpus_per_node} per node, which your L4 quota must cover), and each vLLM "
            f"replica takes a whole GPU: lower max_replicas to {gpus} or raise {PREFIX}:gpu_max_nodes within the quota"
        )
    return problems


def _argo_problems(argo: Argo, kserve: KServe) -> list[str]:
    if argo.enabled and not kserve.enabled:
        return [
            f"{PREFIX}:argo is enabled but {PREFIX}:kserve is not: the workflow's deploy step creates a KServe "
            "InferenceService, so set kserve.enabled: true"
        ]
    if argo.enabled and argo.workflow_namespace == argo.namespace:
        return [f"{PREFIX}:argo.workflow_namespace must differ from argo.namespace (the controller's)"]
    return []


def _driver_problems(vllm: Vllm, driver: NodeDriver) -> list[str]:
    """The vLLM image must run on the driver the GPU nodes get."""
    need, has = VLLM_CUDA_MIN_DRIVER_BRANCH[vllm.cuda], DRIVER_BRANCH[driver.version]
    if not vllm.enabled or has >= need:
        return []
    return [
        f"{PREFIX}:vllm.cuda {vllm.cuda!r} runs vLLM {VLLM_VERSION} on CUDA {vllm.cuda}, which needs NVIDIA driver "
        f"{need}+, but {PREFIX}:{driver.key} {driver.version} installs R{has}: set {driver.key}: LATEST, "
        "or vllm.cuda: '12' (the release's -cu129 image)"
    ]


def check(
    *, kserve: KServe, vllm: Vllm, autoscaling: Autoscaling, argo: Argo, observability: bool, pool: PoolCapacity,
    driver: NodeDriver,
) -> list[str]:
    """Cross-field rules of these features; each problem names its keys and what is allowed."""
    problems = _kserve_problems(kserve) + _vllm_problems(vllm) + _driver_problems(vllm, driver)
    if scaling := _autoscaling_problems(autoscaling, vllm, observability, pool):
        return problems + scaling  # the pool check would repeat the ceiling's problem
    return problems + _gpu_problems(kserve, vllm, autoscaling, pool) + _argo_problems(argo, kserve)
