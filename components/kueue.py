"""Kueue and JobSet (their pinned charts), and the queueing objects of the GPU pool: one
ResourceFlavor, a ClusterQueue whose quota comes from config, and a LocalQueue in the lab namespace.

Admission is all-or-nothing (`waitForPodsReady`): a workload whose pods are not all ready in time is
evicted and requeued, so a multi-pod job never holds part of the quota for long while its other pods
wait. `blockAdmission` (admit nothing more until the admitted workload's pods are Ready) is a choice of
the lab config (stacks.platform_features.Kueue.block_admission), exported for the g3 report.
API `kueue.x-k8s.io/v1beta2` (0.20 stops serving v1beta1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import yaml

from components import k8s_objects
from components.helm_release import ChartSource, HelmRelease, HelmReleaseArgs
from components.namespaces import namespace
from components.naming import StackId, k8s_labels
from components.placement import GPU_RESOURCE, Placement
from components.versions import JOBSET, KUEUE

API_VERSION = "kueue.x-k8s.io/v1beta2"
NAMESPACE = "kueue-system"
JOBSET_NAMESPACE = "jobset-system"
# Job kinds Kueue manages: batch Job, JobSet, and the Training Operator's PyTorchJob.
INTEGRATIONS = ["batch/job", "jobset.x-k8s.io/jobset", "kubeflow.org/pytorchjob"]


@dataclass(frozen=True)
class KueueArgs:
    stack_id: StackId
    placement: Placement  # controllers on the system nodes; the ResourceFlavor describes the GPU nodes
    namespace: str  # the lab namespace holding the LocalQueue
    cluster_queue: str
    local_queue: str
    flavor: str  # ResourceFlavor name of the GPU pool
    quota_gpus: int  # nominal quotas of the ClusterQueue (shared GPUs count one each)
    quota_cpu: float  # cores
    quota_memory_gib: float
    # waitForPodsReady timeout: above the time a GPU node takes from zero to allocatable GPUs.
    pods_ready_timeout_min: int
    # waitForPodsReady.blockAdmission: every later workload waits until the admitted one's pods are Ready.
    block_admission: bool = True
    # The release serving the ServiceMonitor CRD, when the in-cluster Prometheus runs: Kueue then
    # exports its metrics through a ServiceMonitor. None: no metrics.
    prometheus: pulumi.Resource | None = None
    charts: ChartSource = "install"


def cpu_quantity(cores: float) -> str:
    return str(int(cores)) if float(cores).is_integer() else f"{round(cores * 1000)}m"


def memory_quantity(gib: float) -> str:
    return f"{int(gib)}Gi" if float(gib).is_integer() else f"{round(gib * 1024)}Mi"


def manager_config(args: KueueArgs) -> str:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2), as the chart's managerConfig takes it."""
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        # Quota and usage per ClusterQueue (kueue_cluster_queue_nominal_quota / _resource_usage) are
        # reported only with enableClusterQueueResources; the Kueue dashboard plots them.
        "metrics": {"bindAddress": ":8443", "enableClusterQueueResources": True},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {"groupKindConcurrency": {"Job.batch": 5, "Workload.kueue.x-k8s.io": 5}},
        "clientConnection": {"qps": 50, "burst": 100},
        "waitForPodsReady": {
            # Longer than a GPU node takes from zero to allocatable GPUs, or first jobs are evicted.
            "timeout": f"{args.pods_ready_timeout_min}m",
            "blockAdmission": args.block_admission,
            "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 60, "backoffMaxSeconds": 600},
        },
        "integrations": {"frameworks": INTEGRATIONS},
    }
    return yaml.safe_dump(config, sort_keys=False)


def kueue_values(args: KueueArgs) -> dict[str, Any]:
    return {
        "enablePrometheus": args.prometheus is not None,
        "controllerManager": {
            "nodeSelector": args.placement.system_node_selector,
            "manager": {
                "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}}
            },
        },
        "managerConfig": {"controllerManagerConfigYaml": manager_config(args)},
    }


