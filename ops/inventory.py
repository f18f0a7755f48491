"""Everything of gke-ml-labs that bills in a project, read from the Google APIs (never from Pulumi state,
which a failed destroy can leave wrong): GKE clusters, VM instances, persistent disks, static
addresses, forwarding rules and Cloud Storage buckets that carry the label app=gke-ml-labs (every
stack sets it: stacks.config.LabConfig.billing_labels), in every zone and region, each priced at list
price from facts/prices.py; and HMAC keys of the stacks' service accounts. Read-only calls only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Literal

from pydantic import BaseModel, ConfigDict

from facts import prices
from ops.gcp import GcpClient, GcpError

APP_LABEL = ("app", "gke-ml-labs")
LABEL_FILTER = f'labels.{APP_LABEL[0]}="{APP_LABEL[1]}"'
GPU_MACHINE_PREFIXES = ("g2-", "a2-", "a3-", "a4-")
# GCE labels GKE puts on every node VM: which cluster and node pool it belongs to.
NODE_CLUSTER_LABEL, NODE_POOL_LABEL = "goog-k8s-cluster-name", "goog-k8s-node-pool-name"
NOT_BILLING = ("TERMINATED", "STOPPED")  # a stopped VM bills only its disks, which are listed themselves

Kind = Literal["cluster", "VM", "disk", "address", "forwarding rule", "bucket", "HMAC key"]
KINDS: tuple[Kind, ...] = ("cluster", "VM", "disk", "address", "forwarding rule", "bucket", "HMAC key")
# Every service account a stack creates is named gml-<stack>-... (components.naming).
ACCOUNT_PREFIX = "gml-"


class Billable(BaseModel):
    """One thing of ours that bills: what, where, since when, at what list price."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Kind
    name: str
    where: str
    lab: str
    detail: str
    since: datetime
    hourly_usd: float | None  # None: no list price in facts/prices.py
    price: str  # the list price as its source states it (per hour, per month, per GiB-month), or why none
    gpus: int = 0
    node_of: tuple[str, str] | None = None  # a GKE node VM: (cluster, node pool)

    def hours_up(self, now: datetime) -> float:
        return max((now - self.since).total_seconds(), 0) / 3600

    def cost_so_far(self, now: datetime) -> float | None:
        return None if self.hourly_usd is None else self.hourly_usd * self.hours_up(now)

    def line(self, now: datetime) -> str:
        cost = self.cost_so_far(now)
        so_far = "cost so far not known" if cost is None else f"${cost:.2f} so far"
        return (
            f"{self.kind} {self.name} ({self.where}, lab {self.lab}): {self.detail}; since "
            f"{self.since.isoformat()} ({self.hours_up(now):.1f} h); {self.price}, {so_far}"
        )


class Incomplete(GcpError):
    """A list call answered only in part (Container's `missingZones`): what it found, and what not."""

    def __init__(self, message: str, found: list[Billable]):
        super().__init__(message)
        self.found = found


def _tail(url: str) -> str:
    return url.rsplit("/", 1)[-1]


def _ours(labels: dict | None) -> bool:
    return (labels or {}).get(APP_LABEL[0]) == APP_LABEL[1]


def _lab(labels: dict | None) -> str:
    return (labels or {}).get("lab", "?")


def _region(location: str) -> str:
    """us-central1-a -> us-central1; a region stays itself."""
    return location.rsplit("-", 1)[0] if location.count("-") == 2 else location


