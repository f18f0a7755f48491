"""Items as Google's list APIs return them, for seeding tests/fake_google.py: the fields the discovery
documents of google-api-python-client 2.202.0 name (compute v1 20261106, container v1 20261027, storage
v1, artifactregistry v1 20261031, file v1 20260819, iam v1 20261023), the ones status reads and some it
does not. What GKE makes for our clusters follows GKE's own shapes: a PVC disk's labels and JSON
description as a GKE export shows them (goog-gke-volume, goog-k8s-cluster-name, ...), and a LoadBalancer
Service's forwarding rule, target pool, firewall rules, health check and address as
kubernetes/cloud-provider-gcp (providers/gce/gce_loadbalancer_external.go and _naming.go) writes them."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

PROJECT = "lab-project"
NOW = datetime(2026, 11, 29, 18, 0, tzinfo=timezone.utc)
DAY = NOW - timedelta(hours=24)
COMPUTE = f"https://www.googleapis.com/compute/v1/projects/{PROJECT}"
PACIFIC = timezone(timedelta(hours=-8))  # Compute writes creationTimestamp in Pacific time
OURS = {"app": "gke-ml-labs", "lab": "g6", "stack": "g6", "managed-by": "pulumi"}
G7 = {**OURS, "lab": "g7", "stack": "g7"}
THEIRS = {"team": "search", "app": "ranker"}


def stamp(t: datetime) -> str:
    return t.astimezone(PACIFIC).isoformat(timespec="milliseconds")


def rfc3339(t: datetime) -> str:
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def vm(name: str, zone: str, machine: str, created: datetime, *, labels: dict, spot: bool = True,
       accelerators: int = 0, status_: str = "RUNNING", pool: str | None = None, cluster: str = "gml-g6") -> dict:
    """An instance as instances.aggregatedList returns it; a node of `pool` carries GKE's labels."""
    labels = {**labels, **({"goog-gke-node": "", "goog-k8s-cluster-name": cluster, "goog-k8s-node-pool-name": pool}
                           if pool else {})}  # fmt: skip
    body = {
        "kind": "compute#instance", "id": "4567", "name": name,
        "selfLink": f"{COMPUTE}/zones/{zone}/instances/{name}",
        "zone": f"{COMPUTE}/zones/{zone}",
        "machineType": f"{COMPUTE}/zones/{zone}/machineTypes/{machine}",
        "status": status_, "creationTimestamp": stamp(created), "labels": labels,
        "scheduling": {"provisioningModel": "SPOT" if spot else "STANDARD", "preemptible": spot,
                       "automaticRestart": not spot, "onHostMaintenance": "TERMINATE"},
        "networkInterfaces": [{"network": f"{COMPUTE}/global/networks/{cluster}"}],
        "tags": {"items": [f"gke-{cluster}-7c1f2a9e-node"]},
    }  # fmt: skip
    if accelerators:
        body["guestAccelerators"] = [
            {"acceleratorType": f"{COMPUTE}/zones/{zone}/acceleratorTypes/nvidia-l4", "acceleratorCount": accelerators}
        ]
    return body


def disk(name: str, zone: str, size_gb: int, created: datetime, *, labels: dict, users: tuple[str, ...] = (),
         disk_type: str = "pd-balanced", description: str = "") -> dict:
    return {
        "kind": "compute#disk", "id": "771", "name": name, "sizeGb": str(size_gb), "status": "READY",
        "zone": f"{COMPUTE}/zones/{zone}", "selfLink": f"{COMPUTE}/zones/{zone}/disks/{name}",
        "type": f"{COMPUTE}/zones/{zone}/diskTypes/{disk_type}", "creationTimestamp": stamp(created),
        "labels": labels, "labelFingerprint": "42WmSpB8rSM=", "physicalBlockSizeBytes": "4096",
        **({"description": description} if description else {}),
        **({"users": [f"{COMPUTE}/zones/{zone}/instances/{u}" for u in users]} if users else {}),
    }  # fmt: skip


