"""What the platform features of g1-g4 and g8 send to a cluster, checked against the pinned upstream
schemas: every object, every custom resource, every Helm value; CRs after their CRDs; and nothing but
GPU workloads and GPU-node DaemonSets tolerating the GPU taint."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import schemas
import yaml

from components import upstream, versions
from components.gpu_pool import GPU_TAINT
from stacks.mockrun import MockRun, run_stack

RELEASE = "kubernetes:helm.sh/v3:Release"
TENANTS = {
    "enabled": True,
    "tenants": [
        {"name": "team-a", "group": "team-a@example.com", "gpus": 1},
        {"name": "team-b", "group": "team-b@example.com", "gpus": 0, "cpu": 2, "memory_gib": 4.5},
    ],
}
NVIDIA = {
    "gke-ml-labs:gpu_sharing": {"mode": "nvidia", "replicas": 3},
    "gke-ml-labs:gpu_driver_version": "INSTALLATION_DISABLED",
}
# Every platform component at least once: the five lab files, NVIDIA mode, tenancy with Kueue.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "g1": ("g1", {}),
    "g2": ("g2", {}),
    "g2-nvidia": ("g2", NVIDIA),
    "g3": ("g3", {}),
    "g3-tenants": ("g3", {"gke-ml-labs:tenancy": TENANTS}),
    "g4": ("g4", {}),
    "g4-v1": ("g4", {"gke-ml-labs:training_operator": {"api": "v1"}}),
    "g8": ("g8", {}),
}
CHARTS = [versions.KUBE_PROMETHEUS_STACK, versions.DCGM_EXPORTER, versions.GPU_OPERATOR, versions.KUEUE, versions.JOBSET,
          versions.KUBEFLOW_TRAINER]
# Keys values.yaml documents only in a comment (checked to be there by assert_helm_values_exist).
COMMENTED = {"dcgm-exporter": ("customMetrics",), "gpu-operator": ("dcgmExporter.config",)}
# Where a GPU-taint toleration is right: GPU-node DaemonSets (chart name -> dotted value paths). NFD's
# worker runs on every node because it is what labels GPU nodes for the operator's DaemonSets.
GPU_DAEMONSET_TOLERATIONS = {
    "dcgm-exporter": {"tolerations"},
    "gpu-operator": {"daemonsets.tolerations", "node-feature-discovery.worker.tolerations"},
}
# Custom resources we create and the release that serves their CRD and webhook.
CRD_RELEASE = {"kueue.x-k8s.io": "kueue"}


@functools.cache
def variant(name: str) -> MockRun:
    stack, overrides = VARIANTS[name]
    return run_stack(stack, overrides=overrides)


def k8s_objects(run: MockRun) -> list:
    return [
        r for r in run.resources
        if r.custom and r.type.startswith("kubernetes:") and "apiVersion" in r.inputs and "kind" in r.inputs
    ]


def chart_of(release) -> versions.Chart:
    name = release.inputs["chart"].rsplit("/", 1)[-1]
    found = [c for c in CHARTS if c.name == name and c.version == release.inputs["version"]]
    assert found, f"release {release.name}: chart {name} {release.inputs['version']} is not a pin of versions.py"
    return found[0]


def merged(defaults: Any, ours: Any) -> Any:
    if isinstance(defaults, dict) and isinstance(ours, dict):
        return {**defaults, **{k: merged(defaults.get(k), v) for k, v in ours.items()}}
    return ours


def toleration_paths(values: Any, path: tuple[str, ...] = ()) -> set[str]:
    """Dotted paths of every `tolerations` list that lets a pod onto a GPU node."""
    found = set()
    if isinstance(values, dict):
        for key, value in values.items():
            if key == "tolerations" and isinstance(value, list) and any(tolerates_gpu(t) for t in value):
                found.add(".".join(path + (key,)))
            else:
                found |= toleration_paths(value, path + (key,))
    elif isinstance(values, list):
        for item in values:
            found |= toleration_paths(item, path)
    return found


def tolerates_gpu(toleration: dict) -> bool:
    key_ok = toleration.get("key") in (None, GPU_TAINT["key"]) if toleration.get("operator") == "Exists" else (
        toleration.get("key") == GPU_TAINT["key"] and toleration.get("value") == GPU_TAINT["value"]
    )
    return key_ok and toleration.get("effect") in (None, "NoSchedule")


@pytest.mark.parametrize("name", VARIANTS)
def test_every_object_validates_against_kubernetes_or_its_crd(name):
    objects = k8s_objects(variant(name))
    assert objects
    for obj in objects:
        schemas.validate_object(obj.inputs)


@pytest.mark.parametrize("name", VARIANTS)
def test_every_helm_value_exists_in_the_pinned_chart(name):
    releases = variant(name).of_type(RELEASE)
    assert releases or name == "g4-v1"  # the v1 operator is a kustomize overlay, not a chart
    for release in releases:
        chart = chart_of(release)
        schemas.assert_helm_values_exist(release.inputs["values"], chart.upstream, COMMENTED.get(chart.name, ()))


def test_a_misspelt_helm_value_would_be_caught():
    values = dict(variant("g3").one(RELEASE, "kueue").inputs["values"])
    values["managerConfg"] = values.pop("managerConfig")
    with pytest.raises(AssertionError, match="managerConfg"):
        schemas.assert_helm_values_exist(values, versions.KUEUE.upstream)


@pytest.mark.parametrize("name", VARIANTS)
def test_custom_resources_wait_for_the_release_serving_their_crd(name):
    run = variant(name)
    crs = [o for o in k8s_objects(run) if o.inputs["apiVersion"].split("/")[0] in CRD_RELEASE]
    for cr in crs:
        release = run.one(RELEASE, CRD_RELEASE[cr.inputs["apiVersion"].split("/")[0]])
        assert run.depends_on(cr, release), f"{cr.name} does not wait for {release.name}"
    if name.startswith("g3"):
        assert len(crs) >= 3


@pytest.mark.parametrize("name", VARIANTS)
def test_charts_with_servicemonitors_wait_for_prometheus_operator_crds(name):
    run = variant(name)
    kps = [r for r in run.of_type(RELEASE) if r.name == "kps"]
    for release in run.of_type(RELEASE):
        values = release.inputs["values"]
        wants_monitor = (
            values.get("serviceMonitor", {}).get("enabled")
            or values.get("enablePrometheus")
            or values.get("dcgmExporter", {}).get("serviceMonitor", {}).get("enabled")
        )
        if wants_monitor:
            assert kps and run.depends_on(release, kps[0]), f"{release.name} renders ServiceMonitors before the CRD"


@pytest.mark.parametrize("name", VARIANTS)
def test_only_gpu_daemonsets_tolerate_the_gpu_taint_in_helm_values(name):
    for release in variant(name).of_type(RELEASE):
        chart = chart_of(release)
        defaults = yaml.safe_load(upstream.path(f"{chart.upstream}/values.yaml").read_text())
        effective = merged(defaults, release.inputs["values"])
        found = toleration_paths(effective)
        allowed = GPU_DAEMONSET_TOLERATIONS.get(chart.name, set())
        assert found <= allowed, f"{chart.name}: {sorted(found - allowed)} let non-GPU pods onto GPU nodes"


def test_the_node_exporter_default_toleration_is_overridden():
    # The subchart's defaults are not locked; its chart tolerates every NoSchedule taint by default.
    values = variant("g1").one(RELEASE, "kps").inputs["values"]
    assert values["prometheus-node-exporter"]["tolerations"] == []
    assert values["prometheus-node-exporter"]["nodeSelector"] == {"gke-ml-labs/pool": "system"}


@pytest.mark.parametrize("name", VARIANTS)
def test_only_the_kueue_flavor_carries_the_gpu_toleration_among_objects(name):
    for obj in k8s_objects(variant(name)):
        paths = toleration_paths(obj.inputs)
        if obj.inputs["kind"] == "ResourceFlavor":
            assert paths == {"spec.tolerations"}  # what admitted GPU workloads get
        else:
            assert not paths, f"{obj.inputs['kind']} {obj.name} tolerates the GPU taint at {paths}"


def test_toleration_detector_sees_both_forms():
    assert tolerates_gpu({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"})
    assert tolerates_gpu({"operator": "Exists"})
    assert tolerates_gpu({"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"})
    assert not tolerates_gpu({"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"})
