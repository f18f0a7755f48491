"""g8: a spot node preempted under a running training job: time to reschedule and resume, and steps
lost, with and without checkpointing.

For each variant a Job runs scripts/trainer.py on the GPU pool; after `--kill-after` steps the
benchmark preempts the job's spot node through the Compute API's `simulateMaintenanceEvent` (on a
Spot VM that IS a preemption: the same ACPI shutdown notice, GKE's graceful node shutdown, the VM
stopped and recreated by its managed instance group). Deleting the Node object or the instance
would skip the shutdown notice a real preemption gives, so it would measure something else. On a
cluster not on Compute Engine, `--preempt-command` preempts the node instead (the local cluster's powers
its real node off through the node's logind, the same graceful shutdown), and `--storage-emulator` sends
the checkpoints to a Cloud Storage emulator.
The Job's podFailurePolicy ignores pods failed by the disruption, so the rerun is not counted as a
failure. Everything is read back from the pods' logs ("step N", "resumed from step M") by pure
functions.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.cluster import RUN_LABEL, WaitTimeout, wait_until
from benchmarks.harness import ServiceRef
from benchmarks.kube import images, objects
from benchmarks.kube.errors import LabError
from benchmarks.kube.record import Recording, Snapshot
from benchmarks.kube.stack import LabParams, gpu_placement, lab_params
from benchmarks.kube.timeline import condition_time, parse_time, seconds_between
from benchmarks.labs import live, workloads
from benchmarks.labs.live import LabSession, now
from benchmarks.labs.plotting import Panel, panels_plot
from benchmarks.labs.result import Check, Frozen, LabResult, common_fields
from benchmarks.metrics import PrometheusClient, gpu_util_query, scalar

LAB = "g8"
TITLE = "Spot preemption with and without checkpoints"
DEFAULT_TIMEOUT_S = 1800.0
VARIANTS = {"with-checkpoints": True, "without-checkpoints": False}
SECTION = "checkpoints"
VARIANT_LABEL = "gke-ml-labs/variant"

MAINTENANCE_EVENT = "simulateMaintenanceEvent"
SHUTDOWN_WATCH_S = 120.0  # a Spot VM's shutdown takes 30 s; then the node is gone, and the pod with it
_STEP = re.compile(r"^step (\d+) t=([\d.]+)$")
_RESUMED = re.compile(r"^resumed from step (\d+)$")
_CHECKPOINT = re.compile(r"^checkpoint step (\d+)")


class Params(LabParams):
    """outputs.benchmark.checkpoints of a g8 stack."""

    bucket: str
    namespace: str
    service_account: str
    interval_s: int
    image: str | None = None  # the stack's pinned PyTorch image, when it exports one


class Progress(Frozen):
    """What one pod's log says: where it started and each step with its wall-clock time."""

    resumed_from: int | None  # the checkpointed step it loaded, None when it started from 0
    steps: list[tuple[int, float]]
    checkpoints: list[int]
    done: bool


class Variant(Frozen):
    name: str
    checkpointing: bool
    job: str
    node: str | None
    preempted_at: datetime | None
    preempted_by: str = MAINTENANCE_EVENT  # how: the Compute call, or the --preempt-command run
    steps_before: int  # steps the first pod completed (last logged step + 1)
    last_checkpoint: int | None
    resumed_at_step: int | None  # first step the new pod ran
    steps_lost: int | None
    reschedule_s: float | None  # preemption -> replacement pod scheduled
    gpu_util_pct: float | None  # DCGM_FI_DEV_GPU_UTIL averaged over the variant's run
    resume_s: float | None  # preemption -> first step of the replacement pod
    job_s: float | None
    step_series: list[tuple[float, int]]  # (seconds since job start, step) over every pod
    preempted_s: float | None = None  # seconds since job start when the node was preempted


class G8Result(LabResult):
    variants: list[Variant]
    step_seconds: float


def parse_progress(text: str) -> Progress:
    resumed, steps, ckpts, done = None, [], [], False
    for raw in text.splitlines():
        line = raw.strip()
        if m := _STEP.match(line):
            steps.append((int(m[1]), float(m[2])))
        elif m := _RESUMED.match(line):
            resumed = int(m[1])
        elif m := _CHECKPOINT.match(line):
            ckpts.append(int(m[1]))
        elif line.startswith("done step"):
            done = True
    return Progress(resumed_from=resumed, steps=steps, checkpoints=ckpts, done=done)


