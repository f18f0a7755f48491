"""Everything of gke-ml-labs left in a project, read from the Google APIs (never from Pulumi state, which a
failed destroy can leave wrong), in every zone and region, each priced at list price from facts/prices.py
or said to have no price there. Read-only calls only.

What is ours, by one rule (`Ownership`):
- it carries the label app=gke-ml-labs (every stack sets it: stacks.config.LabConfig.billing_labels);
- its name is one of ours: `gml-<stack>...` (components.naming) or `gke-gml-<stack>-...` (GKE's names for the
  node VMs, boot disks and firewall rules of our clusters);
- GKE tied it to one of our clusters without our label: a PVC disk's `goog-k8s-cluster-name`, or a load
  balancer GKE made for a LoadBalancer Service (kubernetes/cloud-provider-gcp's gce_loadbalancer_naming.go):
  the forwarding rule, target pool, address and health check named after the Service's load balancer
  (`a<uid>`), whose firewall rule `k8s-fw-<that name>` is on our network or whose pool holds our nodes; the
  health check `k8s-<cluster id>-node` whose firewall rule `k8s-<cluster id>-node-http-hc` is on our network.
  Their description is JSON naming the Service (`kubernetes.io/service-name`), which the line quotes.

The kinds listed are those any lab's plan can create (tests/test_ops_inventory.py derives them from every
stack's plan and fails on a Google resource type without a lister here) and those GKE makes for them.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from facts import prices
from ops.gcp import GcpClient, GcpError, host, validated

APP_LABEL = ("app", "gke-ml-labs")
OUR_PREFIX = "gml-"  # components.naming.resource_name
GKE_PREFIX = "gke-gml-"  # GKE names what it makes for cluster gml-<stack>: gke-gml-<stack>-...
GPU_MACHINE_PREFIXES = ("g2-", "a2-", "a3-", "a4-")
# GCE labels GKE puts on node VMs and PVC disks: which cluster and node pool they belong to.
NODE_CLUSTER_LABEL, NODE_POOL_LABEL = "goog-k8s-cluster-name", "goog-k8s-node-pool-name"
VOLUME_LABEL = "goog-gke-volume"
SERVICE_NAME = "kubernetes.io/service-name"  # in the JSON description of a load balancer's parts
PVC_NAME, PVC_NAMESPACE = "kubernetes.io/created-for/pvc/name", "kubernetes.io/created-for/pvc/namespace"
FIREWALL_PREFIX = "k8s-fw-"
NOT_BILLING = ("TERMINATED", "STOPPED")  # a stopped VM bills only its disks, which are listed themselves

Kind = Literal[
    "cluster", "VM", "disk", "address", "forwarding rule", "target pool", "firewall rule", "health check",
    "network", "subnetwork", "bucket", "HMAC key", "service account", "repository", "Filestore instance",
]  # fmt: skip
KINDS: tuple[Kind, ...] = Kind.__args__  # type: ignore[attr-defined]
_PLURAL = {"address": "addresses"}


def plural(kind: str, count: int) -> str:
    return f"{count} {kind if count == 1 else _PLURAL.get(kind, kind + 's')}"


class Billable(BaseModel):
    """One thing of ours left in a project: what, where, since when, at what list price (or why none)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Kind
    name: str
    where: str
    lab: str
    detail: str
    since: datetime | None  # None: the API gives no creation time (service accounts)
    hourly_usd: float | None  # None: no list price in facts/prices.py
    price: str  # the list price as its source states it (per hour, per month, per GiB-month), or why none
    gpus: int = 0
    node_of: tuple[str, str] | None = None  # a GKE node VM: (cluster, node pool)

    def hours_up(self, now: datetime) -> float | None:
        return None if self.since is None else max((now - self.since).total_seconds(), 0) / 3600

    def cost_so_far(self, now: datetime) -> float | None:
        hours = self.hours_up(now)
        return None if self.hourly_usd is None or hours is None else self.hourly_usd * hours

    def line(self, now: datetime) -> str:
        cost, hours = self.cost_so_far(now), self.hours_up(now)
        so_far = "cost so far not known" if cost is None else f"${cost:.2f} so far"
        since = "since not known" if self.since is None else f"since {self.since.isoformat()} ({hours:.1f} h)"
        return f"{self.kind} {self.name} ({self.where}, lab {self.lab}): {self.detail}; {since}; {self.price}, {so_far}"


class Incomplete(GcpError):
    """A list call answered only in part (Container's `missingZones`, Compute's `unreachables`, Filestore's
    `unreachable`): what it found, and what not."""

    def __init__(self, message: str, found: list):
        super().__init__(message)
        self.found = found


