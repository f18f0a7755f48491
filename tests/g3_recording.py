"""The g3 recordings: both runs rendered from hand-written timelines into the API objects the real g3
stack and its controllers return, through the real builders (benchmarks.labs.g3.workloads) and
kube_fixtures, then checked by `kube_fixtures.problems`.

What each object looks like, and who writes what:
- JobSet (jobset.x-k8s.io/v1alpha2): our spec plus the JobSet webhook's defaults; conditions as the
  JobSet controller sets them (Suspended while Kueue holds it, Completed / Failed with the
  controller's reasons and messages), replicatedJobsStatus.
- Pod: what the Job controller makes of an Indexed Job's template (name `<job>-<index>-<random>`,
  hostname `<job>-<index>`, the JobSet's subdomain, JOB_COMPLETION_INDEX, the job-tracking finalizer,
  JobSet's labels and annotations, its coordinator annotation); PodScheduled as the scheduler writes
  it (SchedulingGated, Unschedulable with its message, True); container states from the kubelet.
- Workload (kueue.x-k8s.io/v1beta2, run A only): `jobset-<name>-<hash>` owned by the JobSet, one pod
  set per replicated Job, conditions from kube_fixtures.kueue_conditions: no admission check on the
  g3 ClusterQueue, so QuotaReserved and Admitted share their transition time; blockAdmission's and
  the quota's waits with Kueue's own reasons and messages.
- Worker logs: the JSON lines scripts/barrier.py prints.
Snapshots are taken every `poll_s` and kept only when an object changed (as the benchmark does).

The timings are constructed, not measured (examples/g3 says so): a GPU node from zero in about
4.5 minutes, python:3.12-slim pulled in 8 s on it, containers started 1.6 s after placement once the
image is there. `python -m tests.g3_recording` rewrites tests/data/labs/g3/recording.json.
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from benchmarks.cluster import LAB_LABEL, RUN_LABEL, with_labels
from benchmarks.kube.record import public_outputs
from benchmarks.labs.g3 import workloads as g3w
from tests import kube_fixtures as kf

PATH = kf.DATA / "g3" / "recording.json"
T0 = datetime.fromisoformat("2026-11-29T17:02:00+00:00")
RUN_ID = "g3-11291702-8c41"
SYSTEM_NODE = "gke-gml-g3-system-0b4d7e21-m2c8"
GPU_NODE = "gke-gml-g3-gpu-5f2c9a1e-b1rt"
TIMING = g3w.Timing(rendezvous_timeout_s=90.0, work_s=20.0)
BLOCKED = "waiting for all admitted workloads to be in PodsReady condition"
SCHEDULING_GATED = "Scheduling is blocked due to non-empty scheduling gates"
JOBSET_COMPLETED = "jobset completed successfully"  # the JobSet controller's; Kueue copies it to Finished
# The refusals as kube-scheduler 1.35 (GKE's Regular minor) writes them, read from the local cluster's
# real scheduler on g3's node shapes (tests/cluster/test_gangs.py holds this file to them).
NO_NODE = ("0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. no new claims to deallocate, "
           "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")  # fmt: skip
NO_GPU = ("0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's node affinity/selector. "
          "no new claims to deallocate, preemption: 0/2 nodes are available: 1 No preemption victims found for incoming "
          "pod, 1 Preemption is not helpful for scheduling.")  # fmt: skip
PYTHON_DIGEST = "sha256:" + hashlib.sha256(b"python:3.12.8-slim").hexdigest()
START_S = 1.3  # placed -> container running, the image already on the node
ARRIVE_S = 0.3  # container running -> the script's "arrived" line


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def api(s: float) -> str:
    """An API server timestamp: whole seconds, truncated."""
    return kf.api_time(at(s).replace(microsecond=0))


def _hex(*parts: str, n: int = 64) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:n]


# ---------------------------------------------------------------------------------------------
# Timelines (seconds after T0)


@dataclass
class WorkerPlan:
    index: int
    created: float
    unschedulable: tuple[float, str] | None = None  # the scheduler refused it: since, message
    placed: float | None = None
    started: float | None = None  # container running; the script logs its arrival right after
    released: float | None = None  # the barrier let it through (then WORK_S of holding its GPU)
    gave_up: tuple[float, str] | None = None
    terminated: float | None = None  # SIGTERM (its job failed around it)
    deleted: float | None = None  # deletionTimestamp; gone from lists a second later
    work_s: float = TIMING.work_s
    ended: float | None = None  # the container exited (derived)

    def __post_init__(self) -> None:
        if self.released is not None:
            self.ended = self.released + self.work_s
        elif self.gave_up is not None:
            self.ended = self.gave_up[0]
        elif self.terminated is not None:
            self.ended = self.terminated


@dataclass
class JobPlan:
    name: str
    created: float
    workers: list[WorkerPlan]
    resumed: float | None = None  # run A: Kueue admitted it (the JobSet was created suspended)
    end: tuple[str, float] | None = None  # ("Completed" | "Failed", when)
    # run A: the Workload's waits before admission: [(since, reason, message)]; (since, None, "") = no condition
    waits: list[tuple[float, str | None, str]] = field(default_factory=list)
    workload_created: float | None = None
    pods_ready: float | None = None
    finished: float | None = None


@dataclass
class RunPlan:
    run: g3w.Run
    namespace: str
    jobs: list[JobPlan]
    polls: list[float]
    ended: float
    released: list[tuple[str, float]] = field(default_factory=list)  # (job-index, when): run B's gate lifts


def _kueue_run() -> RunPlan:
    """Run A: a admitted at once, its pods wait for a GPU node from zero; b held by blockAdmission
    until a's pods are Ready; c behind b in the StrictFIFO queue, then short of quota until a finishes."""

    def job(name: str, pods_at: float, placed: float, started: list[float], release: float) -> list[WorkerPlan]:
        return [
            WorkerPlan(i, pods_at, unschedulable=(pods_at, NO_NODE) if placed > pods_at + 1 else None, placed=placed,
                       started=started[i], released=release)
            for i in range(3)
        ]  # fmt: skip

    names = g3w.jobset_names(RUN_ID, 3)
    quota_msg = "couldn't assign flavors to pod set worker: insufficient unused quota for nvidia.com/gpu in flavor l4-spot, 3 more needed"
    a = JobPlan(names[0], 0.2, job(names[0], 2.1, 266.4, [274.3, 274.5, 275.0], 275.32), resumed=1.2,
                end=("Completed", 296.0), workload_created=0.9, pods_ready=275.4, finished=296.0)  # fmt: skip
    b = JobPlan(names[1], 0.5, job(names[1], 276.2, 276.3, [278.1, 278.3, 278.6], 278.92), resumed=275.9,
                end=("Completed", 299.7), waits=[(1.1, "Waiting", BLOCKED)], workload_created=0.9, pods_ready=278.8,
                finished=299.7)  # fmt: skip
    c = JobPlan(names[2], 0.8, job(names[2], 297.7, 297.8, [299.5, 299.8, 300.1], 300.42), resumed=297.4,
                end=("Completed", 321.2), waits=[(0.9, None, ""), (276.1, "Pending", quota_msg)], workload_created=0.9,
                pods_ready=300.3, finished=321.2)  # fmt: skip
    return RunPlan("kueue", "batch-jobs", [a, b, c], polls=[1.5 + 5 * k for k in range(65)], ended=321.7)