def job_name(run_id: str, variant: str) -> str:
    return f"g8-{'ckpt' if VARIANTS[variant] else 'nockpt'}-{run_id[-4:]}"


def build_workloads(
    outputs: dict[str, Any],
    run_id: str = "manual",
    variant: str = "with-checkpoints",
    steps: int = 40,
    step_seconds: float = 2.0,
    storage_emulator: str | None = None,
) -> list[dict[str, Any]]:
    p = lab_params(outputs, LAB, Params, SECTION)
    selector, tolerations = gpu_placement(outputs)
    name = job_name(run_id, variant)
    every = max(1, round(p.interval_s / step_seconds))
    cm = workloads.scripts_config_map(f"{name}-scripts", p.namespace, ["trainer.py"])
    env = {
        "BUCKET": p.bucket,
        "PREFIX": f"benchmarks/{run_id}/{variant}/",
        "CHECKPOINT": "1" if VARIANTS[variant] else "0",
        "STEPS": str(steps),
        "STEP_SECONDS": f"{step_seconds:g}",
        "CHECKPOINT_EVERY": str(every),
        **({"STORAGE_EMULATOR_HOST": storage_emulator} if storage_emulator else {}),
    }
    spec = objects.pod_spec(
        [objects.container("trainer", p.image or images.PYTORCH_CUDA, ["python", f"{objects.SCRIPT_MOUNT}/trainer.py"],
                           env=env, requests=workloads.PYTORCH_REQUESTS,
                           limits={"nvidia.com/gpu": "1", "cpu": "2", "memory": workloads.PYTORCH_MEMORY_LIMIT},
                           with_scripts=True)],
        node_selector=selector,
        tolerations=tolerations,
        scripts_config_map=cm["metadata"]["name"],
        service_account=p.service_account,  # Workload Identity: the bucket writer, no keys
    )
    # A deletion's grace; in a node's graceful shutdown the kubelet gives a pod at most shutdownGracePeriod less
    # shutdownGracePeriodCriticalPods (15 s on GKE's Spot nodes), time enough for the SIGTERM checkpoint.
    spec["terminationGracePeriodSeconds"] = 25
    job = objects.job(name, p.namespace, spec, labels={VARIANT_LABEL: variant}, backoff_limit=2)
    # A pod killed by the node's preemption carries the DisruptionTarget condition: rerun it without
    # spending the backoff limit (that is what the Job's podFailurePolicy is for).
    job["spec"]["podFailurePolicy"] = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    return [cm, job]


def check_outputs(outputs: dict[str, Any]) -> None:
    lab_params(outputs, LAB, Params, SECTION)
    gpu_placement(outputs)
    spot = (outputs.get("gpu_pool") or {}).get("spot")
    if not spot:
        # None on an existing cluster whose gpu_nodes.node_selector does not say cloud.google.com/gke-spot.
        said = "false" if spot is False else "not known"
        raise LabError(f"gpu_pool.spot is {said}: g8 preempts a Spot VM; an on-demand node would only be restarted")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kill-after", type=int, default=20, help="preempt the node after this many steps")
    parser.add_argument("--steps", type=int, default=40, help="steps each job runs in all")
    parser.add_argument("--step-seconds", type=float, default=2.0, help="wall time of one training step")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma list of: " + ", ".join(VARIANTS))
    parser.add_argument("--preempt-command", metavar="CMD",
                        help="a command run here that preempts the node ({node}: its name), instead of Compute's "
                             f"{MAINTENANCE_EVENT} (a cluster not on Compute Engine)")  # fmt: skip
    parser.add_argument("--storage-emulator", metavar="URL",
                        help="the trainer's STORAGE_EMULATOR_HOST: checkpoints to this Cloud Storage emulator, "
                             "unauthenticated, instead of the stack's bucket in Cloud Storage")  # fmt: skip


def preempt(node: dict[str, Any], gcp: Any = None, command: str | None = None) -> datetime:
    """simulateMaintenanceEvent on the node's instance, or `command` ({node} its name) run here; returns when
    the preemption was asked for."""
    if command:
        argv = shlex.split(command.replace("{node}", node["metadata"]["name"]))
        at = now()
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise LabError(f"--preempt-command {argv[0]}: {e}") from None
        if done.returncode != 0:
            raise LabError(f"--preempt-command {argv[0]} exited with {done.returncode}: {(done.stderr or done.stdout).strip()}")
        return at
    from ops.gcp import GcpClient

    project, zone, instance = instance_of(node)
    client = gcp or GcpClient.from_environment()
    at = now()
    client.request("POST", "compute", f"projects/{project}/zones/{zone}/instances/{instance}/simulateMaintenanceEvent")
    return at


