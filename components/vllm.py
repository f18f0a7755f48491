"""A vLLM OpenAI-compatible server on the GPU pool: Deployment, ClusterIP Service, an optional Hugging
Face token Secret, and a ServiceMonitor when the in-cluster Prometheus runs.

The object bodies are pure functions of the args, so tests check exactly what is deployed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi

from components import k8s_objects, keda, model_weights, versions
from components.placement import GpuPlacement
from components.namespaces import namespace
from components.naming import StackId, k8s_labels
from podspec.security import TMP, Scratch, restricted

NAME = "vllm"
PORT = 8000
HF_SECRET = "hf-token"
HF_SECRET_KEY = "token"
# The image runs as root by default; here it runs as an unprivileged user with a read-only root
# filesystem, so everything vLLM writes has an emptyDir. /cache is HOME, which holds what the
# libraries' documented defaults put under ~: vLLM's compile cache and usage-stats file
# (VLLM_CACHE_ROOT ~/.cache/vllm, VLLM_CONFIG_ROOT ~/.config/vllm), Triton's kernel cache
# (~/.triton), FlashInfer's JIT cache, CUDA's JIT cache (~/.nv); and the model download (HF_HOME).
# /tmp holds vLLM's IPC sockets (VLLM_RPC_BASE_PATH: the temp dir) and TorchInductor's cache
# (/tmp/torchinductor_<user>).
CACHE = Scratch("cache", "/cache", "40Gi")
# PyTorch shares tensors between processes through /dev/shm (64 MiB by default).
SHM = Scratch("dshm", "/dev/shm", "2Gi", medium="Memory")
HF_CACHE = f"{CACHE.path}/huggingface"
# vLLM's own CLI, named rather than left to the image's ENTRYPOINT, which changed across releases.
# (`python -m vllm.entrypoints.openai.api_server` is deprecated in v0.34.0; `vllm serve` builds the parser
# recorded in tests/data/vllm/v0.34.0/serve-help.txt.)
COMMAND = ["vllm", "serve"]
PROBE_PERIOD_S = 10
# /health in v0.34.0 (entrypoints/serve/instrumentator/health.py) awaits AsyncLLM.check_health, which only
# reads the engine's `errored` flag: no round trip to the engine core process, so a saturated engine does
# not slow it. What does is the API server's event loop, which answers it only between the work of every
# request in flight (tokenising prompts, detokenising and streaming each step's outputs, 128 at a time:
# VLLM_V1_OUTPUT_PROC_CHUNK_SIZE). Under g6's saturation search that queue is seconds long at worst, and
# the kubelet's 1 s default would then time a probe out and, three in a row, drop the Service endpoint
# mid-run. 10 s leaves that margin while a dead engine still fails at once (503, not a timeout); the
# liveness probe allows 6 x 10 s before a restart. (llm-d-benchmark#1734 raised the same probes to 15 s
# for a saturated vLLM.)
PROBE_TIMEOUT_S = 10
# The Service must not hold `pulumi up` until an endpoint exists: the provider gives up after 10 min.
SKIP_AWAIT = {"pulumi.com/skipAwait": "true"}
# The Deployment does: `pulumi up` returns once the new server is ready, so a g6 sweep that changed
# max-num-seqs measures the new server, never the old one on its way out. Its deadline covers a GPU
# node from zero and the driver install (up to ~15 min on GKE) plus the startup probe's allowance.
NODE_FROM_ZERO_MIN = 20


@dataclass(frozen=True)
class VllmServerArgs:
    stack_id: StackId
    placement: GpuPlacement  # the GPU pool the server's pod lands on
    namespace: str
    # Each of these is one server flag.
    model: str  # Hugging Face model id (the positional model_tag)
    dtype: str  # --dtype
    max_model_len: int  # --max-model-len
    gpu_memory_utilization: float  # --gpu-memory-utilization
    max_num_seqs: int  # --max-num-seqs
    startup_timeout_min: int  # image pull + model download allowance before liveness checks
    cpu: float = 2.0  # cores the pod requests
    quantization: str | None = None  # --quantization; None: the checkpoint's own
    enable_prefix_caching: bool | None = None  # --enable-/--disable-prefix-caching; None: vLLM's default (on)
    hf_token: pulumi.Output[str] | None = None
    # The release serving the ServiceMonitor CRD (kube-prometheus-stack); None: no ServiceMonitor.
    prometheus: pulumi.Resource | None = None
    scrape_interval_s: int = 15
    # Where the image and the weights come from: Docker Hub (one of versions.VLLM_IMAGES, or its Artifact
    # Registry cache, for image streaming), and Hugging Face or a bucket mounted through the GCS FUSE CSI driver.
    image: str = versions.VLLM_IMAGE
    weights: WeightsBucket | None = None
    after: list[pulumi.Resource] = field(default_factory=list)  # e.g. the image cache's read access
    # Scaled by KEDA on the server's own gauge (the `autoscaling` feature); None: one fixed replica.
    autoscaling: keda.Scaling | None = None
    keda: pulumi.Resource | None = None  # the release serving the ScaledObject CRD and its webhook


@dataclass(frozen=True)
class WeightsBucket:
    """Serve the weights from the stack's bucket (components.model_weights), filled before the server starts."""

    project: str
    region: str
    billing_labels: dict[str, str]
    system_node_selector: dict[str, str]  # where the one-time copy runs
    cluster: pulumi.Resource | None = None  # makes the Workload Identity pool exist

    def bucket(self, stack_id: StackId) -> str:
        return model_weights.bucket_name(stack_id, self.project)