def _since(stamp: str) -> datetime:
    """In UTC: Compute writes Pacific time, Container and Storage write UTC."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(timezone.utc)


def _hourly(per_hour: float | None, unit: str = "/h") -> str:
    return f"${per_hour:.4f}{unit}"


def compute_items(client: GcpClient, project: str, kind: str, with_global: bool = False) -> Iterator[tuple[str, dict]]:
    """(scope, item) for every item of ours in an aggregated list (every zone or region, every page),
    and in the global list when the kind has one (addresses and forwarding rules of global load
    balancers). Compute filters by our label; checking it here too costs nothing."""
    seen = set()
    for page in client.pages("compute", f"projects/{project}/aggregated/{kind}", filter=LABEL_FILTER):
        for scope, listing in (page.get("items") or {}).items():
            for item in listing.get(kind, []):
                seen.add(item.get("selfLink") or item.get("id"))
                if _ours(item.get("labels")):
                    yield scope, item
    if with_global:
        for page in client.pages("compute", f"projects/{project}/global/{kind}", filter=LABEL_FILTER):
            for item in page.get("items", []):
                if (item.get("selfLink") or item.get("id")) not in seen and _ours(item.get("labels")):
                    yield "global", item


def vms(client: GcpClient, project: str) -> list[Billable]:
    found = []
    for scope, vm in compute_items(client, project, "instances"):
        if vm.get("status") in NOT_BILLING:
            continue
        machine = _tail(vm.get("machineType", ""))
        gpus = sum(int(a.get("acceleratorCount", 0)) for a in vm.get("guestAccelerators") or [])
        if not gpus and machine.startswith(GPU_MACHINE_PREFIXES):
            # Accelerator-optimized machine types carry their GPUs without listing guestAccelerators.
            gpus = 1
        scheduling = vm.get("scheduling") or {}
        spot = scheduling.get("provisioningModel") == "SPOT" or bool(scheduling.get("preemptible"))
        zone = _tail(vm.get("zone", scope))
        try:
            hourly, price = prices.hourly(_region(zone), machine, spot), None
        except prices.PricingError as e:
            hourly, price = None, f"no list price: {e}"
        found.append(Billable(
            kind="VM", name=vm["name"], where=zone, lab=_lab(vm.get("labels")),
            detail=f"{machine}, {f'{gpus} GPU, ' if gpus else ''}{'spot' if spot else 'on-demand'}, {vm.get('status', '?')}",
            since=_since(vm["creationTimestamp"]), hourly_usd=hourly, price=price or _hourly(hourly), gpus=gpus,
            node_of=_node_of(vm.get("labels") or {}),
        ))  # fmt: skip
    return found


def _node_of(labels: dict) -> tuple[str, str] | None:
    if NODE_CLUSTER_LABEL in labels and NODE_POOL_LABEL in labels:
        return labels[NODE_CLUSTER_LABEL], labels[NODE_POOL_LABEL]
    return None


def clusters(client: GcpClient, project: str, nodes: list[Billable] | None) -> list[Billable]:
    """Our GKE clusters with their node pools; node counts from the node VMs found (`nodes`; None when
    they could not be listed), whose prices are their own lines: a cluster's line prices the fee alone."""
    answer = client.get("container", f"projects/{project}/locations/-/clusters")
    found = []
    for cluster in answer.get("clusters", []):
        if not _ours(cluster.get("resourceLabels")):
            continue
        pools = []
        for pool in cluster.get("nodePools") or []:
            config = pool.get("config") or {}
            scaling = pool.get("autoscaling") or {}
            low = scaling.get("totalMinNodeCount", scaling.get("minNodeCount", 0))
            high = scaling.get("totalMaxNodeCount", scaling.get("maxNodeCount", 0))
            bounds = f", autoscaling {low}-{high}" if scaling.get("enabled") else ""
            spot = "spot" if config.get("spot") or config.get("preemptible") else "on-demand"
            count = "?" if nodes is None else sum(1 for n in nodes if n.node_of == (cluster["name"], pool["name"]))
            pools.append(f"{pool['name']} ({config.get('machineType', '?')}, {spot}, {count} node(s) now{bounds})")
        location = cluster.get("location", "?")
        zonal = location.count("-") == 2
        free = f"; the free tier credits {prices.GKE_ZONAL_FREE_CLUSTERS} zonal cluster per billing account" if zonal else ""
        found.append(Billable(
            kind="cluster", name=cluster["name"], where=location, lab=_lab(cluster.get("resourceLabels")),
            detail=f"{cluster.get('status', '?')}, node pools: {', '.join(pools) or 'none'}",
            since=_since(cluster["createTime"]), hourly_usd=prices.GKE_CLUSTER_FEE_PER_HOUR,
            price=f"{_hourly(prices.GKE_CLUSTER_FEE_PER_HOUR)} cluster fee{free}",
        ))  # fmt: skip
    if answer.get("missingZones"):
        raise Incomplete(f"these zones did not answer, their clusters are unknown: {', '.join(answer['missingZones'])}",
                         found)  # fmt: skip
    return found


def disks(client: GcpClient, project: str) -> list[Billable]:
    found = []
    for scope, disk in compute_items(client, project, "disks"):
        disk_type = _tail(disk.get("type", ""))
        size = int(disk.get("sizeGb", 0))
        users = [_tail(u) for u in disk.get("users") or []]
        where = _tail(scope)
        try:
            if scope.startswith("regions/"):
                raise prices.PricingError(f"regional {disk_type} disks are not in facts/prices.py")
            per_gib = prices.disk_gib_month(_region(where), disk_type)
            monthly = per_gib * size
            hourly = monthly / prices.HOURS_PER_MONTH
            price = f"{size} GiB x ${per_gib:.2f}/GiB-month = ${monthly:.2f}/month ({_hourly(hourly)})"
        except prices.PricingError as e:
            hourly, price = None, f"no list price: {e}"
        found.append(Billable(
            kind="disk", name=disk["name"], where=where, lab=_lab(disk.get("labels")),
            detail=f"{size} GiB {disk_type}, " + (f"attached to {', '.join(users)}" if users else "attached to nothing"),
            since=_since(disk["creationTimestamp"]), hourly_usd=hourly, price=price,
        ))  # fmt: skip
    return found


