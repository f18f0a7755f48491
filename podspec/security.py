"""The restricted Pod Security Standard for every pod spec our code writes, built by one helper.

`restricted(spec)` returns a pod spec that meets *restricted*: non-root with a numeric user, no
privilege escalation, every capability dropped, the runtime's default seccomp profile; plus what we
ask beyond the standard: a read-only root filesystem with an emptyDir wherever the process writes
(`Scratch`), no service-account token unless the pod calls the Kubernetes API, and an explicit pull
policy; each workload sets its own CPU limit. Specs that are not plain pod specs (an InferenceService
predictor, an Argo step) take the pieces: `pod_security_context`, `hardened_container`, `Scratch`.

Where a workload cannot meet a rule, it is in WAIVERS, the one list of exceptions, with its reason and
the checkov check IDs that reason answers. tests/test_security_posture.py checks every pod spec of
every stack and of the benchmark kit against the rules named in `Rule` (tests/pod_security.py), and
fails on any gap WAIVERS does not name.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Literal, get_args

# uid/gid 65534 ("nobody") is in /etc/passwd of every image we run that starts as root by default
# (python:*-slim and busybox: Debian's and busybox's nobody; pytorch/pytorch and vllm/vllm-openai:
# Ubuntu's), so whatever looks the user up (getpass.getuser(), torch's default cache paths) finds one.
# A GPU pod may run as it: NVIDIA's driver creates /dev/nvidia* with mode 0666 unless told otherwise
# (NVreg_DeviceFileMode, the driver's README), and the device plugin hands those nodes to the container.
NOBODY = 65534
# Tags are pinned (components/versions.py, benchmarks/labs/images.py), so a node that holds the image
# need not ask the registry again; `Always` (checkov CKV_K8S_15) would contact Docker Hub on every pod
# start, against its anonymous pull rate limit, for an image that cannot have changed under its tag
# from our point of view.
IMAGE_PULL_POLICY = "IfNotPresent"
RUNTIME_DEFAULT = {"type": "RuntimeDefault"}
# The Pod Security Standards' levels, as Pod Security Admission's namespace labels name them.
PodSecurityLevel = Literal["privileged", "baseline", "restricted"]
# The Standards' version our namespaces' Pod Security Admission labels name (the `*-version` labels):
# the definitions tests/pod_security.py checks our pods against. Pinned, not `latest`, so a
# control-plane upgrade cannot tighten what a running lab's namespaces enforce (an API server newer
# than 1.33 still applies v1.33's definitions to these namespaces).
POD_SECURITY_VERSION = "v1.33"
PSA_PREFIX = "pod-security.kubernetes.io"

# The rules tests/pod_security.py checks, by name. Baseline and restricted are the Pod Security
# Standards' own (kubernetes.io/docs/concepts/security/pod-security-standards); "ours" is what we ask
# beyond them. A namespace can enforce restricted only if all its pods meet the first two groups.
BaselineRule = Literal[
    "host-namespaces", "privileged", "added-capabilities", "host-path", "host-ports", "apparmor", "selinux",
    "proc-mount", "seccomp-unconfined", "sysctls",
]
RestrictedRule = Literal[
    "volume-types", "privilege-escalation", "run-as-non-root", "run-as-root-user", "seccomp", "capabilities",
]
OurRule = Literal["read-only-root", "service-account-token", "pull-policy", "cpu-limit"]
Rule = Literal[BaselineRule, RestrictedRule, OurRule]
BASELINE_RULES: tuple[str, ...] = get_args(BaselineRule)
RESTRICTED_RULES: tuple[str, ...] = get_args(RestrictedRule)
OUR_RULES: tuple[str, ...] = get_args(OurRule)


@dataclass(frozen=True)
class Scratch:
    """A writable emptyDir for a container whose root filesystem is read-only. The kubelet creates an
    emptyDir with mode 0777 (pkg/volume/emptydir), group-owned by the pod's fsGroup when it has one, so
    any non-root user can write there."""

    name: str
    path: str
    size_limit: str
    medium: str | None = None  # "Memory": a tmpfs, counted against the container's memory

    def volume(self) -> dict[str, Any]:
        empty_dir: dict[str, Any] = {"sizeLimit": self.size_limit}
        if self.medium:
            empty_dir["medium"] = self.medium
        return {"name": self.name, "emptyDir": empty_dir}

    def mount(self) -> dict[str, Any]:
        return {"name": self.name, "mountPath": self.path}


# Python's tempfile, pip's unpacking and sh's here-documents write under /tmp.
TMP = Scratch("tmp", "/tmp", "1Gi")


def pod_security_labels(enforce: PodSecurityLevel) -> dict[str, str]:
    """A namespace's Pod Security Admission labels: refuse pods below `enforce`; warn the client and
    write an audit entry for any pod below restricted, so how far it is from restricted stays visible."""
    labels = {}
    for mode, level in (("enforce", enforce), ("warn", "restricted"), ("audit", "restricted")):
        labels[f"{PSA_PREFIX}/{mode}"] = level
        labels[f"{PSA_PREFIX}/{mode}-version"] = POD_SECURITY_VERSION
    return labels


def pod_security_context(user: int | None = NOBODY) -> dict[str, Any]:
    """Pod-level settings: non-root, the runtime's default seccomp profile, and with `user` that
    numeric user and group for every container (and fsGroup for its volumes). `user=None` keeps the
    image's own user, which must then be numeric and not 0, or the kubelet refuses to start it."""
    context: dict[str, Any] = {"runAsNonRoot": True, "seccompProfile": dict(RUNTIME_DEFAULT)}
    if user is not None:
        context.update(runAsUser=user, runAsGroup=user, fsGroup=user)
    return context


