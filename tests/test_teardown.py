"""`pulumi destroy` must not hang or leave cost behind, for every stack file (globbed, so new labs
are covered as they are added): everything in the stack's tree, custom resources deleted before the
release that serves their CRD, buckets emptied on delete, nothing protected or retained, PVCs of
StatefulSets deleted with them, every in-cluster object on the cluster's own provider, and that
provider dropping objects of a cluster already gone."""

from __future__ import annotations

import pytest

from conftest import STACKS
from stacks.mockrun import MockRun, Recorded, run_stack

# Resources that install CRDs (and the controllers serving them).
INSTALLERS = (
    "kubernetes:helm.sh/v3:Release",
    "kubernetes:kustomize/v2:Directory",
    "kubernetes:yaml/v2:ConfigFile",
    "kubernetes:yaml/v2:ConfigGroup",
    "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition",
)
# API groups served by Kubernetes itself; any other group in a kubernetes: type is a custom resource.
BUILT_IN_GROUPS = {
    "core", "apps", "batch", "rbac.authorization.k8s.io", "networking.k8s.io", "policy", "scheduling.k8s.io",
    "storage.k8s.io", "autoscaling", "admissionregistration.k8s.io", "apiextensions.k8s.io", "coordination.k8s.io",
    "discovery.k8s.io", "node.k8s.io", "certificates.k8s.io", "helm.sh", "yaml", "kustomize",
}
# Which installer serves a CRD group, by what its inputs name (chart or manifest), where we know it.
CRD_SOURCES = {
    "monitoring.coreos.com": ("kube-prometheus-stack",),
    "kueue.x-k8s.io": ("kueue",),
    "jobset.x-k8s.io": ("jobset",),
    "serving.kserve.io": ("kserve-crd",),
    "serving.knative.dev": ("serving-core",),
    "argoproj.io": ("argo-workflows",),
    "nvidia.com": ("gpu-operator",),
    "kubeflow.org": ("trainer", "training-operator"),
    "trainer.kubeflow.org": ("kubeflow-trainer",),
    "keda.sh": ("keda",),
}


def group(resource: Recorded) -> str:
    # kubernetes:<group>/<version>:<Kind>; the core group is written "core/v1".
    return resource.type.split(":")[1].rsplit("/", 1)[0]


def custom_resources(run: MockRun) -> list[Recorded]:
    return [r for r in run.resources if r.custom and r.type.startswith("kubernetes:") and group(r) not in BUILT_IN_GROUPS]


def installs(installer: Recorded, crd_group: str) -> bool:
    names = CRD_SOURCES.get(crd_group)
    if names is None:
        # Unknown: the check cannot tell whether the CR waits for its controller, so it must not pass.
        raise AssertionError(
            f"CRD group {crd_group!r} is not in CRD_SOURCES: name the chart or manifest that installs it "
            f"(known: {', '.join(sorted(CRD_SOURCES))})"
        )
    text = " ".join(str(installer.inputs.get(k, "")) for k in ("chart", "files", "file", "directory", "yaml", "objs"))
    return any(n in text for n in names)


@pytest.fixture(params=STACKS)
def run(request, stack_runs) -> MockRun:
    return stack_runs[(request.param, False)]


def test_every_resource_is_in_the_stack_tree(run):
    # Under mocks every run in one process hangs off the first run's Stack resource, so the test
    # asks for a Stack at the top of each chain rather than this stack's own URN.
    for r in run.resources:
        chain = run.ancestors(r)
        top = chain[-1] if chain else r
        assert "::pulumi:pulumi:Stack::gke-ml-labs-" in top.parent, (
            f"{r.type} {r.name}: parent chain ends at {top.parent!r}, not the stack: destroy would not reach it"
        )


def waits_for(run: MockRun, resource: Recorded) -> list[Recorded]:
    """Everything `resource` waits for, directly or through what it waits for (destroy reverses it)."""
    seen, frontier = {resource.urn}, [resource]
    while frontier:
        current = frontier.pop()
        for other in run.resources:
            if other.urn not in seen and run.depends_on(current, other):
                seen.add(other.urn)
                frontier.append(other)
    return [r for r in run.resources if r.urn in seen and r is not resource]


def test_custom_resources_wait_for_the_release_serving_their_crd(run):
    for cr in custom_resources(run):
        serving = [i for i in waits_for(run, cr) if i.type in INSTALLERS and installs(i, group(cr))]
        assert serving, (
            f"{cr.type} {cr.name} does not depend on a release installing {group(cr)}: on destroy its "
            f"controller could go first and leave the CR's finalizer stuck"
        )


def test_buckets_are_emptied_on_destroy(run):
    for bucket in run.of_type("gcp:storage/bucket:Bucket"):
        assert bucket.inputs.get("forceDestroy") is True, f"bucket {bucket.name} lacks force_destroy: destroy fails on objects"


def test_nothing_is_protected_or_retained(run):
    held = [f"{r.type} {r.name}" for r in run.resources if r.protect or r.retain_on_delete]
    assert held == [], f"destroy would skip or refuse: {held}"


def test_cluster_can_be_deleted(run):
    cluster = run.one("gcp:container/cluster:Cluster")
    assert cluster.inputs.get("deletionProtection") is False


def test_kubernetes_objects_use_the_cluster_provider_which_forgets_a_gone_cluster(run):
    (provider,) = [r for r in run.of_type("pulumi:providers:kubernetes") if not r.name.startswith("default")]
    assert provider.inputs.get("deleteUnreachable") in (True, "true")
    for r in run.resources:
        if r.custom and r.type.startswith("kubernetes:"):
            assert r.provider.startswith(provider.urn), f"{r.type} {r.name} is not on the cluster's provider"


