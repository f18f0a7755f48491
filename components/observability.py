"""In-cluster observability: kube-prometheus-stack (Prometheus, Grafana with the lab dashboards) on the
system pool, and NVIDIA's dcgm-exporter on GPU nodes, scraped by that Prometheus.

DCGM choice: NVIDIA's dcgm-exporter chart, not GKE-managed DCGM. GKE's DCGM is scraped by Managed
Prometheus and its series land in Cloud Monitoring, while the benchmarks and dashboards read this
in-cluster Prometheus; so the cluster keeps `managed_dcgm` off (stacks.compose_platform) and exactly
one exporter runs: this chart, or, in NVIDIA GPU Operator mode, the operator's own exporter (then
this chart is not installed; components.gpu_sharing).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi

from components import k8s_objects
from components.dashboards import all_dashboards
from components.dashboards.gpu import DCGM_METRICS
from components.helm_release import ChartSource, HelmRelease, HelmReleaseArgs
from components.namespaces import NAMESPACE_NAME_LABEL, critical_pods_quota
from components.naming import StackId, k8s_labels
from components.placement import Placement
from components.versions import DCGM_EXPORTER, KUBE_PROMETHEUS_STACK

NAMESPACE = "monitoring"
RELEASE = "kps"
# fullnameOverride pins the Service names the stack outputs promise (the chart otherwise derives them
# from the release name).
PROMETHEUS = {"namespace": NAMESPACE, "service": f"{RELEASE}-prometheus", "port": 9090}
GRAFANA = {"namespace": NAMESPACE, "service": f"{RELEASE}-grafana", "port": 80}
DASHBOARD_LABEL = {"grafana_dashboard": "1"}
# A NetworkPolicy peer: the pods of Prometheus' namespace.
PROMETHEUS_PEER = {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: NAMESPACE}}}
# GKE-installed drivers live here on the node (COS and Ubuntu); the exporter needs libnvidia-ml from it.
GKE_NVIDIA_HOST_DIR = "/home/kubernetes/bin/nvidia"
NVIDIA_MOUNT = "/usr/local/nvidia"

# DCGM fields the exporter emits: what the GPU dashboard reads plus a few that explain it (tensor
# pipe, clocks, temperature, XID errors). SM_ACTIVE is off in both lists the exporter ships.
_EXTRA_DCGM_FIELDS = {
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("gauge", "Ratio of cycles the tensor (HMMA) pipe is active."),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gauge", "Ratio of time the graphics engine is active."),
    "DCGM_FI_DEV_SM_CLOCK": ("gauge", "SM clock frequency (in MHz)."),
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C)."),
    "DCGM_FI_DEV_XID_ERRORS": ("gauge", "Value of the last XID error encountered."),
}
_DASHBOARD_FIELD_TYPES = {
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
    "DCGM_FI_PROF_SM_ACTIVE": ("gauge", "The ratio of cycles an SM has at least 1 warp assigned."),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("gauge", "Ratio of cycles the device memory interface is active."),
    "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB)."),
    "DCGM_FI_DEV_FB_FREE": ("gauge", "Framebuffer memory free (in MiB)."),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W)."),
}


@dataclass(frozen=True)
class ObservabilityArgs:
    stack_id: StackId
    placement: Placement  # everything on the system nodes, the DCGM exporter on the GPU nodes
    retention: str  # Prometheus retention, e.g. 2d
    scrape_interval_s: int
    grafana: bool = True  # Grafana with the lab dashboards
    # False in GPU Operator mode, where the operator runs the (only) exporter.
    standalone_dcgm: bool = True
    charts: ChartSource = "install"


class ObservabilityError(Exception):
    """The observability config asks for something this component cannot deploy."""


def dcgm_metrics_csv() -> str:
    """The exporter's counters list (its CSV format: field, Prometheus type, help)."""
    missing = [m for m in DCGM_METRICS if m not in _DASHBOARD_FIELD_TYPES]
    if missing:
        raise ObservabilityError(
            f"the GPU dashboard reads {', '.join(missing)}, which components.observability does not enable; "
            "add them to _DASHBOARD_FIELD_TYPES"
        )
    fields = {**{m: _DASHBOARD_FIELD_TYPES[m] for m in DCGM_METRICS}, **_EXTRA_DCGM_FIELDS}
    return "".join(f"{field}, {kind}, {help_text}\n" for field, (kind, help_text) in fields.items())


