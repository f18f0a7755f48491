"""Config of the cluster target: where a lab's Kubernetes half is applied (the `cluster` key).

`target: gke` (the default) creates the GKE cluster and its pools, as every lab did before the key
existed. `target: existing` applies only the Kubernetes half to a cluster that already exists (a user's
own GKE cluster, any cluster with L4 nodes, or the local control plane the tests start), reached
through a kubeconfig context; nothing of Google is created, so the GKE-only keys and the features that
need Google are refused here, each naming its key (`check`). `cluster: gke` and `cluster: existing`
are accepted as short forms of `{target: ...}`.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from facts.machines import G2_L4_COUNT
from stacks.platform_features import PREFIX

KEY = f"{PREFIX}:cluster"
# GKE's labels and taint on every node of an L4 pool (GKE adds the taint to GPU nodes itself), so a
# GKE cluster with L4 nodes needs no gpu_nodes settings.
GKE_ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
GKE_GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
# Base keys that configure the GKE cluster, its network or its node pools, which `existing` does not
# create. The machine types, gpu_max_nodes and gpu_driver_version stay: they describe the existing
# nodes to the checks (GPU capacity, the driver vLLM needs) and to the cost figures.
GKE_ONLY_KEYS = (
    "zone", "gpu_zones", "release_channel", "system_min_nodes", "system_max_nodes", "system_spot",
    "gpu_count", "gpu_spot", "gpu_min_nodes", "gpu_disk_gb", "subnet_cidr", "pods_cidr", "services_cidr",
    "labels",
)  # fmt: skip
# Kubernetes label keys ([prefix/]name) and values, as the API server accepts them.
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_LABEL_NAME}$")
_LABEL_VALUE = re.compile(rf"^({_LABEL_NAME})?$")


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _selector(v: dict[str, str]) -> dict[str, str]:
    for key, value in v.items():
        if not _LABEL_KEY.match(key) or len(key.rpartition("/")[2]) > 63 or not _LABEL_VALUE.match(value):
            raise ValueError(
                f"{key}={value!r} is not a Kubernetes label: a key is [prefix/]name, a value at most 63 "
                "letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
            )
    return v


class Taint(_Model):
    """A taint the GPU nodes carry; every GPU pod tolerates it."""

    key: str = Field(description="taint key")
    value: str | None = Field(None, description="taint value; null: tolerated with operator Exists")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field("NoSchedule", description="taint effect")


class GpuNodes(_Model):
    """How GPU pods find the existing cluster's L4 nodes, and what each offers."""

    node_selector: dict[str, str] = Field(
        default_factory=lambda: {GKE_ACCELERATOR_LABEL: "nvidia-l4"},
        description="labels every GPU node carries; GPU pods select them (default: GKE's label on L4 nodes)",
    )
    taints: list[Taint] = Field(
        default_factory=lambda: [Taint(**GKE_GPU_TAINT)],
        description="taints of the GPU nodes, tolerated by GPU pods only (default: the one GKE puts on GPU nodes)",
    )
    gpus_per_node: int = Field(1, ge=1, le=8, description="physical L4s per GPU node (time-sharing not counted)")

    @field_validator("node_selector")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        return _selector(v)


class Cluster(_Model):
    """Where the lab is applied: a GKE cluster this stack creates, or an existing cluster (docs/existing-cluster.md)."""

    target: Literal["gke", "existing"] = Field(
        "gke", description="gke: create the GKE cluster and pools; existing: apply the Kubernetes half to a kubeconfig context"
    )
    kubeconfig: str | None = Field(None, description="existing: path of the kubeconfig file (~ expanded; relative to the project folder)")
    context: str | None = Field(None, description="existing: the kubeconfig context to apply the lab to")
    system_node_selector: dict[str, str] = Field(
        default_factory=dict,
        description="existing: labels of the nodes for controllers, monitoring and benchmark clients ({}: any untainted node)",
    )
    gpu_nodes: GpuNodes = Field(default_factory=GpuNodes, description="existing: the GPU nodes (fields below)")
    charts: Literal["install", "upstream-crds"] = Field(
        "install",
        description="existing: install: every chart and manifest as on GKE; upstream-crds: no network, each "
        "replaced by the CRDs of its pinned version from the upstream lock (docs/existing-cluster.md)",
    )
    bucket: str | None = Field(
        None,
        description="existing: a Cloud Storage bucket of yours for checkpoints (g8) and Argo's artefacts (g7); "
        "no bucket or IAM is created",
    )

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, data: Any) -> Any:
        return {"target": data} if isinstance(data, str) else data

    @field_validator("system_node_selector")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        return _selector(v)

    @model_validator(mode="after")
    def _fields_of_target(self) -> Cluster:
        if self.target == "gke":
            given = sorted(self.model_fields_set - {"target"})
            if given:
                raise ValueError(
                    f"{', '.join(given)}: only for target existing (target gke creates the cluster itself): "
                    "remove them, or set target: existing"
                )
            return self
        missing = [k for k in ("kubeconfig", "context") if not getattr(self, k)]
        if missing:
            raise ValueError(
                f"target existing needs {' and '.join(missing)}: the kubeconfig file and the context of the "
                "cluster to apply the lab to"
            )
        return self

    @property
    def existing(self) -> bool:
        return self.target == "existing"


