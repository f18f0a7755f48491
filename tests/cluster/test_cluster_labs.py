"""Every lab's Kubernetes half (`cluster: existing`) through the real Pulumi engine and provider against
the local control plane, its nodes shaped like the lab's pools: `pulumi up`, then the API server's own
answers (every declared object exists; every pod template we write is admitted, by a server-side
dry-run create, under its namespace's Pod Security level; every namespace that sets a level refuses a
privileged pod; every object the lab's benchmark creates, built from the stack's real outputs, is
accepted, and so is each of its pods), then `pulumi destroy` and none of the lab's objects remain.

Pods are simulated (kwok: no container runs); scheduling, admission and controllers are real. The
figures per lab (objects, rejections, seconds up and down) go to .cache/test-cluster/labs.json and are
printed at the end; docs/testing.md quotes a run."""

from __future__ import annotations

import json
import runpy
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import dynamic
from pulumi.automation.errors import CommandError
from localcluster.engine import stack
from existing_cluster import raw, run_existing
from cluster.inventory import (
    PRIVILEGED_PROBE, PSA_ENFORCE, Declared, declared, dry_run_create, dry_run_pod, live, pod_templates,
    unordered_custom_resources,
)
from kubernetes import client

from benchmarks.manifests import LABS as BENCHMARKED, workloads

from localcluster.build import REPO
from localcluster.controlplane import CONTEXT
from stacks.loader import PROJECT
from stacks.stackfile import load_config, stack_names

LABS = stack_names()
RESULTS = REPO / ".cache" / "test-cluster" / "labs.json"
# `pulumi destroy` is to leave nothing, CRDs included: Helm keeps a chart's crds/ on uninstall, but with
# charts: upstream-crds the CRDs are the program's own objects and go with it.


def _stack_file(lab: str, kubeconfig: Path) -> dict:
    """The lab's stack file turned to `cluster: existing` on the local cluster, offline charts (the
    locked CRDs of each chart's pinned version), as a user on their own cluster would write it."""
    keys = raw(lab, kubeconfig=str(kubeconfig), context=CONTEXT, charts="upstream-crds")
    return {"config": {f"{PROJECT}:{k}": v for k, v in keys.items()}}


def _mocked(lab: str, kubeconfig: Path) -> list[tuple[str, str]]:
    """The Kubernetes objects (type, name) the same stack file declares under Pulumi mocks: what the real
    engine is to create, no more, no less (dev declares none: on an existing cluster the lab is the
    cluster itself)."""
    run = run_existing(lab, kubeconfig=str(kubeconfig), context=CONTEXT, charts="upstream-crds")
    return sorted((r.type, r.name) for r in run.resources if r.custom and r.type.startswith("kubernetes:"))


def _program() -> None:
    # What the language host would run: the project's own entry point.
    runpy.run_path(str(REPO / "__main__.py"), run_name="__main__")


@pytest.fixture(scope="module")
def figures():
    found: dict[str, dict] = {}
    yield found
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(found, indent=2) + "\n")
    print("\nlab   objects  kit  rejections  up_s  destroy_s")
    for lab, f in found.items():
        if "up_failed" in f:
            print(f"{lab:5} pulumi up failed: {f['up_failed'][-1]}")
        else:
            print(f"{lab:5} {f['objects']:7} {f['kit_objects']:4} {len(f['rejections']):11} {f['up_s']:5.0f} {f['destroy_s']:10.0f}")


