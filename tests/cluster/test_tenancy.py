"""Tenancy and Pod Security on the real API server's authorizer and admission chain (RBAC,
ResourceQuota, LimitRange, PodSecurity), not on our own checks: a tenant namespace built by
components.tenancy, and a member of the tenant's group acting through impersonation.

docs/security.md: the tenant's group may run and inspect workloads in its namespace (pods, logs, exec,
services, config maps, secrets, volumes' claims, service accounts, events; Deployments, StatefulSets,
Jobs, CronJobs; JobSets, PyTorchJobs, TrainJobs) and read its LocalQueue and Workloads, but not change
quota or RBAC, and nothing outside its namespace; its namespace enforces the restricted standard.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from benchmarks.kube import images, objects
from components.cluster import POOL_LABEL, SYSTEM_POOL_NAME
from components.namespaces import namespace
from components.tenancy import TENANT_LABEL, Tenant, tenant_objects
from podspec.security import POD_SECURITY_VERSION
from stacks.compose_platform import stack_id
from stacks.stackfile import load_config
from tests.cluster.lab_cluster import LabCluster, lab_cluster, scheduling_built  # noqa: F401 (a fixture)

TENANT = Tenant(name="team-a", group="team-a@example.com", gpus=1, cpu=4, memory_gib=16, pods=20)
MEMBER = {"Impersonate-User": "alice@example.com", "Impersonate-Group": TENANT.group}


@pytest.fixture(scope="module")
def cluster(scheduling_built, tmp_path_factory) -> Iterator[LabCluster]:
    cfg = load_config("dev")
    with lab_cluster(scheduling_built, cfg, tmp_path_factory.mktemp("cluster")) as c:
        ids = stack_id(cfg)
        c.create(namespace(ids, TENANT.name, "tenancy", "restricted", {TENANT_LABEL: TENANT.name}))
        for obj in tenant_objects(ids, TENANT):  # NetworkPolicies included: the API server must accept them
            c.create(obj)
        c.wait_for_service_account(TENANT.name)
        yield c


def _allowed(c: LabCluster, verb: str, resource: str, group: str = "", ns: str = TENANT.name, sub: str = "") -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": MEMBER["Impersonate-User"],
            "groups": [TENANT.group, "system:authenticated"],
            "resourceAttributes": {"namespace": ns, "verb": verb, "group": group, "resource": resource,
                                   **({"subresource": sub} if sub else {})},
        },
    }  # fmt: skip
    answer = c.client.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", json=review)
    answer.raise_for_status()
    return answer.json()["status"].get("allowed", False)


@pytest.mark.parametrize(
    ("verb", "resource", "group", "sub"),
    [("create", "pods", "", ""), ("get", "pods", "", "log"), ("create", "pods", "", "exec"), ("delete", "secrets", "", ""),
     ("create", "jobs", "batch", ""), ("patch", "deployments", "apps", ""), ("create", "jobsets", "jobset.x-k8s.io", ""),
     ("create", "trainjobs", "trainer.kubeflow.org", ""), ("list", "workloads", "kueue.x-k8s.io", ""),
     ("get", "localqueues", "kueue.x-k8s.io", "")],
)  # fmt: skip
def test_a_tenant_member_may_run_and_inspect_workloads_in_its_namespace(cluster, verb, resource, group, sub):
    assert _allowed(cluster, verb, resource, group, sub=sub)


@pytest.mark.parametrize(
    ("verb", "resource", "group", "ns"),
    [("update", "resourcequotas", "", TENANT.name), ("delete", "limitranges", "", TENANT.name),
     ("create", "rolebindings", "rbac.authorization.k8s.io", TENANT.name),
     ("patch", "roles", "rbac.authorization.k8s.io", TENANT.name),
     ("delete", "networkpolicies", "networking.k8s.io", TENANT.name),
     ("create", "localqueues", "kueue.x-k8s.io", TENANT.name), ("create", "pods", "", "default"),
     ("list", "secrets", "", "kube-system")],
)  # fmt: skip
def test_a_tenant_member_may_not_change_quota_rbac_or_anything_outside(cluster, verb, resource, group, ns):
    assert not _allowed(cluster, verb, resource, group, ns=ns)


def _pod(name: str, limits: dict[str, str] | None = None, requests: dict[str, str] | None = None) -> dict:
    """A pod as the kit writes them (restricted), on the system pool."""
    container = objects.container("c", images.BUSYBOX, ["sleep", "60"], requests=requests, limits=limits)
    return objects.pod(name, TENANT.name, objects.pod_spec([container], node_selector={POOL_LABEL: SYSTEM_POOL_NAME}))


def test_a_member_creates_a_restricted_pod_and_is_refused_the_quota_object(cluster):
    ok = cluster.client.post(f"/api/v1/namespaces/{TENANT.name}/pods", json=_pod("member-pod"), headers=MEMBER)
    assert ok.status_code == 201, ok.text
    # A container that sets no resources gets the LimitRange's defaults (the quota counts requests).
    assert ok.json()["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
    refused = cluster.client.delete(f"/api/v1/namespaces/{TENANT.name}/resourcequotas/tenant-quota", headers=MEMBER)
    assert refused.status_code == 403
    assert refused.json()["message"] == (
        'resourcequotas "tenant-quota" is forbidden: User "alice@example.com" cannot delete resource "resourcequotas" '
        f'in API group "" in the namespace "{TENANT.name}"'
    )


def test_the_quota_refuses_a_pod_over_the_tenants_gpus_with_the_api_servers_message(cluster):
    over = _pod("two-gpus", {"nvidia.com/gpu": "2", "cpu": "500m", "memory": "256Mi"})
    answer = cluster.client.post(f"/api/v1/namespaces/{TENANT.name}/pods", json=over, headers=MEMBER)
    assert answer.status_code == 403, answer.text
    message = answer.json()["message"]
    assert message.startswith('pods "two-gpus" is forbidden: exceeded quota: tenant-quota, ')
    assert "requested: requests.nvidia.com/gpu=2" in message and "limited: requests.nvidia.com/gpu=1" in message


def test_the_limit_range_refuses_a_container_over_its_maximum(cluster):
    big = _pod("too-big", {"cpu": "8", "memory": "256Mi"}, {"cpu": "1", "memory": "256Mi"})
    answer = cluster.client.post(f"/api/v1/namespaces/{TENANT.name}/pods", json=big, headers=MEMBER)
    assert answer.status_code == 403, answer.text
    assert "maximum cpu usage per Container is 4, but limit is 8" in answer.json()["message"]


@pytest.mark.parametrize(
    ("security", "violation"),
    [({"privileged": True}, 'privileged (container "c" must not set securityContext.privileged=true)'),
     ({}, 'allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false)')],
    ids=["privileged", "no-security-context"],
)  # fmt: skip
def test_pod_security_admission_refuses_a_non_restricted_pod(cluster, security, violation):
    ns = cluster.get(f"/api/v1/namespaces/{TENANT.name}")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    bad = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "not-restricted", "namespace": TENANT.name},
           "spec": {"containers": [{"name": "c", "image": images.BUSYBOX, "securityContext": security,
                                    "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}}}]}}  # fmt: skip
    answer = cluster.client.post(f"/api/v1/namespaces/{TENANT.name}/pods", json=bad)
    assert answer.status_code == 403, answer.text
    message = answer.json()["message"]
    assert message.startswith(f'pods "not-restricted" is forbidden: violates PodSecurity "restricted:{POD_SECURITY_VERSION}": ')
    assert violation in message, message
