"""A zonal GKE Standard cluster (free tier), its least-privilege node identity, the CPU system pool,
and the Kubernetes provider every in-cluster component uses."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from components.network import PODS_RANGE, SERVICES_RANGE
from facts.gke_auth import ADC_FLAG, AUTH_PLUGIN, INSTALL_HINT

# What a node needs and nothing more (instead of the default compute service account, which holds
# Editor on the project): GKE's documented role for node service accounts, which covers writing logs,
# metrics and resource metadata and the autoscaling metrics, i.e. the older minimal set (logWriter,
# metricWriter, monitoring.viewer, stackdriver.resourceMetadata.writer) and more. No
# artifactregistry.reader: every image the labs run is public (Docker Hub, quay.io, ghcr.io,
# registry.k8s.io, nvcr.io, GKE's own); add it to pull private images from the project's registry.
NODE_ROLES = ("roles/container.defaultNodeServiceAccount",)
NODE_OAUTH_SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
POOL_LABEL = "gke-ml-labs/pool"
SYSTEM_POOL_NAME = "system"
# What a pod selects to run on the CPU system pool (controllers, benchmark clients).
SYSTEM_NODE_SELECTOR = {POOL_LABEL: SYSTEM_POOL_NAME}
SYSTEM_DISK_GB = 50  # the system pool's boot disk (the cost estimate prices it)
# Fields the node pools set explicitly so GKE has nothing to back-fill, plus those GKE still fills
# in after creation: without ignoring them a later `up` proposes to REPLACE the pool.
NODE_POOL_IGNORE_CHANGES = ["initialNodeCount", "nodeConfig.kubeletConfig", "nodeConfig.linuxNodeConfig"]


@dataclass(frozen=True)
class PoolDefaults:
    """What every node pool of the cluster shares: where it lives, its node identity and node_config."""

    project: str
    cluster: pulumi.Input[str]
    zone: str
    service_account: pulumi.Input[str]
    resource_labels: dict[str, str]

    def node_pool(
        self,
        resource_name: str,
        *,
        name: str,
        node_locations: list[str],
        min_nodes: int,
        max_nodes: int,
        location_policy: str,
        parent: pulumi.Resource,
        **node_config,
    ) -> gcp.container.NodePool:
        """An autoscaled, auto-repaired pool, guarded against replacement by back-filled fields."""
        return gcp.container.NodePool(
            resource_name,
            name=name,
            project=self.project,
            cluster=self.cluster,
            location=self.zone,
            node_locations=node_locations,
            initial_node_count=min_nodes,
            # Whole-pool bounds (not per zone), so a pool's maximum is exactly what quota must cover.
            autoscaling=gcp.container.NodePoolAutoscalingArgs(
                total_min_node_count=min_nodes, total_max_node_count=max_nodes, location_policy=location_policy
            ),
            management=gcp.container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True),
            node_config=self.node_config(**node_config),
            opts=pulumi.ResourceOptions(parent=parent, ignore_changes=NODE_POOL_IGNORE_CHANGES),
        )

    def node_config(self, **overrides) -> gcp.container.NodePoolNodeConfigArgs:
        base = dict(
            image_type="COS_CONTAINERD",
            disk_type="pd-balanced",
            oauth_scopes=NODE_OAUTH_SCOPES,
            service_account=self.service_account,
            resource_labels=self.resource_labels,
            metadata={"disable-legacy-endpoints": "true"},
            workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(mode="GKE_METADATA"),
            shielded_instance_config=gcp.container.NodePoolNodeConfigShieldedInstanceConfigArgs(
                enable_secure_boot=True, enable_integrity_monitoring=True
            ),
        )
        return gcp.container.NodePoolNodeConfigArgs(**{**base, **overrides})


@dataclass(frozen=True)
class GkeClusterArgs:
    project: str
    zone: str
    cluster_name: str
    network: pulumi.Input[str]
    subnetwork: pulumi.Input[str]
    release_channel: str
    resource_labels: dict[str, str]
    system_machine_type: str
    system_min_nodes: int
    system_max_nodes: int
    system_spot: bool
    # GKE-managed DCGM needs managed Prometheus; labs that run their own exporter leave both off so
    # only one DCGM exporter ever runs.
    managed_dcgm: bool = False
    monitoring_components: list[str] = field(default_factory=lambda: ["SYSTEM_COMPONENTS"])
    security_group: str | None = None  # Google Groups for RBAC (gke-security-groups@<domain>)
    gcs_fuse: bool = False  # the Cloud Storage FUSE CSI driver add-on (buckets mounted as volumes)


class GkeCluster(pulumi.ComponentResource):
    def __init__(self, name: str, args: GkeClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:platform:GkeCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        self.node_service_account = gcp.serviceaccount.Account(
            f"{name}-nodes",
            project=args.project,
            account_id=f"{args.cluster_name}-nodes"[:30].rstrip("-"),
            display_name=f"GKE nodes of {args.cluster_name}",
            opts=child,
        )
        self.node_roles = [
            gcp.projects.IAMMember(
                f"{name}-nodes-{role.split('/')[1].replace('.', '-')}",
                project=args.project,
                role=role,
                member=self.node_service_account.email.apply(lambda e: f"serviceAccount:{e}"),
                opts=child,
            )
            for role in NODE_ROLES
        ]
        components = list(args.monitoring_components) + (["DCGM"] if args.managed_dcgm else [])
        self.cluster = gcp.container.Cluster(
            name,
            name=args.cluster_name,
            project=args.project,
            location=args.zone,  # zonal: the one control plane GKE's free tier covers
            network=args.network,
            subnetwork=args.subnetwork,
            networking_mode="VPC_NATIVE",
            # Dataplane V2 enforces NetworkPolicies (tenancy needs them) at no extra cost. Always on:
            # GKE sets it only at creation, so switching it later would replace the cluster.
            datapath_provider="ADVANCED_DATAPATH",
            ip_allocation_policy=gcp.container.ClusterIpAllocationPolicyArgs(
                cluster_secondary_range_name=PODS_RANGE, services_secondary_range_name=SERVICES_RANGE
            ),
            remove_default_node_pool=True,
            initial_node_count=1,
            # Even the default pool, which lives only until the cluster exists, runs as our node
            # account: where an org policy disables the default compute account it could not start.
            node_config=gcp.container.ClusterNodeConfigArgs(
                service_account=self.node_service_account.email, oauth_scopes=NODE_OAUTH_SCOPES
            ),
            deletion_protection=False,  # a lab must be destroyable with `pulumi destroy`
            release_channel=gcp.container.ClusterReleaseChannelArgs(channel=args.release_channel),
            workload_identity_config=gcp.container.ClusterWorkloadIdentityConfigArgs(
                workload_pool=f"{args.project}.svc.id.goog"
            ),
            resource_labels=args.resource_labels,
            authenticator_groups_config=gcp.container.ClusterAuthenticatorGroupsConfigArgs(
                security_group=args.security_group
            )
            if args.security_group
            else None,
            addons_config=gcp.container.ClusterAddonsConfigArgs(
                gcs_fuse_csi_driver_config=gcp.container.ClusterAddonsConfigGcsFuseCsiDriverConfigArgs(enabled=True)
            )
            if args.gcs_fuse
            else None,
            # GKE cost allocation: the billing export then splits cluster cost by namespace and label.
            cost_management_config=gcp.container.ClusterCostManagementConfigArgs(enabled=True),
            monitoring_config=gcp.container.ClusterMonitoringConfigArgs(
                enable_components=components,
                managed_prometheus=gcp.container.ClusterMonitoringConfigManagedPrometheusArgs(
                    enabled=args.managed_dcgm
                ),
            ),
            # The default pool is created and removed at once; its settings never matter again.
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["nodeConfig", "initialNodeCount"]),
        )

        self.pool_defaults = PoolDefaults(
            project=args.project,
            cluster=self.cluster.name,
            zone=args.zone,
            service_account=self.node_service_account.email,
            resource_labels=args.resource_labels,
        )
        self.system_node_selector = dict(SYSTEM_NODE_SELECTOR)
        self.system_pool = self.pool_defaults.node_pool(
            f"{name}-system",
            name=SYSTEM_POOL_NAME,
            node_locations=[args.zone],
            min_nodes=args.system_min_nodes,
            max_nodes=args.system_max_nodes,
            location_policy="BALANCED",
            parent=self,
            machine_type=args.system_machine_type,
            spot=args.system_spot,
            disk_size_gb=SYSTEM_DISK_GB,
            labels=dict(self.system_node_selector),
        )

        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(
                self.cluster.name, self.cluster.endpoint, self.cluster.master_auth.cluster_ca_certificate
            ).apply(lambda a: kubeconfig(args.project, args.zone, a[0], a[1], a[2]))
        )
        # Installing charts and CRs needs a node to run on: wait for the system pool.
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.kubeconfig,
            # If the cluster is already gone, drop its objects from state instead of failing destroy.
            delete_unreachable=True,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.system_pool]),
        )
        self.register_outputs({"cluster_name": self.cluster.name, "kubeconfig": self.kubeconfig})


# Without ADC_FLAG the plugin takes the token of gcloud's active account, not the Application Default
# Credentials the walk-through sets up and preflight checks: a user with only ADC would fail at the
# first Kubernetes object, after the cluster exists.
AUTH_PLUGIN_ARGS = [ADC_FLAG]


def kubeconfig(project: str, zone: str, name: str, endpoint: str, ca_cert: str) -> str:
    """A kubeconfig that authenticates through gke-gcloud-auth-plugin with Application Default
    Credentials: no key or token is stored."""
    context = f"gke_{project}_{zone}_{name}"
    return f"""apiVersion: v1
kind: Config
clusters:
- name: {context}
  cluster:
    server: https://{endpoint}
    certificate-authority-data: {ca_cert}
contexts:
- name: {context}
  context:
    cluster: {context}
    user: {context}
current-context: {context}
users:
- name: {context}
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: {AUTH_PLUGIN}
      args: {json.dumps(AUTH_PLUGIN_ARGS)}
      installHint: Install {AUTH_PLUGIN} ({INSTALL_HINT})
      provideClusterInfo: true
"""
