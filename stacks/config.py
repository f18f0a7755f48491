"""The typed lab config: everything a `Pulumi.<stack>.yaml` may say, validated before any resource exists.

Keys live in the project's config namespace (`gke-ml-labs:<key>`). The base cluster and GPU pool are
flat keys (`gpu_max_nodes`, `zone`, ...) because users change them most often with
`pulumi config set`; each platform feature is one object key (`kueue: {...}`), defined in the
feature modules beside this one and switched on per lab by `stacks.labs`.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from facts.machines import G2_L4_COUNT, SYSTEM_MACHINE_TYPES
from facts.prices import L4_ZONES
from stacks import cluster_config, cost_features, platform_features, serving_features

LabName = Literal["dev", "g1", "g2", "g3", "g4", "g5", "g6", "g7", "g8"]

_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
_REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
# The machine types each pool accepts: the GPU pool's carry L4s, and the cost estimate prices them all.
_MACHINES = {
    "gpu_machine_type": (tuple(G2_L4_COUNT), "does not carry an L4"),
    "system_machine_type": (SYSTEM_MACHINE_TYPES, "is not a system machine type the cost estimate prices"),
}
# Every GCP name derives from the stack name (components.naming): the cluster gml-<stack> must end in a
# letter or digit, the longest service account id, gml-<stack>-model, has 30 characters at most, and
# the stack is a GCE label value (lowercase). Longer names would be cut to the same account id twice.
_STACK = re.compile(r"^[a-z0-9](?:[a-z0-9_-]{0,18}[a-z0-9])?$")


class Frozen(BaseModel):
    """Base for every config model: immutable, and a misspelt key is an error, never ignored."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class LabConfig(Frozen):
    """One stack's whole configuration. Defaults give the cheapest safe platform."""

    lab: LabName = Field(description="which lab this stack is (its defaults come from stacks/labs.py)")
    stack: str = Field(description="Pulumi stack name (set by the loader)")
    project: str | None = Field(description="GCP project id (from gcp:project); unused with cluster.target existing")
    region: str = Field("us-central1", description="GCP region (from gcp:region)")
    zone: str | None = Field(None, description="zone of the zonal cluster; default <region>-a")
    gpu_zones: list[str] | None = Field(
        None, description="zones the GPU pool may use (location_policy ANY picks one with stock)"
    )
    release_channel: Literal["RAPID", "REGULAR", "STABLE"] = Field("REGULAR", description="GKE release channel")
    # System pool: runs controllers, Prometheus, Grafana. e2-standard-4 fits the heaviest lab (g5).
    system_machine_type: str = Field(
        "e2-standard-4", description="machine type of the CPU pool for controllers and monitoring (e2-standard-2, -4, -8)"
    )
    system_min_nodes: int = Field(1, ge=1, le=10, description="CPU pool's minimum nodes")
    system_max_nodes: int = Field(2, ge=1, le=10, description="CPU pool's maximum nodes")
    system_spot: bool = Field(False, description="spot VMs for the CPU pool (controllers may be preempted)")
    # GPU pool: one L4 spot node at most, scaled from zero.
    gpu_machine_type: str = Field(
        "g2-standard-4", description="G2 machine type: -4/-8/-12/-16/-32 carry 1 L4, -24: 2, -48: 4, -96: 8"
    )
    gpu_accelerator: Literal["nvidia-l4"] = Field("nvidia-l4", description="the GPU every lab is written for")
    gpu_count: int | None = Field(
        None, ge=1, description="GPUs per node; default: what the machine type carries (must equal it)"
    )
    gpu_spot: bool = Field(True, description="spot GPU nodes (about 40% of the on-demand price; may be preempted)")
    gpu_min_nodes: int = Field(0, ge=0, le=16, description="GPU pool's minimum nodes (0: scales to zero)")
    gpu_max_nodes: int = Field(
        1, ge=1, le=16, description="GPU pool's maximum nodes; x GPUs per node must fit your L4 quota"
    )
    gpu_driver_version: Literal["DEFAULT", "LATEST", "INSTALLATION_DISABLED"] = Field(
        "LATEST", description="the NVIDIA driver GKE installs (INSTALLATION_DISABLED: the GPU Operator's own)"
    )
    gpu_disk_gb: int = Field(100, ge=50, le=2000, description="boot disk of a GPU node (images and model weights)")
    subnet_cidr: str = Field("10.10.0.0/20", description="the nodes' subnet; the three ranges must not overlap")
    pods_cidr: str = Field("10.20.0.0/14", description="secondary range for pods")
    services_cidr: str = Field("10.24.0.0/20", description="secondary range for services")
    labels: dict[str, str] = Field(
        default_factory=dict, description="extra GCE billing labels (every resource also gets lab, stack, managed-by)"
    )

    cluster: cluster_config.Cluster = cluster_config.Cluster()
    observability: platform_features.Observability = platform_features.Observability()
    gpu_sharing: platform_features.GpuSharing = platform_features.GpuSharing()
    kueue: platform_features.Kueue = platform_features.Kueue()
    training_operator: platform_features.TrainingOperator = platform_features.TrainingOperator()
    checkpoints: platform_features.Checkpoints = platform_features.Checkpoints()
    tenancy: platform_features.Tenancy = platform_features.Tenancy()
    kserve: serving_features.KServe = serving_features.KServe()
    vllm: serving_features.Vllm = serving_features.Vllm()
    autoscaling: serving_features.Autoscaling = serving_features.Autoscaling()
    argo: serving_features.Argo = serving_features.Argo()
    budget: cost_features.Budget = cost_features.Budget()
    idle_guard: cost_features.IdleGuard = cost_features.IdleGuard()
    cost_exporter: cost_features.CostExporter = cost_features.CostExporter()

    @field_validator("region")
    @classmethod
    def _region_shape(cls, v: str) -> str:
        if not _REGION.match(v):
            raise ValueError(f"{v!r} is not a GCP region name (like 'us-central1')")
        return v

    @field_validator("gpu_machine_type", "system_machine_type")
    @classmethod
    def _known_machine(cls, v: str, info: ValidationInfo) -> str:
        allowed, problem = _MACHINES[info.field_name]
        if v not in allowed:
            raise ValueError(f"{v!r} {problem}; allowed: {', '.join(allowed)}")
        return v

    @field_validator("subnet_cidr", "pods_cidr", "services_cidr")
    @classmethod
    def _cidr(cls, v: str) -> str:
        try:
            ipaddress.ip_network(v)
        except ValueError as e:
            raise ValueError(f"{v!r} is not a CIDR range like '10.10.0.0/20' ({e})") from None
        return v

    @field_validator("labels")
    @classmethod
    def _gce_labels(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if not _LABEL_KEY.match(key) or not _LABEL_VALUE.match(value):
                raise ValueError(
                    f"label {key}={value!r}: GCE labels are lowercase letters, digits, '_' and '-', "
                    "keys start with a letter, both at most 63 characters"
                )
        return v

    @model_validator(mode="after")
    def _consistent(self) -> LabConfig:
        problems: list[str] = []
        if not _STACK.match(self.stack):
            problems.append(
                f"stack name {self.stack!r}: the cluster, service accounts and billing labels are named after it; "
                "allowed: 1 to 20 lowercase letters, digits, '-' or '_', starting and ending with a letter or digit"
            )
        zone_ok = f"{self.region}-"
        # An existing cluster's zones are its own (cluster_config.check refuses zone keys there).
        for z in [] if self.cluster.existing else [self.zone] + (self.gpu_zones or []):
            if z is not None and (not z.startswith(zone_ok) or len(z) != len(zone_ok) + 1):
                problems.append(f"zone {z!r} is not in region {self.region} (expected {zone_ok}a, {zone_ok}b, ...)")
        # A region the catalogue does not list is left to preflight (and has no prices either, which
        # the estimate and the cost exporter report); in one it lists, a zone without L4 is refused.
        l4_zones = L4_ZONES.get(self.region)
        for z in self.gpu_node_zones if l4_zones and not self.cluster.existing else []:
            if z.startswith(zone_ok) and z not in l4_zones:
                problems.append(
                    f"GPU zone {z!r} does not offer L4 GPUs (the catalogue in facts/prices.py lists those of "
                    f"{self.region}: {', '.join(l4_zones)}): set zone or gpu_zones"
                )
        carried = G2_L4_COUNT.get(self.gpu_machine_type)
        if self.gpu_count is not None and carried is not None and self.gpu_count != carried:
            problems.append(
                f"gpu_count {self.gpu_count}: {self.gpu_machine_type} carries exactly {carried} L4 "
                f"(g2-standard-4/8/12/16/32: 1, -24: 2, -48: 4, -96: 8)"
            )
        if self.gpu_min_nodes > self.gpu_max_nodes:
            problems.append(f"gpu_min_nodes ({self.gpu_min_nodes}) is above gpu_max_nodes ({self.gpu_max_nodes})")
        if self.system_min_nodes > self.system_max_nodes:
            problems.append(
                f"system_min_nodes ({self.system_min_nodes}) is above system_max_nodes ({self.system_max_nodes})"
            )
        nets = {k: ipaddress.ip_network(getattr(self, k)) for k in ("subnet_cidr", "pods_cidr", "services_cidr")}
        names = list(nets)
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                if nets[a].overlaps(nets[b]):
                    problems.append(f"{a} {nets[a]} overlaps {b} {nets[b]}")
        problems += cluster_config.check(
            self.cluster,
            set_keys=self.model_fields_set,
            machine_type=self.gpu_machine_type,
            features={k: getattr(self, k) for k in ("checkpoints", "argo", "vllm", "budget", "tenancy", "gpu_sharing")},
        )
        pool = self.pool_capacity
        problems += platform_features.check(
            gpu_sharing=self.gpu_sharing,
            driver_version=self.gpu_driver_version,
            kueue=self.kueue,
            training_operator=self.training_operator,
            checkpoints=self.checkpoints,
            tenancy=self.tenancy,
            pool=pool,
        )
        problems += serving_features.check(
            kserve=self.kserve, vllm=self.vllm, autoscaling=self.autoscaling, argo=self.argo,
            observability=self.observability.enabled, pool=pool, driver=self.node_driver,
        )
        problems += cost_features.check(
            cost_exporter=self.cost_exporter,
            observability_enabled=self.observability.enabled,
            region=self.region,
            machine_types=(self.gpu_machine_type, self.system_machine_type),
        )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    # Derived values: computed here once so components never re-derive them.
    @property
    def cluster_zone(self) -> str:
        return self.zone or f"{self.region}-a"

    @property
    def gpu_node_zones(self) -> list[str]:
        return self.gpu_zones or [self.cluster_zone]

    @property
    def gpus_per_node(self) -> int:
        if self.cluster.existing:
            return self.cluster.gpu_nodes.gpus_per_node
        return self.gpu_count or G2_L4_COUNT[self.gpu_machine_type]

    @property
    def max_gpus(self) -> int:
        """Physical GPUs the pool can ever hold: what the L4 quota must cover."""
        return self.gpu_max_nodes * self.gpus_per_node

    @property
    def node_driver(self) -> platform_features.NodeDriver:
        if self.gpu_driver_version == "INSTALLATION_DISABLED":
            return platform_features.NodeDriver("gpu_sharing.nvidia_driver", self.gpu_sharing.nvidia_driver)
        return platform_features.NodeDriver("gpu_driver_version", self.gpu_driver_version)

    @property
    def pool_capacity(self) -> platform_features.PoolCapacity:
        """nvidia.com/gpu the GPU pool offers, time-slicing included."""
        replicas = self.gpu_sharing.replicas if self.gpu_sharing.enabled else 1
        return platform_features.PoolCapacity(self.gpu_max_nodes, self.gpus_per_node, replicas)

    @property
    def sha256(self) -> str:
        """Digest of the whole validated config (defaults included): which config a report ran against.
        Keys added after reports recorded digests are left out while they change nothing (a gke target,
        autoscaling off, vLLM's CPU at its default), so a config keeps the digest it had before the key existed."""
        unchanged = {"cluster": not self.cluster.existing, "autoscaling": not self.autoscaling.enabled}
        exclude: dict[str, Any] = {k: True for k, same in unchanged.items() if same}
        if self.vllm.cpu == type(self.vllm).model_fields["cpu"].default:
            exclude["vllm"] = {"cpu"}
        dump = self.model_dump_json(exclude=exclude or None)
        return hashlib.sha256(dump.encode()).hexdigest()

    @property
    def billing_labels(self) -> dict[str, str]:
        return {**self.labels, "lab": self.lab, "stack": self.stack, "managed-by": "pulumi", "app": "gke-ml-labs"}
