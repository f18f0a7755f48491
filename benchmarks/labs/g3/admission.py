"""Kueue's side of run A, from the recorded Workload objects: when each job reserved quota and was
admitted (the Admitted condition, not QuotaReserved: an admission check or an eviction can separate
them), and why it waited meanwhile, each wait attributed to its cause from the QuotaReserved=False
condition Kueue wrote:

- quota: "couldn't assign flavors ... insufficient unused quota" (the lab's point);
- blockAdmission: "waiting for all admitted workloads to be in PodsReady condition": Kueue's
  waitForPodsReady.blockAdmission holds every later job until the admitted one's pods are Ready,
  which includes a GPU node booting from zero;
- queue order: no QuotaReserved condition yet (so no message): with StrictFIFO, Kueue's scheduler
  looks only at the head of the queue, and an earlier job was the head;
- other: anything else Kueue said, quoted.
A cause's start is the condition's lastTransitionTime when the condition turned False with it, else
the first snapshot that showed it (Kueue updates the message without a new transition time).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from benchmarks.kube.record import Snapshot
from benchmarks.kube.timeline import condition, condition_time, parse_time, seconds_between
from benchmarks.labs.g3.placement import pod_job
from benchmarks.labs.result import Frozen

Cause = Literal["quota", "blockAdmission", "queue order", "other"]
BLOCK_MESSAGE = "waiting for all admitted workloads to be in PodsReady condition"


class Wait(Frozen):
    cause: Cause
    message: str
    since: datetime
    until: datetime | None  # None: still waiting when the run ended


class Admission(Frozen):
    job: str
    workload: str | None
    submitted: datetime
    quota_reserved: datetime | None
    admitted: datetime | None
    finished: datetime | None
    waited_s: float | None  # submitted -> admitted
    flavors: dict[str, str]
    waits: list[Wait]


def owner_jobset(workload: dict[str, Any]) -> str | None:
    for ref in (workload.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "JobSet":
            return ref.get("name")
    return None


def cause_of(reason: str, message: str) -> Cause:
    # Reasons as Kueue 0.19 writes them without / with its UnadmittedWorkloadsObservability gate.
    if BLOCK_MESSAGE in message or reason in ("Waiting", "WaitingForPodsReady"):
        return "blockAdmission"
    if "insufficient unused quota" in message or reason == "WaitingForQuota":
        return "quota"
    return "other"


def _workloads(snapshots: list[Snapshot], jobs: list[str]) -> list[tuple[datetime, dict[str, dict[str, Any]]]]:
    out = []
    for snap in snapshots:
        by_job = {owner_jobset(w): w for w in snap.objects.get("workloads", [])}
        out.append((snap.at, {j: w for j, w in by_job.items() if j in jobs}))
    return out


def _waits(
    series: list[tuple[datetime, dict[str, Any] | None]], submitted: datetime, admitted: datetime | None
) -> list[Wait]:
    """The causes of one job's wait for admission, in order, from its Workload in each snapshot."""
    waits: list[Wait] = []

    def begin(cause: Cause, message: str, since: datetime) -> None:
        if waits and (waits[-1].cause, waits[-1].message) == (cause, message):
            return
        if waits:
            waits[-1] = waits[-1].model_copy(update={"until": since})
        waits.append(Wait(cause=cause, message=message, since=since, until=None))

    for at, w in series:
        if admitted and at >= admitted:
            break
        if w is None:  # Kueue has not created the Workload yet
            continue
        qr = condition(w, "QuotaReserved")
        if qr is None:
            begin("queue order", "", submitted if not waits else at)
        elif qr.get("status") == "False":
            turned = parse_time(qr.get("lastTransitionTime"))
            # A new transition dates the cause; a new message under the same transition is dated by the
            # first snapshot that showed it.
            since = turned if turned and (not waits or turned > waits[-1].since) else at
            begin(cause_of(qr.get("reason", ""), qr.get("message", "")), qr.get("message", ""), since)
    if waits and admitted:
        waits[-1] = waits[-1].model_copy(update={"until": admitted})
    return waits


def admissions(snapshots: list[Snapshot], jobs: list[str], submitted: dict[str, datetime]) -> list[Admission]:
    series = _workloads(snapshots, jobs)
    out = []
    for job in jobs:
        mine = [(at, ws.get(job)) for at, ws in series]
        w = next((w for _, w in reversed(mine) if w), None)
        admitted = condition_time(w, "Admitted") if w else None
        assignments = ((w or {}).get("status") or {}).get("admission", {}).get("podSetAssignments", [])
        out.append(
            Admission(
                job=job,
                workload=w["metadata"]["name"] if w else None,
                submitted=submitted[job],
                quota_reserved=condition_time(w, "QuotaReserved") if w else None,
                admitted=admitted,
                finished=condition_time(w, "Finished") if w else None,
                waited_s=seconds_between(submitted[job], admitted),
                flavors={k: v for a in assignments for k, v in (a.get("flavors") or {}).items()},
                waits=_waits(mine, submitted[job], admitted),
            )
        )
    return out


def full_queue_moment(
    snapshots: list[Snapshot], jobs: list[str], capacity: int
) -> tuple[datetime, list[str], list[str], str] | None:
    """The first snapshot with `capacity` jobs admitted (unfinished) and every other one waiting for
    quota: (time, admitted jobs, waiting jobs, Kueue's message for the first waiting)."""
    for at, by_job in _workloads(snapshots, jobs):
        ws = list(by_job.values())
        admitted = sorted(
            owner_jobset(w) for w in ws if condition_time(w, "Admitted") and not condition_time(w, "Finished")
        )
        waiting = [
            w for w in ws
            if (qr := condition(w, "QuotaReserved")) and qr.get("status") == "False"
            and cause_of(qr.get("reason", ""), qr.get("message", "")) == "quota"
        ]  # fmt: skip
        if len(admitted) == capacity and len(waiting) == len(jobs) - capacity:
            return (
                at,
                admitted,
                sorted(owner_jobset(w) for w in waiting),
                condition(waiting[0], "QuotaReserved")["message"],
            )
    return None


def max_overlap(intervals: list[tuple[datetime, datetime]]) -> int:
    """Most intervals open at one instant ([start, end): a job finishing frees its quota at once)."""
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda x: (x[0], x[1]))
    best = current = 0
    for _, step in edges:
        current += step
        best = max(best, current)
    return best


def pods_without_admission(snapshots: list[Snapshot], jobs: list[str]) -> list[str]:
    """Pods that existed while their job's Workload was not admitted: Kueue let part of a job through."""
    bad = set()
    for snap, (_, by_job) in zip(snapshots, _workloads(snapshots, jobs)):
        admitted = {j for j, w in by_job.items() if condition_time(w, "Admitted")}
        for pod in snap.objects.get("pods", []):
            job = pod_job(pod)
            if job in jobs and job not in admitted:
                bad.add(pod["metadata"]["name"])
    return sorted(bad)