def _scheduler_run(order: list[str], start: float = 330.0) -> tuple[list[tuple[str, float]], dict[str, float]]:
    """Gate lifts one by one, each after the scheduler's decision on the one before (seen at the next
    0.5 s poll); the scheduler decides 50 ms after a lift."""
    released, placed = [], {}
    for k, key in enumerate(order):
        released.append((key, start + 1.6 + 0.6 * k))
        placed[key] = start + 1.65 + 0.6 * k
    return released, placed


def deadlocked_run(start: float = 330.0) -> RunPlan:
    """Run B as the benchmark runs it: a0 b0 c0 a1 b1 c1 placed, a2 b2 c2 refused; every job 2 of 3 and
    all six slots held until the workers give up, 90 s after they arrived. Then the cascade: a's two
    exit, the scheduler hands their slots to a2 and b2, a's Job fails (a2 deleted before it starts), b
    gives up (b2 deleted), c2 gets a slot and is deleted as c fails. No job ever ran."""
    names = g3w.jobset_names(RUN_ID, 3)
    order = [f"{j}-{i}" for i in range(3) for j in "abc"]
    released, decided = _scheduler_run(order, start)
    give_up = {j: decided[f"{j}-0"] + START_S + ARRIVE_S + TIMING.rendezvous_timeout_s for j in "abc"}
    failed = {j: give_up[j] + 0.6 for j in "abc"}  # the Job controller, then the JobSet controller
    # Who gets the slots the give-ups free: the refused pods, in the scheduler's queue order.
    late = {"a": give_up["a"] + 0.1, "b": give_up["a"] + 0.1, "c": give_up["b"] + 0.1}
    jobs = []
    for n, (j, name) in enumerate(zip("abc", names)):
        ws = [
            WorkerPlan(0, start + 1.1, placed=decided[f"{j}-0"], started=decided[f"{j}-0"] + START_S,
                       gave_up=(give_up[j], "rendezvous timeout 90 s: 2 of 3 workers arrived")),
            WorkerPlan(1, start + 1.1, placed=decided[f"{j}-1"], started=decided[f"{j}-1"] + START_S,
                       gave_up=(give_up[j] + 0.01, "worker 0 gave up (it closed the connection)")),
            WorkerPlan(2, start + 1.1, unschedulable=(decided[f"{j}-2"], NO_GPU), placed=late[j], deleted=failed[j]),
        ]  # fmt: skip
        jobs.append(JobPlan(name, start + 0.1 * n, ws, end=("Failed", failed[j])))
    return _scheduler_plan(jobs, released, start)


