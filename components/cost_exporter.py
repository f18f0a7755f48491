"""The cost exporter: a Deployment on the system pool exporting hourly cost gauges per node,
namespace and pod (components/scripts/cost_exporter.py), its Service, a ServiceMonitor for the
in-cluster Prometheus (when observability is on) and the cost dashboard for Grafana's sidecar."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi

from components import k8s_objects
from components.cluster import POOL_LABEL
from components.in_cluster_script import APP_DIR, package_items, rbac, script_files
from components.namespaces import namespace
from components.naming import StackId, k8s_labels
from components.versions import SCRIPTS_PROMETHEUS_CLIENT, SCRIPTS_PYTHON_IMAGE
from facts.prices import exporter_table

NAMESPACE = "cost-exporter"
NAME = "cost-exporter"
COMPONENT = "cost-exporter"
PORT = 8080
DEPS_DIR = "/deps"
PRICES = "prices.json"
SCRIPTS = ("kube_api.py", "cost_exporter.py")
RULES = [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list"]}]
_SELECTOR = {"app.kubernetes.io/name": NAME}


@dataclass(frozen=True)
class CostExporterArgs:
    stack_id: StackId
    region: str  # whose list prices (facts.prices) the exporter applies
    refresh_seconds: int  # how often it re-reads nodes and pods, and Prometheus scrapes it
    # The release serving the ServiceMonitor CRD (the in-cluster Prometheus); None: no ServiceMonitor.
    prometheus: pulumi.Resource | None = None


def _labels(args: CostExporterArgs) -> dict[str, str]:
    return {**k8s_labels(args.stack_id, COMPONENT), **_SELECTOR}


def config_map(args: CostExporterArgs) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{NAME}-app", "namespace": NAMESPACE, "labels": _labels(args)},
        "data": {**script_files(*SCRIPTS), PRICES: json.dumps(exporter_table(args.region), sort_keys=True)},
    }


def deployment(args: CostExporterArgs) -> dict:
    labels = _labels(args)
    install = f"pip install --quiet --no-cache-dir --target {DEPS_DIR} {SCRIPTS_PROMETHEUS_CLIENT}"
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": _SELECTOR},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": NAME,
                    # System pool, no GPU toleration: the exporter must never keep a GPU node alive.
                    "nodeSelector": {POOL_LABEL: "system"},
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534},
                    "containers": [
                        {
                            "name": NAME,
                            "image": SCRIPTS_PYTHON_IMAGE,
                            "command": ["sh", "-c", f"{install} && exec python -m components.scripts.cost_exporter"],
                            "workingDir": APP_DIR,
                            "env": [
                                {"name": "PYTHONPATH", "value": f"{APP_DIR}:{DEPS_DIR}"},
                                {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
                                {"name": "HOME", "value": DEPS_DIR},
                                {"name": "PRICES_FILE", "value": f"{APP_DIR}/{PRICES}"},
                                {"name": "PORT", "value": str(PORT)},
                                {"name": "REFRESH_SECONDS", "value": str(args.refresh_seconds)},
                            ],
                            "ports": [{"name": "metrics", "containerPort": PORT}],
                            "readinessProbe": {"httpGet": {"path": "/metrics", "port": "metrics"}, "periodSeconds": 30},
                            # The pip install at start takes a while on a cold node.
                            "startupProbe": {
                                "httpGet": {"path": "/metrics", "port": "metrics"},
                                "periodSeconds": 10,
                                "failureThreshold": 30,
                            },
                            "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
                            "securityContext": {"allowPrivilegeEscalation": False},
                            "volumeMounts": [
                                {"name": "app", "mountPath": APP_DIR, "readOnly": True},
                                {"name": "deps", "mountPath": DEPS_DIR},
                            ],
                        }
                    ],
                    "volumes": [
                        {
                            "name": "app",
                            "configMap": {
                                "name": f"{NAME}-app",
                                "items": [*package_items(*SCRIPTS), {"key": PRICES, "path": PRICES}],
                            },
                        },
                        {"name": "deps", "emptyDir": {"sizeLimit": "64Mi"}},
                    ],
                },
            },
        },
    }


def service(args: CostExporterArgs) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": _labels(args)},
        "spec": {"type": "ClusterIP", "selector": _SELECTOR, "ports": [{"name": "metrics", "port": PORT, "targetPort": "metrics"}]},
    }


def service_monitor(args: CostExporterArgs) -> dict:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": _labels(args)},
        "spec": {
            "selector": {"matchLabels": _SELECTOR},
            "endpoints": [{"port": "metrics", "interval": f"{args.refresh_seconds}s"}],
        },
    }


def objects(args: CostExporterArgs) -> list[dict]:
    """The core objects, in creation order (the ServiceMonitor comes separately: it needs Prometheus)."""
    return [
        namespace(args.stack_id, NAMESPACE, COMPONENT),
        *rbac(args.stack_id, NAME, NAMESPACE, RULES, COMPONENT),
        config_map(args),
        deployment(args),
        service(args),
    ]


class CostExporter(pulumi.ComponentResource):
    def __init__(self, name: str, args: CostExporterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:cost_exporter:CostExporter", name, None, opts)
        ns, *rest = objects(args)
        self.namespace = k8s_objects.create(f"{name}-ns", ns, pulumi.ResourceOptions(parent=self))
        after_ns = pulumi.ResourceOptions(parent=self, depends_on=[self.namespace])
        self.objects = [
            k8s_objects.create(f"{obj['metadata']['name']}-{obj['kind'].lower()}", obj, after_ns) for obj in rest
        ]
        self.service_monitor = (
            k8s_objects.create(
                f"{name}-servicemonitor",
                service_monitor(args),
                pulumi.ResourceOptions(parent=self, depends_on=[self.namespace, args.prometheus]),
            )
            if args.prometheus is not None
            else None
        )
        self.register_outputs({"namespace": NAMESPACE, "service": NAME, "port": PORT})
