"""g4: a two-node job really rendezvoused (world size 2, ranks 0 and 1), and its pods were cleaned up as
its API says.

- trainer-v2 (the default): a TrainJob against the torch-distributed ClusterTrainingRuntime of Kubeflow
  Trainer; torchrun in each of the JobSet's pods. The runtime sets no TTL, so the pods stay after the
  TrainJob completes; deleting the TrainJob removes its JobSet and pods (owner references), and the
  benchmark times that.
- v1: a PyTorchJob of the Training Operator; cleanPodPolicy decides which pods are deleted on completion.

One node and a gloo all-reduce of one number: a rendezvous demo, not distributed training.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any, Literal

from benchmarks.cluster import Gone, WaitTimeout, run_selector, wait_until
from benchmarks.kube import images, objects
from benchmarks.kube.errors import LabError
from benchmarks.kube.record import Recording, Snapshot
from benchmarks.kube.stack import LabParams, gpu_placement, lab_params
from benchmarks.kube.timeline import condition_time, parse_time, phase, seconds_between
from benchmarks.labs import live, workloads
from benchmarks.labs.live import LabSession, now
from benchmarks.labs.result import Check, Frozen, LabResult, common_fields

LAB = "g4"
TITLE = "Kubeflow training job rendezvous (Trainer v2 TrainJob, or Training Operator v1 PyTorchJob)"
DEFAULT_TIMEOUT_S = 1800.0
PYTORCHJOB = ("kubeflow.org/v1", "PyTorchJob")
TRAINJOB = ("trainer.kubeflow.org/v1alpha1", "TrainJob")
JOBSET = ("jobset.x-k8s.io/v1alpha2", "JobSet")
SECTION = "training"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"  # v1: the operator's label on the PyTorchJob's pods
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"  # trainer-v2: JobSet's label on its pods
# The runtime's trainer job and container (pkg/constants Node = "node" in Kubeflow Trainer v2.3.0).
NODE = "node"
PATCH_MANAGER = "gke-ml-labs.io/g4"  # the owner of our runtimePatches entry
LINGER_S = 20  # seconds each pod stays up after its last line, so logs are read before any cleanup

_RENDEZVOUS = re.compile(r"^rendezvous rank=(\d+) world_size=(\d+) backend=(\S+) host=(\S+) master=(\S+) cuda=(\w+)")
_ALL_REDUCE = re.compile(r"^all_reduce rank=(\d+) sum=([\d.e+-]+) expected=([\d.e+-]+)")


class Params(LabParams):
    """outputs.benchmark.training of a g4 stack (one without `api` predates Trainer v2: it ran v1)."""

    api: Literal["trainer-v2", "v1"] = "v1"
    namespace: str
    workers: int = 2
    gpus_per_worker: int = 1
    clean_pod_policy: str = "None"
    runtime: str | None = None
    image: str | None = None


class RankReport(Frozen):
    pod: str
    rank: int
    world_size: int
    backend: str
    host: str
    master: str
    cuda: bool
    all_reduce_sum: float | None
    all_reduce_expected: float | None


class G4Result(LabResult):
    api: Literal["trainer-v2", "v1"] = "v1"
    job: str
    clean_pod_policy: str | None  # v1 only
    runtime: str | None = None  # trainer-v2: the ClusterTrainingRuntime
    # trainer-v2: from deleting the TrainJob to the first look with its JobSet and pods gone, and to the
    # last look that still saw them: the clean-up took between the two (the poll interval's resolution).
    cleanup_seconds: float | None = None
    cleanup_last_seen_seconds: float | None = None
    world_size: int
    ranks: list[RankReport]
    job_seconds: float | None
    nodes_used: list[str]
    pods_at_completion: list[str]
    pods_remaining: list[str]
    expected_remaining: list[str]


def job_name(run_id: str) -> str:
    return f"g4-rendezvous-{run_id[-4:]}"


def _rank_container(p: Params, name: str, command: list[str]) -> dict[str, Any]:
    gpus = {"nvidia.com/gpu": str(p.gpus_per_worker)}
    return objects.container(
        name,
        p.image or images.PYTORCH_CUDA,
        command,
        env={"LINGER_S": str(LINGER_S)},
        requests=workloads.PYTORCH_REQUESTS,
        limits={**gpus, "cpu": "1", "memory": workloads.PYTORCH_MEMORY_LIMIT},
        with_scripts=True,
    )


def _pytorchjob(p: Params, name: str, cm: str, selector: dict[str, str], tolerations: list[dict[str, str]]) -> dict[str, Any]:
    def replica(count: int) -> dict[str, Any]:
        # The operator injects MASTER_ADDR/RANK/WORLD_SIZE only into the container named "pytorch".
        container = _rank_container(p, "pytorch", ["python", f"{objects.SCRIPT_MOUNT}/rendezvous.py"])
        # The operator adds an init container (init-pytorch) to Worker pods; the pod-level user (nobody)
        # lets that root-by-default image start, and the namespace enforces baseline for it.
        spec = objects.pod_spec(
            [container], node_selector=selector, tolerations=tolerations, scripts_config_map=cm, restart_policy="Never"
        )
        return {"replicas": count, "restartPolicy": "Never", "template": {"spec": spec}}

    return {
        "apiVersion": PYTORCHJOB[0],
        "kind": PYTORCHJOB[1],
        "metadata": objects.meta(name, p.namespace),
        "spec": {
            "runPolicy": {"cleanPodPolicy": p.clean_pod_policy, "backoffLimit": 0},
            "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(p.workers - 1)},
        },
    }


def _trainjob(p: Params, name: str, cm: str, selector: dict[str, str], tolerations: list[dict[str, str]]) -> dict[str, Any]:
    """The TrainJob: image, command, env and resources through `trainer`; the rest of our restricted pod
    (placement, volumes, security) through a runtimePatches entry, the fields v2.3.0 lets a patch set."""
    # torchrun reads the PET_* variables the torch plugin injects (nodes, node rank, master address and
    # port) and gives the script RANK, WORLD_SIZE and MASTER_ADDR as the v1 operator did.
    container = _rank_container(p, NODE, ["torchrun", f"{objects.SCRIPT_MOUNT}/rendezvous.py"])
    pod = objects.pod_spec([container], node_selector=selector, tolerations=tolerations, scripts_config_map=cm,
                           service_account=name)
    (c,) = pod["containers"]
    keys = ("nodeSelector", "tolerations", "volumes", "securityContext", "terminationGracePeriodSeconds", "serviceAccountName")
    pod_patch = {k: pod[k] for k in keys}
    pod_patch["containers"] = [{"name": NODE, "volumeMounts": c["volumeMounts"], "securityContext": c["securityContext"]}]
    job_patch = {"spec": {"template": {"spec": pod_patch}}}
    return {
        "apiVersion": TRAINJOB[0],
        "kind": TRAINJOB[1],
        "metadata": objects.meta(name, p.namespace),
        "spec": {
            "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": p.runtime},
            "trainer": {
                "image": c["image"],
                "command": c["command"],
                "env": c["env"],
                "numNodes": p.workers,
                "numProcPerNode": 1,  # one rank per pod: the pods share one time-sliced GPU
                "resourcesPerNode": c["resources"],
            },
            "runtimePatches": [
                {
                    "manager": PATCH_MANAGER,
                    "trainingRuntimeSpec": {
                        "template": {"spec": {"replicatedJobs": [{"name": NODE, "template": job_patch}]}}
                    },
                }
            ],
        },
    }


def build_workloads(outputs: dict[str, Any], run_id: str = "manual") -> list[dict[str, Any]]:
    """The script ConfigMap and the job: a TrainJob (with the ServiceAccount its pods run as) or a
    PyTorchJob, as the stack's training API."""
    p = lab_params(outputs, LAB, Params, SECTION)
    selector, tolerations = gpu_placement(outputs)
    name = job_name(run_id)
    cm = workloads.scripts_config_map(f"{name}-scripts", p.namespace, ["rendezvous.py"])
    if p.api == "v1":
        return [cm, _pytorchjob(p, name, cm["metadata"]["name"], selector, tolerations)]
    # A patch cannot turn the pods' token mount off (no automountServiceAccountToken in v2.3.0's
    # PodSpecPatch): their own ServiceAccount does.
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": objects.meta(name, p.namespace),
               "automountServiceAccountToken": False}
    return [cm, account, _trainjob(p, name, cm["metadata"]["name"], selector, tolerations)]


