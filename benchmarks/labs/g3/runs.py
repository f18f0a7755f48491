"""The live part of g3: run A (Kueue), then run B (default scheduler) on the same GPU node, recording
every JobSet, Workload and Pod and every worker's log as it goes.

A poll is kept in the recording only when some object changed (its resourceVersion moved).

Run B's pods are created behind a scheduling gate, then released one at a time, round-robin across
the jobs (a0, b0, c0, a1, ...): each release waits until the scheduler has placed the pod or
refused it, so the scheduler sees the same interleaved order on every run, and with 2W GPU slots for
3 jobs of W workers every job gets two thirds of its workers and none can start. The first release
waits until its pod is placed (a GPU node may have to come up first); without that, the order in
which a fresh node's pending pods get placed would decide the outcome. Run B ends when every JobSet
has finished, or is cut (its JobSets deleted) once no worker could still be waiting for a legitimate
reason: the rendezvous timeout plus the work time after the last release, plus a few polls.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import datetime
from typing import Any

from benchmarks.cluster import KubeApiError, WaitTimeout, run_selector, wait_until
from benchmarks.kube.record import Recording, Snapshot
from benchmarks.kube.timeline import condition, phase
from benchmarks.labs.g3.admission import owner_jobset
from benchmarks.labs.g3.placement import jobset_end, pod_job
from benchmarks.labs.g3.workloads import (
    INDEX_LABEL,
    JOBSET,
    WORKLOAD,
    Params,
    Run,
    Timing,
    jobset_names,
    params,
    run_objects,
    scheduler_namespace,
)
from benchmarks.labs.live import LabSession, now

RELEASE_POLL_S = 0.5  # how often a released pod is checked for the scheduler's decision
# Polls after the rendezvous timeout and the work time before run B is cut: time for the Job and
# JobSet controllers to fail what gave up, and for this benchmark to see it.
CUT_GRACE_POLLS = 6


def record(session: LabSession, args: argparse.Namespace) -> Recording:
    p = params(session.outputs)
    timing = Timing(rendezvous_timeout_s=args.rendezvous_timeout, work_s=args.work_seconds)
    names = jobset_names(session.run_id, p.jobs)
    session.client["g3"] = {
        "jobs": names,
        "workers": p.workers,
        "rendezvous_timeout_s": timing.rendezvous_timeout_s,
        "work_s": timing.work_s,
        "runs": {},
    }
    run_with_kueue(session, p, timing, names, args)
    run_without_kueue(session, p, timing, names, args)
    return session.recording()


def _start(session: LabSession, run: Run, namespace: str, timing: Timing) -> dict[str, Any]:
    info: dict[str, Any] = {"namespace": namespace}
    session.client["g3"]["runs"][run] = info
    for obj in run_objects(session.outputs, session.run_id, timing, run):
        session.scope.create(obj)
    if namespace not in session.namespaces:
        session.namespaces.append(namespace)
    return info


def run_with_kueue(session: LabSession, p: Params, timing: Timing, names: list[str], args: argparse.Namespace) -> None:
    session.log(
        f"g3 run A (Kueue): {p.jobs} JobSets of {p.workers} workers into LocalQueue {p.local_queue} "
        f"(quota {p.quota.gpus} GPUs = {p.quota.gpus // p.workers} whole jobs)"
    )
    info = _start(session, "kueue", p.namespace, timing)
    watch(session, p.namespace, names, args.timeout, args.poll, "run A: every JobSet finished", workloads=True)
    info["ended_at"] = now().isoformat()


def run_without_kueue(
    session: LabSession, p: Params, timing: Timing, names: list[str], args: argparse.Namespace
) -> None:
    namespace = scheduler_namespace(session.run_id)
    session.log(
        f"g3 run B (default scheduler): the same JobSets in {namespace}, no queue; their {p.jobs * p.workers} "
        "pods released to the scheduler one by one, round-robin across the jobs"
    )
    info = _start(session, "default-scheduler", namespace, timing)
    info["released"] = []
    total = p.jobs * p.workers
    snap = watch(
        session,
        namespace,
        names,
        args.timeout,
        args.poll,
        f"run B: all {total} worker pods created (gated)",
        done=lambda s: len(s.objects["pods"]) == total,
    )
    for i, pod in enumerate(release_order(snap.objects["pods"], names)):
        lifted = release(session, namespace, pod, must_place=i == 0, timeout_s=args.timeout)
        info["released"].append({"pod": pod, "at": lifted.isoformat()})
    cut_after = timing.rendezvous_timeout_s + timing.work_s + CUT_GRACE_POLLS * args.poll
    try:
        watch(session, namespace, names, cut_after, args.poll, "run B: every JobSet finished")
    except WaitTimeout:
        info["cut_at"] = now().isoformat()
        session.log(
            f"run B: cut {cut_after:.0f} s after the last release: deleting its JobSets, so no worker keeps a GPU"
        )
        session.cluster.delete_labelled(*JOBSET, namespace, run_selector(session.run_id))
        take_snapshot(session, namespace, names)
    info["ended_at"] = now().isoformat()


def release_order(pods: list[dict[str, Any]], jobs: list[str]) -> list[str]:
    """Pod names round-robin across the jobs by worker index: a0, b0, c0, a1, b1, c1, ..."""
    by_key = {(pod_job(p), int(p["metadata"]["labels"][INDEX_LABEL])): p["metadata"]["name"] for p in pods}
    indexes = sorted({i for _, i in by_key})
    return [by_key[(j, i)] for i in indexes for j in jobs if (j, i) in by_key]


def _scheduling(pod: dict[str, Any]) -> str | None:
    """'placed', 'refused' (the scheduler found no room), or None (gated, or not tried yet)."""
    c = condition(pod, "PodScheduled") or {}
    if c.get("status") == "True":
        return "placed"
    if c.get("reason") == "Unschedulable":
        return "refused"
    return None


def release(session: LabSession, namespace: str, pod: str, must_place: bool, timeout_s: float) -> datetime:
    """Lift the pod's scheduling gate and wait for the scheduler's decision (its placement, when
    `must_place`); returns when the gate was lifted."""
    lifted = now()
    session.cluster.patch("v1", "Pod", namespace, pod, {"spec": {"schedulingGates": None}})
    selector = run_selector(session.run_id)

    def get() -> dict[str, Any]:
        pods = session.cluster.list("v1", "Pod", namespace, selector)
        return next((p for p in pods if p["metadata"]["name"] == pod), {})

    decided = wait_until(
        f"{pod} placed" if must_place else f"{pod} placed or refused",
        get,
        lambda p: _scheduling(p) == "placed" or (not must_place and _scheduling(p) is not None),
        timeout_s,
        interval_s=RELEASE_POLL_S,
        progress=lambda _: None,
        describe=lambda p: (condition(p, "PodScheduled") or {}).get("message", "no decision yet"),
    )
    where = (decided.get("spec") or {}).get("nodeName")
    refused = (condition(decided, "PodScheduled") or {}).get("message", "")
    session.log(f"run B: released {pod}: " + (f"placed on {where}" if where else f"pending ({refused})"))
    return lifted


def watch(
    session: LabSession,
    namespace: str,
    names: list[str],
    timeout_s: float,
    poll_s: float,
    what: str,
    workloads: bool = False,
    done: Callable[[Snapshot], bool] | None = None,
) -> Snapshot:
    """Snapshot the run until `done` (default: every JobSet finished); WaitTimeout after `timeout_s`."""
    finished = done or (lambda s: sum(jobset_end(js) is not None for js in s.objects["jobsets"]) == len(names))
    return wait_until(
        what,
        lambda: take_snapshot(session, namespace, names, workloads),
        finished,
        timeout_s,
        interval_s=poll_s,
        progress=session.log,
        describe=describe,
    )


def take_snapshot(session: LabSession, namespace: str, names: list[str], workloads: bool = False) -> Snapshot:
    cluster, selector = session.cluster, run_selector(session.run_id)
    # Pods first: Kueue may admit a job between two lists, and a pod listed after its Workload was
    # read as waiting would look like a pod of an unadmitted (half-placed) job.
    pods = cluster.list("v1", "Pod", namespace, selector)
    objects = {"pods": pods}
    if workloads:
        objects["workloads"] = [w for w in cluster.list(*WORKLOAD, namespace) if owner_jobset(w) in names]
    objects["jobsets"] = cluster.list(*JOBSET, namespace, selector)
    read_logs(session, namespace, pods)
    snap = Snapshot(at=now(), objects=objects)
    previous = next((s for s in reversed(session.snapshots) if _versions(s, namespace)), None)
    # A poll that saw nothing new adds nothing to the recording (minutes of a node booting).
    if previous is None or _versions(previous, namespace) != _versions(snap, namespace):
        session.snapshots.append(snap)
    return snap


def _versions(snap: Snapshot, namespace: str) -> list[tuple[str, str, str]]:
    """(kind, name, resourceVersion) of the snapshot's objects in `namespace`: equal lists, same state."""
    return [
        (o["kind"], o["metadata"]["name"], o["metadata"].get("resourceVersion", ""))
        for objs in snap.objects.values() for o in objs if o["metadata"].get("namespace") == namespace
    ]  # fmt: skip


def read_logs(session: LabSession, namespace: str, pods: list[dict[str, Any]]) -> None:
    """Each started worker's log so far: a failed job's pods may be deleted before the run ends."""
    for pod in pods:
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        if not any("running" in (s.get("state") or {}) or "terminated" in (s.get("state") or {}) for s in statuses):
            continue
        name = pod["metadata"]["name"]
        try:
            session.logs[f"{namespace}/{name}"] = session.cluster.pod_log(namespace, name)
        except KubeApiError:  # deleted meanwhile: keep what was read before
            pass


def describe(snap: Snapshot) -> str:
    placed: dict[str, int] = {}
    for pod in snap.objects["pods"]:
        holding = phase(pod) in ("Pending", "Running")
        if holding and (condition(pod, "PodScheduled") or {}).get("status") == "True":
            placed[pod_job(pod)] = placed.get(pod_job(pod), 0) + 1
    ends = [e[0] for js in snap.objects["jobsets"] if (e := jobset_end(js))]
    parts = [f"{j}: {n} holding a GPU" for j, n in sorted(placed.items())]
    parts.append(f"completed {ends.count('Completed')}, failed {ends.count('Failed')}")
    return "; ".join(parts)