def _small(cpu: str, memory: str, memory_limit: str) -> dict:
    # Requests small enough that everything fits the e2-standard-4 system node beside the other
    # controllers; memory limited (not CPU: throttling only slows a scrape, OOM would lose data).
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory_limit}}


def prometheus_stack_values(obs: ObservabilityArgs) -> dict[str, Any]:
    """kube-prometheus-stack values: small, short retention, everything on the system nodes."""
    system = obs.placement.system_node_selector
    no_nil_selectors = {
        f"{kind}SelectorNilUsesHelmValues": False
        for kind in ("serviceMonitor", "podMonitor", "rule", "probe", "scrapeConfig")
    }
    return {
        "fullnameOverride": RELEASE,
        # Alerts are not part of any lab; Alertmanager would only take memory.
        "alertmanager": {"enabled": False},
        # GKE runs the control plane: these targets are unreachable and would only show as down.
        "kubeControllerManager": {"enabled": False},
        "kubeScheduler": {"enabled": False},
        "kubeEtcd": {"enabled": False},
        "kubeProxy": {"enabled": False},
        "prometheus": {
            "service": {"type": "ClusterIP"},
            "prometheusSpec": {
                "retention": obs.retention,
                "scrapeInterval": f"{obs.scrape_interval_s}s",
                # Select every ServiceMonitor/PodMonitor/rule in every namespace, not only this release's.
                **no_nil_selectors,
                "nodeSelector": system,
                "resources": _small("200m", "768Mi", "2Gi"),
            },
        },
        "prometheusOperator": {
            "nodeSelector": system,
            "resources": _small("50m", "128Mi", "256Mi"),
            "admissionWebhooks": {"patch": {"nodeSelector": system}},
        },
        "kube-state-metrics": {"nodeSelector": system, "resources": _small("20m", "64Mi", "256Mi")},
        # Node metrics of the system pool only: the chart's default tolerates every NoSchedule taint, which
        # would put a non-GPU pod on (and keep alive) GPU nodes; DCGM covers those.
        "prometheus-node-exporter": {
            "nodeSelector": system,
            "tolerations": [],
            "resources": _small("20m", "32Mi", "128Mi"),
        },
        "grafana": {
            "enabled": obs.grafana,
            "fullnameOverride": GRAFANA["service"],
            # No adminPassword here: this chart version leaves it unset, so the Grafana chart generates a
            # random one into the Secret kps-grafana (key admin-password) and keeps it across upgrades.
            "service": {"type": "ClusterIP"},
            "nodeSelector": system,
            "resources": _small("50m", "192Mi", "512Mi"),
            "persistence": {"enabled": False},
            "sidecar": {
                "dashboards": {
                    "enabled": True,
                    "label": next(iter(DASHBOARD_LABEL)),
                    "labelValue": DASHBOARD_LABEL["grafana_dashboard"],
                    "searchNamespace": "ALL",
                }
            },
        },
    }