@pytest.mark.usefixtures("built")  # the Pulumi CLI and the provider on PATH
@pytest.mark.parametrize("lab", LABS)
def test_the_lab_goes_up_is_accepted_and_comes_down_to_nothing(lab, control_plane, api, tmp_path, figures):
    control_plane.shape(load_config(lab))
    expected = _mocked(lab, control_plane.kubeconfig)
    (tmp_path / f"Pulumi.{lab}.yaml").write_text(yaml.safe_dump(_stack_file(lab, control_plane.kubeconfig)))
    lab_stack = stack(lab, PROJECT, _program, tmp_path)

    started = time.monotonic()
    try:
        up = lab_stack.up(on_output=print, color="never")
    except CommandError as e:
        errors = _errors(e)
        figures[lab] = {"up_failed": errors}
        lab_stack.destroy(on_output=print, color="never")  # leave the next lab a clean cluster
        pytest.fail(f"pulumi up -s {lab} failed; the errors it printed:\n" + "\n".join(errors))
    up_s = time.monotonic() - started
    state = lab_stack.export_stack().deployment
    objects = declared(state)
    assert sorted((o.type, o.logical_name) for o in objects) == expected, "the engine's objects are not those the program declares"
    unordered = unordered_custom_resources(state, objects)

    kinds = dynamic.DynamicClient(api)
    missing = [str(o) for o in objects if live(kinds, o) is None]
    rejections = _admission(api, objects)
    kit = workloads(lab, {k: v.value for k, v in up.outputs.items()}) if lab in BENCHMARKED else []
    rejections += _kit_admission(api, kit)

    started = time.monotonic()
    down = lab_stack.destroy(on_output=print, color="never")
    destroy_s = time.monotonic() - started
    kinds = dynamic.DynamicClient(api)  # the kinds served now, the lab's CRDs gone
    left = [str(o) for o in objects if live(kinds, o) is not None]
    figures[lab] = {"objects": len(objects), "kit_objects": len(kit), "rejections": rejections, "up_s": round(up_s, 1), "destroy_s": round(destroy_s, 1)}

    assert missing == [], f"declared but not on the API server: {missing}"
    assert unordered == [], "\n".join(unordered)
    assert rejections == [], "\n".join(rejections)
    assert down.summary.result == "succeeded"
    assert left == [], f"left behind by pulumi destroy: {left}"


def _admission(api, objects: list[Declared]) -> list[str]:
    """Each pod template dry-run created in its namespace; each Pod Security level shown to refuse."""
    rejections = []
    for obj in objects:
        for template in pod_templates(obj.outputs.get("spec")):
            refused = dry_run_pod(api, obj.namespace or "default", template)
            if refused:
                rejections.append(f"{obj}: a pod of its template was refused: {refused}")
    for ns in (o for o in objects if o.kind == "Namespace"):
        level = (ns.outputs["metadata"].get("labels") or {}).get(PSA_ENFORCE)
        if level in ("baseline", "restricted") and dry_run_pod(api, ns.name, {"spec": PRIVILEGED_PROBE}) is None:
            rejections.append(f"{ns}: enforces {level} but admitted a privileged pod")
    return rejections


# What the benchmark's pods refer to (their namespace, ServiceAccount, scripts): created for real, as the
# benchmark creates them first, then deleted; its workloads and pods are dry-run created.
KIT_MADE = ("Namespace", "ServiceAccount", "ConfigMap")
# A TrainJob's pod specs are patches onto its runtime's (runtimePatches: no image of their own): its pods
# exist only once the Trainer controller merges them, which this test does not run.
NOT_PODS = ("TrainJob",)


def _kit_admission(api, kit: list[dict]) -> list[str]:
    """What the benchmark creates, as it writes it: each object accepted, each pod its workloads make
    admitted (server-side dry-run)."""
    kinds, rejections, made = dynamic.DynamicClient(api), [], []
    try:
        for obj in kit:
            meta = obj["metadata"]
            where = f"{obj['kind']} {meta.get('namespace', '')}/{meta['name']} (the benchmark's)"
            resource = kinds.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            if obj["kind"] in KIT_MADE:
                resource.create(body=obj, namespace=meta.get("namespace"))
                made.append((resource, meta))
                if obj["kind"] == "Namespace":
                    _default_service_account(api, meta["name"])
                continue
            refused = dry_run_create(kinds, obj)
            if refused:
                rejections.append(f"{where}: refused: {refused}")
            if obj["kind"] == "Pod" or obj["kind"] in NOT_PODS:
                continue
            for template in pod_templates(obj.get("spec")):
                refused = dry_run_pod(api, meta["namespace"], template)
                if refused:
                    rejections.append(f"{where}: a pod of its template was refused: {refused}")
    finally:
        for resource, meta in reversed(made):
            resource.delete(name=meta["name"], namespace=meta.get("namespace"))
    return rejections


def _default_service_account(api, namespace: str, timeout_s: float = 60) -> None:
    """The namespace's `default` ServiceAccount, which the controller manager makes and without which the
    ServiceAccount admission plugin refuses every pod there (the benchmark's pods come later)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client.CoreV1Api(api).read_namespaced_service_account("default", namespace)
            return
        except client.ApiException as e:
            if e.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _errors(error: CommandError) -> list[str]:
    """The lines of a failed `pulumi up` that carry an error: the provider quotes the API server's message."""
    lines = [ln.strip() for ln in str(error).splitlines()]
    return [ln for ln in lines if "error" in ln.lower()][-20:] or lines[-20:]