def instance_of(node: dict[str, Any]) -> tuple[str, str, str]:
    """(project, zone, instance) from the Node's spec.providerID 'gce://PROJECT/ZONE/INSTANCE'."""
    provider = (node.get("spec") or {}).get("providerID", "")
    parts = provider.removeprefix("gce://").split("/")
    if not provider.startswith("gce://") or len(parts) != 3:
        raise LabError(f"node {node['metadata']['name']} has providerID {provider!r}, not gce://PROJECT/ZONE/INSTANCE")
    return parts[0], parts[1], parts[2]


def record(session: LabSession, args: argparse.Namespace) -> Recording:
    p = lab_params(session.outputs, LAB, Params, SECTION)
    cluster, run_id = session.cluster, session.run_id
    session.namespaces = [p.namespace, "default"]
    session.client.update({"kill_after": args.kill_after, "step_seconds": args.step_seconds})
    snapshots, logs = session.snapshots, session.logs
    runs: list[dict[str, Any]] = session.client.setdefault("runs", [])
    for variant in [v.strip() for v in args.variants.split(",") if v.strip()]:
        if variant not in VARIANTS:
            raise LabError(f"--variants: {variant!r} is not one of {', '.join(VARIANTS)}")
        name = job_name(run_id, variant)
        started = now()
        for obj in build_workloads(session.outputs, run_id, variant, args.steps, args.step_seconds, args.storage_emulator):
            session.scope.create(obj)

        def poll(name: str = name) -> Snapshot:
            pods = cluster.list("v1", "Pod", p.namespace, f"batch.kubernetes.io/job-name={name}")
            for pod in pods:
                try:
                    text = cluster.pod_log(p.namespace, pod["metadata"]["name"])
                except Exception:  # the node is going away: keep what we already read
                    continue
                if kept := kept_log(logs.get(pod["metadata"]["name"]), text):
                    logs[pod["metadata"]["name"]] = kept
            jobs = cluster.list("batch/v1", "Job", p.namespace, f"{RUN_LABEL}={run_id},{VARIANT_LABEL}={variant}")
            snapshots.append(Snapshot(at=now(), objects={"pods": pods, "jobs": jobs}))
            return snapshots[-1]

        def reached(snap: Snapshot) -> bool:
            return any(_last_step(logs.get(x["metadata"]["name"], "")) >= args.kill_after - 1 for x in snap.objects["pods"])

        snap = wait_until(f"{variant}: {args.kill_after} steps done", poll, reached, args.timeout,
                          interval_s=args.poll, progress=session.log)
        running = next(x for x in snap.objects["pods"] if _last_step(logs.get(x["metadata"]["name"], "")) >= 0)
        node_name = running["spec"]["nodeName"]
        node = next(n for n in cluster.list("v1", "Node") if n["metadata"]["name"] == node_name)
        how = args.preempt_command or MAINTENANCE_EVENT
        session.log(f"{variant}: preempting {node_name} ({how if args.preempt_command else how + ' on its Spot VM'})")
        preempted_at = preempt(node, command=args.preempt_command)
        # Its last steps and its SIGTERM checkpoint are logged in the graceful shutdown's seconds, and the log goes
        # with the node: read it often until the pod has stopped.
        victim = running["metadata"]["name"]
        try:
            wait_until(f"{variant}: {victim} stopped", poll,
                       lambda s: all(x["status"].get("phase") in ("Failed", "Succeeded") for x in s.objects["pods"]
                                     if x["metadata"]["name"] == victim),
                       min(args.timeout, SHUTDOWN_WATCH_S), interval_s=min(args.poll, 0.5),
                       progress=lambda line: session.log(line) if "waiting" not in line else None)  # fmt: skip
        except WaitTimeout:  # a node gone before its kubelet said so: its log is what was read
            session.log(f"{variant}: {victim} not reported stopped in {SHUTDOWN_WATCH_S:.0f} s; its log as last read")
        wait_until(f"{variant}: job rescheduled and finished", poll,
                   lambda s: any(condition_time(j, "Complete") or condition_time(j, "Failed") for j in s.objects["jobs"]),
                   args.timeout, interval_s=args.poll, progress=session.log)
        runs.append({"variant": variant, "job": name, "node": node_name, "preempted_at": preempted_at.isoformat(), "preempted_by": how,
                     "dcgm": _gpu_util(session, int((now() - started).total_seconds()))})
    return session.recording()


