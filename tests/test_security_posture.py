"""The security posture of what we deploy, read from the whole program run under mocks and from the
benchmark kit's own builders: every pod spec meets restricted or is waived (podspec.security.WAIVERS)
for exactly what it lacks; every namespace we create carries Pod Security Admission labels at the
strictest level its pods meet; and the first-run findings of issue 14 (Knative's PDBs, Kueue's
blockAdmission) hold on the rendered objects."""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pytest
import yaml
from conftest import STACKS
from pod_security import findings, level, pod_specs

import schemas

from benchmarks.manifests import LABS, workloads
from components import knative, versions
from podspec.security import POD_SECURITY_VERSION, WAIVERS, waived
from stacks.mockrun import MockRun, run_stack
from stacks.plan import kubernetes_objects
from stacks.stackfile import REPO

K = "gke-ml-labs"
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
PSA = "pod-security.kubernetes.io"
LEVELS = ("privileged", "baseline", "restricted")  # least to most strict
# Features no stack file turns on but a user may: they create namespaces (and pods) too.
EXTRA_RUNS = {
    "tenancy": ("g3", {f"{K}:tenancy": {"enabled": True, "tenants": [{"name": "team-a", "group": "a@example.com"}]}}),
    "gpu-operator": ("g2", {f"{K}:gpu_sharing": {"mode": "nvidia"}, f"{K}:gpu_driver_version": "INSTALLATION_DISABLED"}),
    "g4-v1": ("g4", {f"{K}:training_operator": {"api": "v1"}}),
}
# The lab whose benchmark a run of EXTRA_RUNS feeds (its kit pods count in its namespaces).
KIT_LAB = {"g4-v1": "g4"}
# The DCGM exporter chart's DaemonSet takes the release's name.
DCGM_WORKLOAD = "monitoring/DaemonSet/dcgm-exporter"


@pytest.fixture(scope="module")
def runs(stack_runs) -> dict[str, MockRun]:
    extra = {name: run_stack(stack, overrides=o) for name, (stack, o) in EXTRA_RUNS.items()}
    return {**{s: stack_runs[(s, False)] for s in STACKS}, **extra}


def objects(run: MockRun) -> list[dict[str, Any]]:
    """Every Kubernetes object the stack creates (Helm values are not objects)."""
    return [body for file_name, body in kubernetes_objects(run) if not file_name.startswith("helm-")]


def helm_values(run: MockRun, release: str) -> dict[str, Any] | None:
    found = [r.inputs.get("values") or {} for r in run.of_type(HELM_RELEASE) if r.inputs.get("name") == release]
    return found[0] if found else None


def kit_pods(runs: dict[str, MockRun]) -> list[tuple[str, dict[str, Any]]]:
    fed = [(lab, lab) for lab in LABS] + list(KIT_LAB.items())
    return [p for run, lab in fed for obj in workloads(lab, runs[run].outputs) for p in pod_specs(obj)]


