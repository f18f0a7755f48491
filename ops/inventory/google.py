"""Google's answers as status reads them: the fields read, as the APIs' REST references name them (every
other field ignored), one model per kind of thing the inventory lists (ops.inventory)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel


def tail(url: str) -> str:
    """The last part of a resource URL or path: its name."""
    return url.rsplit("/", 1)[-1]


class GoogleAnswer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", alias_generator=to_camel, populate_by_name=True)


def _int64(value: Any) -> Any:
    """Google writes int64 fields as JSON strings ("sizeGb": "100")."""
    return int(value) if isinstance(value, str) and value.isdigit() else value


class ComputeItem(GoogleAnswer):
    name: str
    creation_timestamp: str
    description: str = ""
    labels: dict[str, str] = {}
    zone: str = ""
    region: str = ""

    @property
    def where(self) -> str:
        return tail(self.zone or self.region) or "global"


class Accelerator(GoogleAnswer):
    accelerator_count: int = 0


class Scheduling(GoogleAnswer):
    provisioning_model: str = ""
    preemptible: bool = False


class Instance(ComputeItem):
    machine_type: str
    status: str
    guest_accelerators: list[Accelerator] = []
    scheduling: Scheduling = Scheduling()


class Disk(ComputeItem):
    type: str
    size_gb: int
    users: list[str] = []

    _sizes = field_validator("size_gb", mode="before")(_int64)


class Address(ComputeItem):
    address: str = ""
    address_type: str = "EXTERNAL"  # Google's default, omitted from the answer
    status: str
    users: list[str] = []


class ForwardingRule(ComputeItem):
    ip_address: str = Field("", alias="IPAddress")
    ip_protocol: str = Field("", alias="IPProtocol")
    load_balancing_scheme: str = ""
    target: str = ""
    network: str = ""


class TargetPool(ComputeItem):
    instances: list[str] = []
    health_checks: list[str] = []


class Firewall(ComputeItem):
    network: str
    target_tags: list[str] = []


class HealthCheck(ComputeItem):
    """compute#httpHealthCheck (what the service controller makes for a target pool) or compute#healthCheck."""


class Network(ComputeItem):
    pass


class Subnetwork(ComputeItem):
    network: str
    ip_cidr_range: str = ""


class NodePoolScaling(GoogleAnswer):
    enabled: bool = False
    min_node_count: int | None = None
    max_node_count: int | None = None
    total_min_node_count: int | None = None
    total_max_node_count: int | None = None


class NodeConfig(GoogleAnswer):
    machine_type: str = "?"
    spot: bool = False
    preemptible: bool = False


class NodePool(GoogleAnswer):
    name: str
    config: NodeConfig = NodeConfig()
    autoscaling: NodePoolScaling = NodePoolScaling()


class Cluster(GoogleAnswer):
    name: str
    location: str
    status: str = "?"
    create_time: str
    resource_labels: dict[str, str] = {}
    node_pools: list[NodePool] = []


class Bucket(GoogleAnswer):
    name: str
    location: str
    storage_class: str = "?"
    time_created: str
    labels: dict[str, str] = {}
    size: int | None = None  # summed from its objects (not Google's field)
    size_error: str | None = None  # why the objects could not be summed


class StorageObject(GoogleAnswer):
    size: int = 0

    _sizes = field_validator("size", mode="before")(_int64)


class HmacKey(GoogleAnswer):
    access_id: str
    service_account_email: str
    state: str
    time_created: str


class ServiceAccount(GoogleAnswer):
    email: str
    display_name: str = ""
    disabled: bool = False


class Location(GoogleAnswer):
    location_id: str


class Repository(GoogleAnswer):
    name: str  # projects/P/locations/L/repositories/R
    format: str = "?"
    mode: str = ""
    size_bytes: int = 0
    create_time: str
    labels: dict[str, str] = {}

    _sizes = field_validator("size_bytes", mode="before")(_int64)


class FileShare(GoogleAnswer):
    name: str = ""
    capacity_gb: int = 0

    _sizes = field_validator("capacity_gb", mode="before")(_int64)


class FilestoreInstance(GoogleAnswer):
    name: str  # projects/P/locations/L/instances/I
    tier: str = "?"
    state: str = "?"
    create_time: str
    labels: dict[str, str] = {}
    file_shares: list[FileShare] = []