def dcgm_exporter_values(obs: ObservabilityArgs) -> dict[str, Any]:
    """dcgm-exporter values for GKE nodes whose driver GKE installed."""
    metrics_mount = {
        # The chart's default mount of its counters ConfigMap (rendered from customMetrics), kept
        # because setting extraVolumeMounts replaces the whole default list.
        "name": "exporter-metrics-volume",
        "mountPath": "/etc/dcgm-exporter/default-counters.csv",
        "subPath": "default-counters.csv",
    }
    return {
        "customMetrics": dcgm_metrics_csv(),
        # A GPU-node DaemonSet: on the GPU pool only, tolerating its taint.
        "nodeSelector": obs.placement.gpu.node_selector,
        "tolerations": obs.placement.gpu.tolerations,
        # GKE's driver and NVML are under /home/kubernetes/bin/nvidia on the host, not in the image.
        "extraHostVolumes": [{"name": "nvidia-install-dir-host", "hostPath": GKE_NVIDIA_HOST_DIR}],
        "extraVolumeMounts": [
            metrics_mount,
            {"name": "nvidia-install-dir-host", "mountPath": NVIDIA_MOUNT, "readOnly": True},
        ],
        # The pod requests no GPU (it must not take one from a workload), so on GKE, where no NVIDIA
        # container runtime injects devices, it sees /dev/nvidia* only when privileged; without them
        # NVML fails to initialise (Google's own DCGM exporter manifest for GKE runs privileged). The
        # chart's default allowPrivilegeEscalation: false would make the API server reject privileged.
        # Waived in podspec.security.WAIVERS; the monitoring namespace enforces privileged for it.
        "securityContext": {"privileged": True, "allowPrivilegeEscalation": True},
        "extraEnv": [
            {"name": "LD_LIBRARY_PATH", "value": f"{NVIDIA_MOUNT}/lib64"},
            # GKE's device plugin hands GPUs to pods by device name (nvidia0), not UUID: without this the
            # exporter cannot say which pod holds a GPU.
            {"name": "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE", "value": "device-name"},
        ],
        "serviceMonitor": {
            "enabled": True,
            "interval": f"{obs.scrape_interval_s}s",
            # Keep the exporter's namespace/pod labels (the GPU dashboard's per-pod panels need them).
            "honorLabels": True,
        },
        # Racing the driver: a GPU node from zero gets its driver from GKE's installer minutes after the
        # exporter's pod is scheduled. The chart has no init container hook and the image is distroless,
        # so the exporter fails NVML init and the kubelet restarts it until the driver is there. The
        # probes make that harmless: readiness (after 60 s) keeps a not-yet-working exporter out of the
        # Service (Prometheus scrapes only ready endpoints), and liveness waits 180 s so DCGM's slow first
        # start on a fresh node is not killed and restarted in a loop.
        "readinessProbe": {"initialDelaySeconds": 60},
        "livenessProbe": {"initialDelaySeconds": 180, "periodSeconds": 15},
    }


def dashboard_config_maps(stack_id: StackId) -> list[dict]:
    """One ConfigMap per dashboard, labelled for Grafana's sidecar."""
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": f"dashboard-{file_name.removesuffix('.json')}",
                "namespace": NAMESPACE,
                "labels": {**k8s_labels(stack_id, "observability"), **DASHBOARD_LABEL},
            },
            "data": {file_name: json.dumps(model, sort_keys=True)},
        }
        for file_name, model in sorted(all_dashboards().items())
    ]


def dashboard_ids() -> dict[str, str]:
    """Dashboard title -> uid (Grafana opens it at /d/<uid>)."""
    return {model["title"]: model["uid"] for model in all_dashboards().values()}


class Observability(pulumi.ComponentResource):
    def __init__(self, name: str, args: ObservabilityArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:observability:Observability", name, None, opts)
        labels = k8s_labels(args.stack_id, "observability")
        self.stack = HelmRelease(
            RELEASE,
            HelmReleaseArgs(
                chart=KUBE_PROMETHEUS_STACK,
                namespace=NAMESPACE,
                values=prometheus_stack_values(args),
                labels=labels,
                # GPU-node and node-level DaemonSets live here: node-exporter uses the host's network and
                # PID namespaces and hostPath mounts, and the DCGM exporter runs privileged (podspec
                # WAIVERS). Neither meets baseline; warn/audit still report every pod below restricted.
                pod_security="privileged",
                source=args.charts,
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        # The release serves the monitoring.coreos.com CRDs every ServiceMonitor needs.
        self.ready: pulumi.Resource = self.stack
        after_namespace = pulumi.ResourceOptions(parent=self, depends_on=[self.stack.namespace])
        self.dashboards = (
            [
                k8s_objects.create(obj["metadata"]["name"], obj, after_namespace)
                for obj in dashboard_config_maps(args.stack_id)
            ]
            if args.grafana
            else []
        )
        self.dcgm: HelmRelease | None = None
        if args.standalone_dcgm:
            quota = k8s_objects.create(
                "monitoring-critical-pods",
                critical_pods_quota(args.stack_id, NAMESPACE, "observability"),
                after_namespace,
            )
            self.dcgm = HelmRelease(
                "dcgm-exporter",
                HelmReleaseArgs(
                    chart=DCGM_EXPORTER,
                    namespace=NAMESPACE,
                    values=dcgm_exporter_values(args),
                    labels=labels,
                    create_namespace=False,
                    source=args.charts,
                ),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.stack, quota]),
            )
        self.register_outputs({"prometheus": PROMETHEUS, "grafana": GRAFANA})