def pvc_disk(name: str, zone: str, size_gb: int, created: datetime, *, cluster: str, pvc: str,
             namespace: str, disk_type: str = "pd-ssd") -> dict:
    """A disk the GKE PD CSI driver made for a PVC: GKE's labels only, its JSON description naming the claim."""
    description = json.dumps({"kubernetes.io/created-for/pv/name": name, "kubernetes.io/created-for/pvc/name": pvc,
                              "kubernetes.io/created-for/pvc/namespace": namespace,
                              "storage.gke.io/created-by": "pd.csi.storage.gke.io"}, separators=(",", ":"))  # fmt: skip
    labels = {"goog-gke-cluster-id-base32": "u73evtkmjveu5e3nbd5lgel66rneey2titvuwrmuoejjqr3wuxha",
              "goog-gke-volume": "", "goog-k8s-cluster-location": "us-central1-a", "goog-k8s-cluster-name": cluster}  # fmt: skip
    return disk(name, zone, size_gb, created, labels=labels, disk_type=disk_type, description=description)


def address(name: str, region: str, created: datetime, *, labels: dict | None = None, status_: str = "RESERVED",
            ip: str = "34.118.20.7", description: str = "", users: tuple[str, ...] = ()) -> dict:
    scope = "global" if region == "global" else f"regions/{region}"
    users = users or (("a1b2",) if status_ == "IN_USE" else ())
    return {
        "kind": "compute#address", "id": "991", "name": name, "address": ip, "addressType": "EXTERNAL",
        "networkTier": "PREMIUM", "status": status_, "creationTimestamp": stamp(created),
        "selfLink": f"{COMPUTE}/{scope}/addresses/{name}", "labelFingerprint": "42WmSpB8rSM=",
        **({"labels": labels} if labels else {}), **({"description": description} if description else {}),
        **({"region": f"{COMPUTE}/regions/{region}"} if region != "global" else {}),
        **({"users": [f"{COMPUTE}/{scope}/forwardingRules/{u}" for u in users]} if users else {}),
    }  # fmt: skip


def forwarding_rule(name: str, region: str, created: datetime, *, labels: dict | None = None, target: str = "a1b2",
                    ip: str = "34.118.20.7", description: str = "", port: int = 80) -> dict:
    return {
        "kind": "compute#forwardingRule", "id": "551", "name": name, "IPAddress": ip, "IPProtocol": "TCP",
        "portRange": f"{port}-{port}", "loadBalancingScheme": "EXTERNAL", "networkTier": "PREMIUM",
        "region": f"{COMPUTE}/regions/{region}", "selfLink": f"{COMPUTE}/regions/{region}/forwardingRules/{name}",
        "creationTimestamp": stamp(created), "labelFingerprint": "42WmSpB8rSM=",
        "target": f"{COMPUTE}/regions/{region}/targetPools/{target}",
        **({"labels": labels} if labels else {}), **({"description": description} if description else {}),
    }  # fmt: skip


def cluster(name: str, created: datetime, *, labels: dict, location: str = "us-central1-a") -> dict:
    """A cluster as projects.locations.clusters.list returns it (container v1)."""
    return {
        "name": name, "location": location, "zone": location, "status": "RUNNING",
        "createTime": rfc3339(created), "resourceLabels": labels,
        "currentNodeCount": 2, "currentMasterVersion": "1.33.5-gke.1201000",
        "selfLink": f"https://container.googleapis.com/v1/projects/{PROJECT}/zones/{location}/clusters/{name}",
        "nodePools": [
            {"name": "system", "status": "RUNNING", "initialNodeCount": 1,
             "config": {"machineType": "e2-standard-4", "diskSizeGb": 100, "diskType": "pd-balanced"},
             "autoscaling": {"enabled": True, "minNodeCount": 1, "maxNodeCount": 2, "locationPolicy": "BALANCED"}},
            {"name": "gpu", "status": "RUNNING", "initialNodeCount": 0,
             "config": {"machineType": "g2-standard-4", "spot": True,
                        "accelerators": [{"acceleratorCount": "1", "acceleratorType": "nvidia-l4"}]},
             "autoscaling": {"enabled": True, "totalMinNodeCount": 0, "totalMaxNodeCount": 1, "locationPolicy": "ANY"}},
        ],
    }  # fmt: skip


