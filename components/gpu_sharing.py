"""GPU time-slicing, and in NVIDIA mode the NVIDIA GPU Operator that provides it.

Two mutually exclusive modes (the lab config allows one at a time):
- `gke`: GKE's own time-sharing, `gpu_sharing_config` on the node pool (components.gpu_pool.GpuSharing);
  GKE installs the driver and runs its device plugin, which advertises GPUs x replicas. Nothing in the
  cluster, so no component here.
- `nvidia`: the NVIDIA GPU Operator's device plugin with a time-slicing config. What NVIDIA and Google
  document for GKE, and what this module does: the pool has GKE's driver install disabled
  (gpu_driver_version INSTALLATION_DISABLED) and the node label NO_GKE_DEVICE_PLUGIN_LABEL
  (`gke-no-default-nvidia-gpu-device-plugin=true`) so GKE's plugin stays off; the operator's own driver
  container does not work on COS, so the operator runs with `driver.enabled=false` and the driver comes
  from Google's COS driver installer DaemonSet (pinned), installed under /home/kubernetes/bin/nvidia
  where the operator's toolkit and plugin are pointed. The operator's dcgm-exporter is then the only
  exporter (the standalone chart is not installed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components import k8s_objects
from components.helm_release import HelmRelease, HelmReleaseArgs
from components.namespaces import critical_pods_quota, namespace
from components.naming import StackId
from components.observability import GKE_NVIDIA_HOST_DIR, dcgm_metrics_csv
from components.placement import GPU_RESOURCE
from components.versions import GKE_COS_DRIVER_INSTALLER, GKE_COS_DRIVER_INSTALLER_COMMIT, GPU_OPERATOR

NAMESPACE = "gpu-operator"
# GKE skips its own device plugin on nodes carrying this label (NVIDIA's and Google's GKE guides).
NO_GKE_DEVICE_PLUGIN_LABEL = {"gke-no-default-nvidia-gpu-device-plugin": "true"}
TIME_SLICING_CONFIG = "time-slicing-config"
TIME_SLICING_PROFILE = "any"
DCGM_METRICS_CONFIG = "lab-dcgm-metrics"


@dataclass(frozen=True)
class GpuOperatorArgs:
    stack_id: StackId
    replicas: int  # pods sharing each physical GPU (time-slicing)
    nvidia_driver: str  # the driver Google's COS installer puts on nodes: DEFAULT or LATEST
    scrape_interval_s: int  # of the operator's DCGM exporter
    system_node_selector: dict[str, str]  # where the operator and feature discovery's master run
    # The release serving the ServiceMonitor CRD, when the in-cluster Prometheus runs: the operator's
    # DCGM exporter is then scraped. None: no ServiceMonitor.
    prometheus: pulumi.Resource | None = None


def time_slicing_config(replicas: int) -> str:
    """The device plugin's config file: every GPU advertised `replicas` times."""
    return yaml.safe_dump(
        {
            "version": "v1",
            "flags": {"migStrategy": "none"},  # the L4 has no MIG
            "sharing": {"timeSlicing": {"resources": [{"name": GPU_RESOURCE, "replicas": replicas}]}},
        },
        sort_keys=False,
    )


def driver_installer_url(driver: str) -> str:
    """Google's COS driver installer DaemonSet, pinned to a commit."""
    return (
        "https://raw.githubusercontent.com/GoogleCloudPlatform/container-engine-accelerators/"
        f"{GKE_COS_DRIVER_INSTALLER_COMMIT}/{GKE_COS_DRIVER_INSTALLER[driver]}"
    )


def gpu_operator_values(args: GpuOperatorArgs) -> dict[str, Any]:
    """GPU Operator values for GKE COS nodes with Google's driver."""
    return {
        # GKE's documented install: the driver is Google's, found under /home/kubernetes/bin/nvidia.
        "driver": {"enabled": False},
        "hostPaths": {"driverInstallDir": GKE_NVIDIA_HOST_DIR},
        "toolkit": {
            "installDir": GKE_NVIDIA_HOST_DIR,
            # NVIDIA's GKE prerequisite for GKE >= 1.33: read containerd's config from the file, not
            # from the containerd CLI, or the toolkit pods never start.
            "env": [{"name": "RUNTIME_CONFIG_SOURCE", "value": "file"}],
        },
        "cdi": {"enabled": True},
        "migManager": {"enabled": False},  # the L4 has no MIG
        "devicePlugin": {
            "config": {
                "create": True,
                "name": TIME_SLICING_CONFIG,
                "default": TIME_SLICING_PROFILE,
                "data": {TIME_SLICING_PROFILE: time_slicing_config(args.replicas)},
            }
        },
        "dcgmExporter": {
            "enabled": True,
            "config": {"name": DCGM_METRICS_CONFIG, "create": True, "data": dcgm_metrics_csv()},
            "serviceMonitor": {
                "enabled": args.prometheus is not None,
                "interval": f"{args.scrape_interval_s}s",
                "honorLabels": True,
            },
        },
        # Controllers on the system pool; the operator's DaemonSets select GPU nodes themselves (NFD labels)
        # and tolerate the GPU taint through daemonsets.tolerations (chart default).
        "operator": {"nodeSelector": args.system_node_selector},
        "node-feature-discovery": {
            "master": {"nodeSelector": args.system_node_selector},
            "gc": {"nodeSelector": args.system_node_selector},
        },
    }


class GpuOperator(pulumi.ComponentResource):
    def __init__(self, name: str, args: GpuOperatorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:gpu_sharing:GpuOperator", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        # Google's installer: a GPU-node DaemonSet in kube-system (it tolerates every taint and selects
        # nodes with cloud.google.com/gke-accelerator and no GKE-managed driver).
        self.driver_installer = k8s.yaml.v2.ConfigFile(
            f"{name}-driver-installer", file=driver_installer_url(args.nvidia_driver), opts=child
        )
        # Privileged: the operator's GPU-node DaemonSets (device plugin, container toolkit, DCGM exporter,
        # validator, feature discovery) run privileged or with hostPath mounts to reach the driver and
        # containerd's config on the node.
        self.namespace = k8s_objects.create(
            f"{name}-ns", namespace(args.stack_id, NAMESPACE, "gpu-sharing", "privileged"), child
        )
        after_ns = pulumi.ResourceOptions(parent=self, depends_on=[self.namespace])
        quota = k8s_objects.create(
            f"{name}-critical-pods", critical_pods_quota(args.stack_id, NAMESPACE, "gpu-sharing"), after_ns
        )
        waits = [self.namespace, quota, self.driver_installer] + ([args.prometheus] if args.prometheus else [])
        self.release = HelmRelease(
            "gpu-operator",
            HelmReleaseArgs(
                chart=GPU_OPERATOR,
                namespace=NAMESPACE,
                values=gpu_operator_values(args),
                create_namespace=False,
                # The operator waits for a GPU node before its operands are ready; the release itself
                # (operator + NFD) is ready without one.
                timeout_s=900,
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=waits),
        )
        self.register_outputs({"namespace": NAMESPACE})