def one_completes_run(start: float = 330.0, work_s: float = 100.0) -> RunPlan:
    """Run B if job a's pods had reached the scheduler first (a0 a1 a2 b0 b1 c0 placed; b2 c1 c2
    refused): a is whole and works `work_s`; b and c hold three slots they cannot use and give up at
    the rendezvous timeout while a still works. b's two freed slots go to c1 and c2, which start,
    find c's worker 0 gone, and are stopped as c fails. Only a completes."""
    names = g3w.jobset_names(RUN_ID, 3)
    order = ["a-0", "a-1", "a-2", "b-0", "b-1", "c-0", "b-2", "c-1", "c-2"]
    released, decided = _scheduler_run(order, start)
    release_a = decided["a-2"] + START_S + ARRIVE_S + 0.02
    a = JobPlan(names[0], start, [
        WorkerPlan(i, start + 1.1, placed=decided[f"a-{i}"], started=decided[f"a-{i}"] + START_S, released=release_a,
                   work_s=work_s)
        for i in range(3)
    ], end=("Completed", release_a + work_s + 0.8))  # fmt: skip
    give_b = decided["b-0"] + START_S + ARRIVE_S + TIMING.rendezvous_timeout_s
    give_c = decided["c-0"] + START_S + ARRIVE_S + TIMING.rendezvous_timeout_s
    b = JobPlan(names[1], start + 0.1, [
        WorkerPlan(0, start + 1.1, placed=decided["b-0"], started=decided["b-0"] + START_S,
                   gave_up=(give_b, "rendezvous timeout 90 s: 2 of 3 workers arrived")),
        WorkerPlan(1, start + 1.1, placed=decided["b-1"], started=decided["b-1"] + START_S,
                   gave_up=(give_b + 0.01, "worker 0 gave up (it closed the connection)")),
        WorkerPlan(2, start + 1.1, unschedulable=(decided["b-2"], NO_GPU), deleted=give_b + 0.6),
    ], end=("Failed", give_b + 0.6))  # fmt: skip
    c = JobPlan(names[2], start + 0.2, [
        WorkerPlan(0, start + 1.1, placed=decided["c-0"], started=decided["c-0"] + START_S,
                   gave_up=(give_c, "rendezvous timeout 90 s: 1 of 3 workers arrived")),
        *(WorkerPlan(i, start + 1.1, unschedulable=(decided[f"c-{i}"], NO_GPU), placed=give_b + 0.1,
                     started=give_b + 0.1 + START_S, terminated=give_c + 0.6, deleted=give_c + 0.6) for i in (1, 2)),
    ], end=("Failed", give_c + 0.6))  # fmt: skip
    return _scheduler_plan([a, b, c], released, start)


def _scheduler_plan(jobs: list[JobPlan], released: list[tuple[str, float]], start: float) -> RunPlan:
    """Run B's polls: one that sees the gated pods, then every 5 s after the last release until every
    JobSet has ended."""
    last_end = max(j.end[1] for j in jobs)
    polls, t = [start + 1.5], released[-1][1] + 0.5
    while True:
        polls.append(t)
        if t >= last_end:
            break
        t += 5.0
    return RunPlan(
        "default-scheduler", g3w.scheduler_namespace(RUN_ID), jobs, polls, ended=polls[-1] + 0.2, released=released
    )


# ---------------------------------------------------------------------------------------------
# Rendering the objects at time t


def _version(*changes: float | None, t: float) -> str:
    """A resourceVersion that moves whenever one of the object's changes has happened by t."""
    seen = [c for c in changes if c is not None and c <= t]
    return str(4_500_000 + int(max(seen, default=0) * 10))


def _jobset(spec: dict[str, Any], plan: JobPlan, run: RunPlan, t: float) -> dict[str, Any]:
    js = copy.deepcopy(spec)
    meta = js["metadata"]
    worker_changes = [x for w in plan.workers for x in (w.started, w.ended)]
    meta.update(uid="-", resourceVersion=_version(plan.created, plan.resumed, plan.end and plan.end[1], *worker_changes, t=t),
                creationTimestamp=api(plan.created), generation=2 if plan.resumed and plan.resumed <= t else 1)  # fmt: skip
    s = js["spec"]
    s.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})  # the JobSet webhook's defaults
    s["successPolicy"].setdefault("targetReplicatedJobs", [])
    s["network"].setdefault("publishNotReadyAddresses", True)
    if run.run == "kueue" and plan.resumed is not None and plan.resumed <= t:
        s["suspend"] = False
    conditions = []
    if run.run == "kueue":
        suspended = {"type": "Suspended", "status": "True", "reason": "SuspendedJobs", "message": "jobset is suspended",
                     "lastTransitionTime": api(plan.created)}  # fmt: skip
        if plan.resumed is not None and plan.resumed <= t:
            suspended.update(status="False", reason="ResumeJobs", message="jobset is resumed",
                             lastTransitionTime=api(plan.resumed))  # fmt: skip
        conditions.append(suspended)
    ended = plan.end and plan.end[1] <= t
    if ended:
        kind, when = plan.end
        message = JOBSET_COMPLETED if kind == "Completed" else \
            f"jobset failed due to one or more job failures (first failed job: {plan.name}-{g3w.REPLICATED_JOB}-0)"  # fmt: skip
        conditions.append({"type": kind, "status": "True", "reason": "AllJobsCompleted" if kind == "Completed" else "FailedJobs",
                           "message": message, "lastTransitionTime": api(when)})  # fmt: skip
    active = [w for w in plan.workers if w.created <= t and not _gone(w, t) and not (w.ended and w.ended <= t)]
    ready = sum(1 for w in active if w.started and w.started <= t)
    status: dict[str, Any] = {"restarts": 0, "conditions": conditions, "replicatedJobsStatus": [{
        "name": g3w.REPLICATED_JOB, "ready": 1 if ready == len(plan.workers) and not ended else 0,
        "succeeded": 1 if ended and plan.end[0] == "Completed" else 0, "failed": 1 if ended and plan.end[0] == "Failed" else 0,
        "active": 1 if not ended and (run.run != "kueue" or (plan.resumed and plan.resumed <= t)) else 0,
        "suspended": 1 if run.run == "kueue" and not (plan.resumed and plan.resumed <= t) else 0}]}  # fmt: skip
    if ended:
        status["terminalState"] = plan.end[0]
    js["status"] = status
    return js