def bucket(name: str, created: datetime, *, labels: dict | None = None, location: str = "US-CENTRAL1") -> dict:
    return {
        "kind": "storage#bucket", "id": name, "name": name, "projectNumber": "123456789012",
        "location": location, "locationType": "region", "storageClass": "STANDARD",
        "timeCreated": rfc3339(created), "updated": rfc3339(created), "metageneration": "1", "etag": "CAE=",
        "selfLink": f"https://www.googleapis.com/storage/v1/b/{name}", **({"labels": labels} if labels else {}),
    }  # fmt: skip


def hmac_key(access_id: str, email: str, created: datetime) -> dict:
    return {"kind": "storage#hmacKeyMetadata", "id": f"{PROJECT}/{access_id}", "accessId": access_id,
            "projectId": PROJECT, "serviceAccountEmail": email, "state": "ACTIVE", "etag": "MQ==",
            "timeCreated": rfc3339(created), "updated": rfc3339(created)}  # fmt: skip


def network(name: str, created: datetime) -> dict:
    return {"kind": "compute#network", "id": "8811", "name": name, "autoCreateSubnetworks": False, "mtu": 1460,
            "creationTimestamp": stamp(created), "selfLink": f"{COMPUTE}/global/networks/{name}",
            "routingConfig": {"routingMode": "REGIONAL"},
            "subnetworks": [f"{COMPUTE}/regions/us-central1/subnetworks/{name}"]}  # fmt: skip


def subnetwork(name: str, region: str, created: datetime, *, network_name: str, cidr: str = "10.10.0.0/20") -> dict:
    return {"kind": "compute#subnetwork", "id": "8812", "name": name, "ipCidrRange": cidr,
            "network": f"{COMPUTE}/global/networks/{network_name}", "region": f"{COMPUTE}/regions/{region}",
            "creationTimestamp": stamp(created), "selfLink": f"{COMPUTE}/regions/{region}/subnetworks/{name}",
            "gatewayAddress": "10.10.0.1", "privateIpGoogleAccess": False, "stackType": "IPV4_ONLY",
            "secondaryIpRanges": [{"rangeName": "pods", "ipCidrRange": "10.20.0.0/14"}]}  # fmt: skip


def service_account(email: str, display_name: str) -> dict:
    return {"name": f"projects/{PROJECT}/serviceAccounts/{email}", "projectId": PROJECT, "uniqueId": "1049",
            "email": email, "displayName": display_name, "etag": "MDEwMjE5MjA=", "oauth2ClientId": "1049"}  # fmt: skip


def repository(name: str, location: str, created: datetime, *, labels: dict | None, size_bytes: int) -> dict:
    """A remote repository of Docker Hub, as components/image_cache.py creates it."""
    return {"name": f"projects/{PROJECT}/locations/{location}/repositories/{name}", "format": "DOCKER",
            "mode": "REMOTE_REPOSITORY", "description": "Pull-through cache of Docker Hub",
            "createTime": rfc3339(created), "updateTime": rfc3339(created), "sizeBytes": str(size_bytes),
            "remoteRepositoryConfig": {"dockerRepository": {"publicRepository": "DOCKER_HUB"}},
            "registryUri": f"{location}-docker.pkg.dev/{PROJECT}/{name}", **({"labels": labels} if labels else {})}  # fmt: skip