def test_statefulset_volumes_are_deleted_with_them(run):
    for sts in run.of_type("kubernetes:apps/v1:StatefulSet"):
        spec = sts.inputs.get("spec") or {}
        if spec.get("volumeClaimTemplates"):
            policy = spec.get("persistentVolumeClaimRetentionPolicy") or {}
            assert policy.get("whenDeleted") == "Delete", f"StatefulSet {sts.name} would leave its PVCs (and disks) behind"


def _recorded(type_: str, name: str, dependencies: list[str] = (), inputs: dict | None = None) -> Recorded:
    return Recorded(type=type_, name=name, urn=f"urn:pulumi:t::gke-ml-labs::{type_}::{name}", custom=True,
                    inputs=inputs or {}, parent="urn:pulumi:t::gke-ml-labs::pulumi:pulumi:Stack::gke-ml-labs-t",
                    provider="", dependencies=list(dependencies), ignore_changes=[], delete_before_replace=False,
                    protect=False, retain_on_delete=False)


def test_the_crd_check_sees_a_missing_or_wrong_dependency():
    kps = _recorded("kubernetes:helm.sh/v3:Release", "kps", inputs={"chart": "kube-prometheus-stack"})
    kueue = _recorded("kubernetes:helm.sh/v3:Release", "kueue", inputs={"chart": "oci://registry.k8s.io/kueue/charts/kueue"})
    via_kueue = _recorded("kubernetes:monitoring.coreos.com/v1:ServiceMonitor", "sm", [kueue.urn])
    chained = _recorded("kubernetes:monitoring.coreos.com/v1:ServiceMonitor", "sm2", [kueue.urn])
    kueue_after_kps = _recorded("kubernetes:helm.sh/v3:Release", "kueue", [kps.urn], inputs=kueue.inputs)
    run = MockRun(stack="t", preview=False, resources=[kps, kueue, via_kueue])
    assert not [i for i in waits_for(run, via_kueue) if installs(i, "monitoring.coreos.com")]
    run = MockRun(stack="t", preview=False, resources=[kps, kueue_after_kps, chained])
    assert [i.name for i in waits_for(run, chained) if installs(i, "monitoring.coreos.com")] == ["kps"]


def test_a_custom_resource_of_an_unknown_crd_group_fails_the_check():
    release = _recorded("kubernetes:helm.sh/v3:Release", "kueue", inputs={"chart": "oci://registry.k8s.io/kueue/charts/kueue"})
    widget = _recorded("kubernetes:example.com/v1:Widget", "w", [release.urn])
    run = MockRun(stack="t", preview=False, resources=[release, widget])
    with pytest.raises(AssertionError, match=r"^CRD group 'example.com' is not in CRD_SOURCES: name the chart"):
        test_custom_resources_wait_for_the_release_serving_their_crd(run)


# Namespaces where a lab's benchmark (or the InferenceService) leaves objects whose finalizers a
# controller clears, and the installers of those controllers, by stack: (namespace, installer type,
# what the installer's inputs name).
LAB_NAMESPACES = [
    ("g3", "batch-jobs", "kubernetes:helm.sh/v3:Release", "kueue"),
    ("g3", "batch-jobs", "kubernetes:helm.sh/v3:Release", "jobset"),
    ("g4", "training", "kubernetes:helm.sh/v3:Release", "kubeflow-trainer"),
    ("g5", "models", "kubernetes:helm.sh/v3:Release", "kserve-resources"),
    ("g5", "models", "kubernetes:yaml/v2:ConfigFile", "serving-core"),
    ("g5", "models", "kubernetes:yaml/v2:ConfigFile", "kourier"),
    ("g7", "pipelines", "kubernetes:helm.sh/v3:Release", "kserve-resources"),
    ("g7", "pipelines", "kubernetes:helm.sh/v3:Release", "argo-workflows"),
]


def _namespace(run: MockRun, name: str) -> Recorded:
    (ns,) = [r for r in run.of_type("kubernetes:core/v1:Namespace") if r.inputs["metadata"]["name"] == name]
    return ns


def _installer(run: MockRun, type_: str, names: str) -> Recorded:
    keys = ("chart", "file", "directory")
    (found,) = [r for r in run.of_type(type_) if r.name == names or any(names in str(r.inputs.get(k, "")) for k in keys)]
    return found


@pytest.mark.parametrize(("stack", "ns", "type_", "installer"), LAB_NAMESPACES)
def test_lab_namespaces_are_deleted_while_their_controllers_still_run(stack_runs, stack, ns, type_, installer):
    run = stack_runs[(stack, False)]
    namespace, controller = _namespace(run, ns), _installer(run, type_, installer)
    assert controller in waits_for(run, namespace), (
        f"{stack}: namespace {ns} does not wait for {installer}: destroy may remove the controller first and "
        "leave the namespace Terminating on finalizers nobody clears, which blocks deleting the cluster"
    )


def test_tenant_namespaces_wait_for_kueue_when_it_runs():
    tenants = {"enabled": True, "tenants": [{"name": "team-a", "group": "team-a@example.com"}]}
    run = run_stack("g3", overrides={"gke-ml-labs:tenancy": tenants})
    assert _installer(run, "kubernetes:helm.sh/v3:Release", "kueue") in waits_for(run, _namespace(run, "team-a"))