def addresses(client: GcpClient, project: str) -> list[Billable]:
    found = []
    for scope, address in compute_items(client, project, "addresses", with_global=True):
        kind = address.get("addressType", "EXTERNAL")
        status = address.get("status", "?")
        if kind == "EXTERNAL" and status == "IN_USE":
            hourly, price = prices.EXTERNAL_IP_IN_USE_PER_HOUR, f"{_hourly(prices.EXTERNAL_IP_IN_USE_PER_HOUR)} (in use)"
        else:
            hourly, price = None, f"no list price for a {kind.lower()} address {status.lower()} in facts/prices.py"
        users = [_tail(u) for u in address.get("users") or []]
        found.append(Billable(
            kind="address", name=address["name"], where=_tail(scope), lab=_lab(address.get("labels")),
            detail=f"{kind.lower()} {address.get('address', '?')}, {status}"
            + (f" by {', '.join(users)}" if users else ""),
            since=_since(address["creationTimestamp"]), hourly_usd=hourly, price=price,
        ))  # fmt: skip
    return found


def forwarding_rules(client: GcpClient, project: str) -> list[Billable]:
    rules = sorted(compute_items(client, project, "forwardingRules", with_global=True),
                   key=lambda r: r[1]["creationTimestamp"])  # fmt: skip
    found = []
    for nth, (scope, rule) in enumerate(rules, start=1):
        hourly = prices.forwarding_rule_hourly(nth)
        found.append(Billable(
            kind="forwarding rule", name=rule["name"], where=_tail(scope), lab=_lab(rule.get("labels")),
            detail=" ".join(filter(None, (rule.get("loadBalancingScheme", "?"), rule.get("IPProtocol"),
                                          rule.get("IPAddress", "?")))),
            since=_since(rule["creationTimestamp"]), hourly_usd=hourly,
            price=f"{_hourly(hourly)} (rule {nth} of the project: the first {prices.FORWARDING_RULES_AT_FULL_PRICE} "
            f"cost ${prices.FORWARDING_RULE_PER_HOUR}/h, each further one ${prices.FORWARDING_RULE_EXTRA_PER_HOUR}/h)",
        ))  # fmt: skip
    return found


def buckets(client: GcpClient, project: str) -> list[Billable]:
    """Our buckets (Cloud Storage lists cannot filter by label: it is checked here) and what they hold,
    summed over their objects."""
    found = []
    for page in client.pages("storage", "b", project=project):
        for bucket in page.get("items", []):
            if not _ours(bucket.get("labels")):
                continue
            size = sum(
                int(o.get("size", 0))
                for objects in client.pages("storage", f"b/{bucket['name']}/o", fields="items(size),nextPageToken")
                for o in objects.get("items", [])
            )
            gib = size / 1024**3
            location = bucket.get("location", "?")
            try:
                per_gib = prices.gcs_gib_month(location)
                hourly = per_gib * gib / prices.HOURS_PER_MONTH
                price = f"{gib:.2f} GiB x ${per_gib:.3f}/GiB-month = ${per_gib * gib:.2f}/month"
            except prices.PricingError as e:
                hourly, price = None, f"no list price: {e}"
            found.append(Billable(
                kind="bucket", name=bucket["name"], where=location.lower(), lab=_lab(bucket.get("labels")),
                detail=f"{bucket.get('storageClass', '?')}, holds {size} bytes",
                since=_since(bucket["timeCreated"]), hourly_usd=hourly, price=price,
            ))  # fmt: skip
    return found


def hmac_keys(client: GcpClient, project: str) -> list[Billable]:
    """HMAC keys of our service accounts (HMAC keys carry no labels, so no lab either): a live
    credential to a lab's bucket left behind (the g7 artefact check once asked for one)."""
    found = []
    for page in client.pages("storage", f"projects/{project}/hmacKeys"):
        for key in page.get("items", []):
            email = key.get("serviceAccountEmail", "")
            if not email.startswith(ACCOUNT_PREFIX) or key.get("state") == "DELETED":
                continue
            found.append(Billable(
                kind="HMAC key", name=key["accessId"], where="global", lab="?",
                detail=f"{key.get('state', '?')}, of {email}", since=_since(key["timeCreated"]), hourly_usd=None,
                price="no list price in facts/prices.py, but a live credential to the lab's buckets: "
                f"`gcloud storage hmac update {key['accessId']} --deactivate && "
                f"gcloud storage hmac delete {key['accessId']}`",
            ))  # fmt: skip
    return found


# What each kind needs listed, in report order; the API each call needs (for "enable it" hints).
Lister = Callable[[GcpClient, str], list[Billable]]
LISTERS: dict[str, tuple[str, Lister]] = {
    "VMs": ("compute.googleapis.com", vms),
    "disks": ("compute.googleapis.com", disks),
    "addresses": ("compute.googleapis.com", addresses),
    "forwarding rules": ("compute.googleapis.com", forwarding_rules),
    "buckets": ("storage.googleapis.com", buckets),
    "HMAC keys": ("storage.googleapis.com", hmac_keys),
}
CLUSTER_API = "container.googleapis.com"


def count_by_kind(found: list[Billable]) -> str:
    counts = Counter(b.kind for b in found)
    return ", ".join(f"{counts[k]} {k}{'s' if counts[k] != 1 else ''}" for k in KINDS if counts[k])
