"""The restricted checker (tests/pod_security.py) fails a pod for each rule it breaks, and the one helper
(podspec.security.restricted) builds pods that pass it. The checks over every stack's and every
benchmark's pod specs build on these two."""

from __future__ import annotations

import copy
import re
from typing import Any, Callable

import pytest
from pod_security import findings, level, pod_specs

from podspec.security import (
    BASELINE_RULES,
    NOBODY,
    OUR_RULES,
    RESTRICTED_RULES,
    TMP,
    WAIVERS,
    Scratch,
    restricted,
    waived,
)

APP = {
    "name": "app",
    "image": "docker.io/library/python:3.12.8-slim",
    "command": ["python", "-c", "print(1)"],
    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}},
}


def hardened(**kwargs: Any) -> dict[str, Any]:
    return restricted({"restartPolicy": "Never", "containers": [copy.deepcopy(APP)]}, **kwargs)


def rules(spec: dict[str, Any]) -> set[str]:
    return {f.rule for f in findings(spec)}


def test_the_helper_builds_a_pod_that_meets_restricted_and_our_rules():
    spec = hardened()
    assert findings(spec) == [] and level(findings(spec)) == "restricted"
    (app,) = spec["containers"]
    assert spec["securityContext"] == {
        "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"},
        "runAsUser": NOBODY, "runAsGroup": NOBODY, "fsGroup": NOBODY,
    }
    assert app["securityContext"] == {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True,
    }
    # /tmp is writable and HOME points there: pip, CUDA and Hugging Face write under ~.
    assert spec["volumes"] == [{"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}]
    assert app["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    assert {"name": "HOME", "value": "/tmp"} in app["env"]
    assert app["imagePullPolicy"] == "IfNotPresent" and spec["automountServiceAccountToken"] is False


def test_the_kubernetes_documentations_restricted_pod_is_restricted():
    # The shape of the restricted example in Kubernetes' own docs (pod-level non-root and seccomp,
    # container-level escalation and capabilities): restricted, though not our extra rules.
    spec = {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "c", "image": "x", "securityContext": {
            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}],
    }
    assert level(findings(spec)) == "restricted"
    assert rules(spec) == {"read-only-root", "service-account-token", "pull-policy", "cpu-limit"}


def _container(spec: dict[str, Any]) -> dict[str, Any]:
    return spec["containers"][0]


def _sc(spec: dict[str, Any]) -> dict[str, Any]:
    return _container(spec)["securityContext"]


BREAKERS: list[tuple[str, Callable[[dict[str, Any]], Any], set[str], str]] = [
    ("host network", lambda s: s.update(hostNetwork=True), {"host-namespaces"}, "privileged"),
    ("host PID", lambda s: s.update(hostPID=True), {"host-namespaces"}, "privileged"),
    ("privileged", lambda s: _sc(s).update(privileged=True), {"privileged"}, "privileged"),
    ("SYS_ADMIN", lambda s: _sc(s)["capabilities"].update(add=["SYS_ADMIN"]), {"added-capabilities", "capabilities"},
     "privileged"),
    ("CHOWN added", lambda s: _sc(s)["capabilities"].update(add=["CHOWN"]), {"capabilities"}, "baseline"),
    ("NET_BIND_SERVICE added", lambda s: _sc(s)["capabilities"].update(add=["NET_BIND_SERVICE"]), set(), "restricted"),
    ("hostPath", lambda s: s["volumes"].append({"name": "h", "hostPath": {"path": "/var"}}), {"host-path", "volume-types"},
     "privileged"),
    ("hostPort", lambda s: _container(s).update(ports=[{"containerPort": 80, "hostPort": 80}]), {"host-ports"},
     "privileged"),
    ("AppArmor unconfined", lambda s: _sc(s).update(appArmorProfile={"type": "Unconfined"}), {"apparmor"}, "privileged"),
    ("SELinux user", lambda s: _sc(s).update(seLinuxOptions={"user": "system_u"}), {"selinux"}, "privileged"),
    ("SELinux type", lambda s: _sc(s).update(seLinuxOptions={"type": "spc_t"}), {"selinux"}, "privileged"),
    ("procMount", lambda s: _sc(s).update(procMount="Unmasked"), {"proc-mount"}, "privileged"),
    ("seccomp unconfined", lambda s: _sc(s).update(seccompProfile={"type": "Unconfined"}),
     {"seccomp-unconfined", "seccomp"}, "privileged"),
    ("unsafe sysctl", lambda s: s["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
     {"sysctls"}, "privileged"),
    ("nfs volume", lambda s: s["volumes"].append({"name": "n", "nfs": {"server": "x", "path": "/"}}),
     {"volume-types"}, "baseline"),
    ("escalation", lambda s: _sc(s).update(allowPrivilegeEscalation=True), {"privilege-escalation"}, "baseline"),
    ("escalation unset", lambda s: _sc(s).pop("allowPrivilegeEscalation"), {"privilege-escalation"}, "baseline"),
    ("runAsNonRoot unset", lambda s: s["securityContext"].pop("runAsNonRoot"), {"run-as-non-root"}, "baseline"),
    ("container runAsNonRoot false", lambda s: _sc(s).update(runAsNonRoot=False), {"run-as-non-root"}, "baseline"),
    ("runAsUser 0", lambda s: _sc(s).update(runAsUser=0), {"run-as-root-user"}, "baseline"),
    ("pod runAsUser 0", lambda s: s["securityContext"].update(runAsUser=0), {"run-as-root-user"}, "baseline"),
    ("seccomp unset", lambda s: s["securityContext"].pop("seccompProfile"), {"seccomp"}, "baseline"),
    ("capabilities kept", lambda s: _sc(s).pop("capabilities"), {"capabilities"}, "baseline"),
    ("writable root", lambda s: _sc(s).update(readOnlyRootFilesystem=False), {"read-only-root"}, "restricted"),
    ("token mounted", lambda s: s.update(automountServiceAccountToken=True), {"service-account-token"}, "restricted"),
    ("token by default", lambda s: s.pop("automountServiceAccountToken"), {"service-account-token"}, "restricted"),
    ("pull Always", lambda s: _container(s).update(imagePullPolicy="Always"), {"pull-policy"}, "restricted"),
    ("no CPU limit", lambda s: _container(s)["resources"]["limits"].pop("cpu"), {"cpu-limit"}, "restricted"),
]


@pytest.mark.parametrize(("change", "expected", "expected_level"), [b[1:] for b in BREAKERS], ids=[b[0] for b in BREAKERS])
def test_each_broken_rule_is_found_and_sets_the_level(change, expected, expected_level):
    spec = hardened()
    change(spec)
    assert rules(spec) == expected
    assert level(findings(spec)) == expected_level


def test_every_rule_can_fail():
    # No rule of the vocabulary the waivers use is one the checker never reports.
    spec_rules = set().union(*(b[2] for b in BREAKERS))
    assert spec_rules == set(BASELINE_RULES) | set(RESTRICTED_RULES) | set(OUR_RULES)


def test_an_init_container_is_checked_like_the_others():
    spec = hardened()
    spec["initContainers"] = [{"name": "setup", "image": "busybox", "securityContext": {"privileged": True}}]
    assert {(f.rule, f.where) for f in findings(spec)} >= {
        ("privileged", "container setup"), ("privilege-escalation", "container setup"), ("capabilities", "container setup")
    }


def test_container_level_settings_suffice_where_the_pod_sets_none():
    # Knative and Argo inject containers and some specs carry only container-level settings: restricted
    # holds when every container says non-root and seccomp itself, and fails for the one that does not.
    spec = hardened()
    spec["securityContext"] = {}
    spec["containers"].append(copy.deepcopy(spec["containers"][0]) | {"name": "sidecar"})
    for c in spec["containers"]:
        c["securityContext"].update(runAsNonRoot=True, seccompProfile={"type": "RuntimeDefault"})
    assert level(findings(spec)) == "restricted"
    del spec["containers"][1]["securityContext"]["seccompProfile"]
    assert [(f.rule, f.where) for f in findings(spec)] == [("seccomp", "container sidecar")]


def test_the_helper_keeps_what_the_spec_says_and_refuses_a_clash():
    spec = restricted(
        {"containers": [{**APP, "env": [{"name": "HOME", "value": "/cache"}]}], "volumes": [{"name": "data", "configMap": {"name": "d"}}]},
        scratch=(TMP, Scratch("cache", "/cache", "10Gi"), Scratch("dshm", "/dev/shm", "2Gi", medium="Memory")),
        calls_api=True,
        user=None,
    )
    (app,) = spec["containers"]
    assert [e for e in app["env"] if e["name"] == "HOME"] == [{"name": "HOME", "value": "/cache"}]
    assert [v["name"] for v in spec["volumes"]] == ["data", "tmp", "cache", "dshm"]
    assert spec["volumes"][-1] == {"name": "dshm", "emptyDir": {"sizeLimit": "2Gi", "medium": "Memory"}}
    assert "runAsUser" not in spec["securityContext"] and level(findings(spec)) == "restricted"
    # A pod that calls the API keeps its token, which the checker reports until a waiver names it.
    assert rules(spec) == {"service-account-token"}
    with pytest.raises(ValueError, match=r"already has volume\(s\) \['tmp'\]"):
        restricted({"containers": [APP], "volumes": [{"name": "tmp", "emptyDir": {}}]})


def test_every_waiver_names_known_rules_checkov_ids_and_one_line_of_reason():
    known = set(BASELINE_RULES) | set(RESTRICTED_RULES) | set(OUR_RULES)
    for w in WAIVERS:
        assert set(w.rules) <= known, w
        assert all(re.fullmatch(r"CKV2?_K8S_\d+", c) for c in w.checkov), w
        assert w.reason and "\n" not in w.reason, w
        assert all(p.count("/") == 2 for p in w.workloads), w  # namespace/Kind/name
    assert waived("llm/Deployment/vllm") == {"cpu-limit"}
    assert waived("llm/Deployment/other") == set()


def _deployment(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "n"},
            "spec": {"template": {"spec": spec}}}


def test_pod_specs_are_found_in_every_shape_we_create():
    pod = {"containers": [APP]}
    cron = {"kind": "CronJob", "metadata": {"name": "c", "namespace": "n"},
            "spec": {"jobTemplate": {"spec": {"template": {"spec": pod}}}}}
    pytorch = {"kind": "PyTorchJob", "metadata": {"name": "p", "namespace": "t"}, "spec": {"pytorchReplicaSpecs": {
        "Master": {"template": {"spec": pod}}, "Worker": {"template": {"spec": pod}}}}}
    jobset = {"kind": "JobSet", "metadata": {"name": "js", "namespace": "b"}, "spec": {"replicatedJobs": [
        {"name": "driver", "template": {"spec": {"template": {"spec": pod}}}},
        {"name": "workers", "template": {"spec": {"template": {"spec": pod}}}}]}}
    isvc = {"kind": "InferenceService", "metadata": {"name": "iris", "namespace": "models"}, "spec": {"predictor": {
        "minReplicas": 0, "model": {"modelFormat": {"name": "sklearn"}, "storageUri": "gs://b/m"}}}}
    workflow = {"kind": "WorkflowTemplate", "metadata": {"name": "w", "namespace": "p"}, "spec": {
        "securityContext": {"runAsNonRoot": True}, "volumes": [{"name": "tmp", "emptyDir": {}}],
        "templates": [{"name": "dag", "dag": {"tasks": []}}, {"name": "train", "script": {"image": "x", "source": "1"}},
                      {"name": "deploy", "container": {"image": "y"}, "securityContext": {"runAsUser": 5}}]}}
    found = {wid: spec for obj in (_deployment(pod), cron, pytorch, jobset, isvc, workflow) for wid, spec in pod_specs(obj)}
    assert sorted(found) == [
        "b/JobSet/js:driver", "b/JobSet/js:workers", "models/InferenceService/iris", "n/CronJob/c",
        "n/Deployment/d", "p/WorkflowTemplate/w:deploy", "p/WorkflowTemplate/w:train",
        "t/PyTorchJob/p:Master", "t/PyTorchJob/p:Worker",
    ]
    assert found["models/InferenceService/iris"]["containers"][0]["storageUri"] == "gs://b/m"
    assert found["p/WorkflowTemplate/w:train"]["securityContext"] == {"runAsNonRoot": True}
    assert found["p/WorkflowTemplate/w:deploy"]["securityContext"] == {"runAsUser": 5}
    assert found["p/WorkflowTemplate/w:train"]["volumes"] == [{"name": "tmp", "emptyDir": {}}]