def check_outputs(outputs: dict[str, Any]) -> None:
    p = lab_params(outputs, LAB, Params, SECTION)
    gpu_placement(outputs)
    if p.clean_pod_policy not in ("None", "Running", "All"):
        raise LabError(f"benchmark.clean_pod_policy {p.clean_pod_policy!r}: allowed None, Running, All")
    if p.api == "trainer-v2" and not p.runtime:
        raise LabError("benchmark.training.runtime is empty: a trainer-v2 stack names its ClusterTrainingRuntime")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--settle", type=float, default=30.0, help="seconds to wait after completion for pod cleanup")


def parse_log(pod: str, text: str) -> RankReport | None:
    """The rank's evidence from its log (see scripts/rendezvous.py), or None if it never got there."""
    rv = ar = None
    for line in text.splitlines():
        rv = rv or _RENDEZVOUS.match(line.strip())
        ar = ar or _ALL_REDUCE.match(line.strip())
    if rv is None:
        return None
    return RankReport(
        pod=pod,
        rank=int(rv[1]),
        world_size=int(rv[2]),
        backend=rv[3],
        host=rv[4],
        master=rv[5],
        cuda=rv[6] == "True",
        all_reduce_sum=float(ar[2]) if ar else None,
        all_reduce_expected=float(ar[3]) if ar else None,
    )