def coordinator(jobset: str) -> str:
    """The value JobSet (v0.12.0, CoordinatorEndpoint) writes into the coordinator annotation: worker 0's
    DNS name, `<jobset>-<replicatedJob>-<job index>-<pod index>.<subdomain>`, the subdomain defaulting
    to the JobSet's name."""
    return f"{jobset}-{g3w.REPLICATED_JOB}-0-0.{jobset}"


def _key(plan: JobPlan, w: WorkerPlan) -> str:
    """'a-0' for worker 0 of the first job: how the plans name a worker."""
    return f"{'abcdefgh'[g3w.jobset_names(RUN_ID, 8).index(plan.name)]}-{w.index}"


def _pod_name(plan: JobPlan, w: WorkerPlan, namespace: str) -> str:
    """The Job controller's name for an Indexed Job's pod: `<job>-<index>-<5 random characters>`."""
    job = f"{plan.name}-{g3w.REPLICATED_JOB}-0"
    return f"{job}-{w.index}-{_hex(namespace, job, str(w.index), n=5)}"


def _gone(w: WorkerPlan, t: float) -> bool:
    return w.deleted is not None and t >= w.deleted + 1.0


def _pod(template: dict[str, Any], plan: JobPlan, w: WorkerPlan, run: RunPlan, t: float) -> dict[str, Any]:
    job = f"{plan.name}-{g3w.REPLICATED_JOB}-0"
    name = _pod_name(plan, w, run.namespace)
    spec = copy.deepcopy(template["spec"])
    labels = {**template["metadata"]["labels"], **_jobset_labels(plan.name, run.namespace),
              "batch.kubernetes.io/controller-uid": "-", "batch.kubernetes.io/job-name": job, "controller-uid": "-",
              "job-name": job, g3w.INDEX_LABEL: str(w.index)}  # fmt: skip
    annotations = {**_jobset_labels(plan.name, run.namespace), g3w.INDEX_LABEL: str(w.index),
                   g3w.COORDINATOR_KEY: coordinator(plan.name)}  # fmt: skip
    labels[g3w.COORDINATOR_KEY] = coordinator(plan.name)
    for c in spec["containers"]:
        c["env"].append({"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
            "apiVersion": "v1", "fieldPath": f"metadata.annotations['{g3w.INDEX_LABEL}']"}}})  # fmt: skip
        c.update(
            terminationMessagePath="/dev/termination-log",
            terminationMessagePolicy="File",
            imagePullPolicy="IfNotPresent",
        )
        for e in c["env"]:
            if "valueFrom" in e:
                e["valueFrom"]["fieldRef"].setdefault("apiVersion", "v1")
    spec.update(hostname=f"{job}-{w.index}", subdomain=plan.name, dnsPolicy="ClusterFirst", schedulerName="default-scheduler",
                serviceAccountName="default", serviceAccount="default", enableServiceLinks=True, priority=0,
                preemptionPolicy="PreemptLowerPriority")  # fmt: skip
    spec["tolerations"] = spec["tolerations"] + [
        {"key": f"node.kubernetes.io/{k}", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        for k in ("not-ready", "unreachable")
    ]  # the DefaultTolerationSeconds admission plugin's
    gated = spec.pop("schedulingGates", None)
    lifted = next((s for key, s in run.released if key == _key(plan, w)), None)
    if gated and (lifted is None or lifted > t):
        spec["schedulingGates"] = gated
    placed = w.placed is not None and w.placed <= t
    if placed:
        spec["nodeName"] = GPU_NODE
    deleting = w.deleted is not None and w.deleted <= t
    changes = [w.created, lifted, w.unschedulable and w.unschedulable[0], w.placed, w.started, w.ended, w.deleted]
    meta = {"name": name, "generateName": f"{job}-{w.index}-", "namespace": run.namespace, "uid": "-",
            "resourceVersion": _version(*changes, t=t), "creationTimestamp": api(w.created), "labels": labels,
            "annotations": annotations, "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job,
            "uid": "-", "controller": True, "blockOwnerDeletion": True}], "finalizers": ["batch.kubernetes.io/job-tracking"]}  # fmt: skip
    if deleting:
        meta.update(deletionTimestamp=api(w.deleted), deletionGracePeriodSeconds=5)
    status = _pod_status(w, spec, lifted, t)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def _pod_status(w: WorkerPlan, spec: dict[str, Any], lifted: float | None, t: float) -> dict[str, Any]:
    def cond(
        kind: str, status: str, since: float, reason: str | None = None, message: str | None = None
    ) -> dict[str, Any]:
        c = {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": api(since)}
        return {**c, **({"reason": reason} if reason else {}), **({"message": message} if message else {})}

    placed = w.placed is not None and w.placed <= t
    if not placed:
        if "schedulingGates" in spec:
            sched = cond("PodScheduled", "False", w.created, "SchedulingGated", SCHEDULING_GATED)
        elif w.unschedulable and w.unschedulable[0] <= t:
            sched = cond("PodScheduled", "False", w.unschedulable[0], "Unschedulable", w.unschedulable[1])
        else:
            sched = cond("PodScheduled", "False", lifted or w.created, "Unschedulable", NO_NODE)
        return {"phase": "Pending", "qosClass": "Guaranteed", "conditions": [sched]}
    started = w.started is not None and w.started <= t
    ended = w.ended is not None and w.ended <= t
    ok = w.released is not None
    container: dict[str, Any] = {"name": "worker", "image": "docker.io/library/python:3.12.8-slim", "imageID":
                                 f"docker.io/library/python@{PYTHON_DIGEST}", "restartCount": 0, "lastState": {}}  # fmt: skip
    cid = f"containerd://{_hex(spec['hostname'], str(w.created))}"
    if ended:
        container.update(ready=False, started=False, containerID=cid, state={"terminated": {
            "exitCode": 0 if ok else (1 if w.gave_up else 143), "reason": "Completed" if ok else "Error",
            "startedAt": api(w.started), "finishedAt": api(w.ended), "containerID": cid}})  # fmt: skip
    elif started:
        container.update(ready=True, started=True, containerID=cid, state={"running": {"startedAt": api(w.started)}})
    else:
        container.update(ready=False, started=False, state={"waiting": {"reason": "ContainerCreating"}})
    ready_since = w.ended if ended else w.started
    phase = ("Succeeded" if ok else "Failed") if ended else ("Running" if started else "Pending")
    # As the kubelet (1.35) words them, read on the real node (examples/g3-real-node): a pod not yet started
    # names its unready containers; an ended one has its sandbox gone and says how it ended.
    unready = ("PodCompleted" if ok else "PodFailed", None) if ended else ("ContainersNotReady",
                                                                           "containers with unready status: [worker]")
    conditions = [
        cond("PodReadyToStartContainers", "True", w.placed + 1.2) if started and not ended
        else cond("PodReadyToStartContainers", "False", ready_since or w.placed),
        cond("Initialized", "True", w.placed, "PodCompleted" if ended and ok else None),
        cond("Ready", "True", w.started) if started and not ended else cond("Ready", "False", ready_since or w.placed, *unready),
        cond("ContainersReady", "True", w.started) if started and not ended
        else cond("ContainersReady", "False", ready_since or w.placed, *unready),
        cond("PodScheduled", "True", w.placed),
    ]  # fmt: skip
    return {"phase": phase, "qosClass": "Guaranteed", "conditions": conditions, "hostIP": "10.10.0.1",
            "hostIPs": [{"ip": "10.10.0.1"}], "podIP": f"10.20.0.{10 + int(_hex(cid, n=2), 16) % 200}",
            "podIPs": [{"ip": "-"}], "startTime": api(w.placed), "containerStatuses": [container]}  # fmt: skip


def _jobset_labels(jobset: str, namespace: str) -> dict[str, str]:
    """What the JobSet controller stamps on its Jobs and their pods (labelAndAnnotateObject, v0.12.0)."""
    job = f"{jobset}-{g3w.REPLICATED_JOB}-0"
    return {
        "jobset.sigs.k8s.io/jobset-name": jobset, "jobset.sigs.k8s.io/jobset-uid": "-",
        "jobset.sigs.k8s.io/replicatedjob-name": g3w.REPLICATED_JOB, "jobset.sigs.k8s.io/restart-attempt": "0",
        "jobset.sigs.k8s.io/replicatedjob-replicas": "1", "jobset.sigs.k8s.io/global-replicas": "1",
        "jobset.sigs.k8s.io/job-index": "0", "jobset.sigs.k8s.io/job-key": hashlib.sha1(f"{namespace}/{job}".encode()).hexdigest(),
        "jobset.sigs.k8s.io/job-global-index": "0", "jobset.sigs.k8s.io/group-name": "default",
        "jobset.sigs.k8s.io/group-replicas": "1", "jobset.sigs.k8s.io/job-group-index": "0",
    }  # fmt: skip


def _workload(spec: dict[str, Any], plan: JobPlan, cq: str, flavor: str, workers: int, worker: dict[str, Any],
              t: float) -> dict[str, Any] | None:  # fmt: skip
    if plan.workload_created is None or plan.workload_created > t:
        return None
    template = copy.deepcopy(spec["spec"]["replicatedJobs"][0]["template"]["spec"]["template"])
    reserved = plan.resumed - 0.3 if plan.resumed is not None and plan.resumed - 0.3 <= t else None
    if reserved is not None:
        conditions, _ = kf.kueue_conditions(
            at(reserved).replace(microsecond=0), cluster_queue=cq,
            pods_ready=at(plan.pods_ready).replace(microsecond=0) if plan.pods_ready and plan.pods_ready <= t else None,
            finished=at(plan.finished).replace(microsecond=0) if plan.finished and plan.finished <= t else None,
            finished_message=JOBSET_COMPLETED,
        )  # fmt: skip
    else:
        current = [w for w in plan.waits if w[0] <= t][-1:]
        conditions = []
        if current and current[0][1] is not None:
            first = next(w for w in plan.waits if w[1] is not None)
            conditions, _ = kf.kueue_conditions(None, pending_since=at(first[0]).replace(microsecond=0),
                                                pending_reason=current[0][1], pending_message=current[0][2])  # fmt: skip
    status: dict[str, Any] = {"conditions": conditions}
    if reserved is not None:
        usage = {"cpu": f"{round(workers * worker['cpu'] * 1000)}m", "memory": f"{round(workers * worker['memory_gib'] * 1024)}Mi",
                 g3w.GPU: str(workers)}  # fmt: skip
        status["admission"] = {"clusterQueue": cq, "podSetAssignments": [{
            "name": g3w.REPLICATED_JOB, "count": workers, "flavors": {r: flavor for r in usage}, "resourceUsage": usage}]}  # fmt: skip
    changes = [plan.workload_created, reserved, plan.pods_ready, plan.finished] + [w[0] for w in plan.waits]
    name = _workload_name(plan)
    return {
        "apiVersion": g3w.WORKLOAD[0], "kind": g3w.WORKLOAD[1],
        "metadata": {"name": name, "namespace": spec["metadata"]["namespace"], "uid": "-",
                     "resourceVersion": _version(*changes, t=t), "creationTimestamp": api(plan.workload_created),
                     "generation": 1, "labels": {"kueue.x-k8s.io/job-uid": "-"},
                     "ownerReferences": [{"apiVersion": g3w.JOBSET[0], "kind": "JobSet", "name": plan.name, "uid": "-",
                                          "controller": True, "blockOwnerDeletion": True}],
                     "finalizers": ["kueue.x-k8s.io/resource-in-use"]},
        "spec": {"active": True, "queueName": spec["metadata"]["labels"][g3w.QUEUE_LABEL], "priority": 0, "podSets": [{
            "name": g3w.REPLICATED_JOB, "count": workers, "template": template, "topologyRequest": {
                "podIndexLabel": g3w.INDEX_LABEL, "subGroupIndexLabel": "jobset.sigs.k8s.io/job-index", "subGroupCount": 1}}]},
        "status": status,
    }  # fmt: skip


def _workload_name(plan: JobPlan) -> str:
    """Kueue's name for a JobSet's Workload: `jobset-<name>-<5 characters of a hash>`."""
    return f"jobset-{plan.name}-{_hex('workload', plan.name, n=5)}"


def _log(plan: JobPlan, w: WorkerPlan, t: float, workers: int) -> str:
    """What scripts/barrier.py had printed by t, for a worker that started."""
    arrived = w.started + ARRIVE_S
    host = f"{plan.name}-{g3w.REPLICATED_JOB}-0-{w.index}"
    lines = [{"event": "arrived", "t": arrived, "worker": w.index, "workers": workers, "host": host,
              "coordinator": f"{coordinator(plan.name)}:{g3w.BARRIER_PORT}"}]  # fmt: skip
    if w.released is not None:
        extra = (
            {"peers": sorted(f"{plan.name}-{g3w.REPLICATED_JOB}-0-{i}" for i in range(1, workers))}
            if w.index == 0
            else {}
        )
        lines.append(
            {
                "event": "released",
                "t": w.released,
                "worker": w.index,
                "waited_s": round(w.released - arrived, 3),
                **extra,
            }
        )
        lines.append({"event": "finished", "t": w.released + w.work_s, "worker": w.index,
                      "work": f"held its shared GPU {w.work_s:g} s without computing (the image has only Python's "
                              "standard library)"})  # fmt: skip
    elif w.gave_up is not None:
        lines.append({"event": "gave_up", "t": w.gave_up[0], "worker": w.index, "waited_s": round(w.gave_up[0] - arrived, 3),
                      "reason": w.gave_up[1]})  # fmt: skip
    elif w.terminated is not None:
        lines.append({"event": "terminated", "t": w.terminated, "worker": w.index, "signal": 15})
    return "".join(json.dumps({k: round(v + T0.timestamp(), 3) if k == "t" else v for k, v in line.items()}) + "\n"
                   for line in lines if line["t"] <= t)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Whole recordings


def outputs() -> dict[str, Any]:
    """The g3 stack's outputs as the program exports them today (under Pulumi mocks), for one project."""
    from stacks.mockrun import run_stack

    out = public_outputs(run_stack("g3").outputs)
    return json.loads(json.dumps(out).replace("offline-plan-project", "ml-labs-demo"))


def _render(run: RunPlan, outs: dict[str, Any], snapshots: list[dict[str, Any]], logs: dict[str, str]) -> None:
    p = g3w.params(outs)
    specs = {o["metadata"]["name"]: with_labels(o, {RUN_LABEL: RUN_ID, LAB_LABEL: "g3", "app.kubernetes.io/component": "benchmark"})
             for o in g3w.run_objects(outs, RUN_ID, TIMING, run.run) if o["kind"] == "JobSet"}  # fmt: skip
    last_key = None
    for t in run.polls:
        pods, jobsets, workloads = [], [], []
        for plan in run.jobs:
            spec = specs[plan.name]
            if plan.created > t:
                continue
            template = spec["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
            pods += [_pod(template, plan, w, run, t) for w in plan.workers if w.created <= t and not _gone(w, t)]
            jobsets.append(_jobset(spec, plan, run, t))
            if run.run == "kueue":
                wl = _workload(spec, plan, p.cluster_queue, p.flavor, p.workers, p.worker.model_dump(), t)
                workloads += [wl] if wl else []
        objects = {"pods": pods, **({"workloads": workloads} if run.run == "kueue" else {}), "jobsets": jobsets}
        key = [
            (o["kind"], o["metadata"]["name"], o["metadata"]["resourceVersion"]) for v in objects.values() for o in v
        ]
        if key != last_key:  # the benchmark keeps a poll only when something changed
            snapshots.append({"at": at(t).isoformat(), "objects": objects})
            last_key = key
        for plan in run.jobs:  # the benchmark reads the log of every started worker at each poll
            for w in plan.workers:
                if w.started is not None and w.started <= t and not _gone(w, t):
                    logs[f"{run.namespace}/{_pod_name(plan, w, run.namespace)}"] = _log(plan, w, t, p.workers)


def _nodes() -> list[dict[str, Any]]:
    """The system node and the GPU node (g2-standard-4, one L4 time-shared x6), as GKE reports them."""

    def node(
        name: str, created: float, pool: str, extra_labels: dict[str, str], gpus: int, taints: list
    ) -> dict[str, Any]:
        alloc = {"cpu": "3920m", "memory": "12880936Ki", "pods": "110", "ephemeral-storage": "47060071478"}
        cap = {"cpu": "4", "memory": "16374824Ki", "pods": "110", "ephemeral-storage": "98831908Ki"}
        if gpus:
            alloc[g3w.GPU] = cap[g3w.GPU] = str(gpus)
        ready = kf.api_time(at(created + 38))
        return {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": "-", "resourceVersion": "4503301", "creationTimestamp": api(created), "labels": {
                "beta.kubernetes.io/arch": "amd64", "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": name, "cloud.google.com/gke-nodepool": pool, "gke-ml-labs/pool": pool,
                "topology.kubernetes.io/zone": "us-central1-a", "cloud.google.com/gke-os-distribution": "cos",
                **extra_labels}},
            "spec": {"providerID": f"gce://ml-labs-demo/us-central1-a/{name}", "podCIDR": "-", "podCIDRs": ["-"],
                     **({"taints": taints} if taints else {})},
            "status": {"capacity": cap, "allocatable": alloc, "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
                 "lastHeartbeatTime": kf.api_time(at(430)), "lastTransitionTime": ready}],
                "nodeInfo": {"architecture": "amd64", "bootID": "-", "containerRuntimeVersion": "containerd://2.0.6",
                             "kernelVersion": "6.6.97+", "kubeProxyVersion": "", "kubeletVersion": "v1.35.7-gke.1219000",
                             "machineID": "-", "operatingSystem": "linux", "osImage": "Container-Optimized OS from Google",
                             "systemUUID": "-"},
                "addresses": [{"type": "InternalIP", "address": "-"}, {"type": "Hostname", "address": name}]},
        }  # fmt: skip

    system = node(SYSTEM_NODE, -86400, "system", {"node.kubernetes.io/instance-type": "e2-standard-4",
                                                  "cloud.google.com/machine-family": "e2"}, 0, [])  # fmt: skip
    gpu = node(GPU_NODE, 70, "gpu", {
        "node.kubernetes.io/instance-type": "g2-standard-4", "cloud.google.com/machine-family": "g2",
        "cloud.google.com/gke-accelerator": "nvidia-l4", "cloud.google.com/gke-gpu-driver-version": "latest",
        "cloud.google.com/gke-gpu": "true", "cloud.google.com/gke-spot": "true",
        "cloud.google.com/gke-gpu-sharing-strategy": "time-sharing", "cloud.google.com/gke-max-shared-clients-per-gpu": "6",
    }, 6, [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])  # fmt: skip
    return [system, gpu]


