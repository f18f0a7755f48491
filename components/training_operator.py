"""Kubeflow Training Operator v1 (PyTorchJob), standalone install, and the lab namespace for g4's job.

The stack installs the operator and prepares the namespace; the benchmark submits the job. It can
build it with `pytorch_job`, which the tests validate against the pinned PyTorchJob CRD.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components import k8s_objects
from components.gpu_pool import GpuPlacement
from components.namespaces import namespace
from components.naming import StackId, k8s_labels
from components.versions import PYTORCH_IMAGE, TRAINING_OPERATOR_KUSTOMIZE
from podspec.security import restricted

OPERATOR_NAMESPACE = "kubeflow"  # set by the standalone overlay


@dataclass(frozen=True)
class TrainingOperatorArgs:
    stack_id: StackId
    namespace: str  # the lab namespace the PyTorchJobs run in


@dataclass(frozen=True)
class PyTorchJobArgs:
    stack_id: StackId
    namespace: str
    workers: int  # pods in all (one Master, the rest Workers): the world size
    gpus_per_worker: int
    clean_pod_policy: str  # runPolicy.cleanPodPolicy: None, Running or All


def pytorch_job(job: PyTorchJobArgs, placement: GpuPlacement, name: str, command: list[str]) -> dict:
    """A PyTorchJob of `workers` pods (one Master + Workers) on the GPU pool, each with its GPU(s).

    Several pods share one L4 when time-slicing is on; NCCL refuses two ranks on one GPU, so a job
    on a single shared GPU must use the gloo backend.
    """

    def replica(count: int) -> dict:
        return {
            "replicas": count,
            "restartPolicy": "OnFailure",
            "template": {
                "metadata": {"labels": k8s_labels(job.stack_id, "training")},
                "spec": restricted({
                    "nodeSelector": placement.node_selector,
                    "tolerations": placement.tolerations,
                    "containers": [
                        {
                            "name": "pytorch",  # the operator finds the training container by this name
                            "image": PYTORCH_IMAGE,
                            "command": command,
                            # A small CPU request: the pods may share one node (time-shared GPU).
                            "resources": {
                                "requests": {"cpu": "250m"},
                                "limits": {"cpu": "1", **placement.limits(job.gpus_per_worker)},
                            },
                        }
                    ],
                }),
            },
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": job.namespace, "labels": k8s_labels(job.stack_id, "training")},
        "spec": {
            "runPolicy": {"cleanPodPolicy": job.clean_pod_policy},
            "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(job.workers - 1)},
        },
    }


class TrainingOperator(pulumi.ComponentResource):
    def __init__(self, name: str, args: TrainingOperatorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:training_operator:TrainingOperator", name, None, opts)
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
            # Baseline, not restricted: the operator adds an init container (init-pytorch, waiting for
            # the master's DNS name) to every Worker pod with no security settings of its own
            # (pkg/controller.v1/pytorch/initcontainer.go at v1.9.4), so no Worker pod meets
            # restricted however we write it. The rest of each pod does (warn/audit report the gap).
            namespace(args.stack_id, args.namespace, "training", "baseline"),
            pulumi.ResourceOptions(parent=self, depends_on=[self.operator]),
        )
        self.register_outputs({"namespace": args.namespace})
