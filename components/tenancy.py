"""Multi-tenancy: per tenant a namespace with ResourceQuota (GPUs included), LimitRange, default-deny
networking plus the allowances it needs, a Role bound to the tenant's Google group, and a LocalQueue
when Kueue is on; cluster-wide PriorityClasses serving > training > batch (batch never preempts).

NetworkPolicies are enforced on GKE only with Dataplane V2 (or the network policy add-on): the cluster
gets Dataplane V2 whenever tenancy is on (stacks.compose_platform.cluster_overrides). RoleBindings to
a Google group need GKE's Google Groups for RBAC (the group nested in gke-security-groups@<domain>).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components import k8s_objects
from components.placement import GPU_RESOURCE
from components.kueue import cpu_quantity, local_queue, memory_quantity
from components.namespaces import NAMESPACE_NAME_LABEL, namespace
from components.naming import StackId, k8s_labels
from components.observability import PROMETHEUS_PEER

TENANT_LABEL = "gke-ml-labs/tenant"
# name -> (value, preemptionPolicy, description). Far below system-cluster-critical (2e9).
PRIORITY_CLASSES = {
    "lab-serving": (100000, "PreemptLowerPriority", "Online inference: preempts training and batch"),
    "lab-training": (10000, "PreemptLowerPriority", "Training jobs: preempt batch"),
    "lab-batch": (1000, "Never", "Batch work: waits for room, never preempts anyone"),
}
# What a tenant's group may do in its namespace: run and inspect workloads, not change quota or RBAC.
TENANT_RULES = [
    {
        "apiGroups": [""],
        "resources": ["pods", "pods/log", "pods/exec", "services", "configmaps", "secrets",
                      "persistentvolumeclaims", "serviceaccounts", "events"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {
        "apiGroups": ["apps", "batch"],
        "resources": ["deployments", "statefulsets", "replicasets", "jobs", "cronjobs"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {
        "apiGroups": ["jobset.x-k8s.io", "kubeflow.org", "trainer.kubeflow.org"],
        "resources": ["jobsets", "pytorchjobs", "trainjobs"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues", "workloads"], "verbs": ["get", "list", "watch"]},
]


@dataclass(frozen=True)
class Tenant:
    """One team: its namespace, the Google group bound to its Role, and its quota."""

    name: str  # the namespace
    group: str  # Google group email
    gpus: int  # requests.nvidia.com/gpu
    cpu: float  # requests.cpu in cores
    memory_gib: float  # requests.memory
    pods: int


@dataclass(frozen=True)
class TenancyArgs:
    stack_id: StackId
    tenants: list[Tenant]
    # Kueue (serving the LocalQueue CRD) when it runs: each tenant then gets a LocalQueue named
    # `local_queue` that submits to `cluster_queue`.
    kueue: pulumi.Resource | None = None
    local_queue: str = ""
    cluster_queue: str = ""


def priority_classes(stack_id: StackId) -> list[dict]:
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name, "labels": k8s_labels(stack_id, "tenancy")},
            "value": value,
            "preemptionPolicy": policy,
            "globalDefault": False,
            "description": description,
        }
        for name, (value, policy, description) in PRIORITY_CLASSES.items()
    ]


def _meta(stack_id: StackId, tenant: Tenant, name: str) -> dict:
    labels = {**k8s_labels(stack_id, "tenancy"), TENANT_LABEL: tenant.name}
    return {"name": name, "namespace": tenant.name, "labels": labels}


def resource_quota(stack_id: StackId, tenant: Tenant) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": _meta(stack_id, tenant, "tenant-quota"),
        "spec": {
            "hard": {
                f"requests.{GPU_RESOURCE}": str(tenant.gpus),
                "requests.cpu": cpu_quantity(tenant.cpu),
                "requests.memory": memory_quantity(tenant.memory_gib),
                "pods": str(tenant.pods),
            }
        },
    }


def limit_range(stack_id: StackId, tenant: Tenant) -> dict:
    # Defaults for containers that set no requests: the quota on requests would reject them otherwise.
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": _meta(stack_id, tenant, "tenant-defaults"),
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "defaultRequest": {"cpu": "250m", "memory": "256Mi"},
                    "default": {"cpu": "1", "memory": "1Gi"},
                    "max": {"cpu": cpu_quantity(tenant.cpu), "memory": memory_quantity(tenant.memory_gib)},
                }
            ]
        },
    }


def network_policies(stack_id: StackId, tenant: Tenant) -> list[dict]:
    """Default deny both ways; then same namespace, DNS to kube-system, and Prometheus scraping in."""

    def policy(name: str, spec: dict) -> dict:
        return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": _meta(stack_id, tenant, name), "spec": {"podSelector": {}, **spec}}

    dns_ports = [{"protocol": p, "port": 53} for p in ("UDP", "TCP")]
    return [
        policy("default-deny", {"policyTypes": ["Ingress", "Egress"]}),
        policy(
            "allow-same-namespace",
            {"policyTypes": ["Ingress", "Egress"], "ingress": [{"from": [{"podSelector": {}}]}],
             "egress": [{"to": [{"podSelector": {}}]}]},
        ),
        policy(
            "allow-dns",
            {"policyTypes": ["Egress"],
             "egress": [{"to": [{"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: "kube-system"}}}],
                         "ports": dns_ports}]},
        ),
        policy(
            "allow-monitoring-scrape",
            {"policyTypes": ["Ingress"],
             "ingress": [{"from": [PROMETHEUS_PEER]}]},
        ),
    ]


def role(stack_id: StackId, tenant: Tenant) -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(stack_id, tenant, "tenant-member"),
        "rules": TENANT_RULES,
    }


def role_binding(stack_id: StackId, tenant: Tenant) -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(stack_id, tenant, "tenant-member"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant-member"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": tenant.group}],
    }


def tenant_objects(stack_id: StackId, tenant: Tenant) -> list[dict]:
    """Everything in a tenant's namespace except its LocalQueue (that needs Kueue's CRD)."""
    return [resource_quota(stack_id, tenant), limit_range(stack_id, tenant), *network_policies(stack_id, tenant),
            role(stack_id, tenant), role_binding(stack_id, tenant)]


class Tenancy(pulumi.ComponentResource):
    def __init__(self, name: str, args: TenancyArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:tenancy:Tenancy", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.priority_classes = [
            k8s_objects.create(f"{name}-{obj['metadata']['name']}", obj, child)
            for obj in priority_classes(args.stack_id)
        ]
        self.namespaces = []
        for tenant in args.tenants:
            # After Kueue when it runs: destroy deletes the tenant's namespace (and Kueue Workloads of its
            # jobs) while Kueue can still clear their finalizers.
            ns = k8s_objects.create(
                f"{name}-{tenant.name}-ns",
                # Restricted: a tenant's pods must meet it (podspec.security builds such pods), so a
                # privileged or root pod is refused here like anywhere else we run workloads.
                namespace(args.stack_id, tenant.name, "tenancy", "restricted", {TENANT_LABEL: tenant.name}),
                pulumi.ResourceOptions(parent=self, depends_on=[args.kueue] if args.kueue is not None else []),
            )
            self.namespaces.append(ns)
            in_ns = pulumi.ResourceOptions(parent=self, depends_on=[ns])
            for obj in tenant_objects(args.stack_id, tenant):
                k8s_objects.create(f"{name}-{tenant.name}-{obj['kind'].lower()}-{obj['metadata']['name']}", obj, in_ns)
            if args.kueue is not None:
                k8s_objects.create(
                    f"{name}-{tenant.name}-localqueue",
                    local_queue(args.stack_id, tenant.name, args.local_queue, args.cluster_queue),
                    pulumi.ResourceOptions(parent=self, depends_on=[ns, args.kueue]),
                )
        self.register_outputs({"tenants": [t.name for t in args.tenants]})
