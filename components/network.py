"""The lab's VPC: one subnet with secondary ranges for pods and services (a VPC-native cluster)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

PODS_RANGE = "pods"
SERVICES_RANGE = "services"


@dataclass(frozen=True)
class NetworkArgs:
    project: str
    region: str
    network_name: str
    subnet_cidr: str
    pods_cidr: str
    services_cidr: str


class Network(pulumi.ComponentResource):
    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:platform:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.network = gcp.compute.Network(
            f"{name}-vpc",
            name=args.network_name,
            project=args.project,
            auto_create_subnetworks=False,
            routing_mode="REGIONAL",
            opts=child,
        )
        self.subnet = gcp.compute.Subnetwork(
            f"{name}-subnet",
            name=args.network_name,
            project=args.project,
            region=args.region,
            network=self.network.id,
            ip_cidr_range=args.subnet_cidr,
            # Nodes reach Google APIs (GCS, Artifact Registry) without public egress rules.
            private_ip_google_access=True,
            secondary_ip_ranges=[
                gcp.compute.SubnetworkSecondaryIpRangeArgs(range_name=PODS_RANGE, ip_cidr_range=args.pods_cidr),
                gcp.compute.SubnetworkSecondaryIpRangeArgs(range_name=SERVICES_RANGE, ip_cidr_range=args.services_cidr),
            ],
            opts=child,
        )
        self.register_outputs({"network": self.network.name, "subnet": self.subnet.name})