def _gpu_util(session: LabSession, seconds: int) -> dict[str, Any] | None:
    """DCGM utilisation over the variant's whole run (None, with a note, without Prometheus)."""
    raw = session.outputs.get("prometheus")
    if not raw:
        session.notes.append("no Prometheus in the stack outputs: GPU utilisation not measured")
        return None
    try:
        target = ServiceRef.model_validate(raw)
        return PrometheusClient.through_service_proxy(session.cluster, target).answer(gpu_util_query(seconds))
    except Exception as e:  # the preemption numbers stand without it
        session.notes.append(f"DCGM query failed: {e}")
        return None


def kept_log(before: str | None, read: str) -> str | None:
    """What to keep of a pod's log after a read. A container's log only grows, so a read that does not continue
    the one before is not its log: the kubelet of a node back from a preemption with a fresh disk answers
    "unable to retrieve container logs for containerd://..." (HTTP 200) for a container it never had."""
    if not read or (before and not read.startswith(before)):
        return before
    return read


def _last_step(text: str) -> int:
    steps = parse_progress(text).steps
    return steps[-1][0] if steps else -1


def measure(rec: Recording, source: str = "live") -> G8Result:
    runs = rec.client.get("runs") or []
    if not runs:
        raise LabError(f"recording of run {rec.run_id} has no preempted job")
    variants = [_measure_variant(rec, r) for r in runs]
    checks: list[Check] = []
    for v in variants:
        checks.append(
            Check(
                name=f"{v.name}: job resumed on a new pod after the preemption",
                passed=v.resume_s is not None,
                evidence=(
                    f"node {v.node} preempted after {v.steps_before} steps; new pod scheduled {v.reschedule_s:.0f}s "
                    f"and stepping {v.resume_s:.0f}s later, from step {v.resumed_at_step}"
                    if v.resume_s is not None and v.reschedule_s is not None
                    else "no step logged by a replacement pod"
                ),
            )
        )
    by_name = {v.name: v for v in variants}
    with_c, without_c = by_name.get("with-checkpoints"), by_name.get("without-checkpoints")
    if with_c and without_c and with_c.steps_lost is not None and without_c.steps_lost is not None:
        checks.append(
            Check(
                name="checkpointing loses fewer steps",
                passed=with_c.steps_lost < without_c.steps_lost,
                evidence=f"lost {with_c.steps_lost} steps with checkpoints, {without_c.steps_lost} without",
            )
        )
    return G8Result(**common_fields(rec, source, checks), variants=variants, step_seconds=rec.client["step_seconds"])