def filestore_instance(name: str, location: str, created: datetime, *, labels: dict | None, capacity_gb: int,
                       tier: str = "BASIC_HDD") -> dict:
    return {"name": f"projects/{PROJECT}/locations/{location}/instances/{name}", "tier": tier, "state": "READY",
            "createTime": rfc3339(created), "fileShares": [{"name": "share1", "capacityGb": str(capacity_gb)}],
            "networks": [{"network": "gml-g6", "modes": ["MODE_IPV4"], "reservedIpRange": "10.0.0.0/29",
                          "ipAddresses": ["10.0.0.2"]}],
            "etag": "ab12", **({"labels": labels} if labels else {})}  # fmt: skip


# --- a LoadBalancer Service's parts, as cloud-provider-gcp makes them -----------------------------------


def lb_name(uid: str) -> str:
    """cloudprovider.DefaultLoadBalancerName: "a" + the Service's UID without dashes, cut to 32."""
    return ("a" + uid.replace("-", ""))[:32]


def service_description(service: str) -> str:
    return json.dumps({"kubernetes.io/service-name": service}, separators=(",", ":"))  # makeServiceDescription


def load_balancer(uid: str, service: str, ip: str, *, cluster: str, cluster_id: str, network_name: str,
                  nodes: tuple[str, ...], created: datetime, zone: str = "us-central1-a", port: int = 8000) -> dict:
    """Every part of one external (target pool) load balancer: {kind: [items]} and the LB's name."""
    name = lb_name(uid)
    region = zone.rsplit("-", 1)[0]
    hc = f"k8s-{cluster_id}-node"  # MakeNodesHealthCheckName: shared by the cluster's LB Services
    net = f"{COMPUTE}/global/networks/{network_name}"
    fw = {"kind": "compute#firewall", "id": "931", "creationTimestamp": stamp(created), "network": net,
          "direction": "INGRESS", "priority": 1000, "targetTags": [f"gke-{cluster}-7c1f2a9e-node"]}  # fmt: skip
    return {
        "name": name,
        "forwarding_rule": forwarding_rule(name, region, created, target=name, ip=ip,
                                           description=service_description(service), port=port),
        "target_pool": {
            "kind": "compute#targetPool", "id": "7741", "name": name, "creationTimestamp": stamp(created),
            "description": service_description(service), "region": f"{COMPUTE}/regions/{region}",
            "selfLink": f"{COMPUTE}/regions/{region}/targetPools/{name}", "sessionAffinity": "NONE",
            "instances": [f"{COMPUTE}/zones/{zone}/instances/{n}" for n in nodes],
            "healthChecks": [f"{COMPUTE}/global/httpHealthChecks/{hc}"],
        },
        "firewalls": [
            {**fw, "name": f"k8s-fw-{name}", "selfLink": f"{COMPUTE}/global/firewalls/k8s-fw-{name}",
             # makeFirewallDescription's format, a space after the comma
             "description": f'{{"kubernetes.io/service-name":"{service}", "kubernetes.io/service-ip":"{ip}"}}',
             "sourceRanges": ["0.0.0.0/0"], "allowed": [{"IPProtocol": "tcp", "ports": [str(port)]}]},
            {**fw, "name": f"{hc}-http-hc", "selfLink": f"{COMPUTE}/global/firewalls/{hc}-http-hc",
             "description": f'{{"kubernetes.io/cluster-id":"{cluster_id}"}}',  # ensureHTTPHealthCheckFirewall
             "sourceRanges": ["130.211.0.0/22", "35.191.0.0/16", "209.85.152.0/22", "209.85.204.0/22"],
             "allowed": [{"IPProtocol": "tcp", "ports": ["10256"]}]},
        ],  # fmt: skip
        "http_health_check": {
            "kind": "compute#httpHealthCheck", "id": "5521", "name": hc, "creationTimestamp": stamp(created),
            "description": service_description(hc), "port": 10256, "requestPath": "/healthz",
            "checkIntervalSec": 8, "timeoutSec": 1, "healthyThreshold": 1, "unhealthyThreshold": 3,
            "selfLink": f"{COMPUTE}/global/httpHealthChecks/{hc}",
        },
        "address": address(name, region, created, ip=ip, description=service_description(service)),
    }  # fmt: skip
