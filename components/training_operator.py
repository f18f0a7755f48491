"""Kubeflow Training Operator v1 (PyTorchJob), standalone install, and the lab namespace for g4's job.

The stack installs the operator and prepares the namespace; the benchmark submits the job. It can
build it with `pytorch_job`, which the tests validate against the pinned PyTorchJob CRD.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import k8s_objects
from components.gpu_pool import GpuPlacement
from components.namespaces import namespace
from components.naming import k8s_labels
from components.versions import PYTORCH_IMAGE, TRAINING_OPERATOR_KUSTOMIZE, TRAINING_OPERATOR_VERSION
from stacks.config import LabConfig

OPERATOR_NAMESPACE = "kubeflow"  # set by the standalone overlay


def job_summary(cfg: LabConfig) -> dict[str, Any]:
    """What the g4 benchmark needs to submit and judge its PyTorchJob."""
    t = cfg.training_operator
    return {
        "namespace": t.namespace,
        "workers": t.workers,
        "world_size": t.workers,
        "gpus_per_worker": t.gpus_per_worker,
        "clean_pod_policy": t.clean_pod_policy,
        "image": PYTORCH_IMAGE,
        "operator_version": TRAINING_OPERATOR_VERSION,
    }


def pytorch_job(cfg: LabConfig, placement: GpuPlacement, name: str, command: list[str]) -> dict:
    """A PyTorchJob of `workers` pods (one Master + Workers) on the GPU pool, each with its GPU(s).

    Several pods share one L4 when time-slicing is on; NCCL refuses two ranks on one GPU, so a job
    on a single shared GPU must use the gloo backend.
    """
    t = cfg.training_operator

    def replica(count: int) -> dict:
        return {
            "replicas": count,
            "restartPolicy": "OnFailure",
            "template": {
                "metadata": {"labels": k8s_labels(cfg, "training")},
                "spec": {
                    "nodeSelector": placement.node_selector,
                    "tolerations": placement.tolerations,
                    "containers": [
                        {
                            "name": "pytorch",  # the operator finds the training container by this name
                            "image": PYTORCH_IMAGE,
                            "command": command,
                            "resources": {"limits": placement.limits(t.gpus_per_worker)},
                        }
                    ],
                },
            },
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": t.namespace, "labels": k8s_labels(cfg, "training")},
        "spec": {
            "runPolicy": {"cleanPodPolicy": t.clean_pod_policy},
            "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(t.workers - 1)},
        },
    }


@dataclass(frozen=True)
class TrainingOperatorArgs:
    cfg: LabConfig


class TrainingOperator(pulumi.ComponentResource):
    def __init__(self, name: str, args: TrainingOperatorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:training_operator:TrainingOperator", name, None, opts)
        cfg = args.cfg
        child = pulumi.ResourceOptions(parent=self)
        # The v1.9.4 overlay as released (namespace kubeflow, CRDs, webhook, operator). Its Deployment has
        # no GPU toleration, so it runs on the system pool.
        self.operator = k8s.kustomize.v2.Directory(
            f"{name}-standalone", directory=TRAINING_OPERATOR_KUSTOMIZE, opts=child
        )
        # After the operator, so destroy deletes the namespace (and the benchmark's PyTorchJobs in it)
        # while the operator and its CRD are still there, never a PyTorchJob left behind its controller.
        self.namespace = k8s_objects.create(
            f"{name}-lab-ns",
            namespace(cfg, cfg.training_operator.namespace, "training"),
            pulumi.ResourceOptions(parent=self, depends_on=[self.operator]),
        )
        self.register_outputs({"namespace": cfg.training_operator.namespace})
