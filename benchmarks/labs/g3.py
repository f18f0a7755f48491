"""g3: Kueue admits whole jobs within quota: two admitted, one waits, never three half-placed.

Submits the lab's jobs (batch Jobs labelled for the LocalQueue, created suspended for Kueue to
release) whose total GPU demand exceeds the ClusterQueue quota, polls Kueue's Workload objects and the
jobs' pods, and derives from the Workloads' conditions (QuotaReserved, Admitted, Finished, with their
lastTransitionTime) and status.admission when each job was admitted or left waiting.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.cluster import RUN_LABEL, wait_until
from benchmarks.labs import images, live, objects
from benchmarks.labs.errors import LabError
from benchmarks.labs.live import LabSession, now
from benchmarks.labs.plotting import gantt_plot
from benchmarks.labs.record import Recording, Snapshot
from benchmarks.labs.result import Check, Frozen, LabResult, common_fields
from benchmarks.labs.stack import LabParams, gpu_placement, lab_params
from benchmarks.labs.timeline import condition, condition_time, parse_time, seconds_between

LAB = "g3"
TITLE = "Kueue quota and all-or-nothing admission"
DEFAULT_TIMEOUT_S = 1800.0  # first jobs wait for a GPU node from zero, then the third runs after them
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
SECTION = "kueue"
WORKLOAD = ("kueue.x-k8s.io/v1beta2", "Workload")


class Demand(LabParams):
    gpus: int
    cpu: float
    memory_gib: float


class Params(LabParams):
    """outputs.benchmark.kueue of a g3 stack (the queue config the platform deployed)."""

    namespace: str
    local_queue: str
    cluster_queue: str
    flavor: str
    quota: Demand
    jobs: int
    job: Demand
    block_admission: bool | None = None  # None: a stack from before the setting was exported


class JobTimes(Frozen):
    job: str
    workload: str | None
    submitted: datetime
    quota_reserved: datetime | None
    admitted: datetime | None
    finished: datetime | None
    waited_s: float | None
    flavors: dict[str, str]
    waiting_message: str | None  # what Kueue said while it waited (QuotaReserved=False)


class G3Result(LabResult):
    quota_gpus: int
    job_gpus: int
    block_admission: bool | None = None  # Kueue's waitForPodsReady.blockAdmission during the run
    jobs: list[JobTimes]
    max_admitted_at_once: int
    pods_without_admission: list[str]


def job_names(run_id: str, count: int) -> list[str]:
    return [f"g3-job-{chr(ord('a') + i)}-{run_id[-4:]}" for i in range(count)]


def build_workloads(outputs: dict[str, Any], run_id: str = "manual", job_seconds: int = 90) -> list[dict[str, Any]]:
    p = lab_params(outputs, LAB, Params, SECTION)
    selector, tolerations = gpu_placement(outputs)
    out = []
    for name in job_names(run_id, p.jobs):
        requests = {"nvidia.com/gpu": str(p.job.gpus), "cpu": f"{p.job.cpu:g}", "memory": f"{p.job.memory_gib:g}Gi"}
        spec = objects.pod_spec(
            [objects.container("main", images.BUSYBOX, ["sleep", str(job_seconds)], requests=requests, limits=requests)],
            node_selector=selector,
            tolerations=tolerations,
        )
        # Created suspended: Kueue unsuspends a Job when it admits its Workload (the documented way).
        out.append(objects.job(name, p.namespace, spec, labels={QUEUE_LABEL: p.local_queue}, suspend=True))
    return out


def check_outputs(outputs: dict[str, Any]) -> None:
    p = lab_params(outputs, LAB, Params, SECTION)
    gpu_placement(outputs)
    if p.quota.gpus >= p.jobs * p.job.gpus:
        raise LabError(
            f"benchmark.kueue.quota.gpus {p.quota.gpus} admits all {p.jobs} jobs of {p.job.gpus} GPU(s): nothing would "
            "wait; the g3 stack must keep the quota below the jobs' demand"
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--job-seconds", type=int, default=90, help="how long each job runs once started")


def record(session: LabSession, args: argparse.Namespace) -> Recording:
    p = lab_params(session.outputs, LAB, Params, SECTION)
    cluster, run_id = session.cluster, session.run_id
    names = job_names(run_id, p.jobs)
    session.namespaces = [p.namespace]
    session.client["jobs"] = names
    for obj in build_workloads(session.outputs, run_id, args.job_seconds):
        session.scope.create(obj)
    snapshots = session.snapshots

    def poll() -> Snapshot:
        # Pods first: Kueue may admit a job between two lists, and a pod listed after its Workload
        # was read as waiting would look like a pod of an unadmitted (half-placed) job.
        pods = cluster.list("v1", "Pod", p.namespace, f"{RUN_LABEL}={run_id}")
        workloads = [w for w in cluster.list(*WORKLOAD, p.namespace) if owner_job(w) in names]
        snap = Snapshot(
            at=now(),
            objects={
                "workloads": workloads,
                "jobs": cluster.list("batch/v1", "Job", p.namespace, f"{RUN_LABEL}={run_id}"),
                "pods": pods,
            },
        )
        snapshots.append(snap)
        return snap

    wait_until(
        f"all {p.jobs} jobs finished",
        poll,
        lambda s: sum(condition_time(w, "Finished") is not None for w in s.objects["workloads"]) == p.jobs,
        args.timeout,
        interval_s=args.poll,
        progress=session.log,
        describe=_describe,
    )
    return session.recording()


def owner_job(workload: dict[str, Any]) -> str | None:
    for ref in (workload.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "Job":
            return ref.get("name")
    return None


def _describe(snap: Snapshot) -> str:
    ws = snap.objects["workloads"]
    admitted = sum(condition_time(w, "Admitted") is not None and condition_time(w, "Finished") is None for w in ws)
    finished = sum(condition_time(w, "Finished") is not None for w in ws)
    return f"workloads {len(ws)}: admitted {admitted}, finished {finished}, waiting {len(ws) - admitted - finished}"


def measure(rec: Recording, source: str = "live") -> G3Result:
    p = lab_params(rec.outputs, LAB, Params, SECTION)
    names: list[str] = rec.client["jobs"]
    if not rec.snapshots:
        raise LabError(f"recording of run {rec.run_id} has no snapshots of the Workloads")
    last_workload: dict[str, dict[str, Any]] = {}
    waiting_msg: dict[str, str] = {}
    jobs_seen: dict[str, dict[str, Any]] = {}
    for snap in rec.snapshots:
        for w in snap.objects.get("workloads", []):
            job = owner_job(w)
            last_workload[job] = w
            qr = condition(w, "QuotaReserved")
            if qr and qr.get("status") == "False" and job not in waiting_msg:
                waiting_msg[job] = qr.get("message", "")
        for j in snap.objects.get("jobs", []):
            jobs_seen[j["metadata"]["name"]] = j
    missing = [n for n in names if n not in jobs_seen]
    if missing:
        raise LabError(f"recording of run {rec.run_id} never saw jobs {', '.join(missing)}")

    times = []
    for name in names:
        w = last_workload.get(name)
        submitted = parse_time(jobs_seen[name]["metadata"]["creationTimestamp"])
        admitted = condition_time(w, "Admitted") if w else None
        assignments = ((w or {}).get("status") or {}).get("admission", {}).get("podSetAssignments", [])
        times.append(
            JobTimes(
                job=name,
                workload=w["metadata"]["name"] if w else None,
                submitted=submitted,
                quota_reserved=condition_time(w, "QuotaReserved") if w else None,
                admitted=admitted,
                finished=condition_time(w, "Finished") if w else None,
                waited_s=seconds_between(submitted, admitted),
                flavors={k: v for a in assignments for k, v in (a.get("flavors") or {}).items()},
                waiting_message=waiting_msg.get(name),
            )
        )
    max_at_once = _max_overlap([(t.admitted, t.finished or rec.finished_at) for t in times if t.admitted])
    half_placed = _pods_without_admission(rec.snapshots)
    capacity = p.quota.gpus // p.job.gpus
    by_admission = sorted((t for t in times if t.admitted), key=lambda t: t.admitted)
    first, late = by_admission[:capacity], by_admission[capacity:]
    full = _full_queue_moment(rec.snapshots, capacity, p.jobs)
    first_finish = min((t.finished for t in first if t.finished), default=None)

    checks = [
        Check(
            name=f"{capacity} admitted while {p.jobs - capacity} waited for quota",
            passed=full is not None,
            evidence=(
                f"at {full[0]:%H:%M:%S}: admitted {', '.join(full[1])}; waiting {', '.join(full[2])}: \"{full[3]}\""
                if full
                else f"no moment with {capacity} admitted and the rest waiting"
            ),
        ),
        Check(
            name="never more jobs holding quota than it covers, no pod before admission",
            passed=max_at_once <= capacity and not half_placed,
            evidence=f"at most {max_at_once} admitted at once (quota {p.quota.gpus} GPUs / {p.job.gpus} per job)"
            + (f"; pods of unadmitted jobs: {', '.join(half_placed)}" if half_placed else "; no pod of a waiting job"),
        ),
        Check(
            name="the waiting job admitted once another finished",
            passed=bool(late) and first_finish is not None and all(t.admitted >= first_finish for t in late),
            evidence=", ".join(
                f"{t.job} admitted {seconds_between(first_finish, t.admitted):.0f}s after the first finish"
                for t in late
            )
            if late and first_finish
            else "no late admission seen",
        ),
    ]
    return G3Result(
        **common_fields(rec, source, checks),
        quota_gpus=p.quota.gpus,
        job_gpus=p.job.gpus,
        block_admission=p.block_admission,
        jobs=times,
        max_admitted_at_once=max_at_once,
        pods_without_admission=half_placed,
    )


def _full_queue_moment(
    snapshots: list[Snapshot], capacity: int, jobs: int
) -> tuple[datetime, list[str], list[str], str] | None:
    """The first snapshot with `capacity` jobs admitted (unfinished) and every other one waiting with
    QuotaReserved=False: (time, admitted jobs, waiting jobs, Kueue's message for the first waiting)."""
    for snap in snapshots:
        ws = snap.objects.get("workloads", [])
        admitted = sorted(owner_job(w) for w in ws if condition_time(w, "Admitted") and not condition_time(w, "Finished"))
        waiting = [w for w in ws if (condition(w, "QuotaReserved") or {}).get("status") == "False"]
        if len(admitted) == capacity and len(waiting) == jobs - capacity:
            return snap.at, admitted, sorted(owner_job(w) for w in waiting), condition(waiting[0], "QuotaReserved")["message"]
    return None


def _max_overlap(intervals: list[tuple[datetime, datetime]]) -> int:
    """Most intervals open at one instant ([start, end): a job finishing frees its quota at once)."""
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda x: (x[0], x[1]))
    best = current = 0
    for _, step in edges:
        current += step
        best = max(best, current)
    return best