def expected_remaining(policy: str, pods_at_completion: list[dict[str, Any]]) -> list[str]:
    """Pods cleanPodPolicy leaves once the job is done: None keeps all, Running deletes the ones
    still running, All deletes every pod."""
    if policy == "All":
        return []
    if policy == "Running":
        return sorted(p["metadata"]["name"] for p in pods_at_completion if phase(p) not in ("Running", "Pending"))
    return sorted(p["metadata"]["name"] for p in pods_at_completion)


def record(session: LabSession, args: argparse.Namespace) -> Recording:
    p = lab_params(session.outputs, LAB, Params, SECTION)
    cluster, name, selector = session.cluster, job_name(session.run_id), run_selector(session.run_id)
    for obj in build_workloads(session.outputs, session.run_id):
        session.scope.create(obj)
    session.namespaces = [p.namespace]
    session.client["job"] = name
    logs, snapshots = session.logs, session.snapshots
    v2 = p.api == "trainer-v2"
    job_kind, pod_selector = (TRAINJOB, f"{JOBSET_NAME_LABEL}={name}") if v2 else (PYTORCHJOB, f"{JOB_NAME_LABEL}={name}")

    def poll() -> Snapshot:
        pods = cluster.list("v1", "Pod", p.namespace, pod_selector)
        for pod in pods:
            if phase(pod) in ("Running", "Succeeded", "Failed"):
                try:
                    text = cluster.pod_log(p.namespace, pod["metadata"]["name"])
                except Gone:  # deleted since listed (its TrainJob's deletion takes it at once): its last log stays
                    continue
                if text:
                    logs[pod["metadata"]["name"]] = text
        found = {_jobs_key(p.api): cluster.list(*job_kind, p.namespace, selector), "pods": pods}
        if v2:
            found["jobsets"] = cluster.list(*JOBSET, p.namespace, selector)
        snapshots.append(Snapshot(at=now(), objects=found))
        return snapshots[-1]

    def finished(snap: Snapshot) -> bool:
        job = next(iter(snap.objects[_jobs_key(p.api)]), None)
        return bool(job) and any(condition_time(job, c) for c in _DONE[p.api])

    wait_until(f"{job_kind[1]} {name} done", poll, finished, args.timeout, interval_s=args.poll, progress=session.log,
               describe=lambda s: f"pods {[x['status'].get('phase') for x in s.objects['pods']]}")
    completed_at = len(snapshots) - 1
    # Give the controller time to clean up (v1: cleanPodPolicy), then see which pods are left.
    session.log(f"waiting {args.settle:.0f}s to see which pods the {job_kind[1]} leaves")
    time.sleep(args.settle)
    poll()
    client: dict[str, Any] = {"completion_snapshot": completed_at}
    if v2:
        # Deleting the TrainJob is its clean-up: owner references take the JobSet, its Jobs and pods.
        client["deleted_snapshot"] = len(snapshots)
        client["deleted_at"] = now().isoformat()
        cluster.delete_labelled(*TRAINJOB, p.namespace, selector)
        try:
            wait_until(f"TrainJob {name}'s JobSet and pods gone", poll, _all_gone, args.timeout, interval_s=args.poll,
                       progress=session.log, describe=lambda s: f"pods {[x['metadata']['name'] for x in s.objects['pods']]}")
        except WaitTimeout as e:  # a finding (pods left behind), not a failed run: measure says so
            session.log(str(e))
    return session.recording(client=client)


_DONE = {"trainer-v2": ("Complete", "Failed"), "v1": ("Succeeded", "Failed")}


def _jobs_key(api: str) -> str:
    return "trainjobs" if api == "trainer-v2" else "pytorchjobs"


def _all_gone(snap: Snapshot) -> bool:
    return not any(snap.objects.get(k) for k in ("trainjobs", "jobsets", "pods"))


