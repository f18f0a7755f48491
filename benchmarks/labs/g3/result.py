"""g3's typed result and `measure`: both runs from the recording, side by side, and the checks."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from benchmarks.kube.errors import LabError
from benchmarks.kube.objects import allocatable_gpus
from benchmarks.kube.record import Recording, Snapshot
from benchmarks.kube.timeline import parse_time, seconds_between
from benchmarks.labs.g3.admission import Admission, admissions, full_queue_moment, max_overlap, pods_without_admission
from benchmarks.labs.g3.placement import (
    Deadlock,
    Worker,
    count_at,
    find_deadlock,
    jobset_end,
    placed_steps,
    stranded_slot_s,
    whole_at,
    workers,
)
from benchmarks.labs.g3.workloads import RUNS, Run, params, pool_gpus
from benchmarks.labs.result import Check, Frozen, LabResult, common_fields

# The scheduler binds one pod in milliseconds and the API's times have 1 s resolution: workers of one
# admitted job placed further apart than this waited for a GPU.
PLACEMENT_SKEW_S = 5.0
# A worker's give-up is its own timer; its container may take a few seconds more to be seen ending.
TIMEOUT_SLACK_S = 15.0


class JobRun(Frozen):
    job: str
    submitted: datetime
    workers: list[Worker]
    placed: list[tuple[float, int]]  # (seconds since the run started, workers holding a GPU)
    whole_at_s: float | None  # all workers held a GPU: the job could start
    started: datetime | None  # its barrier released
    outcome: str | None  # the JobSet's end: Completed, Failed, or None (still running when the run ended)
    ended_at: datetime | None
    end_message: str | None
    stranded_slot_s: float  # GPU slot-seconds its workers held while it could not start (placement.stranded_slot_s)


class RunSummary(Frozen):
    run: Run
    namespace: str
    started_at: datetime  # the first JobSet's creation
    ended_at: datetime
    gpu_slots: int  # shared GPUs the nodes offered
    jobs: list[JobRun]
    max_holding: int  # most workers holding a GPU at once
    deadlock: Deadlock | None
    cut_at: datetime | None  # the benchmark stopped the run (rendezvous timeout passed)
    release_order: list[str]  # run B: the order the benchmark let the workers' pods be scheduled

    @property
    def completed(self) -> int:
        return sum(j.outcome == "Completed" for j in self.jobs)

    @property
    def stranded_slot_s(self) -> float:
        return sum(j.stranded_slot_s for j in self.jobs)

    @property
    def last_finished_s(self) -> float | None:
        done = [j.ended_at for j in self.jobs if j.outcome == "Completed" and j.ended_at]
        return seconds_between(self.started_at, max(done)) if len(done) == len(self.jobs) else None

    def at_s(self, t: datetime | None) -> float | None:
        return seconds_between(self.started_at, t)


class G3Result(LabResult):
    workers: int
    jobs: int
    quota_gpus: int
    rendezvous_timeout_s: float
    work_s: float
    work: str | None  # what a worker did after the barrier, in its own words
    block_admission: bool | None
    kueue: RunSummary
    admissions: list[Admission]
    max_admitted_at_once: int
    pods_without_admission: list[str]
    default_scheduler: RunSummary


def _in_namespace(snap: Snapshot, namespace: str) -> bool:
    return any(o["metadata"].get("namespace") == namespace for objs in snap.objects.values() for o in objs)


def _gpu_slots(rec: Recording) -> int:
    """Shared GPUs the GPU nodes offered (allocatable nvidia.com/gpu), else what the pool can offer."""
    on_nodes = sum(allocatable_gpus(n) or 0 for n in rec.nodes)
    return on_nodes or pool_gpus(rec.outputs)


def _ended_by(jobs: list[JobRun], origin: datetime, until_s: float, cut_at: datetime | None) -> str:
    if cut_at and abs((cut_at - origin).total_seconds() - until_s) < 1:
        return "the benchmark cut the run at the rendezvous timeout"
    ends = [
        (abs((w.freed - origin).total_seconds() - until_s), j.job, w)
        for j in jobs for w in j.workers if w.freed
    ]  # fmt: skip
    _, job, w = min(ends, key=lambda e: e[0])
    if w.gave_up and w.arrived:
        waited = (w.gave_up - w.arrived).total_seconds()
        return f"{job} worker {w.index} gave up {waited:.0f} s after it arrived ({w.gave_up_reason})"
    if w.terminated:
        return f"{job} worker {w.index} was stopped (SIGTERM) as its job failed"
    return f"{job} worker {w.index} let go of its GPU"


def summarize(rec: Recording, run: Run, jobs: list[str], workers_per_job: int, slots: int) -> RunSummary:
    info: dict[str, Any] = rec.client["g3"]["runs"][run]
    namespace = info["namespace"]
    snaps = [s for s in rec.snapshots if _in_namespace(s, namespace)]
    if not snaps:
        raise LabError(f"recording of run {rec.run_id} has no snapshot of the {run} run (namespace {namespace})")
    last: dict[str, dict[str, Any]] = {}
    for snap in snaps:
        for js in snap.objects.get("jobsets", []):
            if js["metadata"]["namespace"] == namespace:
                last[js["metadata"]["name"]] = js
    missing = [j for j in jobs if j not in last]
    if missing:
        raise LabError(f"recording of run {rec.run_id} never saw JobSets {', '.join(missing)} of the {run} run")
    submitted = {j: parse_time(last[j]["metadata"]["creationTimestamp"]) for j in jobs}
    origin = min(submitted.values())
    ended_at = parse_time(info["ended_at"])
    cut_at = parse_time(info.get("cut_at"))
    out = []
    for job in jobs:
        ws = workers(snaps, rec.logs, namespace, job, ended_at)
        steps = placed_steps(ws, origin)
        end = jobset_end(last[job])
        started = min((w.released for w in ws if w.released), default=None)
        out.append(
            JobRun(
                job=job,
                submitted=submitted[job],
                workers=ws,
                placed=steps,
                whole_at_s=whole_at(steps, workers_per_job),
                started=started,
                outcome=end[0] if end else None,
                ended_at=end[1] if end else None,
                end_message=end[2] if end else None,
                stranded_slot_s=stranded_slot_s(steps, workers_per_job, started is not None),
            )
        )
    edges = sorted({t for j in out for t, _ in j.placed})
    max_holding = max((sum(count_at(j.placed, t) for j in out) for t in edges), default=0)
    end_s = (ended_at - origin).total_seconds()
    found = find_deadlock({j.job: j.placed for j in out}, workers_per_job, slots, end_s)
    stuck = None
    if found:
        since, until, placed = found
        stuck = Deadlock(since_s=since, until_s=until, placed=placed, ended_by=_ended_by(out, origin, until, cut_at))
    return RunSummary(
        run=run,
        namespace=namespace,
        started_at=origin,
        ended_at=ended_at,
        gpu_slots=slots,
        jobs=out,
        max_holding=max_holding,
        deadlock=stuck,
        cut_at=cut_at,
        release_order=[r["pod"] for r in info.get("released", [])],
    )


def _placed_within_skew(run: RunSummary) -> list[str]:
    """Jobs whose workers were not all placed within PLACEMENT_SKEW_S of the first."""
    late = []
    for j in run.jobs:
        placed = sorted(w.placed for w in j.workers if w.placed)
        if placed and (j.whole_at_s is None or (placed[-1] - placed[0]).total_seconds() > PLACEMENT_SKEW_S):
            late.append(j.job)
    return late


def _overstayed(run: RunSummary, timeout_s: float) -> list[str]:
    """Workers that held a GPU without being released for longer than the rendezvous timeout allows."""
    out = []
    for j in run.jobs:
        for w in j.workers:
            if not w.placed or w.released:
                continue
            start = w.arrived or w.placed
            held = (w.freed - start).total_seconds() if w.freed else None
            if held is None or held > timeout_s + TIMEOUT_SLACK_S:
                out.append(f"{j.job} worker {w.index} ({'still held' if held is None else f'{held:.0f} s'})")
    return out


def _checks(
    result: dict[str, Any], a: RunSummary, b: RunSummary, adm: list[Admission], jobs: list[str], rec: Recording
) -> list[Check]:
    w, capacity = result["workers"], result["quota_gpus"] // result["workers"]
    snaps_a = [s for s in rec.snapshots if _in_namespace(s, a.namespace)]
    full = full_queue_moment(snaps_a, jobs, capacity)
    by_admission = sorted((x for x in adm if x.admitted), key=lambda x: x.admitted)
    first, late = by_admission[:capacity], by_admission[capacity:]
    first_finish = min((x.finished for x in first if x.finished), default=None)
    unplaced = _placed_within_skew(a)
    overstayed = _overstayed(b, result["rendezvous_timeout_s"])
    # More than the scheduler's binding skew: workers really waited on GPUs for a job that could not start.
    partial = {j.job: max(n for _, n in j.placed) for j in b.jobs if j.stranded_slot_s > PLACEMENT_SKEW_S}
    return [
        Check(
            name=f"with Kueue: {capacity} jobs admitted whole while {len(jobs) - capacity} waited for quota",
            passed=full is not None,
            evidence=(
                f'at {full[0]:%H:%M:%S}: admitted {", ".join(full[1])}; waiting {", ".join(full[2])}: "{full[3]}"'
                if full
                else f"no moment with {capacity} admitted and the rest waiting for quota"
            ),
        ),
        Check(
            name="with Kueue: never more jobs admitted than the quota covers, no pod of a waiting job",
            passed=result["max_admitted_at_once"] <= capacity and not result["pods_without_admission"],
            evidence=f"at most {result['max_admitted_at_once']} admitted at once (quota {result['quota_gpus']} GPUs / "
            f"{w} per job)"
            + (
                f"; pods of unadmitted jobs: {', '.join(result['pods_without_admission'])}"
                if result["pods_without_admission"]
                else "; no pod of a waiting job"
            ),
        ),
        Check(
            name="with Kueue: the waiting job admitted once another finished",
            passed=bool(late) and first_finish is not None and all(x.admitted >= first_finish for x in late),
            evidence=", ".join(
                f"{x.job} admitted {seconds_between(first_finish, x.admitted):.0f} s after the first finish"
                for x in late
            )
            if late and first_finish
            else "no late admission seen",
        ),
        Check(
            name="with Kueue: every job's workers placed together, no GPU held by a job that could not start",
            passed=not unplaced,
            evidence=f"{a.stranded_slot_s / 60:.1f} GPU slot-minutes held by workers of incomplete jobs"
            + (
                f"; placed apart: {', '.join(unplaced)}"
                if unplaced
                else f"; each job's workers placed within {PLACEMENT_SKEW_S:g} s of each other"
            ),
        ),
        Check(
            name="without Kueue: jobs partly placed, GPUs held by workers that could not start",
            passed=bool(partial),
            evidence=(
                f"{b.stranded_slot_s / 60:.1f} GPU slot-minutes held by workers of jobs that could not start; most "
                f"workers placed per job: {', '.join(f'{j} {n} of {w}' for j, n in partial.items())}"
                + (
                    f"; deadlock from {b.deadlock.since_s:.0f} s to {b.deadlock.until_s:.0f} s, ended when "
                    f"{b.deadlock.ended_by}"
                    if b.deadlock
                    else ""
                )
                if partial
                else "every job was placed whole: the default scheduler's order happened to suit the jobs"
            ),
        ),
        Check(
            name="without Kueue: no worker held a GPU past the rendezvous timeout",
            passed=not overstayed,
            evidence=f"held past {result['rendezvous_timeout_s']:g} s (+{TIMEOUT_SLACK_S:g} s) at the barrier: "
            + (", ".join(overstayed) if overstayed else "none")
            + (f"; the benchmark cut the run at {b.cut_at:%H:%M:%S}" if b.cut_at else ""),
        ),
    ]


def measure(rec: Recording, source: str = "live") -> G3Result:
    p = params(rec.outputs)
    g3: dict[str, Any] = rec.client.get("g3") or {}
    if set(g3.get("runs", {})) != set(RUNS):
        raise LabError(f"recording of run {rec.run_id} lacks a run ({', '.join(RUNS)} expected): it stopped early")
    jobs: list[str] = g3["jobs"]
    slots = _gpu_slots(rec)
    a = summarize(rec, "kueue", jobs, p.workers, slots)
    b = summarize(rec, "default-scheduler", jobs, p.workers, slots)
    snaps_a = [s for s in rec.snapshots if _in_namespace(s, a.namespace)]
    adm = admissions(snaps_a, jobs, {j.job: j.submitted for j in a.jobs})
    fields = {
        "workers": p.workers,
        "jobs": len(jobs),
        "quota_gpus": p.quota.gpus,
        "rendezvous_timeout_s": g3["rendezvous_timeout_s"],
        "work_s": g3["work_s"],
        "work": next((w.work for r in (a, b) for j in r.jobs for w in j.workers if w.work), None),
        "block_admission": p.block_admission,
        "max_admitted_at_once": max_overlap([(x.admitted, x.finished or a.ended_at) for x in adm if x.admitted]),
        "pods_without_admission": pods_without_admission(snaps_a, jobs),
    }
    return G3Result(
        **common_fields(rec, source, _checks(fields, a, b, adm, jobs, rec)),
        **fields,
        kueue=a,
        admissions=adm,
        default_scheduler=b,
    )
