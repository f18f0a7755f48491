"""The Pod Security Standards as a checker over pod specs, written from the standard's own page
(kubernetes.io/docs/concepts/security/pod-security-standards, policies of v1.33), independently of the
helper that builds our settings (podspec.security), plus the rules we ask beyond it (OUR_RULES).

`findings(spec)` lists every rule a pod spec breaks; `level(...)` is the strictest Pod Security level
it meets; `pod_specs(obj)` finds the pod specs inside any object we create (workload controllers, a
PyTorchJob's replicas, a JobSet's jobs, an InferenceService's predictor, an Argo template's steps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from podspec.security import BASELINE_RULES, IMAGE_PULL_POLICY, RESTRICTED_RULES

# Baseline: capabilities a container may add, sysctls a pod may set, SELinux types it may ask for.
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP",
    "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
# Restricted: the only volume types a pod may use.
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret",
}
# Keys of a volume that are not its type.
_VOLUME_META = {"name"}
_CONTAINER_KEYS = ("initContainers", "containers", "ephemeralContainers")


@dataclass(frozen=True)
class Finding:
    rule: str
    where: str  # "pod" or "container <name>"
    detail: str

    def __str__(self) -> str:
        return f"{self.rule} ({self.where}): {self.detail}"


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for key in _CONTAINER_KEYS for c in spec.get(key) or []]


def _baseline(spec: dict[str, Any]) -> Iterator[Finding]:
    pod_sc = spec.get("securityContext") or {}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            yield Finding("host-namespaces", "pod", f"{key}: true")
    for volume in spec.get("volumes") or []:
        if "hostPath" in volume:
            yield Finding("host-path", "pod", f"volume {volume.get('name')} is a hostPath")
    for sysctl in pod_sc.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            yield Finding("sysctls", "pod", f"sysctl {sysctl.get('name')} is not in the safe set")
    contexts = [("pod", pod_sc)] + [(f"container {c.get('name')}", c.get("securityContext") or {}) for c in _containers(spec)]
    for where, sc in contexts:
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            yield Finding("seccomp-unconfined", where, "seccompProfile Unconfined")
        if (sc.get("appArmorProfile") or {}).get("type") not in (None, "RuntimeDefault", "Localhost"):
            yield Finding("apparmor", where, f"appArmorProfile {sc['appArmorProfile']['type']}")
        selinux = sc.get("seLinuxOptions") or {}
        if selinux.get("type", "") not in SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
            yield Finding("selinux", where, f"seLinuxOptions {selinux}")
    for c in _containers(spec):
        where, sc = f"container {c.get('name')}", c.get("securityContext") or {}
        if sc.get("privileged"):
            yield Finding("privileged", where, "privileged: true")
        added = set((sc.get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES
        if added:
            yield Finding("added-capabilities", where, f"adds {sorted(added)}")
        if sc.get("procMount", "Default") != "Default":
            yield Finding("proc-mount", where, f"procMount {sc['procMount']}")
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                yield Finding("host-ports", where, f"hostPort {port['hostPort']}")


def _restricted(spec: dict[str, Any]) -> Iterator[Finding]:
    pod_sc = spec.get("securityContext") or {}
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - _VOLUME_META
        if not kinds <= RESTRICTED_VOLUMES:
            yield Finding("volume-types", "pod", f"volume {volume.get('name')} is {sorted(kinds)}")
    if pod_sc.get("runAsUser") == 0:
        yield Finding("run-as-root-user", "pod", "runAsUser: 0")
    pod_non_root = pod_sc.get("runAsNonRoot") is True
    pod_seccomp = (pod_sc.get("seccompProfile") or {}).get("type") in ("RuntimeDefault", "Localhost")
    for c in _containers(spec):
        where, sc = f"container {c.get('name')}", c.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            yield Finding("privilege-escalation", where, "allowPrivilegeEscalation is not false")
        # Container fields may stay unset only where the pod-level field is set; none may say false.
        if sc.get("runAsNonRoot") is False or (not pod_non_root and sc.get("runAsNonRoot") is not True):
            yield Finding("run-as-non-root", where, "runAsNonRoot is not true (pod or container)")
        if sc.get("runAsUser") == 0:
            yield Finding("run-as-root-user", where, "runAsUser: 0")
        seccomp = (sc.get("seccompProfile") or {}).get("type")
        if (seccomp is None and not pod_seccomp) or seccomp not in (None, "RuntimeDefault", "Localhost"):
            yield Finding("seccomp", where, "seccompProfile is not RuntimeDefault or Localhost (pod or container)")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            yield Finding("capabilities", where, "capabilities.drop lacks ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            yield Finding("capabilities", where, f"adds {sorted(set(caps['add']) - {'NET_BIND_SERVICE'})}")


def _ours(spec: dict[str, Any]) -> Iterator[Finding]:
    if spec.get("automountServiceAccountToken") is not False:
        yield Finding("service-account-token", "pod", "automountServiceAccountToken is not false")
    for c in _containers(spec):
        where = f"container {c.get('name')}"
        if (c.get("securityContext") or {}).get("readOnlyRootFilesystem") is not True:
            yield Finding("read-only-root", where, "readOnlyRootFilesystem is not true")
        if c.get("imagePullPolicy") != IMAGE_PULL_POLICY:
            yield Finding("pull-policy", where, f"imagePullPolicy {c.get('imagePullPolicy')!r}, not {IMAGE_PULL_POLICY}")
        if "cpu" not in ((c.get("resources") or {}).get("limits") or {}):
            yield Finding("cpu-limit", where, "no CPU limit")


def findings(spec: dict[str, Any]) -> list[Finding]:
    """Every rule the pod spec breaks: baseline, restricted, then ours."""
    return [*_baseline(spec), *_restricted(spec), *_ours(spec)]


def level(found: list[Finding]) -> str:
    """The strictest Pod Security level a pod with these findings meets."""
    rules = {f.rule for f in found}
    if rules & set(BASELINE_RULES):
        return "privileged"
    if rules & set(RESTRICTED_RULES):
        return "baseline"
    return "restricted"


# ------------------------------------------------------------------ finding the pod specs in an object

# Keys on the way down to a pod spec that say nothing about which one it is.
_STRUCTURAL = {"spec", "template", "jobTemplate"}


def _workload_id(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{obj.get('kind')}/{meta.get('name')}"


def _predictor_pod(component: dict[str, Any]) -> dict[str, Any]:
    """A KServe predictor is a pod spec whose serving container is under `model`."""
    pod = {k: v for k, v in component.items() if k not in ("model", "minReplicas", "maxReplicas", "canaryTrafficPercent")}
    pod["containers"] = [{"name": "kserve-container", **component["model"]}, *(component.get("containers") or [])]
    return pod


def _argo_pods(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """An Argo Workflow(Template)'s steps: each container/script template runs in a pod of its own,
    with the workflow-level pod settings."""
    for template in spec.get("templates") or []:
        container = template.get("script") or template.get("container")
        if container is None:
            continue
        pod = {k: spec[k] for k in ("securityContext", "automountServiceAccountToken") if k in spec}
        pod.update({k: template[k] for k in ("securityContext", "automountServiceAccountToken") if k in template})
        pod["volumes"] = [*(spec.get("volumes") or []), *(template.get("volumes") or [])]
        pod["containers"] = [{"name": "main", **container}]
        yield template["name"], pod


def _default_pull_policy(image: str) -> str:
    """What the API server sets when a container names none: Always for :latest or no tag."""
    tag = image.rsplit("/", 1)[-1].partition(":")[2]
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _trainjob_pods(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """A TrainJob's trainer pods as the controller builds them: each runtimePatches pod spec, its
    container given what `trainer` sets on the runtime's node container (image, command, env,
    resources per node), the rest (pull policy) as the API server defaults it."""
    trainer = spec.get("trainer") or {}
    for patch in spec.get("runtimePatches") or []:
        jobset = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}
        for job in jobset.get("replicatedJobs") or []:
            pod = dict(job["template"]["spec"]["template"]["spec"])
            image = trainer.get("image") or ""
            pod["containers"] = [
                {**c, "image": image, "imagePullPolicy": _default_pull_policy(image),
                 "resources": trainer.get("resourcesPerNode") or {}}
                for c in pod.get("containers") or []
            ]
            yield job["name"], pod


def _walk(value: Any, part: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(value, list):
        for item in value:
            yield from _walk(item, item.get("name", part) if isinstance(item, dict) else part)
    elif isinstance(value, dict):
        if isinstance(value.get("containers"), list):
            yield part, value
            return
        if isinstance(value.get("model"), dict) and "modelFormat" in value["model"]:
            yield part, _predictor_pod(value)
            return
        for key, child in value.items():
            yield from _walk(child, part if key in _STRUCTURAL else key)


def pod_specs(obj: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(workload id, pod spec) for every pod spec in `obj`; the id is "namespace/Kind/name", with
    ":part" where the object holds several (PyTorchJob replica types, Argo steps, JobSet jobs)."""
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind in ("Workflow", "WorkflowTemplate"):
        found = list(_argo_pods(spec))
    elif kind == "TrainJob":
        found = list(_trainjob_pods(spec))
    elif kind == "Pod":
        found = [("", spec)]
    else:
        found = list(_walk(spec, ""))
    base = _workload_id(obj)
    return [(f"{base}:{part}" if part and len(found) > 1 else base, pod) for part, pod in found]