def _rank_checks(ranks: list[RankReport], world: int) -> list[Check]:
    return [
        Check(
            name=f"rendezvous: world size {world}, ranks 0..{world - 1} each reported",
            passed=[r.rank for r in ranks] == list(range(world)) and all(r.world_size == world for r in ranks),
            evidence="; ".join(f"{r.pod}: rank {r.rank} of {r.world_size} via {r.master}" for r in ranks) or "no rank logged",
        ),
        Check(
            name="all-reduce summed every rank's value",
            passed=bool(ranks) and all(r.all_reduce_sum is not None and r.all_reduce_sum == r.all_reduce_expected for r in ranks),
            evidence=", ".join(f"rank {r.rank}: {r.all_reduce_sum:g} (expected {r.all_reduce_expected:g})" for r in ranks
                               if r.all_reduce_sum is not None) or "no all_reduce line",
        ),
    ]


def _names(pods: list[dict[str, Any]]) -> list[str]:
    return sorted(x["metadata"]["name"] for x in pods)


def measure(rec: Recording, source: str = "live") -> G4Result:
    p = lab_params(rec.outputs, LAB, Params, SECTION)
    name = rec.client["job"]
    done_at = rec.client["completion_snapshot"]
    if not rec.snapshots or done_at >= len(rec.snapshots):
        raise LabError(f"recording of run {rec.run_id} lacks the snapshot at the job's completion")
    done = rec.snapshots[done_at].objects
    job = done[_jobs_key(p.api)][0]
    at_completion = done["pods"]
    ranks = sorted((r for pod, text in rec.logs.items() if (r := parse_log(pod, text))), key=lambda r: r.rank)
    nodes = sorted({x["spec"].get("nodeName") for s in rec.snapshots for x in s.objects["pods"] if x["spec"].get("nodeName")})
    common = dict(job=name, world_size=p.workers, ranks=ranks, nodes_used=nodes, pods_at_completion=_names(at_completion))
    if p.api == "trainer-v2":
        return _measure_trainjob(rec, source, p, job, done, common)
    remaining = _names(rec.snapshots[-1].objects["pods"])
    expected = expected_remaining(p.clean_pod_policy, at_completion)
    succeeded = condition_time(job, "Succeeded")
    status = job.get("status") or {}
    checks = _rank_checks(ranks, p.workers) + [
        Check(
            name="PyTorchJob Succeeded",
            passed=succeeded is not None,
            evidence=", ".join(
                f"{role}: succeeded {rs.get('succeeded', 0)}, failed {rs.get('failed', 0)}"
                for role, rs in (status.get("replicaStatuses") or {}).items()
            )
            + (f"; completed {succeeded:%H:%M:%S}" if succeeded else "; not completed"),
        ),
        Check(
            name=f"cleanPodPolicy {p.clean_pod_policy}: the expected pods remain",
            passed=remaining == expected,
            evidence=f"remaining: {', '.join(remaining) or 'none'}; expected: {', '.join(expected) or 'none'}",
        ),
    ]
    return G4Result(
        **common_fields(rec, source, checks),
        **common,
        api="v1",
        clean_pod_policy=p.clean_pod_policy,
        job_seconds=seconds_between(parse_time(status.get("startTime")), parse_time(status.get("completionTime"))),
        pods_remaining=remaining,
        expected_remaining=expected,
    )