def jobset_values(system_node_selector: dict[str, str]) -> dict[str, Any]:
    return {
        "controller": {
            "nodeSelector": system_node_selector,
            "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}},
        }
    }


def resource_flavor(args: KueueArgs) -> dict:
    """The GPU nodes as a Kueue flavor: their labels, and the toleration of their taints for admitted pods."""
    gpu = args.placement.gpu
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": {"name": args.flavor, "labels": k8s_labels(args.stack_id, "kueue")},
        "spec": {"nodeLabels": gpu.node_selector, "tolerations": gpu.tolerations},
    }


def cluster_queue(args: KueueArgs) -> dict:
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": args.cluster_queue, "labels": k8s_labels(args.stack_id, "kueue")},
        "spec": {
            "namespaceSelector": {},  # LocalQueues of any namespace (lab and tenants) may point here
            # Strict creation order: the job that waits is the last one submitted, every run.
            "queueingStrategy": "StrictFIFO",
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", GPU_RESOURCE],
                    "flavors": [
                        {
                            "name": args.flavor,
                            "resources": [
                                {"name": "cpu", "nominalQuota": cpu_quantity(args.quota_cpu)},
                                {"name": "memory", "nominalQuota": memory_quantity(args.quota_memory_gib)},
                                {"name": GPU_RESOURCE, "nominalQuota": str(args.quota_gpus)},
                            ],
                        }
                    ],
                }
            ],
        },
    }


def local_queue(stack_id: StackId, ns: str, name: str, cluster_queue_name: str) -> dict:
    return {
        "apiVersion": API_VERSION,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": ns, "labels": k8s_labels(stack_id, "kueue")},
        "spec": {"clusterQueue": cluster_queue_name},
    }


class Kueue(pulumi.ComponentResource):
    def __init__(self, name: str, args: KueueArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:kueue:Kueue", name, None, opts)
        labels = k8s_labels(args.stack_id, "kueue")
        self.jobset = HelmRelease(
            "jobset",
            # The chart's only pod, the controller, runs non-root with RuntimeDefault seccomp, no privilege
            # escalation and every capability dropped (its values.yaml): restricted.
            HelmReleaseArgs(
                chart=JOBSET,
                namespace=JOBSET_NAMESPACE,
                values=jobset_values(args.placement.system_node_selector),
                labels=labels,
                pod_security="restricted",
                source=args.charts,
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        # Kueue enables its JobSet integration only if the JobSet CRD exists when it starts.
        waits = [self.jobset] + ([args.prometheus] if args.prometheus else [])
        self.release = HelmRelease(
            "kueue",
            # The controller manager (KueueViz is off by default) is restricted by the chart's own
            # podSecurityContext and containerSecurityContext (values.yaml).
            HelmReleaseArgs(
                chart=KUEUE,
                namespace=NAMESPACE,
                values=kueue_values(args),
                labels=labels,
                pod_security="restricted",
                source=args.charts,
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=waits),
        )
        after_kueue = pulumi.ResourceOptions(parent=self, depends_on=[self.release])
        # After Kueue (which waits for JobSet), so destroy deletes the namespace, and the benchmark's
        # Jobs/JobSets and their Workloads in it, while Kueue still runs to clear the Workloads'
        # finalizers; otherwise the namespace hangs in Terminating and the cluster is never deleted.
        self.lab_namespace = k8s_objects.create(
            f"{name}-lab-ns", namespace(args.stack_id, args.namespace, "kueue", "restricted"), after_kueue
        )
        self.flavor = k8s_objects.create(f"{name}-flavor", resource_flavor(args), after_kueue)
        self.cluster_queue = k8s_objects.create(
            f"{name}-cluster-queue",
            cluster_queue(args),
            pulumi.ResourceOptions(parent=self, depends_on=[self.release, self.flavor]),
        )
        self.local_queue = k8s_objects.create(
            f"{name}-local-queue",
            local_queue(args.stack_id, args.namespace, args.local_queue, args.cluster_queue),
            pulumi.ResourceOptions(parent=self, depends_on=[self.release, self.cluster_queue, self.lab_namespace]),
        )
        self.register_outputs({"cluster_queue": args.cluster_queue})