def rollout_await(v: VllmServerArgs) -> dict[str, str]:
    return {"pulumi.com/timeoutSeconds": str((NODE_FROM_ZERO_MIN + v.startup_timeout_min) * 60)}


def server_args(v: VllmServerArgs) -> list[str]:
    """Exactly the configured server flags, nothing implicit. The model comes first, as `vllm serve`'s
    positional model_tag: v0.34.0 warns that `--model` "will be removed in a future version" and moves it
    there itself (utils/argparse_utils.py), and refuses --served-model-name without a positional model.
    Weights from a bucket are served from their folder there, under the model's own name (what clients
    ask for)."""
    model = [v.model] if v.weights is None else [model_weights.model_dir(v.model), f"--served-model-name={v.model}"]
    args = [
        *model,
        f"--dtype={v.dtype}",
        f"--max-num-seqs={v.max_num_seqs}",
        f"--max-model-len={v.max_model_len}",
        f"--gpu-memory-utilization={v.gpu_memory_utilization}",
    ]
    if v.quantization is not None:
        args.append(f"--quantization={v.quantization}")
    if v.enable_prefix_caching is not None:
        # vLLM v0.34.0 names the pair --enable-prefix-caching | --disable-prefix-caching (its serve --help).
        args.append("--enable-prefix-caching" if v.enable_prefix_caching else "--disable-prefix-caching")
    return [*args, f"--port={PORT}"]


def _selector() -> dict[str, str]:
    return {"app.kubernetes.io/name": NAME}


def pod_spec(v: VllmServerArgs, with_token: bool) -> dict[str, Any]:
    """The server's pod: restricted, as an unprivileged user, every write on an emptyDir."""
    placement = v.placement
    env = [{"name": "HF_HOME", "value": HF_CACHE}]
    if with_token:
        env.append(
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": HF_SECRET, "key": HF_SECRET_KEY}}}
        )
    health = {"httpGet": {"path": "/health", "port": PORT}, "periodSeconds": PROBE_PERIOD_S,
              "timeoutSeconds": PROBE_TIMEOUT_S}
    spec: dict[str, Any] = {
        # A Service named vllm would inject VLLM_PORT=tcp://..., which vLLM reads as its own
        # setting and crashes on.
        "enableServiceLinks": False,
        "nodeSelector": placement.node_selector,
        "tolerations": placement.tolerations,
        "terminationGracePeriodSeconds": 30,
        "containers": [
            {
                "name": NAME,
                "image": v.image,
                "command": COMMAND,
                "args": server_args(v),
                "ports": [{"name": "http", "containerPort": PORT}],
                "env": env,
                # No CPU limit: it would throttle what g6 measures (podspec.security.WAIVERS).
                "resources": {
                    "requests": {"cpu": _cores(v.cpu), "memory": "8Gi", **placement.limits(1)},
                    "limits": {"memory": "12Gi", **placement.limits(1)},
                },
                # The model download (and load) on a fresh node before any liveness check
                # may restart the pod; the image pull happens before probes start.
                "startupProbe": {**health, "failureThreshold": v.startup_timeout_min * 60 // PROBE_PERIOD_S},
                "readinessProbe": {**health, "failureThreshold": 3},
                "livenessProbe": {**health, "failureThreshold": 6},
            }
        ],
    }
    if v.weights is not None:
        spec["serviceAccountName"] = model_weights.READER_SA
        spec["volumes"] = [model_weights.fuse_volume(v.weights.bucket(v.stack_id), read_only=True)]
        spec["containers"][0]["volumeMounts"] = [model_weights.mount(read_only=True)]
    return restricted(spec, scratch=(TMP, CACHE, SHM), home=CACHE.path)


def _annotations(v: VllmServerArgs) -> dict[str, Any]:
    """GKE injects the GCS FUSE sidecar only into pods that ask for it."""
    return {"annotations": dict(model_weights.SIDECAR_ANNOTATION)} if v.weights is not None else {}


def deployment(v: VllmServerArgs, with_token: bool) -> dict[str, Any]:
    labels = {**k8s_labels(v.stack_id, "llm-server"), **_selector()}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": NAME,
            "namespace": v.namespace,
            "labels": labels,
            "annotations": rollout_await(v),
        },
        "spec": {
            **_scale(v),
            "selector": {"matchLabels": _selector()},
            "template": {"metadata": {"labels": labels, **_annotations(v)}, "spec": pod_spec(v, with_token)},
        },
    }


