"""The cost exporter: a Deployment on the system pool exporting hourly cost gauges per node,
namespace and pod (components/scripts/cost_exporter.py), its Service, a ServiceMonitor for the
in-cluster Prometheus (when observability is on) and the cost dashboard for Grafana's sidecar."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi

from components import k8s_objects
from components.in_cluster_script import APP_DIR, package_items, rbac, script_files
from components.namespaces import namespace
from components.naming import StackId, k8s_labels
from components.versions import SCRIPTS_PROMETHEUS_CLIENT, SCRIPTS_PYTHON_IMAGE
from components.observability import PROMETHEUS_PEER
from facts.prices import exporter_table
from podspec.security import TMP, Scratch, restricted

NAMESPACE = "cost-exporter"
NAME = "cost-exporter"
COMPONENT = "cost-exporter"
PORT = 8080
PROBE_TIMEOUT_S = 10
# The exporter's dependency, installed at start (pip --target) into this emptyDir.
DEPS = Scratch("deps", "/deps", "64Mi")
PRICES = "prices.json"
SCRIPTS = ("kube_api.py", "cost_exporter.py")
RULES = [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list"]}]
_SELECTOR = {"app.kubernetes.io/name": NAME}


@dataclass(frozen=True)
class CostExporterArgs:
    stack_id: StackId
    region: str  # whose list prices (facts.prices) the exporter applies
    refresh_seconds: int  # how often it re-reads nodes and pods, and Prometheus scrapes it
    system_node_selector: dict[str, str]  # where the exporter runs (never a GPU node)
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


def pod_spec(args: CostExporterArgs) -> dict:
    """The exporter's pod: restricted, with a token (it lists nodes and pods), its one dependency
    installed at start into an emptyDir (the root filesystem is read-only)."""
    install = (
        f"pip install --quiet --no-cache-dir --disable-pip-version-check --target {DEPS.path} "
        f"{SCRIPTS_PROMETHEUS_CLIENT}"
    )
    metrics = {"httpGet": {"path": "/metrics", "port": "metrics"}}
    return restricted(
        {
            "serviceAccountName": NAME,
            # System nodes, no GPU toleration: the exporter must never keep a GPU node alive.
            "nodeSelector": args.system_node_selector,
            "containers": [
                {
                    "name": NAME,
                    "image": SCRIPTS_PYTHON_IMAGE,
                    "command": ["sh", "-c", f"{install} && exec python -m components.scripts.cost_exporter"],
                    "workingDir": APP_DIR,
                    "env": [
                        {"name": "PYTHONPATH", "value": f"{APP_DIR}:{DEPS.path}"},
                        {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
                        {"name": "PRICES_FILE", "value": f"{APP_DIR}/{PRICES}"},
                        {"name": "PORT", "value": str(PORT)},
                        {"name": "REFRESH_SECONDS", "value": str(args.refresh_seconds)},
                    ],
                    "ports": [{"name": "metrics", "containerPort": PORT}],
                    # Every probe waits PROBE_TIMEOUT_S for /metrics, not the kubelet's 1 s: the exporter
                    # requests 10m of CPU, which is all it gets on a busy system node, and its server thread
                    # waits for the GIL while the refresh parses the node and pod lists.
                    "readinessProbe": {**metrics, "periodSeconds": 30, "timeoutSeconds": PROBE_TIMEOUT_S},
                    # A server that stops answering for 3 minutes is restarted.
                    "livenessProbe": {**metrics, "periodSeconds": 60, "failureThreshold": 3, "timeoutSeconds": PROBE_TIMEOUT_S},
                    # The pip install at start takes a while on a cold node.
                    "startupProbe": {**metrics, "periodSeconds": 10, "failureThreshold": 30, "timeoutSeconds": PROBE_TIMEOUT_S},
                    "resources": {
                        "requests": {"cpu": "10m", "memory": "64Mi"},
                        "limits": {"cpu": "500m", "memory": "256Mi"},
                    },
                    "volumeMounts": [{"name": "app", "mountPath": APP_DIR, "readOnly": True}],
                }
            ],
            "volumes": [
                {
                    "name": "app",
                    "configMap": {
                        "name": f"{NAME}-app",
                        "items": [*package_items(*SCRIPTS), {"key": PRICES, "path": PRICES}],
                    },
                }
            ],
        },
        calls_api=True,
        scratch=(TMP, DEPS),
    )


def deployment(args: CostExporterArgs) -> dict:
    labels = _labels(args)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": _SELECTOR},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec(args)},
        },
    }


def network_policy(args: CostExporterArgs) -> dict:
    """Only Prometheus reaches the exporter (the node itself, e.g. a port-forward or the kubelet's
    probes, always can: Kubernetes' NetworkPolicy documentation)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": _labels(args)},
        "spec": {
            "podSelector": {"matchLabels": _SELECTOR},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [PROMETHEUS_PEER], "ports": [{"protocol": "TCP", "port": PORT}]}],
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
        namespace(args.stack_id, NAMESPACE, COMPONENT, "restricted"),
        *rbac(args.stack_id, NAME, NAMESPACE, RULES, COMPONENT),
        config_map(args),
        deployment(args),
        service(args),
        network_policy(args),
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
