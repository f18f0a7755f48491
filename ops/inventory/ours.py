"""What of a project's things is ours, and which stack's (`Ownership`, by the rule ops.inventory states), and
each of ours as a line priced at list price from facts/prices.py (`leftovers`), or said to have no price there."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from facts import prices
from ops.inventory.google import ComputeItem, Disk, Firewall, Subnetwork, tail

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


class Ownership:
    """Whether a thing is ours, and which stack's: by our label, our names, or GKE's own ties (ops.inventory's doc)."""

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


def _since(stamp: str) -> datetime:
    """In UTC: Compute writes Pacific time, the other APIs UTC (RFC 3339)."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(timezone.utc)


def _region(location: str) -> str:
    """us-central1-a -> us-central1; a region stays itself."""
    return location.rsplit("-", 1)[0] if location.count("-") == 2 else location


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
        return self.own.stack_of_name(tail(network_url)) if network_url else None

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
            stack = next(filter(None, (self.own.stack_of_name(tail(i)) for i in pool.instances)), None)
            if stack:
                names[pool.name] = stack
        return names

    def _lab(self, item: ComputeItem, *also: str) -> str | None:
        """Ours by label or name, or by one of GKE's ties in `also` (names of ours)."""
        lab = self.own.lab(item.labels, item.name)
        return lab or next((self.lb_names[n] for n in (item.name, *also) if n in self.lb_names), None)

    def _gke(self, item: ComputeItem) -> str:
        service = _service(item.description)
        return f"; made by GKE for Service {service}" if service else ""

    def vms(self) -> None:
        for vm in self.raw.get("VMs", []):
            lab = self.own.lab(vm.labels, vm.name)
            if lab is None or vm.status in NOT_BILLING:
                continue
            machine = tail(vm.machine_type)
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
            disk_type = tail(disk.type)

            def price(disk: Disk = disk, disk_type: str = disk_type) -> tuple[float, str]:
                if disk.region and not disk.zone:
                    raise prices.PricingError(f"regional {disk_type} disks are not in facts/prices.py")
                per_gib = prices.disk_gib_month(_region(disk.where), disk_type)
                monthly = per_gib * disk.size_gb
                hourly = monthly / prices.HOURS_PER_MONTH
                return hourly, f"{disk.size_gb} GiB x ${per_gib:.2f}/GiB-month = ${monthly:.2f}/month ({_hourly(hourly)})"

            hourly, priced = _priced(price)
            users = [tail(u) for u in disk.users]
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
            lab = self._lab(rule, tail(rule.target)) or (self._network_stack(rule.network) if rule.network else None)
            if lab is None and tail(rule.target) in self.ours_pools:
                lab = self.lb_names.get(tail(rule.target), "?")
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
            users = [tail(u) for u in address.users]
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
                         detail=f"on network {tail(fw.network)}{self._gke(fw)}", since=_since(fw.creation_timestamp),
                         hourly_usd=None, price=UNPRICED)  # fmt: skip

    def health_checks(self) -> None:
        pooled = {tail(h) for pool in self.raw.get("target pools", []) if pool.name in self.ours_pools
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
                    extra = f"{net.ip_cidr_range} of {tail(net.network)}" if isinstance(net, Subnetwork) else "VPC network"
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
            name = tail(repo.name)
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
            name, location = tail(instance.name), instance.name.split("/")[3]
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