def _scale(v: VllmServerArgs) -> dict[str, Any]:
    """Replicas and how an update replaces them, never holding more GPUs than the replicas already do."""
    if v.autoscaling is None:
        # One server on one GPU (the default quota): the old pod must free it before the new one starts.
        return {"replicas": 1, "strategy": {"type": "Recreate"}}
    # The HPA owns the count: a `replicas` here would reset it to this value at every `pulumi up`. An update
    # replaces one replica at a time, each freeing its GPU first: the others serve on meanwhile.
    return {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}}


def hf_secret(v: VllmServerArgs, token: pulumi.Input[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": HF_SECRET, "namespace": v.namespace, "labels": k8s_labels(v.stack_id, "llm-server")},
        "type": "Opaque",
        "stringData": {HF_SECRET_KEY: token},
    }


def service(v: VllmServerArgs) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": NAME,
            "namespace": v.namespace,
            "labels": {**k8s_labels(v.stack_id, "llm-server"), **_selector()},
            # Pulumi's Service await waits (10 min) for an endpoint, i.e. for the pod on a GPU node that
            # may still be scaling up from zero: `pulumi up` would fail on the cold start.
            "annotations": SKIP_AWAIT,
        },
        "spec": {
            "type": "ClusterIP",
            "selector": _selector(),
            "ports": [{"name": "http", "port": PORT, "targetPort": "http"}],
        },
    }


def _cores(cpu: float) -> str:
    """A CPU quantity as Kubernetes writes it: whole cores, else millicores."""
    return f"{cpu:g}" if cpu.is_integer() else f"{round(cpu * 1000)}m"


def service_monitor(v: VllmServerArgs) -> dict[str, Any]:
    """Prometheus scrapes /metrics (vllm:* series) from the Service's port."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": NAME, "namespace": v.namespace, "labels": k8s_labels(v.stack_id, "llm-server")},
        "spec": {
            "selector": {"matchLabels": _selector()},
            "namespaceSelector": {"matchNames": [v.namespace]},
            "endpoints": [{"port": "http", "path": "/metrics", "interval": f"{v.scrape_interval_s}s"}],
        },
    }


def endpoint(v: VllmServerArgs) -> dict[str, Any]:
    return {"namespace": v.namespace, "service": NAME, "port": PORT, "path": "/v1", "protocol": "openai"}


class VllmServer(pulumi.ComponentResource):
    def __init__(self, name: str, args: VllmServerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:vllm:VllmServer", name, None, opts)
        self.namespace = k8s_objects.create(
            f"{name}-ns", namespace(args.stack_id, args.namespace, "llm-server", "restricted"), pulumi.ResourceOptions(parent=self)
        )
        in_ns = pulumi.ResourceOptions(parent=self, depends_on=[self.namespace])
        if args.hf_token is not None:
            # Only the Secret holds the token; the Deployment refers to it by name.
            self.secret = k8s_objects.create(f"{name}-hf-token", hf_secret(args, args.hf_token), in_ns)
        weights: list[pulumi.Resource] = []
        if args.weights is not None:
            w = args.weights
            self.weights = model_weights.ModelWeights(
                f"{name}-weights",
                model_weights.ModelWeightsArgs(
                    stack_id=args.stack_id, project=w.project, region=w.region, namespace=args.namespace,
                    model=args.model, billing_labels=w.billing_labels, system_node_selector=w.system_node_selector,
                    hf_secret=HF_SECRET if args.hf_token is not None else None, hf_secret_key=HF_SECRET_KEY,
                    cluster=w.cluster,
                    after=[self.namespace, *([self.secret] if args.hf_token is not None else [])],
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )  # fmt: skip
            weights = self.weights.done
        body = deployment(args, with_token=args.hf_token is not None)
        self.deployment = k8s_objects.create(
            f"{name}-deployment", body,
            pulumi.ResourceOptions(parent=self, depends_on=[self.namespace, *args.after, *weights]),
        )  # fmt: skip
        self.service = k8s_objects.create(f"{name}-service", service(args), in_ns)
        if args.autoscaling is not None:
            body = keda.scaled_object(args.stack_id, args.namespace, NAME, NAME, args.autoscaling)
            after = [self.deployment, *([args.keda] if args.keda is not None else [])]
            self.scaled_object = k8s_objects.create(
                f"{name}-scaledobject", body, pulumi.ResourceOptions(parent=self, depends_on=after)
            )
        if args.prometheus is not None:
            self.service_monitor = k8s_objects.create(
                f"{name}-servicemonitor",
                service_monitor(args),
                pulumi.ResourceOptions(parent=self, depends_on=[self.namespace, args.prometheus]),
            )
        self.register_outputs({"service": NAME})