def container_security_context(read_only_root: bool = True) -> dict[str, Any]:
    """Container-level settings: no privilege escalation, no capability, a read-only root filesystem."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": read_only_root,
    }


def hardened_container(
    container: dict[str, Any], scratch: tuple[Scratch, ...] = (TMP,), home: str | None = TMP.path
) -> dict[str, Any]:
    """A copy of `container` with the container-level settings, the pull policy, a mount of each
    scratch volume and HOME set to `home` (a writable directory) unless the container sets HOME itself:
    pip, CUDA's JIT cache, Triton and Hugging Face write under ~ when nothing else says where."""
    out = copy.deepcopy(container)
    out["securityContext"] = {**out.get("securityContext", {}), **container_security_context()}
    out["imagePullPolicy"] = IMAGE_PULL_POLICY
    mounts = out.get("volumeMounts", [])
    taken = {m["mountPath"] for m in mounts}
    out["volumeMounts"] = [*mounts, *(s.mount() for s in scratch if s.path not in taken)]
    env = out.get("env", [])
    if home is not None and not any(e.get("name") == "HOME" for e in env):
        out["env"] = [*env, {"name": "HOME", "value": home}]
    return out


def restricted(
    spec: dict[str, Any],
    *,
    user: int | None = NOBODY,
    calls_api: bool = False,
    scratch: tuple[Scratch, ...] = (TMP,),
    home: str | None = TMP.path,
) -> dict[str, Any]:
    """A copy of the pod spec `spec` that meets the restricted Pod Security Standard, with a read-only
    root filesystem (`scratch` emptyDirs mounted in every container), `user` as its numeric user, and
    the service-account token mounted only when the pod `calls_api`."""
    out = copy.deepcopy(spec)
    volumes = out.get("volumes", [])
    clash = {v["name"] for v in volumes} & {s.name for s in scratch}
    if clash:
        raise ValueError(f"pod spec already has volume(s) {sorted(clash)}: pass them as Scratch instead")
    out["securityContext"] = {**out.get("securityContext", {}), **pod_security_context(user)}
    out["automountServiceAccountToken"] = calls_api
    out["volumes"] = [*volumes, *(s.volume() for s in scratch)]
    for key in ("initContainers", "containers"):
        if key in out:
            out[key] = [hardened_container(c, scratch, home) for c in out[key]]
    return out


