"""g3's report body and its one plot, rendered only from the saved result."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from benchmarks.labs.g3.admission import Admission
from benchmarks.labs.g3.result import G3Result, JobRun, RunSummary
from benchmarks.labs.plotting import StepPanel, step_panels

PLOT = "placement.png"
CAUSES = {
    "quota": "quota",
    "blockAdmission": "blockAdmission (waitForPodsReady)",
    "queue order": "queue order (StrictFIFO)",
    "other": "other",
}
QUEUE_ORDER = ("no QuotaReserved condition yet: Kueue's scheduler looks only at the head of a StrictFIFO queue, and "
               "an earlier job was the head")  # fmt: skip


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _outcome(run: RunSummary, j: JobRun) -> str:
    if j.outcome is None:
        return "cut by the benchmark" if run.cut_at else "still running"
    return f"{j.outcome.lower()} at {_s(run.at_s(j.ended_at))}"


def _last_finished(run: RunSummary) -> str:
    if run.last_finished_s is not None:
        return f"{run.last_finished_s:.0f} s"
    end = f"cut at {_s(run.at_s(run.cut_at))} s" if run.cut_at else f"run over at {_s(run.at_s(run.ended_at))} s"
    return f"never ({run.completed} of {len(run.jobs)} completed; {end})"


def _deadlock(run: RunSummary, workers: int) -> str:
    d = run.deadlock
    if d is None:
        return "none"
    placed = ", ".join(f"{j} {n} of {workers}" for j, n in d.placed.items())
    return (f"{d.since_s:.0f} s to {d.until_s:.0f} s ({placed} placed, all {run.gpu_slots} GPU slots held); "
            f"ended when {d.ended_by}")  # fmt: skip


def _wait_line(x: Admission, origin: datetime) -> list[str]:
    def rel(t: datetime | None) -> str:
        return "the end" if t is None else f"{(t - origin).total_seconds():.0f} s"

    return [
        f"- {x.job}, {rel(w.since)} to {rel(w.until)}: **{CAUSES[w.cause]}**: "
        + (f'"{w.message}"' if w.message else QUEUE_ORDER)
        for w in x.waits
    ]


def _release_order(run: RunSummary) -> str:
    """'g3-a-8c41/0, g3-b-8c41/0, ...': each released pod as its job and worker index."""
    who = {w.pod: f"{j.job}/{w.index}" for j in run.jobs for w in j.workers}
    return ", ".join(who.get(pod, pod) for pod in run.release_order) or "(no release recorded)"


def _job_table(run: RunSummary, workers: int) -> list[str]:
    rows = []
    for j in run.jobs:
        most = max(n for _, n in j.placed)
        rows.append(
            f"| {j.job} | {most} of {workers} | {_s(j.whole_at_s)} | {_s(run.at_s(j.started))} | {_outcome(run, j)} | "
            f"{j.stranded_slot_s / 60:.1f} |"
        )
    return [
        "| job | most workers holding a GPU | whole at | barrier released | JobSet "
        "| GPU slot-min held while it could not start |",
        "|---|---|---|---|---|---|",
        *rows,
    ]


def report_body(result: G3Result) -> str:
    a, b, w, t = result.kueue, result.default_scheduler, result.workers, result.rendezvous_timeout_s
    origin = a.started_at

    def rel(x: datetime | None) -> str:
        return _s(a.at_s(x))

    block = {True: "on", False: "off", None: "not stated in the stack outputs"}[result.block_admission]
    blocked = [x.job for x in result.admissions if any(wt.cause == "blockAdmission" for wt in x.waits)]
    return "\n".join(
        [
            "## Two runs, side by side",
            "",
            f"Each job is a JobSet of {w} workers, one shared GPU each, and does nothing until all {w} are present: "
            f"worker 0 waits for the others at a barrier, and every worker gives up {t:g} s after it arrived. The "
            f"GPU node offered {a.gpu_slots} shared GPUs (GKE time-sharing on one L4): room for {a.gpu_slots // w} "
            f"whole jobs; the {result.jobs} jobs need {result.jobs * w}. Times are seconds after each run's first "
            "submission.",
            "",
            "| | with Kueue (run A) | without Kueue (run B, default scheduler) |",
            "|---|---|---|",
            f"| jobs completed | {a.completed} of {len(a.jobs)} | {b.completed} of {len(b.jobs)} |",
            f"| every job finished after | {_last_finished(a)} | {_last_finished(b)} |",
            f"| GPU slot-minutes held by workers of jobs that could not start | {a.stranded_slot_s / 60:.1f} | "
            f"{b.stranded_slot_s / 60:.1f} |",
            f"| most workers holding a GPU at once | {a.max_holding} of {a.gpu_slots} | {b.max_holding} of {b.gpu_slots} |",
            f"| deadlock | {_deadlock(a, w)} | {_deadlock(b, w)} |",
            "",
            "**Why the default scheduler cannot do better.** kube-scheduler places pods, one at a time, each on "
            "its own merits: a pod that fits a free GPU gets it. It has no idea that a worker is useless until its "
            f"{w - 1} siblings are placed too, so when the jobs' workers arrive interleaved it hands out the "
            f"{b.gpu_slots} GPUs a few to each job, and every job holds GPUs it cannot use while waiting for GPUs "
            "held by the others. Nothing in the scheduler ever takes a GPU back from a waiting worker; only the "
            "workers' own rendezvous timeout ends it. **What Kueue's admission adds:** a job's pods are created "
            "only when the whole job fits the ClusterQueue's quota (the JobSet stays suspended until then), and "
            "the quota is sized to what the GPU pool can hold, so admitted jobs are placed whole and a waiting job "
            "holds nothing: it waits for quota, not at a barrier.",
            "",
            "## Run A: Kueue admission",
            "",
            f"ClusterQueue quota: {result.quota_gpus} GPUs = {result.quota_gpus // w} jobs of {w}. From the "
            "Workloads' conditions (lastTransitionTime): QuotaReserved, then Admitted (in the same update when the "
            f"ClusterQueue has no admission checks), then Finished. Kueue's waitForPodsReady.blockAdmission: {block}"
            + (f"; it held back {', '.join(blocked)} (below)." if blocked else "; no wait here came from it."),
            "",
            "| job | workload | submitted | quota reserved | admitted | finished | waited (s) | flavour |",
            "|---|---|---|---|---|---|---|---|",
            *(
                f"| {x.job} | {x.workload or '-'} | {rel(x.submitted)} | {rel(x.quota_reserved)} | {rel(x.admitted)} | "
                f"{rel(x.finished)} | {_s(x.waited_s)} | {', '.join(sorted(set(x.flavors.values()))) or '-'} |"
                for x in result.admissions
            ),
            "",
            "Why each job waited, in order, in Kueue's own words (the QuotaReserved=False message):",
            "",
            *[line for x in result.admissions for line in _wait_line(x, origin)],
            *(["- no job waited"] if not any(x.waits for x in result.admissions) else []),
            "",
            "## Per job",
            "",
            "Run A (Kueue):",
            "",
            *_job_table(a, w),
            "",
            "Run B (default scheduler):",
            "",
            *_job_table(b, w),
            "",
            "## How run B's partial placement was made reproducible",
            "",
            "Run B's JobSets are run A's without the queue label, in a namespace Kueue does not manage. Their pods "
            "were created behind a scheduling gate and released to the scheduler one at a time, each after the "
            "scheduler had placed or refused the previous one, round-robin across the jobs: "
            f"{_release_order(b)}. That is the order a scheduler sees when "
            "several teams' jobs start together; created all at once, which job gets which GPU depends on the "
            "order the scheduler happens to pick pending pods, and changes from run to run. Run B's warnings under "
            "What did not work first time (FailedScheduling, BackoffLimitExceeded, FailedJobs) are what the lab shows, "
            "not a fault.",
            "",
            "## What a worker does",
            "",
            f"After the barrier each worker {result.work or 'finished nothing in this run'}: this lab measures who "
            "holds GPUs and when, not what is computed on them.",
        ]
    )


def _panel(run: RunSummary, title: str, workers: int, admitted: list[Admission] | None = None) -> StepPanel:
    spans = (
        [(run.deadlock.since_s, run.deadlock.until_s, "deadlock: every slot held, no job whole")]
        if run.deadlock
        else []
    )
    return StepPanel(
        title=title,
        series={j.job: [(t, float(n)) for t, n in j.placed] for j in run.jobs},
        spans=spans,
        levels=[(workers, f"whole job ({workers} workers)")],
        x_end=(run.ended_at - run.started_at).total_seconds(),
        marks=[(run.at_s(x.admitted), x.job) for x in admitted or [] if x.admitted],
        marks_label="Kueue admitted the job",
    )


def panels(result: G3Result) -> list[StepPanel]:
    """The plot's two panels: per job, workers holding a GPU over time, with and without Kueue."""
    a, b, w = result.kueue, result.default_scheduler, result.workers
    return [
        _panel(a, f"with Kueue: {a.completed} of {len(a.jobs)} jobs completed", w, result.admissions),
        _panel(b, f"without Kueue: {b.completed} of {len(b.jobs)} jobs completed", w),
    ]


def plots(result: G3Result, folder: Path) -> list[str]:
    step_panels(panels(result), "seconds since the run's first submission", "workers holding a GPU", folder / PLOT)
    return [PLOT]
