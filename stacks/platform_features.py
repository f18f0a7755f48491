"""Config of the platform features of labs g1-g4 and g8: observability, GPU sharing, Kueue,
Training Operator, checkpoints, tenancy.

Each model is one object key of the stack file (`gke-ml-labs:kueue: {...}`); `check` holds the rules
that span several keys (a quota against the GPU pool, a sharing mode against the driver install), over
the feature models and the pool's capacity that LabConfig hands it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

PREFIX = "gke-ml-labs"
# A Kubernetes namespace / object name (RFC 1123 label).
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
_DURATION = r"^[1-9][0-9]*(h|d|w)$"
# GKE accepts 2..48 clients per GPU for time-sharing (gpu_sharing_config.max_shared_clients_per_gpu).
MAX_SHARED_CLIENTS = 48
# Namespaces the platform itself uses; a tenant or lab namespace must not take one of them.
RESERVED_NAMESPACES = frozenset(
    {"default", "kube-system", "kube-public", "kube-node-lease", "monitoring", "gpu-operator", "kueue-system",
     "jobset-system", "kubeflow", "kubeflow-system"}
)


class _Feature(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    enabled: bool = False


class Observability(_Feature):
    """kube-prometheus-stack (Prometheus + Grafana) on the system pool, and a DCGM exporter on GPU nodes."""

    retention: str = Field("2d", pattern=_DURATION, description="Prometheus retention, e.g. 2d (h, d or w)")
    scrape_interval_s: int = Field(15, ge=5, le=120, description="Prometheus scrape interval in seconds")
    grafana: bool = Field(True, description="deploy Grafana with the lab dashboards")


class GpuSharing(_Feature):
    """Several pods on one L4 by time-slicing: GKE's own (`gke`) or the NVIDIA GPU Operator's (`nvidia`)."""

    mode: Literal["gke", "nvidia"] = Field(
        "gke",
        description="gke: gpu_sharing_config on the pool, GKE driver and device plugin; "
        "nvidia: NVIDIA GPU Operator device plugin with a time-slicing ConfigMap",
    )
    replicas: int = Field(4, ge=2, le=MAX_SHARED_CLIENTS, description="pods sharing each physical GPU")
    nvidia_driver: Literal["DEFAULT", "LATEST"] = Field(
        "LATEST",
        description="nvidia mode only: the driver Google's COS installer puts on nodes (GKE's own install is off)",
    )


class Kueue(_Feature):
    """Kueue + JobSet: one ResourceFlavor for the GPU pool, a ClusterQueue capped by quota, a LocalQueue.

    The g3 benchmark submits `jobs` JobSets of `workers` workers, one shared GPU each (`worker_*` is
    one worker's demand); a job starts only when all its workers are present. The quota must admit
    two whole jobs and not three, so one always waits; the GPU pool must hold what the quota admits
    and less than all the jobs, so that without Kueue the jobs contend for GPUs.
    """

    namespace: str = Field("batch-jobs", pattern=DNS_LABEL, description="lab namespace holding the LocalQueue")
    cluster_queue: str = Field("gpu-cluster-queue", pattern=DNS_LABEL)
    local_queue: str = Field("lab-queue", pattern=DNS_LABEL)
    flavor: str = Field("l4-spot", pattern=DNS_LABEL, description="ResourceFlavor name of the GPU pool")
    quota_gpus: int = Field(6, ge=1, description="nvidia.com/gpu nominal quota (shared GPUs count one each)")
    quota_cpu: float = Field(3, gt=0, description="CPU cores nominal quota")
    quota_memory_gib: float = Field(4, gt=0, description="memory nominal quota in GiB")
    jobs: int = Field(3, ge=3, description="jobs (JobSets) the lab's benchmark submits")
    workers: int = Field(3, ge=2, le=MAX_SHARED_CLIENTS, description="workers of one job, one shared GPU each")
    worker_cpu: float = Field(0.25, gt=0, description="CPU cores one worker requests")
    worker_memory_gib: float = Field(0.25, gt=0, description="memory in GiB one worker requests")
    # Above the time a GPU node takes from zero to allocatable GPUs (up to ~15 min on GKE), or
    # Kueue would evict every first job while its node is still booting.
    pods_ready_timeout_min: int = Field(20, ge=5, le=120, description="waitForPodsReady timeout in minutes")
    # On, Kueue admits nothing else until the last admitted job's pods are Ready (minutes on a GPU pool at
    # zero); the g3 report attributes each wait to quota or to this, from the Workloads' conditions.
    block_admission: bool = Field(
        True, description="waitForPodsReady.blockAdmission: admit one job at a time until its pods are Ready"
    )

    @property
    def job_demand(self) -> dict[str, float]:
        """What one whole job requests, per quota resource (each worker asks one shared GPU)."""
        return {"gpus": self.workers, "cpu": self.workers * self.worker_cpu,
                "memory_gib": self.workers * self.worker_memory_gib}  # fmt: skip


class TrainingOperator(_Feature):
    """Kubeflow Trainer v2 (TrainJob) or the Training Operator v1 (PyTorchJob), and a namespace ready for
    the g4 job."""

    api: Literal["trainer-v2", "v1"] = Field(
        "trainer-v2", description="trainer-v2: Kubeflow Trainer (TrainJob on JobSet); v1: Training Operator (PyTorchJob)"
    )
    namespace: str = Field("training", pattern=DNS_LABEL)
    workers: int = Field(2, ge=2, le=16, description="pods of the job (nodes of the TrainJob), i.e. world size")
    gpus_per_worker: int = Field(1, ge=1, description="nvidia.com/gpu each pod requests")
    clean_pod_policy: Literal["None", "Running", "All"] = Field(
        "None", description="api v1 only: PyTorchJob runPolicy.cleanPodPolicy, which pods are deleted when the job ends"
    )


class Checkpoints(_Feature):
    """A GCS bucket for checkpoints, written through Workload Identity (no keys), deleted with the stack."""

    namespace: str = Field("spot-jobs", pattern=DNS_LABEL)
    service_account: str = Field("checkpointer", pattern=DNS_LABEL, description="Kubernetes ServiceAccount name")
    delete_after_days: int = Field(7, ge=1, le=365, description="objects older than this are deleted")
    interval_s: int = Field(60, ge=10, le=3600, description="seconds between checkpoints of the g8 job")


class Tenant(BaseModel):
    """One team: a namespace with quota, limits, default-deny networking and RBAC for its Google group."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = Field(pattern=DNS_LABEL, description="namespace name")
    group: str = Field(description="Google group email bound to the tenant's Role")
    gpus: int = Field(1, ge=0, description="requests.nvidia.com/gpu quota")
    cpu: float = Field(4, gt=0, description="requests.cpu quota in cores")
    memory_gib: float = Field(16, gt=0, description="requests.memory quota in GiB")
    pods: int = Field(20, ge=1)

    @field_validator("group")
    @classmethod
    def _email(cls, v: str) -> str:
        if not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", v):
            raise ValueError(f"{v!r} is not a Google group email like ml-team@example.com")
        return v


class Tenancy(_Feature):
    """Tenants and PriorityClasses (serving > training > batch; batch never preempts)."""

    tenants: list[Tenant] = Field(default_factory=list)
    # Google Groups for RBAC: GKE resolves a tenant's group only when it is a member of this group,
    # which must be named gke-security-groups@<your domain>.
    security_group: str | None = Field(None, pattern=r"^gke-security-groups@[^@\s]+\.[^@\s]+$")


@dataclass(frozen=True)
class PoolCapacity:
    """What the GPU pool can offer: the limit every GPU quota and request is checked against."""

    max_nodes: int
    gpus_per_node: int  # physical GPUs
    sharing_replicas: int  # 1 without time-slicing

    @property
    def per_node(self) -> int:
        """Allocatable nvidia.com/gpu per GPU node: physical GPUs x time-slicing replicas."""
        return self.gpus_per_node * self.sharing_replicas

    @property
    def total(self) -> int:
        """nvidia.com/gpu the whole pool can ever offer (max_nodes nodes)."""
        return self.max_nodes * self.per_node

    def describe(self) -> str:
        return (
            f"the GPU pool offers at most {self.total} (gpu_max_nodes {self.max_nodes} x "
            f"{self.gpus_per_node} GPU(s) per node x {self.sharing_replicas} sharing replica(s))"
        )


@dataclass(frozen=True)
class NodeDriver:
    """The driver GPU nodes get and the key that chooses it: GKE's install (gpu_driver_version), or with
    that off (NVIDIA GPU Operator mode) Google's COS installer (gpu_sharing.nvidia_driver)."""

    key: str
    version: Literal["DEFAULT", "LATEST"]


def _sharing_problems(sharing: GpuSharing, driver_version: str) -> list[str]:
    nvidia = sharing.enabled and sharing.mode == "nvidia"
    problems = []
    if nvidia and driver_version != "INSTALLATION_DISABLED":
        problems.append(
            f"{PREFIX}:gpu_sharing.mode is 'nvidia' but {PREFIX}:gpu_driver_version is "
            f"{driver_version!r}: GKE's driver install and the NVIDIA GPU Operator exclude each other, so "
            f"set {PREFIX}:gpu_driver_version: INSTALLATION_DISABLED (or use gpu_sharing.mode: gke)"
        )
    if not nvidia and driver_version == "INSTALLATION_DISABLED":
        problems.append(
            f"{PREFIX}:gpu_driver_version INSTALLATION_DISABLED leaves GPU nodes without a driver unless "
            f"{PREFIX}:gpu_sharing is enabled with mode 'nvidia' (the GPU Operator mode installs it), "
            "allowed otherwise: DEFAULT, LATEST"
        )
    return problems


def _kueue_problems(q: Kueue, pool: PoolCapacity) -> list[str]:
    if not q.enabled:
        return []
    problems = []
    key = f"{PREFIX}:kueue"
    per_worker = {"gpus": "1 GPU", "cpu": f"{key}.worker_cpu {q.worker_cpu:g}",
                  "memory_gib": f"{key}.worker_memory_gib {q.worker_memory_gib:g}"}  # fmt: skip
    for resource, one_job in q.job_demand.items():
        quota = getattr(q, f"quota_{resource}")
        if quota < 2 * one_job:
            problems.append(
                f"{key}.quota_{resource} {quota:g} cannot admit two jobs of {key}.workers {q.workers} x "
                f"{per_worker[resource]}: allowed >= {2 * one_job:g}"
            )
    w = q.workers
    if q.quota_gpus >= 3 * w:
        problems.append(
            f"{key}.quota_gpus {q.quota_gpus} admits three jobs of {key}.workers {w} (one shared GPU each): the lab "
            f"needs two admitted and the rest waiting, allowed: {2 * w} to {3 * w - 1}"
        )
    admitted = min(q.quota_gpus // w, q.jobs) * w
    if admitted > pool.total:
        problems.append(
            f"{key}.quota_gpus {q.quota_gpus} admits {admitted // w} jobs of {w} workers ({admitted} shared GPUs), but "
            f"{pool.describe()}: admitted jobs would not all schedule: raise {PREFIX}:gpu_sharing.replicas or "
            f"{PREFIX}:gpu_max_nodes, or lower {key}.workers"
        )
    demand = q.jobs * w
    if pool.total >= demand:
        problems.append(
            f"{PREFIX}:gpu_sharing.replicas and {PREFIX}:gpu_max_nodes: {pool.describe()}, enough for all {q.jobs} jobs of {key}.workers {w} ({demand}): without Kueue they "
            f"would not contend and the lab's run without Kueue shows nothing; allowed at most {demand - 1}: lower "
            f"{PREFIX}:gpu_sharing.replicas or {PREFIX}:gpu_max_nodes"
        )
    return problems


def _training_problems(t: TrainingOperator, pool: PoolCapacity) -> list[str]:
    if not t.enabled:
        return []
    problems = []
    if t.api == "trainer-v2" and t.clean_pod_policy != "None":
        problems.append(
            f"{PREFIX}:training_operator.clean_pod_policy {t.clean_pod_policy!r} applies to api v1 only: a TrainJob has "
            "no cleanPodPolicy (its pods stay until the TrainJob is deleted): remove it, or set training_operator.api: v1"
        )
    demand = t.workers * t.gpus_per_worker
    if demand > pool.total:
        problems.append(
            f"{PREFIX}:training_operator: {t.workers} workers x {t.gpus_per_worker} GPU(s) = {demand}, but "
            f"{pool.describe()}: the job could never start all its pods"
        )
    return problems


def _tenancy_problems(t: Tenancy, labs_use: list[str], pool: PoolCapacity) -> list[str]:
    if not t.enabled:
        return []
    key = f"{PREFIX}:tenancy"
    if not t.tenants:
        return [f"{key}.tenants is empty: give at least one tenant (name, group), or set {key}.enabled false"]
    problems = []
    names = [tenant.name for tenant in t.tenants]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        problems.append(f"{key}.tenants: names {', '.join(duplicates)} appear more than once, names must be unique")
    taken = RESERVED_NAMESPACES | set(labs_use)
    for i, tenant in enumerate(t.tenants):
        if tenant.name in taken:
            problems.append(
                f"{key}.tenants[{i}].name {tenant.name!r} is a namespace the platform uses, "
                f"not allowed: {', '.join(sorted(taken))}"
            )
        if tenant.gpus > pool.total:
            problems.append(f"{key}.tenants[{i}].gpus {tenant.gpus} is above what {pool.describe()}")
    return problems


def lab_namespaces(kueue: Kueue, training_operator: TrainingOperator, checkpoints: Checkpoints) -> list[str]:
    """The namespaces the enabled lab features create for workloads."""
    return [f.namespace for f in (kueue, training_operator, checkpoints) if f.enabled]


def check(
    *,
    gpu_sharing: GpuSharing,
    driver_version: str,
    kueue: Kueue,
    training_operator: TrainingOperator,
    checkpoints: Checkpoints,
    tenancy: Tenancy,
    pool: PoolCapacity,
) -> list[str]:
    """Cross-field rules of these features; each problem names its keys and what is allowed."""
    namespaces = lab_namespaces(kueue, training_operator, checkpoints)
    problems = (
        _sharing_problems(gpu_sharing, driver_version)
        + _kueue_problems(kueue, pool)
        + _training_problems(training_operator, pool)
        + _tenancy_problems(tenancy, namespaces, pool)
    )
    clash = sorted({n for n in namespaces if namespaces.count(n) > 1 or n in RESERVED_NAMESPACES})
    if clash:
        problems.append(
            f"lab namespaces {', '.join(clash)} are used twice or are platform namespaces: give "
            f"{PREFIX}:kueue.namespace, {PREFIX}:training_operator.namespace and {PREFIX}:checkpoints.namespace "
            f"distinct names outside {', '.join(sorted(RESERVED_NAMESPACES))}"
        )
    return problems
