"""KServe in Knative mode: cert-manager, the KServe CRD chart, the controller chart and the serving
runtimes chart, in that order; plus the g5 InferenceService body (scale to zero, canary, autoscaler
settings) on KServe's sklearn server or on NVIDIA Triton.

Knative mode, because scale to zero and `canaryTrafficPercent` need it ("Standard" supports neither).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pulumi

from components import cert_manager, k8s_objects, versions
from components.helm_release import ChartSource, HelmRelease, HelmReleaseArgs
from components.namespaces import namespace
from components.naming import StackId, k8s_labels
from components.placement import GpuPlacement, Placement
from podspec.security import restricted

NAMESPACE = "kserve"
API_VERSION = "serving.kserve.io/v1beta1"
# Small CPU requests: two revisions of the example run side by side on the system pool during a canary.
CPU_PREDICTOR_RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
# The user the predictor runs as: KServe's model-server and storage-initializer images run as 1000
# (python/*.Dockerfile: USER 1000); Triton's image starts as root but ships its triton-server user as 1000.
KSERVE_UID = 1000
# The ClusterServingRuntime that kserve-runtime-configs v0.20.0 installs for Triton (its
# files/runtimes/clusterservingruntimes-patch.yaml, values key kserve.servingruntime.tritonserver).
# It lists modelFormat `triton` version "2" with autoSelect and serves the v2 protocol on port 8080.
TRITON_RUNTIME = "kserve-tritonserver"
TRITON_MODEL_FORMAT = {"name": "triton", "version": "2"}
# Below the runtime's 1 CPU / 2Gi request, so the replicas of a time-shared L4 fit one g2-standard-4
# (about 3.4 allocatable CPUs once GKE's node agents have theirs); the GPU does the inference.
# On the GPU the limit also holds the CUDA context and Triton's pinned host pool, which
# triton_start.sh caps at 64 MiB (Triton's default is 256 MiB).
TRITON_RESOURCES = {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}}
TRITON_START = (Path(__file__).resolve().parent / "scripts" / "triton_start.sh").read_text()
# Knative's own keys, read by its controller from the revision template (KServe copies the
# InferenceService's annotations there, except min/max-scale, which it sets from min/maxReplicas).
PROGRESS_DEADLINE_ANNOTATION = "serving.knative.dev/progress-deadline"
RETENTION_ANNOTATION = "autoscaling.knative.dev/scale-to-zero-pod-retention-period"


@dataclass(frozen=True)
class InferenceServiceArgs:
    """The g5 example: one predictor that scales with requests (to zero when idle), and a canary when a
    traffic share is given."""

    namespace: str
    name: str
    runtime: Literal["sklearn", "triton"]
    model_format: str  # runtime sklearn: a format the runtimes chart serves (sklearn, xgboost)
    served_model: str  # the name the server serves it under (the URL path's model)
    storage_uri: str  # the model the spec names: the canary's while one rolls out
    min_replicas: int  # 0: scale to zero when idle
    max_replicas: int
    scale_metric: Literal["concurrency", "rps"]
    scale_target: int  # per replica, of scale_metric
    progress_deadline_min: int
    scale_to_zero_retention_s: int
    gpu: bool = False  # one GPU per predictor, on the GPU pool
    canary_traffic_percent: int | None = None  # the new revision's share; None: no canary


@dataclass(frozen=True)
class KServeArgs:
    stack_id: StackId
    domain: str  # Knative route domain the InferenceServices are reached under
    placement: Placement  # controllers on the system nodes; a GPU example predictor on the GPU nodes
    example: InferenceServiceArgs | None = None  # None: KServe only (g7's workflow deploys its own)
    # What must be serving before KServe's controller starts: Knative Serving (the controller checks
    # for the Knative Service CRD at start-up in Knative mode).
    after: list[pulumi.Resource] = field(default_factory=list)
    charts: ChartSource = "install"


def resources_values(domain: str, system_node_selector: dict[str, str]) -> dict[str, Any]:
    """Values of the kserve-resources chart (controller, webhooks, inferenceservice-config)."""
    return {
        "kserve": {
            "controller": {
                "deploymentMode": "Knative",
                # KServe's top-level route is an Istio VirtualService; with Kourier it must be off
                # (KServe's "alternative networking layer" guide) and routing is Knative's own.
                "gateway": {"domain": domain, "disableIstioVirtualHost": True},
                "nodeSelector": system_node_selector,
            }
        }
    }


def runtimes_values() -> dict[str, Any]:
    """Values of the kserve-runtime-configs chart: the ClusterServingRuntimes (sklearn, xgboost, Triton,
    ...), with Triton's image pinned here rather than left to the chart's default."""
    repository, tag = versions.TRITON_IMAGE.rsplit(":", 1)
    return {"kserve": {"servingruntime": {"enabled": True, "tritonserver": {"image": repository, "tag": tag}}}}


class KServe(pulumi.ComponentResource):
    def __init__(self, name: str, args: KServeArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:kserve:KServe", name, None, opts)
        labels = k8s_labels(args.stack_id, "kserve")
        system = args.placement.system_node_selector

        def child(*after: pulumi.Resource) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions(parent=self, depends_on=list(after))

        # cert-manager does not need Knative: both install side by side; KServe waits for both.
        self.cert_manager = HelmRelease(
            f"{name}-cert-manager",
            HelmReleaseArgs(
                chart=versions.CERT_MANAGER,
                namespace=cert_manager.NAMESPACE,
                values=cert_manager.values(system),
                labels=labels,
                # Every pod of the chart (controller, webhook, cainjector, startupapicheck) runs non-root
                # with RuntimeDefault seccomp, no escalation and no capability by its defaults: restricted.
                pod_security="restricted",
                source=args.charts,
            ),
            opts=child(),
        )
        self.crds = HelmRelease(
            f"{name}-crd",
            # The namespace's one pod is kserve-resources' controller, restricted by that chart's own
            # securityContext and containerSecurityContext (values.yaml, files/kserve/resources.yaml).
            HelmReleaseArgs(
                chart=versions.KSERVE_CRD, namespace=NAMESPACE, labels=labels, pod_security="restricted", source=args.charts
            ),
            opts=child(),
        )
        # The chart holds the webhook Certificate and Issuer (cert-manager CRs) and the controller.
        self.controller = HelmRelease(
            f"{name}-resources",
            HelmReleaseArgs(
                chart=versions.KSERVE_RESOURCES,
                namespace=NAMESPACE,
                values=resources_values(args.domain, system),
                create_namespace=False,
                source=args.charts,
            ),
            opts=child(self.crds, self.cert_manager, *args.after),
        )
        # ClusterServingRuntimes pass KServe's validating webhook: after the controller serves it.
        self.runtimes = HelmRelease(
            f"{name}-runtimes",
            HelmReleaseArgs(
                chart=versions.KSERVE_RUNTIMES,
                namespace=NAMESPACE,
                values=runtimes_values(),
                create_namespace=False,
                source=args.charts,
            ),
            opts=child(self.controller),
        )
        if (ks := args.example) is not None:
            # After the controller (which waits for Knative): destroy then deletes the namespace while
            # KServe and Knative still run to clear the finalizers of what the InferenceService spawned
            # (Knative Routes, Ingresses), so it cannot hang in Terminating.
            # Restricted: the predictor pod is (predictor()), as are the containers Knative (queue-proxy)
            # and KServe (storage-initializer) add to it, under the pod-level settings it carries.
            self.models_namespace = k8s_objects.create(
                f"{name}-models-ns",
                namespace(args.stack_id, ks.namespace, "inference-service", "restricted"),
                child(self.controller),
            )
            # After its CRD, the webhooks (controller release) and the runtime that serves its model format.
            # The CRD is named too, not only reached through the controller: offline (charts: upstream-crds)
            # the controller's stand-in holds nothing to wait for, while the CRD's stand-in holds the CRD.
            self.inference_service = k8s_objects.create(
                f"{name}-{ks.name}",
                inference_service(args.stack_id, ks, args.placement.gpu),
                child(self.models_namespace, self.crds, self.controller, self.runtimes),
            )
        self.register_outputs({"namespace": NAMESPACE})


def predictor(spec: dict[str, Any]) -> dict[str, Any]:
    """A predictor (a pod spec whose serving container is `model`) that meets restricted, as KSERVE_UID,
    with no API token (the storage initializer reads buckets through Workload Identity or anonymously)
    and /tmp on an emptyDir for the read-only root (Triton's model copy, Python's and CUDA's caches).
    Its pod-level settings also cover the storage-initializer KServe injects, which sets no seccomp
    profile of its own; Knative accepts them with kubernetes.podspec-securitycontext (components.knative)."""
    pod = restricted({**{k: v for k, v in spec.items() if k != "model"}, "containers": [spec["model"]]}, user=KSERVE_UID)
    (model,) = pod.pop("containers")
    return {**pod, "model": model}


def inference_service(stack_id: StackId, ks: InferenceServiceArgs, placement: GpuPlacement) -> dict[str, Any]:
    """The g5 InferenceService: Knative's autoscaler on `scale_metric`, scale to zero, and a canary when
    a canary traffic share is set."""
    spec: dict[str, Any] = {
        # KServe turns these into the revision's autoscaling.knative.dev/{min-scale,max-scale,metric,target}.
        "minReplicas": ks.min_replicas,
        "maxReplicas": ks.max_replicas,
        "scaleMetric": ks.scale_metric,
        "scaleTarget": ks.scale_target,
    }
    if ks.canary_traffic_percent is not None:
        spec["canaryTrafficPercent"] = ks.canary_traffic_percent
    model = _triton_model(ks) if ks.runtime == "triton" else _sklearn_model(ks)
    if ks.gpu:
        model["resources"]["limits"].update(placement.limits(1))
        spec["nodeSelector"] = placement.node_selector
        spec["tolerations"] = placement.tolerations
    model["storageUri"] = ks.storage_uri
    spec["model"] = model
    return {
        "apiVersion": API_VERSION,
        "kind": "InferenceService",
        "metadata": {
            "name": ks.name,
            "namespace": ks.namespace,
            "labels": k8s_labels(stack_id, "inference-service"),
            "annotations": {
                # Explicit, so the example never silently falls back to a cluster default.
                "serving.kserve.io/deploymentMode": "Knative",
                # The revision's own deadline: a GPU node from zero plus the image pull (Triton's is
                # several GB) must fit, whatever the cluster-wide default says.
                PROGRESS_DEADLINE_ANNOTATION: f"{ks.progress_deadline_min}m",
                RETENTION_ANNOTATION: f"{ks.scale_to_zero_retention_s}s",
            },
        },
        "spec": {"predictor": predictor(spec)},
    }


def _sklearn_model(ks: InferenceServiceArgs) -> dict[str, Any]:
    return {
        "modelFormat": {"name": ks.model_format},
        "resources": {k: dict(v) for k, v in CPU_PREDICTOR_RESOURCES.items()},
    }


def _triton_model(ks: InferenceServiceArgs) -> dict[str, Any]:
    """Triton by name, with the format and protocol its ClusterServingRuntime lists. On a GPU the
    server starts through triton_start.sh, which makes the example's model run on the GPU."""
    model: dict[str, Any] = {
        "runtime": TRITON_RUNTIME,
        "modelFormat": dict(TRITON_MODEL_FORMAT),
        "protocolVersion": "v2",
        "resources": {k: dict(v) for k, v in TRITON_RESOURCES.items()},
    }
    if ks.gpu:
        # KServe appends the runtime's args (`tritonserver --model-store=/mnt/models ...`) to this command.
        model["command"] = ["/bin/sh", "-c", TRITON_START]
    return model


def endpoint(ks: InferenceServiceArgs, domain: str, gateway: dict[str, Any]) -> dict[str, Any]:
    """How to reach the example: the Knative route host (through the ClusterIP Kourier gateway, with
    this Host header) and the cluster-local URL of the predictor (traffic split applies to both)."""
    predictor = f"{ks.name}-predictor"
    path, protocol = (
        (f"/v2/models/{ks.served_model}/infer", "kserve-v2")
        if ks.runtime == "triton"
        else (f"/v1/models/{ks.served_model}:predict", "kserve-v1")
    )
    return {
        "namespace": ks.namespace,
        "service": predictor,
        "port": 80,
        "path": path,
        "protocol": protocol,
        "route_host": f"{predictor}.{ks.namespace}.{domain}",
        "url": f"http://{predictor}.{ks.namespace}.svc.cluster.local",
        "gateway": gateway,
    }