# --- Google's answers: the fields read, as the APIs' REST references name them -----------------------


class _Google(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", alias_generator=to_camel, populate_by_name=True)


def _int64(value: Any) -> Any:
    """Google writes int64 fields as JSON strings ("sizeGb": "100")."""
    return int(value) if isinstance(value, str) and value.isdigit() else value


class _Compute(_Google):
    name: str
    creation_timestamp: str
    description: str = ""
    labels: dict[str, str] = {}
    zone: str = ""
    region: str = ""

    @property
    def where(self) -> str:
        return _tail(self.zone or self.region) or "global"


class Accelerator(_Google):
    accelerator_count: int = 0


class Scheduling(_Google):
    provisioning_model: str = ""
    preemptible: bool = False


class Instance(_Compute):
    machine_type: str
    status: str
    guest_accelerators: list[Accelerator] = []
    scheduling: Scheduling = Scheduling()


class Disk(_Compute):
    type: str
    size_gb: int
    users: list[str] = []

    _sizes = field_validator("size_gb", mode="before")(_int64)


class Address(_Compute):
    address: str = ""
    address_type: str = "EXTERNAL"  # Google's default, omitted from the answer
    status: str
    users: list[str] = []


class ForwardingRule(_Compute):
    ip_address: str = Field("", alias="IPAddress")
    ip_protocol: str = Field("", alias="IPProtocol")
    load_balancing_scheme: str = ""
    target: str = ""
    network: str = ""


class TargetPool(_Compute):
    instances: list[str] = []
    health_checks: list[str] = []


class Firewall(_Compute):
    network: str
    target_tags: list[str] = []


class HealthCheck(_Compute):
    """compute#httpHealthCheck (what the service controller makes for a target pool) or compute#healthCheck."""


class Network(_Compute):
    pass


class Subnetwork(_Compute):
    network: str
    ip_cidr_range: str = ""


class NodePoolScaling(_Google):
    enabled: bool = False
    min_node_count: int | None = None
    max_node_count: int | None = None
    total_min_node_count: int | None = None
    total_max_node_count: int | None = None


class NodeConfig(_Google):
    machine_type: str = "?"
    spot: bool = False
    preemptible: bool = False


class NodePool(_Google):
    name: str
    config: NodeConfig = NodeConfig()
    autoscaling: NodePoolScaling = NodePoolScaling()


class Cluster(_Google):
    name: str
    location: str
    status: str = "?"
    create_time: str
    resource_labels: dict[str, str] = {}
    node_pools: list[NodePool] = []


class Bucket(_Google):
    name: str
    location: str
    storage_class: str = "?"
    time_created: str
    labels: dict[str, str] = {}
    size: int | None = None  # summed from its objects (not Google's field)
    size_error: str | None = None  # why the objects could not be summed


class StorageObject(_Google):
    size: int = 0

    _sizes = field_validator("size", mode="before")(_int64)


class HmacKey(_Google):
    access_id: str
    service_account_email: str
    state: str
    time_created: str


class ServiceAccount(_Google):
    email: str
    display_name: str = ""
    disabled: bool = False


class Location(_Google):
    location_id: str


class Repository(_Google):
    name: str  # projects/P/locations/L/repositories/R
    format: str = "?"
    mode: str = ""
    size_bytes: int = 0
    create_time: str
    labels: dict[str, str] = {}

    _sizes = field_validator("size_bytes", mode="before")(_int64)


class FileShare(_Google):
    name: str = ""
    capacity_gb: int = 0

    _sizes = field_validator("capacity_gb", mode="before")(_int64)


class FilestoreInstance(_Google):
    name: str  # projects/P/locations/L/instances/I
    tier: str = "?"
    state: str = "?"
    create_time: str
    labels: dict[str, str] = {}
    file_shares: list[FileShare] = []


# --- listing -----------------------------------------------------------------------------------------

Item = TypeVar("Item", bound=_Google)


def _tail(url: str) -> str:
    return url.rsplit("/", 1)[-1]


def _since(stamp: str) -> datetime:
    """In UTC: Compute writes Pacific time, the other APIs UTC (RFC 3339)."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(timezone.utc)


def _region(location: str) -> str:
    """us-central1-a -> us-central1; a region stays itself."""
    return location.rsplit("-", 1)[0] if location.count("-") == 2 else location


def listed(client: GcpClient, api: str, path: str, key: str, item: type[Item], kind: str | None = None,
           **params: Any) -> list[Item]:  # fmt: skip
    """Every item of a list call, each page's `key` read as a list of `item`."""
    out: list[Item] = []
    for n, page in enumerate(client.pages(api, path, kind=kind, **params), start=1):
        out += validated(list[item], page.get(key, []), f"{host(api)}: GET {path} (page {n}) {key}")
    return out


def aggregated(client: GcpClient, project: str, collection: str, item: type[Item], kind: str) -> list[Item]:
    """Compute's aggregatedList of `collection` (every zone or region, every page); scopes Compute could
    not reach make it Incomplete."""
    out: list[Item] = []
    unreachable: list[str] = []
    path = f"projects/{project}/aggregated/{collection}"
    for n, page in enumerate(client.pages("compute", path, kind=kind), start=1):
        what = f"{host('compute')}: GET {path} (page {n})"
        for scope, scoped in validated(dict[str, dict[str, Any]], page.get("items", {}), f"{what} items").items():
            out += validated(list[item], scoped.get(collection, []), f"{what} items.{scope}.{collection}")
        unreachable += validated(list[str], page.get("unreachables", []), f"{what} unreachables")
    if unreachable:
        raise Incomplete(f"these scopes did not answer, their {collection} are unknown: {', '.join(unreachable)}", out)
    return out


def global_list(client: GcpClient, project: str, collection: str, item: type[Item], kind: str) -> list[Item]:
    return listed(client, "compute", f"projects/{project}/global/{collection}", "items", item, kind)


class Ownership:
    """Whether a thing is ours, and which stack's: by our label, our names, or GKE's own ties (module doc)."""

    def __init__(self, stacks: Iterable[str]):
        self.stacks = sorted(stacks, key=len, reverse=True)  # gml-g6-x is g6's before it is g's

    def stack_of_name(self, name: str) -> str | None:
        """gml-g6-dockerhub -> g6; gke-gml-g6-system-9z1c-x1 -> g6; a name of ours of no known stack -> ?."""
        for prefix in (GKE_PREFIX, OUR_PREFIX):
            if name.startswith(prefix):
                rest = name[len(prefix) :]
                return next((s for s in self.stacks if rest == s or rest.startswith(f"{s}-")), "?")
        return None

    def lab(self, labels: dict[str, str], name: str) -> str | None:
        """The lab (or stack) a labelled or named thing belongs to; None: not ours."""
        if labels.get(APP_LABEL[0]) == APP_LABEL[1]:
            return labels.get("lab", "?")
        cluster = labels.get(NODE_CLUSTER_LABEL)
        return self.stack_of_name(cluster) if cluster else self.stack_of_name(name)


# What each kind is read from: (name as lines say it, API key, fetch). A fetch returns Google's items, ours
# and not (ownership needs the whole graph of a load balancer), except where it must read more of ours.
Fetch = Callable[[GcpClient, str, Ownership], list]


def _buckets(client: GcpClient, project: str, own: Ownership) -> list[Bucket]:
    """Our buckets (Cloud Storage lists cannot filter by label: it is checked here) and what they hold,
    summed over their objects; a bucket whose objects cannot be listed is kept, its size unknown."""
    found = []
    for bucket in listed(client, "storage", "b", "items", Bucket, "storage#buckets", project=project):
        if own.lab(bucket.labels, bucket.name) is None:
            continue
        try:
            objects = listed(client, "storage", f"b/{bucket.name}/o", "items", StorageObject, "storage#objects",
                             fields="kind,items(size),nextPageToken")  # fmt: skip
            found.append(bucket.model_copy(update={"size": sum(o.size for o in objects)}))
        except GcpError as e:
            found.append(bucket.model_copy(update={"size_error": str(e)}))
    return found


def _repositories(client: GcpClient, project: str, own: Ownership) -> list[Repository]:
    """Artifact Registry lists repositories one location at a time (no `-` wildcard): every location."""
    locations = listed(client, "artifactregistry", f"projects/{project}/locations", "locations", Location)
    return [
        repo
        for location in locations
        for repo in listed(client, "artifactregistry", f"projects/{project}/locations/{location.location_id}/repositories",
                           "repositories", Repository)  # fmt: skip
    ]


def _filestore(client: GcpClient, project: str, own: Ownership) -> list[FilestoreInstance]:
    path = f"projects/{project}/locations/-/instances"
    found, unreachable = [], []
    for n, page in enumerate(client.pages("file", path), start=1):
        what = f"{host('file')}: GET {path} (page {n})"
        found += validated(list[FilestoreInstance], page.get("instances", []), f"{what} instances")
        unreachable += validated(list[str], page.get("unreachable", []), f"{what} unreachable")
    if unreachable:
        raise Incomplete(f"these locations did not answer, their instances are unknown: {', '.join(unreachable)}", found)
    return found


def _clusters(client: GcpClient, project: str, own: Ownership) -> list[Cluster]:
    answer = client.get("container", f"projects/{project}/locations/-/clusters")
    what = f"{host('container')}: GET projects/{project}/locations/-/clusters"
    found = validated(list[Cluster], answer.get("clusters", []), f"{what} clusters")
    missing = validated(list[str], answer.get("missingZones", []), f"{what} missingZones")
    if missing:
        raise Incomplete(f"these zones did not answer, their clusters are unknown: {', '.join(missing)}", found)
    return found


def _health_checks(client: GcpClient, project: str, own: Ownership) -> list[HealthCheck]:
    """The legacy HTTP health checks the service controller gives a target pool, and the newer kind."""
    return (global_list(client, project, "httpHealthChecks", HealthCheck, "compute#httpHealthCheckList")
            + aggregated(client, project, "healthChecks", HealthCheck, "compute#healthChecksAggregatedList"))  # fmt: skip


def _compute_with_global(collection: str, item: type[Item], singular: str) -> Fetch:
    """Addresses and forwarding rules: regional (aggregated) and global (a global load balancer's)."""

    def fetch(client: GcpClient, project: str, own: Ownership) -> list[Item]:
        return (aggregated(client, project, collection, item, f"compute#{singular}AggregatedList")
                + global_list(client, project, collection, item, f"compute#{singular}List"))  # fmt: skip

    return fetch


@dataclass(frozen=True)
class Lister:
    api: str
    fetch: Fetch


# Every kind status lists, in report order (clusters after VMs: a cluster's line counts its nodes).
LISTERS: dict[str, Lister] = {
    "VMs": Lister("compute", lambda c, p, o: aggregated(c, p, "instances", Instance, "compute#instanceAggregatedList")),
    "clusters": Lister("container", _clusters),
    "disks": Lister("compute", lambda c, p, o: aggregated(c, p, "disks", Disk, "compute#diskAggregatedList")),
    "addresses": Lister("compute", _compute_with_global("addresses", Address, "address")),
    "forwarding rules": Lister("compute", _compute_with_global("forwardingRules", ForwardingRule, "forwardingRule")),
    "target pools": Lister("compute", lambda c, p, o: aggregated(c, p, "targetPools", TargetPool,
                                                                   "compute#targetPoolAggregatedList")),
    "firewall rules": Lister("compute", lambda c, p, o: global_list(c, p, "firewalls", Firewall, "compute#firewallList")),
    "health checks": Lister("compute", _health_checks),
    "networks": Lister("compute", lambda c, p, o: global_list(c, p, "networks", Network, "compute#networkList")),
    "subnetworks": Lister("compute", lambda c, p, o: aggregated(c, p, "subnetworks", Subnetwork,
                                                                  "compute#subnetworkAggregatedList")),
    "buckets": Lister("storage", _buckets),
    "HMAC keys": Lister("storage", lambda c, p, o: listed(c, "storage", f"projects/{p}/hmacKeys", "items", HmacKey,
                                                          "storage#hmacKeysMetadata")),
    "service accounts": Lister("iam", lambda c, p, o: listed(c, "iam", f"projects/{p}/serviceAccounts", "accounts",
                                                             ServiceAccount)),
    "repositories": Lister("artifactregistry", _repositories),
    "Filestore instances": Lister("file", _filestore),
}  # fmt: skip

# The Google resource types the labs' plans create (pulumi-gcp type tokens): the kind whose lister finds
# them, or why none is needed; tests/test_ops_inventory.py fails on a planned type missing here.
PLANNED: dict[str, str] = {
    "gcp:container/cluster:Cluster": "clusters",
    "gcp:container/nodePool:NodePool": "clusters",  # its VMs and boot disks are listed as VMs and disks too
    "gcp:compute/network:Network": "networks",
    "gcp:compute/subnetwork:Subnetwork": "subnetworks",
    "gcp:storage/bucket:Bucket": "buckets",
    "gcp:storage/bucketIAMMember:BucketIAMMember": "buckets",  # a line of the bucket's policy: goes with it
    "gcp:serviceaccount/account:Account": "service accounts",
    "gcp:serviceaccount/iAMMember:IAMMember": "service accounts",  # a line of the account's policy
    "gcp:artifactregistry/repository:Repository": "repositories",
    "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember": "repositories",  # a line of its policy
    "gcp:projects/service:Service": "enabled APIs",
    "gcp:projects/iAMMember:IAMMember": "project IAM bindings",
    "gcp:billing/budget:Budget": "billing budgets",
    "gcp:projects/serviceIdentity:ServiceIdentity": "service agents",
    "gcp:secretmanager/secretIamMember:SecretIamMember": "Secret Manager IAM bindings",
}
# What status does not list, named in its verdict (the planned kinds above without a lister, and what GKE
# makes for an internal load balancer beside its forwarding rule), each with why.
NOT_LISTED: dict[str, str] = {
    "enabled APIs": "left enabled on destroy by design (components/apis.py), no charge",
    "project IAM bindings": "lines of the project's policy, no charge",
    "billing budgets": "kept on the billing account, not in the project",
    "service agents": "Google's own identities of its APIs, which no destroy removes, no charge",
    "Secret Manager IAM bindings": "lines of the policy of one's own Docker Hub token secret, no charge",
    "backend services and instance groups of GKE internal load balancers": "no list price of their own; "
    "their forwarding rule is listed",
}


# --- what is ours, priced ----------------------------------------------------------------------------


def _hourly(per_hour: float | None, unit: str = "/h") -> str:
    return f"${per_hour:.4f}{unit}"


def _service(description: str) -> str | None:
    """The Service a load balancer's part was made for, from its JSON description."""
    try:
        named = json.loads(description)
    except ValueError:
        return None
    return named.get(SERVICE_NAME) if isinstance(named, dict) else None


def _priced(price: Callable[[], tuple[float, str]]) -> tuple[float | None, str]:
    try:
        return price()
    except prices.PricingError as e:
        return None, f"no list price: {e}"


UNPRICED = "no list price in facts/prices.py"


class _Leftovers:
    """Turns what the listers found into the Billable lines of ours, with GKE's ties resolved."""

    def __init__(self, raw: dict[str, list], own: Ownership):
        self.raw, self.own = raw, own
        self.found: list[Billable] = []
        self.ours_pools: set[str] = set()
        self.ours_rules: set[str] = set()
        self.lb_names = self._load_balancers()

    def add(self, **fields: Any) -> None:
        self.found.append(Billable(**fields))

    def _network_stack(self, network_url: str) -> str | None:
        return self.own.stack_of_name(_tail(network_url)) if network_url else None

    def _firewall_stack(self, fw: Firewall) -> str | None:
        return (self._network_stack(fw.network) or self.own.stack_of_name(fw.name)
                or next(filter(None, map(self.own.stack_of_name, fw.target_tags)), None))  # fmt: skip

    def _load_balancers(self) -> dict[str, str]:
        """Load balancer names GKE made for our clusters (`a<uid>`, or `k8s-<cluster id>-node` for the shared
        health check) -> stack: by their firewall rules on our network, or their pools holding our nodes."""
        names: dict[str, str] = {}
        for fw in self.raw.get("firewall rules", []):
            stack = self._firewall_stack(fw)
            if stack is None or not fw.name.startswith("k8s-"):
                continue
            if fw.name.startswith(FIREWALL_PREFIX):  # k8s-fw-<lb>, k8s-fw-<lb>-deny
                names[fw.name.removeprefix(FIREWALL_PREFIX).removesuffix("-deny")] = stack
            for suffix in ("-http-hc", "-hc"):  # k8s-<cluster id>-node-http-hc, k8s-<lb>-http-hc, <lb>-hc
                if fw.name.endswith(suffix):
                    base = fw.name.removesuffix(suffix)
                    names[base] = names[base.removeprefix("k8s-")] = stack
                    break
        for pool in self.raw.get("target pools", []):
            stack = next(filter(None, (self.own.stack_of_name(_tail(i)) for i in pool.instances)), None)
            if stack:
                names[pool.name] = stack
        return names

    def _lab(self, item: _Compute, *also: str) -> str | None:
        """Ours by label or name, or by one of GKE's ties in `also` (names of ours)."""
        lab = self.own.lab(item.labels, item.name)
        return lab or next((self.lb_names[n] for n in (item.name, *also) if n in self.lb_names), None)

    def _gke(self, item: _Compute) -> str:
        service = _service(item.description)
        return f"; made by GKE for Service {service}" if service else ""

    def vms(self) -> None:
        for vm in self.raw.get("VMs", []):
            lab = self.own.lab(vm.labels, vm.name)
            if lab is None or vm.status in NOT_BILLING:
                continue
            machine = _tail(vm.machine_type)
            gpus = sum(a.accelerator_count for a in vm.guest_accelerators)
            if not gpus and machine.startswith(GPU_MACHINE_PREFIXES):
                gpus = 1  # accelerator-optimized machine types carry their GPUs without listing guestAccelerators
            spot = vm.scheduling.provisioning_model == "SPOT" or vm.scheduling.preemptible
            hourly, price = _priced(lambda: (h := prices.hourly(_region(vm.where), machine, spot), _hourly(h)))
            node_of = ((vm.labels[NODE_CLUSTER_LABEL], vm.labels[NODE_POOL_LABEL])
                       if NODE_CLUSTER_LABEL in vm.labels and NODE_POOL_LABEL in vm.labels else None)  # fmt: skip
            self.add(kind="VM", name=vm.name, where=vm.where, lab=lab,
                     detail=f"{machine}, {f'{gpus} GPU, ' if gpus else ''}{'spot' if spot else 'on-demand'}, {vm.status}",
                     since=_since(vm.creation_timestamp), hourly_usd=hourly, price=price, gpus=gpus, node_of=node_of)  # fmt: skip

    def clusters(self, nodes_known: bool) -> None:
        """Our clusters with their node pools; node counts from the node VMs found (when they could be
        listed), whose prices are their own lines: a cluster's line prices the fee alone, on the estimate's
        basis (stacks.cost_estimate): the GKE free tier credits one zonal cluster per billing account."""
        nodes = [b for b in self.found if b.kind == "VM"]
        credited = False
        for cluster in sorted(self.raw.get("clusters", []), key=lambda c: c.create_time):
            lab = self.own.lab(cluster.resource_labels, cluster.name)
            if lab is None:
                continue
            pools = []
            for pool in cluster.node_pools:
                s = pool.autoscaling
                low = next((v for v in (s.total_min_node_count, s.min_node_count) if v is not None), 0)
                high = next((v for v in (s.total_max_node_count, s.max_node_count) if v is not None), 0)
                bounds = f", autoscaling {low}-{high}" if s.enabled else ""
                spot = "spot" if pool.config.spot or pool.config.preemptible else "on-demand"
                count = sum(1 for n in nodes if n.node_of == (cluster.name, pool.name)) if nodes_known else "?"
                pools.append(f"{pool.name} ({pool.config.machine_type}, {spot}, {count} node(s) now{bounds})")
            zonal = cluster.location.count("-") == 2
            fee = prices.GKE_CLUSTER_FEE_PER_HOUR
            if zonal and not credited:
                credited, hourly = True, 0.0
                price = (f"{_hourly(0.0)}: the GKE free tier credits {prices.GKE_ZONAL_FREE_CLUSTERS} zonal cluster per "
                         f"billing account (its {_hourly(fee)} fee, charged if the account runs another one)")  # fmt: skip
            else:
                hourly, price = fee, f"{_hourly(fee)} cluster fee" + (" (a further zonal cluster)" if zonal else "")
            self.add(kind="cluster", name=cluster.name, where=cluster.location, lab=lab,
                     detail=f"{cluster.status}, node pools: {', '.join(pools) or 'none'}",
                     since=_since(cluster.create_time), hourly_usd=hourly, price=price)  # fmt: skip

    def disks(self) -> None:
        for disk in self.raw.get("disks", []):
            lab = self.own.lab(disk.labels, disk.name)
            if lab is None:
                continue
            disk_type = _tail(disk.type)

            def price(disk: Disk = disk, disk_type: str = disk_type) -> tuple[float, str]:
                if disk.region and not disk.zone:
                    raise prices.PricingError(f"regional {disk_type} disks are not in facts/prices.py")
                per_gib = prices.disk_gib_month(_region(disk.where), disk_type)
                monthly = per_gib * disk.size_gb
                hourly = monthly / prices.HOURS_PER_MONTH
                return hourly, f"{disk.size_gb} GiB x ${per_gib:.2f}/GiB-month = ${monthly:.2f}/month ({_hourly(hourly)})"

            hourly, priced = _priced(price)
            users = [_tail(u) for u in disk.users]
            claim = _claim(disk.description)
            self.add(kind="disk", name=disk.name, where=disk.where, lab=lab,
                     detail=f"{disk.size_gb} GiB {disk_type}, "
                     + (f"attached to {', '.join(users)}" if users else "attached to nothing")
                     + (f"; GKE's volume for PVC {claim}" if claim else ""),
                     since=_since(disk.creation_timestamp), hourly_usd=hourly, price=priced)  # fmt: skip

    def target_pools(self) -> None:
        for pool in self.raw.get("target pools", []):
            lab = self._lab(pool)
            if lab is None:
                continue
            self.ours_pools.add(pool.name)
            self.add(kind="target pool", name=pool.name, where=pool.where, lab=lab,
                     detail=f"{len(pool.instances)} instance(s){self._gke(pool)}", since=_since(pool.creation_timestamp),
                     hourly_usd=None, price=UNPRICED)  # fmt: skip

    def forwarding_rules(self) -> None:
        mine = []
        for rule in self.raw.get("forwarding rules", []):
            lab = self._lab(rule, _tail(rule.target)) or (self._network_stack(rule.network) if rule.network else None)
            if lab is None and _tail(rule.target) in self.ours_pools:
                lab = self.lb_names.get(_tail(rule.target), "?")
            if lab is not None:
                mine.append((rule, lab))
        for nth, (rule, lab) in enumerate(sorted(mine, key=lambda r: r[0].creation_timestamp), start=1):
            self.ours_rules.add(rule.name)
            hourly = prices.forwarding_rule_hourly(nth)
            detail = " ".join(filter(None, (rule.load_balancing_scheme or "?", rule.ip_protocol, rule.ip_address or "?")))
            self.add(kind="forwarding rule", name=rule.name, where=rule.where, lab=lab, detail=detail + self._gke(rule),
                     since=_since(rule.creation_timestamp), hourly_usd=hourly,
                     price=f"{_hourly(hourly)} (rule {nth} of ours in the project: the first "
                     f"{prices.FORWARDING_RULES_AT_FULL_PRICE} cost ${prices.FORWARDING_RULE_PER_HOUR}/h, each further "
                     f"one ${prices.FORWARDING_RULE_EXTRA_PER_HOUR}/h)")  # fmt: skip

    def addresses(self) -> None:
        for address in self.raw.get("addresses", []):
            users = [_tail(u) for u in address.users]
            lab = self._lab(address) or next((self.lb_names.get(u, "?") for u in users if u in self.ours_rules), None)
            if lab is None:
                continue
            kind, status = address.address_type, address.status
            if kind == "EXTERNAL" and status == "IN_USE":
                hourly, price = prices.EXTERNAL_IP_IN_USE_PER_HOUR, f"{_hourly(prices.EXTERNAL_IP_IN_USE_PER_HOUR)} (in use)"
            elif kind == "EXTERNAL":
                hourly, price = _priced(lambda: (h := prices.static_ip_reserved_hourly(address.where),
                                                 f"{_hourly(h)} (reserved, not in use)"))  # fmt: skip
            else:
                hourly, price = None, f"{UNPRICED} for a {kind.lower()} address"
            self.add(kind="address", name=address.name, where=address.where, lab=lab,
                     detail=f"{kind.lower()} {address.address or '?'}, {status}"
                     + (f" by {', '.join(users)}" if users else "") + self._gke(address),
                     since=_since(address.creation_timestamp), hourly_usd=hourly, price=price)  # fmt: skip

    def firewalls(self) -> None:
        for fw in self.raw.get("firewall rules", []):
            lab = self._firewall_stack(fw)
            if lab is not None:
                self.add(kind="firewall rule", name=fw.name, where="global", lab=lab,
                         detail=f"on network {_tail(fw.network)}{self._gke(fw)}", since=_since(fw.creation_timestamp),
                         hourly_usd=None, price=UNPRICED)  # fmt: skip

    def health_checks(self) -> None:
        pooled = {_tail(h) for pool in self.raw.get("target pools", []) if pool.name in self.ours_pools
                  for h in pool.health_checks}  # fmt: skip
        for check in self.raw.get("health checks", []):
            lab = self._lab(check) or (self.lb_names.get(check.name, "?") if check.name in pooled else None)
            if lab is not None:
                self.add(kind="health check", name=check.name, where=check.where, lab=lab,
                         detail=f"made by GKE{' for ' + s if (s := _service(check.description)) else ''}",
                         since=_since(check.creation_timestamp), hourly_usd=None, price=UNPRICED)  # fmt: skip

    def networks(self) -> None:
        for kind, key in (("network", "networks"), ("subnetwork", "subnetworks")):
            for net in self.raw.get(key, []):
                lab = self.own.stack_of_name(net.name)
                if lab is not None:
                    extra = f"{net.ip_cidr_range} of {_tail(net.network)}" if isinstance(net, Subnetwork) else "VPC network"
                    self.add(kind=kind, name=net.name, where=net.where, lab=lab, detail=extra,
                             since=_since(net.creation_timestamp), hourly_usd=None, price=UNPRICED)  # fmt: skip

    def buckets(self) -> None:
        for bucket in self.raw.get("buckets", []):
            location = bucket.location
            if bucket.size is None:
                hourly, price, held = None, "no price: its size is not known", f"what it holds not known: {bucket.size_error}"
            else:
                gib = bucket.size / 1024**3
                held = f"holds {bucket.size} bytes"
                hourly, price = _priced(lambda: (
                    (g := prices.gcs_gib_month(location)) * gib / prices.HOURS_PER_MONTH,
                    f"{gib:.2f} GiB x ${g:.3f}/GiB-month = ${g * gib:.2f}/month"))  # fmt: skip
            self.add(kind="bucket", name=bucket.name, where=location.lower(), lab=self.own.lab(bucket.labels, bucket.name) or "?",
                     detail=f"{bucket.storage_class}, {held}", since=_since(bucket.time_created), hourly_usd=hourly,
                     price=price)  # fmt: skip

    def hmac_keys(self) -> None:
        """HMAC keys of our service accounts (they carry no labels): a live credential to a lab's bucket."""
        for key in self.raw.get("HMAC keys", []):
            if key.state == "DELETED" or self.own.stack_of_name(key.service_account_email) is None:
                continue
            self.add(kind="HMAC key", name=key.access_id, where="global",
                     lab=self.own.stack_of_name(key.service_account_email) or "?",
                     detail=f"{key.state}, of {key.service_account_email}", since=_since(key.time_created), hourly_usd=None,
                     price=f"{UNPRICED}, but a live credential to the lab's buckets: `gcloud storage hmac update "
                     f"{key.access_id} --deactivate && gcloud storage hmac delete {key.access_id}`")  # fmt: skip

    def service_accounts(self) -> None:
        for account in self.raw.get("service accounts", []):
            lab = self.own.stack_of_name(account.email)
            if lab is not None:
                self.add(kind="service account", name=account.email, where="global", lab=lab,
                         detail=f"{account.display_name or 'no display name'}{', disabled' if account.disabled else ''}",
                         since=None, hourly_usd=None, price=UNPRICED)  # fmt: skip

    def repositories(self) -> None:
        for repo in self.raw.get("repositories", []):
            name = _tail(repo.name)
            lab = self.own.lab(repo.labels, name)
            if lab is None:
                continue
            gb = repo.size_bytes / 1e9  # the source prices GB
            monthly = gb * prices.ARTIFACT_REGISTRY_GB_MONTH
            self.add(kind="repository", name=name, where=repo.name.split("/")[3], lab=lab,
                     detail=f"Artifact Registry {repo.format} {repo.mode.lower().replace('_', ' ') or 'repository'}, "
                     f"holds {repo.size_bytes} bytes", since=_since(repo.create_time),
                     hourly_usd=monthly / prices.HOURS_PER_MONTH,
                     price=f"{gb:.2f} GB x ${prices.ARTIFACT_REGISTRY_GB_MONTH:.2f}/GB-month = ${monthly:.2f}/month (the "
                     f"first {prices.ARTIFACT_REGISTRY_FREE_GB:g} GB of the billing account are free)")  # fmt: skip

    def filestore(self) -> None:
        for instance in self.raw.get("Filestore instances", []):
            name, location = _tail(instance.name), instance.name.split("/")[3]
            lab = self.own.lab(instance.labels, name)
            if lab is None:
                continue
            gib = sum(share.capacity_gb for share in instance.file_shares)
            hourly, price = _priced(lambda: (
                (g := prices.filestore_gib_hour(instance.tier, _region(location))) * gib,
                f"{gib} GiB x ${g:.6f}/GiB-hour = {_hourly(g * gib)}"))  # fmt: skip
            self.add(kind="Filestore instance", name=name, where=location, lab=lab,
                     detail=f"{instance.tier}, {gib} GiB provisioned, {instance.state}", since=_since(instance.create_time),
                     hourly_usd=hourly, price=price)  # fmt: skip


def _claim(description: str) -> str | None:
    """The PVC a disk was made for (the PD CSI driver's JSON description), as namespace/name."""
    try:
        named = json.loads(description)
    except ValueError:
        return None
    if isinstance(named, dict) and PVC_NAME in named:
        return f"{named.get(PVC_NAMESPACE, '?')}/{named[PVC_NAME]}"
    return None


def leftovers(raw: dict[str, list], stacks: Iterable[str], nodes_known: bool = True) -> list[Billable]:
    """What of ours `raw` (kind -> Google's items, as the listers found them) holds, as lines."""
    out = _Leftovers(raw, Ownership(stacks))
    out.vms()
    out.clusters(nodes_known)
    out.disks()
    out.target_pools()
    out.forwarding_rules()
    out.addresses()
    out.firewalls()
    out.health_checks()
    out.networks()
    out.buckets()
    out.hmac_keys()
    out.service_accounts()
    out.repositories()
    out.filestore()
    return out.found


def count_by_kind(found: list[Billable]) -> str:
    counts = Counter(b.kind for b in found)
    return ", ".join(plural(k, counts[k]) for k in KINDS if counts[k])