@dataclass(frozen=True)
class Waiver:
    """Workloads that do not meet some rules, and why: the one list of exceptions is WAIVERS."""

    # Patterns (fnmatch) of workload ids "namespace/Kind/name", with ":part" for one pod template of
    # an object holding several (an Argo step, a PyTorchJob replica type).
    workloads: tuple[str, ...]
    rules: tuple[Rule, ...]  # what they do not meet
    checkov: tuple[str, ...]  # the checkov checks (CKV_K8S_*) this reason answers
    reason: str

    def covers(self, workload: str) -> bool:
        return any(fnmatchcase(workload, pattern) for pattern in self.workloads)


WAIVERS: tuple[Waiver, ...] = (
    Waiver(
        ("monitoring/DaemonSet/dcgm-exporter",),
        ("privileged", "privilege-escalation", "host-path"),
        ("CKV_K8S_16", "CKV_K8S_20"),
        "NVML needs /dev/nvidia*, which GKE gives only to a pod requesting a GPU (the exporter must not "
        "take one) or a privileged one (as Google's own GKE DCGM manifest runs); GKE's driver and NVML "
        "are read from the node's /home/kubernetes/bin/nvidia",
    ),
    Waiver(
        ("idle-guard/CronJob/idle-guard", "cost-exporter/Deployment/cost-exporter"),
        ("service-account-token",),
        ("CKV_K8S_38",),
        "calls the Kubernetes API (components/scripts/kube_api.py) under a ClusterRole holding only "
        "the verbs it uses",
    ),
    Waiver(
        ("*/WorkflowTemplate/*",),
        ("service-account-token",),
        ("CKV_K8S_38",),
        "Argo's wait container reports each step's outputs through the API (workflowtaskresults) and "
        "the deploy step creates the InferenceService; the Role allows exactly that",
    ),
    Waiver(
        ("*/Deployment/vllm",),
        ("cpu-limit",),
        ("CKV_K8S_11",),
        "a CPU limit would throttle vLLM's tokenisation, scheduler and HTTP server: the TTFT and "
        "throughput g6 measures",
    ),
    Waiver(
        ("*/Deployment/vllm", "*/Pod/g[1-8]-*", "*/Job/g[1-8]-*"),
        (),
        ("CKV2_K8S_6",),
        "no NetworkPolicy: vLLM's clients (a benchmark in any namespace, Prometheus) and the benchmark "
        "pods' peers (gateway, metadata server, Google APIs) span namespaces; tenants get default-deny",
    ),
    Waiver(
        ("*/Pod/g1-*", "*/Pod/g2-*"),
        (),
        ("CKV_K8S_8", "CKV_K8S_9"),
        "no liveness or readiness probe: a benchmark pod runs to completion and serves nothing to probe",
    ),
    Waiver(
        ("default/*/g1-*", "default/*/g2-*"),
        (),
        ("CKV_K8S_21",),
        "g1 and g2 have no namespace of their own: their short-lived pods go to the one the stack "
        "outputs name, default when none",
    ),
    Waiver(
        ("*/Job/g5-*", "*/Job/g7-client-*"),
        ("cpu-limit",),
        ("CKV_K8S_11",),
        "the HTTP client times each response: a throttled client adds its own delay to the latency "
        "measured",
    ),
    Waiver(
        ("*/Job/g6-*",),
        ("cpu-limit",),
        ("CKV_K8S_11",),
        "the g6 load generator's timing is what is measured: CFS throttling would stall its event loops "
        "for whole 100 ms periods and show up as client lag and TTFT",
    ),
    Waiver(
        ("*/TrainJob/g4-*",),
        ("service-account-token",),
        ("CKV_K8S_38",),
        "Kubeflow Trainer v2.3.0's runtimePatches cannot set automountServiceAccountToken (PodSpecPatch has "
        "no such field): the pods run as the run's own ServiceAccount, whose automountServiceAccountToken "
        "is false, so no token is mounted all the same",
    ),
    Waiver(
        ("*/Pod/g2-*",),
        ("cpu-limit",),
        ("CKV_K8S_11",),
        "each pod's kernel-launch loop runs on its CPU: throttling it would read as GPU contention in "
        "the latency per pod g2 measures",
    ),
)


def waived(workload: str) -> set[str]:
    """The rules WAIVERS excuses for this workload id."""
    return {rule for w in WAIVERS if w.covers(workload) for rule in w.rules}