def _measure_variant(rec: Recording, run: dict[str, Any]) -> Variant:
    name, job = run["variant"], run["job"]
    preempted_at = datetime.fromisoformat(run["preempted_at"]).astimezone(timezone.utc)
    pods: dict[str, dict[str, Any]] = {}
    for snap in rec.snapshots:
        for pod in snap.objects.get("pods", []):
            if (pod["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name") == job:
                pods[pod["metadata"]["name"]] = pod
    ordered = sorted(pods.values(), key=lambda x: x["metadata"]["creationTimestamp"])
    if not ordered:
        raise LabError(f"recording of run {rec.run_id} never saw a pod of job {job}")
    first, later = ordered[0], ordered[1:]
    first_log = parse_progress(rec.logs.get(first["metadata"]["name"], ""))
    # Logs were read until the pod died, so this includes steps run during the graceful shutdown.
    steps_before = first_log.steps[-1][0] + 1 if first_log.steps else 0
    replacement = next((x for x in later if parse_progress(rec.logs.get(x["metadata"]["name"], "")).steps), None)
    resumed_at = reschedule = resume = lost = None
    if replacement is not None:
        prog = parse_progress(rec.logs[replacement["metadata"]["name"]])
        # A step the successor resumed after was done: a log whose last lines went with the node before they
        # were read cannot make the first pod's work look smaller than its checkpoint proves.
        steps_before = max(steps_before, 0 if prog.resumed_from is None else prog.resumed_from + 1)
        resumed_at = prog.steps[0][0]
        reschedule = seconds_between(preempted_at, condition_time(replacement, "PodScheduled"))
        resume = round(prog.steps[0][1] - preempted_at.timestamp(), 3)
        lost = steps_before - resumed_at
    t0 = parse_time(first["metadata"]["creationTimestamp"])
    series = [
        (t - t0.timestamp(), s)
        for x in ordered
        for s, t in parse_progress(rec.logs.get(x["metadata"]["name"], "")).steps
    ]
    jobs = [j for snap in rec.snapshots for j in snap.objects.get("jobs", []) if j["metadata"]["name"] == job]
    complete = condition_time(jobs[-1], "Complete") if jobs else None
    return Variant(
        name=name,
        checkpointing=VARIANTS.get(name, False),
        job=job,
        node=run.get("node"),
        preempted_at=preempted_at,
        preempted_by=run.get("preempted_by", MAINTENANCE_EVENT),
        steps_before=steps_before,
        last_checkpoint=max(first_log.checkpoints, default=None),
        resumed_at_step=resumed_at,
        steps_lost=lost,
        reschedule_s=reschedule,
        resume_s=resume,
        job_s=seconds_between(t0, complete),
        gpu_util_pct=scalar(run.get("dcgm")),
        step_series=sorted(series),
        preempted_s=round(preempted_at.timestamp() - t0.timestamp(), 3),
    )


def report_body(result: G8Result) -> str:
    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:.0f}"

    return "\n".join(
        [
            "## Preemption under a running job",
            "",
            f"Each step takes {result.step_seconds:g}s. " + _how_preempted(result),
            "",
            "| variant | steps before preemption | last checkpoint | resumed at step | steps lost | "
            "preemption -> pod scheduled (s) | preemption -> first step (s) | job total (s) | GPU util (DCGM, %) |",
            "|---|---|---|---|---|---|---|---|---|",
            *(
                f"| {v.name} | {v.steps_before} | {'-' if v.last_checkpoint is None else v.last_checkpoint} | "
                f"{'-' if v.resumed_at_step is None else v.resumed_at_step} | {'-' if v.steps_lost is None else v.steps_lost} | "
                f"{f(v.reschedule_s)} | {f(v.resume_s)} | {f(v.job_s)} | "
                f"{'-' if v.gpu_util_pct is None else v.gpu_util_pct} |"
                for v in result.variants
            ),
            "",
            "Steps lost = steps the first pod finished (including those run during the graceful shutdown) "
            "minus the step the replacement started at; the wall time lost is that times the step time, plus "
            "the time to resume. GPU utilisation is DCGM_FI_DEV_GPU_UTIL averaged over each variant's whole run, "
            "node boot and pod pending included (the share of time a kernel ran, not how much work it did). "
            "The checkpointing trainer also saves on SIGTERM, inside the ~30 s a Spot VM "
            "gets between the preemption notice and power-off: a hard kill would lose the steps since its "
            "last periodic checkpoint instead.",
        ]
    )


def _how_preempted(result: G8Result) -> str:
    commands = sorted({v.preempted_by for v in result.variants} - {MAINTENANCE_EVENT})
    if not commands:
        return (f"The node was preempted with `{MAINTENANCE_EVENT}` (a real Spot preemption path: shutdown notice, "
                "graceful node shutdown, VM recreated).")  # fmt: skip
    return (f"The node was preempted by `{'`, `'.join(commands)}` (--preempt-command), not by Compute Engine: "
            "what that command does to the node is the cluster's to say (its statement, above).")  # fmt: skip


def _panel(v: Variant) -> Panel:
    """The variant's steps as one line per pod, the preemption as a mark, the stall as a span."""
    points = [(t, float(s)) for t, s in v.step_series]
    if v.preempted_s is None or v.resume_s is None:
        return Panel(title=v.name, segments=[points])
    resumed = v.preempted_s + v.resume_s  # the replacement pod's first step
    cut = resumed - 0.01  # both figures are rounded to the millisecond: split short of that step, not through it
    lost = "" if v.steps_lost is None else f", {v.steps_lost} steps lost"
    return Panel(
        title=f"{v.name}: resumed at step {v.resumed_at_step}{lost}",
        segments=[seg for seg in ([p for p in points if p[0] < cut], [p for p in points if p[0] >= cut]) if seg],
        marks=[(v.preempted_s, "spot VM preempted")],
        spans=[(v.preempted_s, resumed, f"no progress: {v.resume_s:.0f}s to the first step of a new pod")],
    )


def plots(result: G8Result, folder: Path) -> list[str]:
    variants = [v for v in result.variants if v.step_series]
    if not variants:
        return []
    panels_plot([_panel(v) for v in variants], "Training progress through a spot preemption",
                "seconds since the job started", "step", folder / "progress.png")
    return ["progress.png"]


def run(args: argparse.Namespace) -> int:
    return live.run(sys.modules[__name__], args)


def main(argv: list[str] | None = None) -> int:
    return live.main(sys.modules[__name__], argv)
