"""Kubeflow Training Operator v1 (PyTorchJob), standalone install, and the lab namespace for g4's job.

The stack installs the operator and prepares the namespace; the g4 benchmark builds and submits the
PyTorchJob from the stack outputs (benchmarks/labs/g4.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components import k8s_objects
from components.namespaces import namespace
from components.naming import StackId
from components.versions import TRAINING_OPERATOR_KUSTOMIZE

OPERATOR_NAMESPACE = "kubeflow"  # set by the standalone overlay


@dataclass(frozen=True)
class TrainingOperatorArgs:
    stack_id: StackId
    namespace: str  # the lab namespace the PyTorchJobs run in


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