def _measure_trainjob(
    rec: Recording, source: str, p: Params, job: dict[str, Any], done: dict[str, Any], common: dict[str, Any]
) -> G4Result:
    deleted_at = rec.client.get("deleted_snapshot", len(rec.snapshots))
    before_delete = rec.snapshots[deleted_at - 1].objects
    remaining = _names(before_delete["pods"])
    # torch-distributed sets no ttlSecondsAfterFinished: nothing removes a finished JobSet's pods.
    expected = common["pods_at_completion"]
    complete = condition_time(job, "Complete")
    jobset = next(iter(done.get("jobsets") or []), {})
    statuses = (job.get("status") or {}).get("jobsStatus") or []
    after = rec.snapshots[deleted_at:]
    gone_at = next((i for i, s in enumerate(after) if _all_gone(s)), None)
    gone = None if gone_at is None else after[gone_at]
    deleted = parse_time(rec.client.get("deleted_at"))
    cleanup = seconds_between(deleted, gone.at) if gone is not None and deleted is not None else None
    last_seen = seconds_between(deleted, after[gone_at - 1].at) if gone_at and deleted is not None else 0.0 if gone else None
    left = rec.snapshots[-1].objects
    checks = _rank_checks(common["ranks"], p.workers) + [
        Check(
            name=f"TrainJob Complete (its JobSet {jobset.get('metadata', {}).get('name', '?')} Completed)",
            passed=complete is not None and condition_time(jobset, "Completed") is not None,
            evidence=", ".join(f"replicated job {s.get('name')}: Jobs succeeded {s.get('succeeded', 0)}, failed "
                               f"{s.get('failed', 0)}" for s in statuses)
            + (f"; completed {complete:%H:%M:%S}" if complete else "; not completed"),
        ),
        Check(
            name="after completion the JobSet keeps its pods (the runtime sets no TTL)",
            passed=remaining == expected,
            evidence=f"remaining: {', '.join(remaining) or 'none'}; expected: {', '.join(expected) or 'none'}",
        ),
        Check(
            name="deleting the TrainJob removes its JobSet and pods",
            passed=gone is not None,
            evidence=f"gone between {last_seen:.0f}s and {cleanup:.0f}s after the delete" if cleanup is not None else
            f"still there at the last look: {len(left.get('jobsets') or [])} JobSet(s), pods {', '.join(_names(left['pods'])) or 'none'}",
        ),
    ]
    return G4Result(
        **common_fields(rec, source, checks),
        **common,
        api="trainer-v2",
        clean_pod_policy=None,
        runtime=p.runtime,
        cleanup_seconds=cleanup,
        cleanup_last_seen_seconds=last_seen,
        job_seconds=seconds_between(parse_time(job["metadata"].get("creationTimestamp")), complete),
        pods_remaining=remaining,
        expected_remaining=expected,
    )


def report_body(result: G4Result) -> str:
    one_node = len(result.nodes_used) <= 1
    v2 = result.api == "trainer-v2"
    what = (f"a TrainJob of Kubeflow Trainer v2 against the {result.runtime} ClusterTrainingRuntime (torchrun in each "
            "pod of its JobSet)" if v2 else "a PyTorchJob of the Kubeflow Training Operator v1")
    lines = [
        "## What this shows, plainly",
        "",
        f"{'One node' if one_node else f'{len(result.nodes_used)} nodes'} ({', '.join(result.nodes_used) or '?'}), "
        f"{result.world_size} processes, a gloo all-reduce of one number: **a rendezvous demo, not distributed "
        f"training**. It ran {what}. It proves the controller wired the pods together (addresses, ranks, world "
        "size); it says nothing about training speed or scaling.",
        "",
        "## Ranks (from the pods' logs)",
        "",
        "| pod | rank | world size | backend | master | CUDA visible | all-reduce sum |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {r.pod} | {r.rank} | {r.world_size} | {r.backend} | {r.master} | {r.cuda} | "
            f"{'-' if r.all_reduce_sum is None else f'{r.all_reduce_sum:g}'} |"
            for r in result.ranks
        ),
        "",
        f"Job ran {result.job_seconds:.0f}s from creation (the GPU node's scale-up included) to completion."
        if v2 and result.job_seconds is not None
        else f"Job ran {result.job_seconds:.0f}s from start to completion." if result.job_seconds is not None else "",
        "",
    ]
    if v2:
        gone = (f"between {result.cleanup_last_seen_seconds:.0f}s and {result.cleanup_seconds:.0f}s after"
                if result.cleanup_seconds is not None else "not yet, at the last look, after")
        return "\n".join([
            *lines,
            "## Clean-up: a TrainJob has no cleanPodPolicy",
            "",
            f"- pods when the TrainJob completed: {', '.join(result.pods_at_completion) or 'none'}",
            f"- pods left before the TrainJob was deleted: {', '.join(result.pods_remaining) or 'none'} "
            f"(expected: {', '.join(result.expected_remaining) or 'none'}; {result.runtime} sets no TTL on its JobSet)",
            f"- the JobSet and its pods were gone {gone} the TrainJob was deleted (owner references)",
        ])
    return "\n".join([
        *lines,
        f"## cleanPodPolicy: {result.clean_pod_policy}",
        "",
        f"- pods when the job completed: {', '.join(result.pods_at_completion) or 'none'}",
        f"- pods left afterwards: {', '.join(result.pods_remaining) or 'none'}",
        f"- what the policy says should be left: {', '.join(result.expected_remaining) or 'none'}",
    ])


def plots(result: G4Result, folder: Path) -> list[str]:
    return []  # a table says it better: two ranks and a list of pods


def run(args: argparse.Namespace) -> int:
    return live.run(sys.modules[__name__], args)


def main(argv: list[str] | None = None) -> int:
    return live.main(sys.modules[__name__], argv)