def _event(kind: str, api_version: str, namespace: str, name: str, reason: str, message: str, when: float,
           warning: bool = False, count: int = 1) -> dict[str, Any]:  # fmt: skip
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "-", "uid": "-", "resourceVersion": _version(when, t=when), "creationTimestamp": api(when),
                     "namespace": namespace},
        "involvedObject": {"apiVersion": api_version, "kind": kind, "name": name, "namespace": namespace, "uid": "-"},
        "reason": reason, "message": message, "type": "Warning" if warning else "Normal", "count": count,
        "source": {}, "firstTimestamp": api(when), "lastTimestamp": api(when),
    }  # fmt: skip


SCALE_UP = ("pod triggered scale-up: [{https://www.googleapis.com/compute/v1/projects/ml-labs-demo/zones/us-central1-a/"
            "instanceGroups/gke-gml-g3-gpu-5f2c9a1e-grp 0->1 (max: 1)}]")  # fmt: skip
NO_SCALE_UP = ("pod didn't trigger scale-up: 1 max node group size reached, 1 node(s) didn't match Pod's node "
               "affinity/selector")  # fmt: skip


def _events(runs: list[RunPlan], snapshots: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events a user would look at: the scheduler's refusals, the autoscaler's (non-)scale-ups,
    Kueue's admissions, the Job and JobSet controllers' ends."""
    names = {
        (p["metadata"]["namespace"], p["metadata"]["labels"][kf.JOBSET_NAME], int(p["metadata"]["labels"][g3w.INDEX_LABEL])):
        p["metadata"]["name"]
        for s in snapshots for p in s["objects"]["pods"]
    }  # fmt: skip
    out = []
    for run in runs:
        ns = run.namespace
        for plan in run.jobs:
            job = f"{plan.name}-{g3w.REPLICATED_JOB}-0"

            def on(kind: str, api_version: str, name: str, reason: str, message: str, when: float, warning: bool = False):
                out.append(_event(kind, api_version, ns, name, reason, message, when, warning))

            for w in plan.workers:
                pod = names.get((ns, plan.name, w.index))
                if pod is None:
                    continue
                if w.unschedulable:
                    since, why = w.unschedulable
                    on("Pod", "v1", pod, "FailedScheduling", why, since, warning=True)
                    if why == NO_NODE and w.index == 0 and plan is run.jobs[0]:
                        on("Pod", "v1", pod, "TriggeredScaleUp", SCALE_UP, since + 10)
                    if why == NO_GPU:
                        on("Pod", "v1", pod, "NotTriggerScaleUp", NO_SCALE_UP, since + 10)
                if w.placed is not None:
                    on("Pod", "v1", pod, "Scheduled", f"Successfully assigned {ns}/{pod} to {GPU_NODE}", w.placed)
            if plan.end and plan.end[0] == "Failed":
                on("Job", "batch/v1", job, "BackoffLimitExceeded", "Job has reached the specified backoff limit",
                   plan.end[1] - 0.3, warning=True)  # fmt: skip
                on("JobSet", g3w.JOBSET[0], plan.name, "FailedJobs",
                   f"jobset failed due to one or more job failures (first failed job: {job})", plan.end[1], warning=True)  # fmt: skip
            if plan.end and plan.end[0] == "Completed":
                on("JobSet", g3w.JOBSET[0], plan.name, "AllJobsCompleted", JOBSET_COMPLETED, plan.end[1])
            if run.run == "kueue" and plan.resumed is not None:
                workload, reserved = _workload_name(plan), plan.resumed - 0.3
                queued = reserved - plan.workload_created
                on("Workload", g3w.WORKLOAD[0], workload, "QuotaReserved",
                   f"Quota reserved in ClusterQueue gpu-cluster-queue, wait time since queued was {queued:.0f}s", reserved)  # fmt: skip
                on("Workload", g3w.WORKLOAD[0], workload, "Admitted",
                   "Admitted by ClusterQueue gpu-cluster-queue, wait time since reservation was 0s", reserved)  # fmt: skip
    return sorted(out, key=lambda e: e["firstTimestamp"])


def recording(scheduler_run: RunPlan | None = None) -> dict[str, Any]:
    """Both runs (run B deadlocked unless another plan is given), through kube_fixtures.realistic."""
    outs = outputs()
    runs = [_kueue_run(), scheduler_run or deadlocked_run()]
    snapshots: list[dict[str, Any]] = []
    logs: dict[str, str] = {}
    for run in runs:
        _render(run, outs, snapshots, logs)
    client_runs = {}
    for run in runs:
        info: dict[str, Any] = {"namespace": run.namespace, "ended_at": at(run.ended).isoformat()}
        if run.run == "default-scheduler":
            pods = {_key(plan, w): _pod_name(plan, w, run.namespace) for plan in run.jobs for w in plan.workers}
            info["released"] = [{"pod": pods[key], "at": at(when).isoformat()} for key, when in run.released]
        client_runs[run.run] = info
    raw = {
        "lab": "g3", "run_id": RUN_ID, "stack": "g3", "started_at": at(-2).isoformat(), "finished_at": at(runs[-1].ended + 1).isoformat(),
        "outputs": outs, "server_version": kf.server_version(), "nodes": _nodes(), "events": _events(runs, snapshots),
        "charts": {"kueue": "kueue-0.19.2", "jobset": "jobset-0.12.0", "kps": "kube-prometheus-stack-88.5.3",
                   "dcgm-exporter": "dcgm-exporter-4.8.2"},
        "snapshots": snapshots, "objects": {}, "logs": logs,
        "client": {"tool_version": "0.1.0", "client_host_cpus": 8, "command": ["python", "-m", "benchmarks", "g3", "--stack", "g3"],
                   "g3": {"jobs": g3w.jobset_names(RUN_ID, 3), "workers": 3, "rendezvous_timeout_s": TIMING.rendezvous_timeout_s,
                          "work_s": TIMING.work_s, "runs": client_runs}},
        "notes": [],
    }  # fmt: skip
    return kf.realistic(raw)


def main() -> int:
    rec = recording()
    found = kf.problems(rec)
    for problem in found:
        print(f"g3: {problem}", file=sys.stderr)
    PATH.write_text(json.dumps(rec, separators=(",", ":"), ensure_ascii=False))
    print(f"g3: {PATH} ({PATH.stat().st_size / 1e3:.0f} kB, {len(rec['snapshots'])} snapshots)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
