"""`cluster.charts: upstream-crds` (the local control plane: no network, no containers): no chart or manifest
is fetched; each is replaced by the CRDs of its pinned version, parsed from the locked upstream files,
and every custom resource of ours waits for its CRD. docs/existing-cluster.md says what stands in for what."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

import existing_cluster as ec
from components import upstream, upstream_crds, versions
from stacks.mockrun import MockRun

REPO = Path(__file__).resolve().parents[1]
LABS = ["dev", "g1", "g2", "g3", "g4", "g5", "g6", "g7", "g8"]
CRD = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"
FETCHED = ("kubernetes:helm.sh/v3:Release", "kubernetes:yaml/v2:ConfigFile", "kubernetes:kustomize/v2:Directory")
MONITORING = {"prometheusrules.monitoring.coreos.com", "servicemonitors.monitoring.coreos.com"}
KUEUE = {"clusterqueues.kueue.x-k8s.io", "localqueues.kueue.x-k8s.io", "resourceflavors.kueue.x-k8s.io",
         "workloads.kueue.x-k8s.io", "jobsets.jobset.x-k8s.io"}  # fmt: skip
ARGO = {"workflows.argoproj.io", "workflowtemplates.argoproj.io", "clusterworkflowtemplates.argoproj.io"}
# Read off tests/upstream.lock.tsv by hand: the locked CRDs of the charts each lab installs (g4's Trainer chart
# installs JobSet as its dependency; g3's Kueue stack installs JobSet's own chart).
EXPECTED = {
    "dev": set(), "g1": MONITORING, "g2": MONITORING, "g3": MONITORING | KUEUE, "g4": {"trainjobs.trainer.kubeflow.org", "jobsets.jobset.x-k8s.io"},
    "g5": {"inferenceservices.serving.kserve.io"}, "g6": MONITORING, "g7": {"inferenceservices.serving.kserve.io"} | ARGO,
    "g8": MONITORING,
}  # fmt: skip
# Groups the API server serves itself (Pulumi's type tokens say `core` for the core group): every other
# kind we create is a custom resource.
BUILT_IN_GROUPS = {"core", "apps", "batch", "rbac.authorization.k8s.io", "networking.k8s.io", "scheduling.k8s.io",
                   "policy", "apiextensions.k8s.io"}  # fmt: skip


@pytest.fixture(scope="module")
def offline() -> dict[str, MockRun]:
    return {lab: ec.run_existing(lab, charts="upstream-crds", context=ec.LOCAL_CONTEXT) for lab in LABS}


def _group_kind(type_: str) -> tuple[str, str]:
    _, api_version, kind = type_.split(":")
    return api_version.split("/")[0], kind


def _locked_crds() -> dict[str, dict[str, Any]]:
    """Every CRD of the lock, by name, as its file has it."""
    found = {}
    for local in upstream.locked_paths():
        if "/crds/" in local:
            for doc in yaml.load_all(upstream.path(local).read_text(), Loader=yaml.CSafeLoader):
                if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                    found[doc["metadata"]["name"]] = doc
    return found


def _no_text_descriptions(value: Any) -> Any:
    """Every `description: <text>` pair dropped (a property named description is a schema, not text)."""
    if isinstance(value, dict):
        return {k: _no_text_descriptions(v) for k, v in value.items() if not (k == "description" and isinstance(v, str))}
    if isinstance(value, list):
        return [_no_text_descriptions(v) for v in value]
    return value


@pytest.mark.parametrize("lab", LABS)
def test_nothing_is_fetched_offline(offline, lab):
    assert [r.type for r in offline[lab].resources if r.type in FETCHED] == []


@pytest.mark.parametrize("lab", LABS)
def test_the_crds_are_those_of_the_locked_files_descriptions_aside(offline, lab):
    registered = {r.inputs["metadata"]["name"]: r.inputs for r in offline[lab].of_type(CRD)}
    assert set(registered) == EXPECTED[lab]
    locked = _locked_crds()
    for name, body in registered.items():
        want = {k: v for k, v in locked[name].items() if k != "status"}
        for version in want["spec"]["versions"]:
            version["schema"]["openAPIV3Schema"] = _no_text_descriptions(version["schema"]["openAPIV3Schema"])
        assert body == want, name


@pytest.mark.parametrize("lab", LABS)
def test_every_custom_resource_waits_for_its_crd(offline, lab):
    run = offline[lab]
    crds = {(c.inputs["spec"]["group"], c.inputs["spec"]["names"]["kind"]): c for c in run.of_type(CRD)}
    custom = [r for r in run.resources if r.custom and r.type.startswith("kubernetes:")
              and _group_kind(r.type)[0] not in BUILT_IN_GROUPS]  # fmt: skip
    assert bool(custom) == (lab not in ("dev", "g4")), "the labs' own custom resources are checked"
    for r in custom:
        crd = crds.get(_group_kind(r.type))
        assert crd is not None, f"{r.type} {r.name}: no CRD of its kind stands in offline"
        assert run.depends_on(r, crd), f"{r.type} {r.name} does not wait for {crd.name}"


@pytest.mark.parametrize("lab", LABS)
def test_every_namespace_the_outputs_name_exists_offline(offline, lab):
    run = offline[lab]
    made = {r.inputs["metadata"]["name"] for r in run.of_type("kubernetes:core/v1:Namespace")}
    assert set(run.outputs["namespaces"]) <= made
    if lab in ("g5", "g7"):  # Knative's manifests make these; offline nothing does, and the outputs say so
        assert not {"knative-serving", "kourier-system"} & set(run.outputs["namespaces"])


def test_the_docs_say_what_stands_in_for_every_chart_and_manifest():
    page = (REPO / "docs" / "existing-cluster.md").read_text()
    table = page[page.index("## What stands in offline"):]
    charts = [c for c in vars(versions).values() if isinstance(c, versions.Chart)]
    for chart in charts:
        row = next((line for line in table.splitlines() if f"`{chart.name}`" in line), None)
        assert row is not None, f"the stand-in table has no row for chart {chart.name}"
        kinds = {crd["spec"]["names"]["kind"] for folder in chart.crds for crd in upstream_crds.crds(folder)}
        assert all(re.search(rf"\b{k}\b", row) for k in kinds), (chart.name, kinds, row)
    for manifest in ("serving-core.yaml", "kourier.yaml", "standalone", "daemonset-preloaded"):
        assert manifest in table, f"the stand-in table does not say what replaces {manifest}"
