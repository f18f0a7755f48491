"""The g4 training controller and the lab namespace for its job: Kubeflow Trainer v2 (TrainJob on JobSet,
from its Helm chart with the torch-distributed ClusterTrainingRuntime) or, behind `training_operator.api:
v1`, the Training Operator v1 (PyTorchJob) from its standalone kustomize overlay.

The stack installs the controller and prepares the namespace; the g4 benchmark builds and submits the
TrainJob or PyTorchJob from the stack outputs (benchmarks/labs/g4.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s

from components import k8s_objects
from components.helm_release import ChartSource, HelmRelease, HelmReleaseArgs
from components.kueue import jobset_values
from components.namespaces import namespace
from components.naming import StackId, k8s_labels
from components.upstream_crds import UpstreamCrds
from components.versions import JOBSET, KUBEFLOW_TRAINER, TRAINING_OPERATOR_CRDS, TRAINING_OPERATOR_KUSTOMIZE

Api = Literal["trainer-v2", "v1"]
OPERATOR_NAMESPACE: dict[Api, str] = {
    "trainer-v2": "kubeflow-system",  # the Trainer docs' install namespace
    "v1": "kubeflow",  # set by the v1 standalone overlay
}
TORCH_RUNTIME = "torch-distributed"  # the built-in ClusterTrainingRuntime the TrainJob references
TORCH_RUNTIME_KEY = "torchDistributed"  # its key under `runtimes` in the chart's values.yaml


@dataclass(frozen=True)
class TrainingOperatorArgs:
    stack_id: StackId
    namespace: str  # the lab namespace the jobs run in
    system_node_selector: dict[str, str]  # where the controllers and the chart's hook Jobs run
    api: Api = "trainer-v2"
    # trainer-v2: the JobSet release already in the cluster (Kueue's), else None and the chart installs it.
    jobset: pulumi.Resource | None = None
    charts: ChartSource = "install"


def trainer_values(with_jobset: bool, system_node_selector: dict[str, str]) -> dict[str, Any]:
    """Chart values of Kubeflow Trainer v2.3.0: controllers on the system nodes, torch-distributed on."""
    values: dict[str, Any] = {
        "manager": {"nodeSelector": system_node_selector},
        "runtimes": {
            TORCH_RUNTIME_KEY: {"enabled": True},
            # The hook Jobs that apply (post-install) and remove (pre-delete) the runtimes.
            "installer": {"nodeSelector": system_node_selector},
        },
        # One JobSet controller per cluster: the chart's own only where Kueue's is not installed.
        "jobset": {"install": with_jobset},
    }
    if with_jobset:
        values["jobset"].update(jobset_values(system_node_selector))
    return values


class TrainingOperator(pulumi.ComponentResource):
    def __init__(self, name: str, args: TrainingOperatorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:training_operator:TrainingOperator", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        if args.api == "trainer-v2":
            self.operator: pulumi.Resource = HelmRelease(
                f"{name}-trainer",
                HelmReleaseArgs(
                    chart=KUBEFLOW_TRAINER,
                    namespace=OPERATOR_NAMESPACE["trainer-v2"],
                    values=trainer_values(args.jobset is None, args.system_node_selector),
                    labels=k8s_labels(args.stack_id, "training"),
                    # Baseline: the chart's runtime installer and clean-up hook Jobs run alpine as root
                    # (`apk add kubectl`) with no security settings of their own (templates/runtimes/).
                    pod_security="baseline",
                    source=args.charts,
                    subchart_crds=JOBSET.crds if args.jobset is None else (),
                ),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[args.jobset] if args.jobset else []),
            )
            # The TrainJob's pods are restricted (benchmarks.kube.objects); the controller adds nothing to them.
            lab_security = "restricted"
        else:
            # The v1.9.4 overlay as released (namespace kubeflow, CRDs, webhook, operator). Its Deployment
            # has no GPU toleration, so it runs on the system pool.
            self.operator = (
                k8s.kustomize.v2.Directory(f"{name}-standalone", directory=TRAINING_OPERATOR_KUSTOMIZE, opts=child)
                if args.charts == "install"
                else UpstreamCrds(f"{name}-standalone-crds", TRAINING_OPERATOR_CRDS, opts=child)
            )
            # Baseline, not restricted: the operator adds an init container (init-pytorch, waiting for
            # the master's DNS name) to every Worker pod with no security settings of its own
            # (pkg/controller.v1/pytorch/initcontainer.go at v1.9.4), so no Worker pod meets
            # restricted however we write it. The rest of each pod does (warn/audit report the gap).
            lab_security = "baseline"
        # After the operator, so destroy deletes the namespace (and the benchmark's jobs in it) while the
        # controller and its CRDs are still there, never a job left behind its controller.
        self.namespace = k8s_objects.create(
            f"{name}-lab-ns",
            namespace(args.stack_id, args.namespace, "training", lab_security),
            pulumi.ResourceOptions(parent=self, depends_on=[self.operator]),
        )
        self.register_outputs({"namespace": args.namespace})
