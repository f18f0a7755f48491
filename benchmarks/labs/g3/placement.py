"""Who held a GPU when: per worker from the recorded Pods and its own log, per job as a step function,
and what that cost: GPU slot-seconds held by workers of jobs that could not start (a job that never
started wasted all its workers held; one that started, what they held before it was whole), and a
deadlock.

A worker holds its shared GPU from the moment the scheduler binds its pod (PodScheduled=True) until
its container ends: the kubelet's finishedAt, else its last log line, else the pod's
deletionTimestamp, else the first snapshot without the pod, else the end of the run.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from benchmarks.kube.record import Snapshot
from benchmarks.kube.timeline import condition, condition_time, parse_time
from benchmarks.labs.g3.workloads import INDEX_LABEL, JOBSET_NAME_LABEL
from benchmarks.labs.result import Frozen

END_EVENTS = ("finished", "gave_up", "terminated")


class LogEvent(Frozen):
    event: str
    at: datetime
    fields: dict[str, Any]


class Worker(Frozen):
    pod: str
    index: int
    node: str | None
    created: datetime
    placed: datetime | None  # bound to a node: from now on it holds a shared GPU
    freed: datetime | None  # stopped holding it (None: never placed)
    arrived: datetime | None  # at the barrier (its log)
    released: datetime | None  # the barrier let it through
    finished: datetime | None
    gave_up: datetime | None
    terminated: datetime | None  # SIGTERM: its job was stopped around it
    gave_up_reason: str | None
    work: str | None  # what it did after the barrier, in its own words


def parse_worker_log(text: str) -> list[LogEvent]:
    """The JSON lines scripts/barrier.py prints; anything else (a traceback) is skipped."""
    out = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "event" in record and "t" in record:
            at = datetime.fromtimestamp(float(record["t"]), tz=timezone.utc)
            out.append(LogEvent(event=record["event"], at=at, fields=record))
    return out


def _first(events: list[LogEvent], kind: str) -> LogEvent | None:
    return next((e for e in events if e.event == kind), None)


def _finished_at(pod: dict[str, Any]) -> datetime | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated and terminated.get("finishedAt"):
            return parse_time(terminated["finishedAt"])
    return None


def pod_job(pod: dict[str, Any]) -> str | None:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(JOBSET_NAME_LABEL)


def workers(
    snapshots: list[Snapshot], logs: dict[str, str], namespace: str, job: str, run_end: datetime
) -> list[Worker]:
    """Every pod the run saw for `job`, with its holding interval and barrier times, by worker index."""
    last: dict[str, dict[str, Any]] = {}
    gone: dict[str, datetime] = {}  # the first snapshot without a pod seen before
    for snap in snapshots:
        names = set()
        for pod in snap.objects.get("pods", []):
            meta = pod["metadata"]
            if meta.get("namespace") != namespace or pod_job(pod) != job:
                continue
            names.add(meta["name"])
            last[meta["name"]] = pod
            gone.pop(meta["name"], None)
        for name in set(last) - names:
            gone.setdefault(name, snap.at)
    out = []
    for name, pod in last.items():
        events = parse_worker_log(logs.get(f"{namespace}/{name}", ""))
        placed = condition_time(pod, "PodScheduled")
        end_event = next((e for e in reversed(events) if e.event in END_EVENTS), None)
        deleted = parse_time(pod["metadata"].get("deletionTimestamp"))
        freed = None
        if placed:
            freed = _finished_at(pod) or (end_event.at if end_event else None) or deleted or gone.get(name) or run_end
        gave_up = _first(events, "gave_up")
        finished = _first(events, "finished")
        out.append(
            Worker(
                pod=name,
                index=int(pod["metadata"]["labels"][INDEX_LABEL]),
                node=(pod.get("spec") or {}).get("nodeName"),
                created=parse_time(pod["metadata"]["creationTimestamp"]),
                placed=placed,
                freed=freed,
                arrived=(e.at if (e := _first(events, "arrived")) else None),
                released=(e.at if (e := _first(events, "released")) else None),
                finished=finished.at if finished else None,
                gave_up=gave_up.at if gave_up else None,
                terminated=(e.at if (e := _first(events, "terminated")) else None),
                gave_up_reason=gave_up.fields.get("reason") if gave_up else None,
                work=finished.fields.get("work") if finished else None,
            )
        )
    return sorted(out, key=lambda w: (w.index, w.created))


def placed_steps(ws: list[Worker], origin: datetime) -> list[tuple[float, int]]:
    """Workers holding a GPU over time: (seconds since `origin`, count from then on), from 0 at origin."""
    edges = sorted(
        [(w.placed, 1) for w in ws if w.placed] + [(w.freed, -1) for w in ws if w.placed and w.freed],
        key=lambda e: (e[0], e[1]),
    )
    steps, count = [(0.0, 0)], 0
    for at, step in edges:
        count += step
        t = round((at - origin).total_seconds(), 3)
        if steps[-1][0] == t:
            steps[-1] = (t, count)
        else:
            steps.append((t, count))
    return steps


def count_at(steps: list[tuple[float, int]], t: float) -> int:
    current = 0
    for at, n in steps:
        if at > t:
            break
        current = n
    return current


def whole_at(steps: list[tuple[float, int]], workers: int) -> float | None:
    """When the job first had all its workers holding a GPU (it could start)."""
    return next((t for t, n in steps if n >= workers), None)


def stranded_slot_s(steps: list[tuple[float, int]], workers: int, started: bool) -> float:
    """GPU slot-seconds held by the job's workers while it could not start: everything they held if
    the job never started (its barrier never released), else what they held before the job was whole."""
    until = whole_at(steps, workers) if started else None
    total = 0.0
    for (t, n), (t_next, _) in zip(steps, steps[1:]):
        if until is not None and t >= until:
            break
        total += n * ((min(t_next, until) if until is not None else t_next) - t)
    return total


class Deadlock(Frozen):
    since_s: float  # seconds since the run started
    until_s: float
    placed: dict[str, int]  # job -> workers holding a GPU meanwhile
    ended_by: str


def find_deadlock(
    steps: dict[str, list[tuple[float, int]]], workers: int, gpu_slots: int, end_s: float
) -> tuple[float, float, dict[str, int]] | None:
    """The first stretch in which every GPU slot was held and every job held some but not all of its
    workers: no job could start and none could get another GPU until a worker gave up.
    (since, until, placed per job), or None."""
    times = sorted({t for s in steps.values() for t, _ in s} | {end_s})
    since = None
    for t, t_next in zip(times, times[1:]):
        placed = {job: count_at(s, t) for job, s in steps.items()}
        stuck = sum(placed.values()) >= gpu_slots and all(0 < n < workers for n in placed.values())
        if stuck and since is None:
            since, during = t, placed
        elif not stuck and since is not None:
            return since, t, during
    return (since, end_s, during) if since is not None else None


def jobset_end(jobset: dict[str, Any]) -> tuple[str, datetime, str] | None:
    """('Completed' | 'Failed', when, message) once the JobSet has finished, else None."""
    for kind in ("Completed", "Failed"):
        at = condition_time(jobset, kind)
        if at:
            return kind, at, (condition(jobset, kind) or {}).get("message", "")
    return None