def unwaived(pods: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [f"{wid}: {f}" for wid, spec in pods for f in findings(spec) if f.rule not in waived(wid)]


def test_every_pod_spec_of_every_stack_meets_restricted_or_is_waived(runs):
    pods = [(f"{name}: {wid}", wid, spec) for name, run in runs.items() for obj in objects(run) for wid, spec in pod_specs(obj)]
    gaps = [f"{label}: {f}" for label, wid, spec in pods for f in findings(spec) if f.rule not in waived(wid)]
    assert gaps == [], "\n".join(gaps)
    # Not vacuous: the idle guard, the cost exporter, vLLM, the g5 predictor and the three g7 steps.
    found = {wid for _, wid, _ in pods}
    assert {"idle-guard/CronJob/idle-guard", "cost-exporter/Deployment/cost-exporter", "llm/Deployment/vllm",
            "models/InferenceService/iris", "pipelines/WorkflowTemplate/train-register-deploy:deploy"} <= found


def test_every_pod_spec_the_benchmarks_create_meets_restricted_or_is_waived(runs):
    pods = kit_pods(runs)
    assert unwaived(pods) == [], "\n".join(unwaived(pods))
    names = [wid.split("/")[2] for wid, _ in pods]
    labs = {name[:2] for name in names if "-nvidia-smi-" not in name}
    assert labs == {"g1", "g2", "g3", "g4", "g5", "g6", "g8"}, "g7's Workflow runs the stack's template, checked above"
    # Every lab's run may end with the one-shot nvidia-smi pod of its report's evidence.
    assert {name[:2] for name in names if "-nvidia-smi-" in name} == set(LABS)


def test_a_new_workload_without_the_helper_is_caught(runs):
    # What a new component would write if it forgot podspec.security: the check above would name it.
    pod = {"containers": [{"name": "new", "image": "python:3.12.8-slim", "resources": {"limits": {"cpu": "1"}}}]}
    rules = {f.rule for f in findings(pod)} - waived("llm/Deployment/new-server")
    assert rules == {"privilege-escalation", "run-as-non-root", "seccomp", "capabilities", "read-only-root",
                     "service-account-token", "pull-policy"}


def test_every_waiver_is_needed(runs):
    # A waiver that matches no workload, or excuses a rule that workload meets, is stale: it would
    # silently excuse the next workload that happens to match.
    pods = [p for run in runs.values() for obj in objects(run) for p in pod_specs(obj)] + kit_pods(runs)
    broken: dict[str, set[str]] = {}
    for wid, spec in pods:
        broken.setdefault(wid, set()).update(f.rule for f in findings(spec))
    dcgm = helm_values(runs["g1"], "dcgm-exporter")
    assert dcgm["securityContext"]["privileged"] is True
    broken[DCGM_WORKLOAD] = {"privileged", "privilege-escalation", "host-path"}
    ids = [*broken]
    for w in WAIVERS:
        matched = [wid for wid in ids if w.covers(wid)]
        assert matched, f"waiver matches no workload: {w}"
        for rule in w.rules:
            assert any(rule in broken[wid] for wid in matched), f"no workload it covers breaks {rule}: {w}"


def _namespaces(run: MockRun, name: str = "") -> dict[str, dict[str, str]]:
    """The namespaces the stack creates, and those its lab's benchmark creates (g3's run without Kueue)."""
    kit = workloads(name, run.outputs) if name in LABS else []
    return {o["metadata"]["name"]: o["metadata"].get("labels") or {} for o in objects(run) + kit if o["kind"] == "Namespace"}


def test_every_namespace_we_create_carries_pod_security_admission_labels(runs):
    seen = set()
    for name, run in runs.items():
        for ns, labels in _namespaces(run, name).items():
            seen.add(ns)
            psa = {k.removeprefix(f"{PSA}/"): v for k, v in labels.items() if k.startswith(f"{PSA}/")}
            assert psa.get("enforce") in LEVELS, f"{name}: namespace {ns} enforces nothing: {labels}"
            assert psa == {
                "enforce": psa["enforce"], "enforce-version": POD_SECURITY_VERSION,
                "warn": "restricted", "warn-version": POD_SECURITY_VERSION,
                "audit": "restricted", "audit-version": POD_SECURITY_VERSION,
            }, f"{name}: namespace {ns}"
    # Ours and the charts' we create (argo, kserve, cert-manager, kueue-system, jobset-system, monitoring).
    assert {"idle-guard", "cost-exporter", "llm", "models", "pipelines", "batch-jobs", "training", "spot-jobs",
            "team-a", "monitoring", "gpu-operator", "argo", "kserve", "cert-manager", "kueue-system",
            "jobset-system", "g3-no-kueue-0000"} <= seen


# Containers controllers add to our pods, as the pinned versions add them: they count towards what a
# namespace can enforce. Training Operator v1.9.4 (pkg/controller.v1/pytorch/initcontainer.go) gives
# every Worker of a PyTorchJob with a Master this init container, verbatim but for the loop.
INIT_PYTORCH = {
    "name": "init-pytorch", "image": "alpine:3.10", "imagePullPolicy": "IfNotPresent",
    "resources": {"limits": {"cpu": "100m", "memory": "20Mi"}, "requests": {"cpu": "50m", "memory": "10Mi"}},
    "command": ["sh", "-c", "until nslookup master; do sleep 2; done"],
}
# Knative Serving 1.21.1's queue-proxy (pkg/reconciler/revision/resources/queue.go, queueSecurityContext).
QUEUE_PROXY = {"name": "queue-proxy", "securityContext": {
    "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}}


def with_injected(wid: str, spec: dict[str, Any], run: MockRun) -> dict[str, Any]:
    kind, part = wid.split("/")[1], wid.partition(":")[2]
    init, extra = [], []
    if kind == "PyTorchJob" and part == "Worker":
        init = [INIT_PYTORCH]
    elif kind == "InferenceService":
        # KServe's storage-initializer (its chart's ClusterStorageContainer) and Knative's queue-proxy.
        storage = schemas._chart_defaults(versions.KSERVE_RESOURCES.upstream)["kserve"]["storage"]
        init, extra = [{"name": "storage-initializer", "securityContext": storage["containerSecurityContext"]}], [QUEUE_PROXY]
    elif kind == "WorkflowTemplate":
        # Argo's init and wait containers, with the executor settings of our chart values.
        executor = {"securityContext": helm_values(run, "argo-workflows")["executor"]["securityContext"]}
        init, extra = [{"name": "init", **executor}], [{"name": "wait", **executor}]
    return {**spec, "initContainers": [*(spec.get("initContainers") or []), *init],
            "containers": [*spec["containers"], *extra]}


def test_namespaces_enforce_the_strictest_level_their_pods_meet(runs):
    for name, run in runs.items():
        namespaces = _namespaces(run, name)
        lab = KIT_LAB.get(name, name)
        kit = [p for obj in workloads(lab, run.outputs) for p in pod_specs(obj)] if lab in LABS else []
        pods = [p for obj in objects(run) for p in pod_specs(obj)] + kit
        by_ns: dict[str, list[str]] = {}
        for wid, spec in pods:
            by_ns.setdefault(wid.split("/")[0], []).append(level(findings(with_injected(wid, spec, run))))
        for ns, levels in by_ns.items():
            if ns not in namespaces:
                assert ns == "default", f"{name}: pods in {ns}, a namespace we do not create"
                continue
            strictest_met = min(levels, key=LEVELS.index)
            assert namespaces[ns][f"{PSA}/enforce"] == strictest_met, f"{name}: namespace {ns}, pods {levels}"
    # Not vacuous: the v1 Training Operator's init container keeps g4's namespace at baseline; a
    # TrainJob's pods are restricted.
    assert _namespaces(runs["g4-v1"])["training"][f"{PSA}/enforce"] == "baseline"
    assert _namespaces(runs["g4"])["training"][f"{PSA}/enforce"] == "restricted"


def test_gpu_node_daemonsets_namespaces_allow_what_they_need(runs):
    # The DCGM exporter (privileged, waived) and node-exporter (host namespaces) share monitoring; the GPU
    # Operator's operands are privileged: baseline would refuse them, so both enforce privileged.
    for name, run in runs.items():
        namespaces = _namespaces(run)
        if helm_values(run, "dcgm-exporter") is not None:
            assert namespaces["monitoring"][f"{PSA}/enforce"] == "privileged", name
            assert "privileged" in waived(DCGM_WORKLOAD)
    assert _namespaces(runs["gpu-operator"])["gpu-operator"][f"{PSA}/enforce"] == "privileged"


def test_argo_executor_and_chart_pods_are_restricted(runs):
    values = helm_values(runs["g7"], "argo-workflows")
    executor = {"name": "wait", **{"securityContext": values["executor"]["securityContext"]}}
    # The executor's containers run under the workflow's pod settings (the steps' pods).
    (template,) = [o for o in objects(runs["g7"]) if o["kind"] == "WorkflowTemplate"]
    pod = {"securityContext": template["spec"]["securityContext"], "containers": [executor]}
    assert level(findings(pod)) == "restricted"
    for part in ("controller", "server"):
        assert values[part]["podSecurityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


# ---------------------------------------------------------------- Knative's disruption budgets

# Verbatim from knative/serving knative-v1.21.1, config/core/deployments/activator-hpa.yaml and
# webhook-hpa.yaml (both HPAs there have minReplicas: 1): no eviction is ever allowed.
UPSTREAM_PDBS = """
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: activator-pdb
  namespace: knative-serving
  labels:
    app.kubernetes.io/component: activator
    app.kubernetes.io/name: knative-serving
    app.kubernetes.io/version: devel
spec:
  minAvailable: 80%
  selector:
    matchLabels:
      app: activator
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: webhook-pdb
  namespace: knative-serving
  labels:
    app.kubernetes.io/component: webhook
    app.kubernetes.io/name: knative-serving
    app.kubernetes.io/version: devel
spec:
  minAvailable: 80%
  selector:
    matchLabels:
      app: webhook
"""


@pytest.mark.parametrize("pdb", list(yaml.safe_load_all(UPSTREAM_PDBS)), ids=lambda p: p["metadata"]["name"])
def test_knative_pdbs_let_the_autoscaler_drain_their_node(pdb):
    transform = knative.manifest_transform(knative.config_maps(knative.KnativeArgs("lab.test", 20, 1200, 30)))
    props = {k: v for k, v in pdb.items() if k != "kind"}  # as the engine hands a ConfigFile child over
    args = pulumi.ResourceTransformArgs(True, "kubernetes:policy/v1:PodDisruptionBudget", pdb["metadata"]["name"],
                                        props, pulumi.ResourceOptions())
    patched = transform(args).props
    # One pod of the one replica may be evicted; minAvailable is gone (a PDB takes one or the other).
    assert patched["spec"] == {"maxUnavailable": 1, "selector": pdb["spec"]["selector"]}
    assert pdb["spec"]["minAvailable"] == "80%", "the manifest object itself is not mutated"
    elsewhere = {**pdb, "metadata": {**pdb["metadata"], "namespace": "kourier-system"}}
    assert knative.patch_object(elsewhere, {}) is None


def test_knative_accepts_the_predictors_pod_security_settings():
    features = knative.config_maps(knative.KnativeArgs("lab.test", 20, 1200, 30))["config-features"]
    assert features["kubernetes.podspec-securitycontext"] == "enabled"


# ---------------------------------------------------------------- Kueue's blockAdmission for g3


def _kueue_config(run: MockRun) -> dict[str, Any]:
    values = helm_values(run, "kueue")
    return yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])


def test_g3_deploys_and_exports_its_block_admission_setting(stack_runs):
    run = stack_runs[("g3", False)]
    ready = _kueue_config(run)["waitForPodsReady"]
    # On, as Pulumi.g3.yaml says; exported, so the g3 report says so and attributes each wait.
    assert ready["blockAdmission"] is True and ready["timeout"] == "20m"
    assert run.outputs["benchmark"]["kueue"]["block_admission"] is True


def test_block_admission_can_be_turned_off_and_the_benchmark_sees_it():
    g3 = yaml.safe_load((REPO / "Pulumi.g3.yaml").read_text())["config"][f"{K}:kueue"]
    run = run_stack("g3", overrides={f"{K}:kueue": json.dumps({**g3, "block_admission": False})})
    assert _kueue_config(run)["waitForPodsReady"]["blockAdmission"] is False
    assert run.outputs["benchmark"]["kueue"]["block_admission"] is False


def test_the_benchmarks_objects_are_written_for_a_reader_or_scanner(tmp_path, capsys):
    from benchmarks import manifests

    assert manifests.main(["--out", str(tmp_path), "g8"]) == 0
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["g8-configmap-spot-jobs-g8-ckpt-0000-scripts.yaml", "g8-job-spot-jobs-g8-ckpt-0000.yaml",
                       "g8-pod-default-g8-nvidia-smi-0000.yaml"]  # fmt: skip
    job = yaml.safe_load((tmp_path / written[1]).read_text())
    assert job["kind"] == "Job" and job["spec"]["template"]["spec"]["serviceAccountName"] == "checkpointer"
    with pytest.raises(SystemExit) as exit_:
        manifests.main(["--out", str(tmp_path), "g9"])
    assert exit_.value.code == 2 and "unknown lab(s) g9; labs: g1, g2, g3, g4, g5, g6, g7, g8" in capsys.readouterr().err