def _pods_without_admission(snapshots: list[Snapshot]) -> list[str]:
    """Pods that existed while their job's Workload was not admitted (a half-placed job)."""
    bad = set()
    for snap in snapshots:
        admitted = {owner_job(w) for w in snap.objects.get("workloads", []) if condition_time(w, "Admitted")}
        for pod in snap.objects.get("pods", []):
            job = ((pod.get("metadata") or {}).get("labels") or {}).get("batch.kubernetes.io/job-name")
            if job and job not in admitted:
                bad.add(pod["metadata"]["name"])
    return sorted(bad)


def report_body(result: G3Result) -> str:
    t0 = min(j.submitted for j in result.jobs)

    def rel(t: datetime | None) -> str:
        return f"{(t - t0).total_seconds():.0f}" if t else "-"

    return "\n".join(
        [
            "## Admission timeline",
            "",
            f"ClusterQueue quota: {result.quota_gpus} GPUs; each job asks {result.job_gpus}. Times are seconds "
            "after the first submission, from the Workloads' condition lastTransitionTime.",
            "",
            _block_admission_line(result.block_admission),
            "",
            "| job | workload | submitted | quota reserved | admitted | finished | waited (s) | flavour |",
            "|---|---|---|---|---|---|---|---|",
            *(
                f"| {j.job} | {j.workload or '-'} | {rel(j.submitted)} | {rel(j.quota_reserved)} | {rel(j.admitted)} | "
                f"{rel(j.finished)} | {j.waited_s:.0f} | {', '.join(sorted(set(j.flavors.values()))) or '-'} |"
                if j.waited_s is not None
                else f"| {j.job} | {j.workload or '-'} | {rel(j.submitted)} | - | never | - | - | - |"
                for j in result.jobs
            ),
            "",
            "While it waited, Kueue said (QuotaReserved=False):",
            "",
            *(f"> {j.job}: {j.waiting_message}" for j in result.jobs if j.waiting_message),
        ]
    )