def _refused(key: str, why: str, fix: str) -> str:
    return f"{PREFIX}:{key}: {why}, and {KEY}.target existing creates nothing of Google: {fix}"


def check(cluster: Cluster, *, set_keys: set[str], machine_type: str, features: dict[str, Any]) -> list[str]:
    """With target existing: the GKE-only keys the stack file sets, GPUs per node against the machine type
    that prices and sizes the nodes, and the features that need Google (a bucket without cluster.bucket,
    Workload Identity, the image cache, a billing budget, ...)."""
    if not cluster.existing:
        return []
    carried, gpus = G2_L4_COUNT[machine_type], cluster.gpu_nodes.gpus_per_node
    machines = sorted((m for m, n in G2_L4_COUNT.items() if n == gpus), key=lambda m: int(m.rsplit("-", 1)[1]))
    problems = [] if carried == gpus else [
        f"{KEY}.gpu_nodes.gpus_per_node {gpus}, but {PREFIX}:gpu_machine_type {machine_type} carries {carried} L4: set "
        f"gpu_machine_type to a G2 type with {gpus} ({', '.join(machines) or 'none has'}), the shape the checks and "
        "cost figures assume"
    ]
    problems += [
        f"{PREFIX}:{key}: configures the GKE cluster or its pools, which {KEY}.target existing does not "
        f"create: remove it" + (" (GPUs per node are cluster.gpu_nodes.gpus_per_node)" if key == "gpu_count" else "")
        for key in GKE_ONLY_KEYS
        if key in set_keys
    ]
    f = features
    bucket_fix = f"set {KEY}.bucket to a bucket of yours (docs/existing-cluster.md) or %s.enabled: false"
    if f["checkpoints"].enabled and cluster.bucket is None:
        problems.append(_refused("checkpoints.enabled", "checkpoints go to a Cloud Storage bucket", bucket_fix % "checkpoints"))
    if f["argo"].enabled and cluster.bucket is None:
        problems.append(_refused("argo.enabled", "the pipeline's artefacts go to a Cloud Storage bucket", bucket_fix % "argo"))
    if f["vllm"].enabled and f["vllm"].weights == "gcs":
        problems.append(_refused("vllm.weights", "gcs needs a bucket, Workload Identity and GKE's GCS FUSE add-on",
                                 "set vllm.weights: huggingface"))  # fmt: skip
    if f["vllm"].enabled and f["vllm"].image_streaming:
        problems.append(_refused("vllm.image_streaming", "it needs an Artifact Registry cache and GKE node pool settings",
                                 "set vllm.image_streaming: false"))  # fmt: skip
    if f["budget"].enabled:
        problems.append(_refused("budget.billing_account", "a budget is a Cloud Billing resource",
                                 "remove it (set a budget on your project yourself)"))  # fmt: skip
    if f["tenancy"].enabled and f["tenancy"].security_group:
        problems.append(_refused("tenancy.security_group", "Google Groups for RBAC is a setting of the GKE cluster",
                                 "remove it (set it on your cluster yourself)"))  # fmt: skip
    if f["gpu_sharing"].enabled and f["gpu_sharing"].mode == "nvidia":
        problems.append(_refused(
            "gpu_sharing.mode", "nvidia needs GKE's driver install off and a node label on a node pool this stack creates",
            "use mode gke and state the time-sharing your GPU nodes already have with gpu_sharing.replicas",
        ))  # fmt: skip
    return problems
