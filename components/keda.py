"""KEDA (its pinned chart) and the ScaledObject that scales the vLLM server on its own queue.

KEDA's operator reads the trigger's PromQL from the in-cluster Prometheus and hands the value to an HPA it
owns through its metrics API server (external.metrics.k8s.io); the HPA, in kube-controller-manager, sets the
Deployment's replicas, and the GPU pool's node autoscaler adds a node for a replica that finds no GPU.

The ScaledObject is a pure function of its args, so tests check exactly what is deployed against the CRD.
Trigger metadata keys are those of KEDA v2.20.2's Prometheus scaler (pkg/scalers/prometheus_scaler.go,
recorded in tests/data/keda/v2.20.2/prometheus-trigger-keys.txt).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from components.helm_release import ChartSource, HelmRelease, HelmReleaseArgs
from components.naming import StackId, k8s_labels
from components.versions import KEDA

NAMESPACE = "keda"
API_VERSION = "keda.sh/v1alpha1"


@dataclass(frozen=True)
class Scaling:
    """How a server is scaled: a vLLM gauge summed over its pods, `target` of it per replica."""

    metric: str  # a vLLM gauge without its prefix, e.g. num_requests_waiting
    target: float
    min_replicas: int
    max_replicas: int
    polling_interval_s: int
    scale_up_stabilization_s: int
    scale_down_stabilization_s: int
    prometheus_url: str  # http://<service>.<namespace>.svc:<port>


def query(scaling: Scaling, namespace: str, service: str) -> str:
    """The server's whole queue (or batch): one sum over its pods, which the HPA divides by the replicas. One
    series, because the scaler refuses a result of several. The Prometheus operator labels each scraped
    series with the namespace and the Service it was scraped through."""
    return f'sum(vllm:{scaling.metric}{{namespace="{namespace}",service="{service}"}})'


def values(system_node_selector: dict[str, str]) -> dict[str, Any]:
    """Keys of the pinned chart, checked against its values.yaml. Its pods already run as the Restricted
    Pod Security level asks (non-root, no capabilities, read-only root, RuntimeDefault seccomp)."""
    small = {"requests": {"cpu": "50m", "memory": "100Mi"}, "limits": {"cpu": "1", "memory": "1000Mi"}}
    return {
        # The chart owns the CRDs, so they are installed (and upgraded) with the release.
        "crds": {"install": True},
        # Controllers on the system nodes: nothing here may keep a GPU node alive.
        "nodeSelector": system_node_selector,
        "resources": {"operator": small, "metricServer": small, "webhooks": small},
    }


def scaled_object(stack_id: StackId, namespace: str, deployment: str, service: str, s: Scaling) -> dict[str, Any]:
    """KEDA's ScaledObject on `deployment`: the HPA it makes keeps `target` of the metric per replica
    (AverageValue, the Prometheus scaler's default), between the floor and the ceiling."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ScaledObject",
        "metadata": {"name": deployment, "namespace": namespace, "labels": k8s_labels(stack_id, "autoscaling")},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment},
            "minReplicaCount": s.min_replicas,
            "maxReplicaCount": s.max_replicas,
            "pollingInterval": s.polling_interval_s,
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "behavior": {
                        "scaleUp": {"stabilizationWindowSeconds": s.scale_up_stabilization_s},
                        "scaleDown": {"stabilizationWindowSeconds": s.scale_down_stabilization_s},
                    }
                }
            },
            "triggers": [
                {
                    "type": "prometheus",
                    "metricType": "AverageValue",
                    "metadata": {
                        "serverAddress": s.prometheus_url,
                        "query": query(s, namespace, service),
                        "threshold": f"{s.target:g}",
                        # No series (every replica restarting) reads as 0: the floor holds, nothing errors.
                        "ignoreNullValues": "true",
                    },
                }
            ],
        },
    }


@dataclass(frozen=True)
class KedaArgs:
    stack_id: StackId
    system_node_selector: dict[str, str]
    charts: ChartSource = "install"


class Keda(pulumi.ComponentResource):
    """The KEDA release in its own namespace; `release` is what a ScaledObject waits for."""

    def __init__(self, name: str, args: KedaArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:autoscaling:Keda", name, None, opts)
        chart = HelmRelease(
            name,
            HelmReleaseArgs(
                chart=KEDA,
                namespace=NAMESPACE,
                values=values(args.system_node_selector),
                labels=k8s_labels(args.stack_id, "autoscaling"),
                pod_security="restricted",
                source=args.charts,
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.release = chart.release
        self.register_outputs({"namespace": NAMESPACE})