def _block_admission_line(on: bool | None) -> str:
    if on is None:
        return "Kueue waitForPodsReady.blockAdmission: not recorded by this stack; a wait may be for quota or for it."
    if on:
        return ("Kueue waitForPodsReady.blockAdmission: **on**: a job also waits until the jobs admitted before it "
                "have all their pods Ready, so a wait is not necessarily for quota.")
    return "Kueue waitForPodsReady.blockAdmission: off: Kueue admits up to the quota at once; the waits below are for quota."


def plots(result: G3Result, folder: Path) -> list[str]:
    t0 = min(j.submitted for j in result.jobs)
    end = max((j.finished or j.admitted or j.submitted) for j in result.jobs)

    def s(t: datetime) -> float:
        return (t - t0).total_seconds()

    rows = []
    for j in result.jobs:
        segments = [(s(j.submitted), s(j.admitted or end), "waiting")]
        if j.admitted:
            segments.append((s(j.admitted), s(j.finished or end), "admitted"))
        rows.append((j.job, segments))
    gantt_plot(rows, f"Kueue admission (quota {result.quota_gpus} GPUs)", folder / "admission.png")
    return ["admission.png"]


def run(args: argparse.Namespace) -> int:
    return live.run(sys.modules[__name__], args)


def main(argv: list[str] | None = None) -> int:
    return live.main(sys.modules[__name__], argv)
