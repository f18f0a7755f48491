"""g5's load phase: a request-rate ramp from the in-cluster client against the predictor, starting from
zero replicas (and, for a GPU predictor, zero GPU nodes), watched through Knative's PodAutoscaler and the
revision's Deployment until it is back at zero; then its measurement, report section and plot.

Recording: the ramp client (scripts/ramp_client.py) logs every request; meanwhile the benchmark polls
the InferenceService's PodAutoscalers and Deployments, its pods and the GPU pool's nodes every
`--watch-interval` seconds and keeps a snapshot whenever what matters of them changed. The numbers come
from benchmarks.labs.autoscaling, pure functions over that recording.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from benchmarks.cluster import RUN_LABEL, WaitTimeout, wait_until
from benchmarks.kube.errors import LabError
from benchmarks.kube.record import Recording, Snapshot
from benchmarks.kube.stack import LabParams, gpu_placement, lab_params
from benchmarks.kube.timeline import condition, phase
from benchmarks.labs.autoscaling import (
    COLD_STEP,
    DEPLOYMENT,
    PODAUTOSCALER,
    STABLE_WINDOW_S,
    LatencyBucket,
    RampPlan,
    ReplicaSample,
    ReturnToZero,
    ScaleStep,
    StepStats,
    latency_buckets,
    parse_ramp_log,
    replica_series,
    return_to_zero,
    scale_steps,
    step_stats,
)
from benchmarks.labs.live import LabSession, now
from benchmarks.labs.plotting import ramp_plot
from benchmarks.labs.result import Check, Frozen
from benchmarks.labs.serving import (
    ISVC_LABEL,
    MODEL_CONTAINER,
    ClientTarget,
    ColdStart,
    cold_start,
    ramp_job,
    triton_instances,
)

LAB = "g5"
# Up to 12 requests/s: enough to walk the example through 1..3 replicas at the shipped target of
# 4 requests/s per replica (2.8 at Knative's 70 % utilisation), little enough for one small client.
DEFAULT_RAMP = "1,4,8,12,8,4,1"
DEFAULT_STEP_S = 60.0


class LoadSettings(LabParams):
    """The autoscaler settings the stack exported in outputs.benchmark (a g5 stack of this version)."""

    inference_service: str
    inference_namespace: str
    runtime: Literal["sklearn", "triton"]
    served_model: str
    gpu_predictor: bool
    max_replicas: int
    scale_metric: Literal["concurrency", "rps"]
    scale_target: int
    scale_to_zero_grace_s: int
    scale_to_zero_retention_s: int
    request_timeout_s: int


class LoadPhase(Frozen):
    plan: RampPlan
    scale_metric: str
    scale_target: int
    max_replicas: int
    runtime: str
    cold_start: ColdStart | None
    cold_sent_s: float | None  # when the request from zero went out, from the ramp's start (negative)
    gpu_nodes_at_start: int | None  # GPU pool nodes when the first request went out (None: CPU predictor)
    requests: int
    errors: int
    client_finished: bool
    steps: list[StepStats]
    scale_steps: list[ScaleStep]
    series: list[ReplicaSample]
    latency: list[LatencyBucket]
    return_to_zero: ReturnToZero
    triton_instances: dict[str, list[str]]  # predictor pod -> where Triton placed each model instance


def settings(outputs: dict[str, Any]) -> LoadSettings:
    return lab_params(outputs, LAB, LoadSettings)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ramp", default=DEFAULT_RAMP, type=_rates,
                        help="requests/s of each step of the load ramp, comma-separated; 'none' skips the load phase "
                        "(default %(default)s)")
    parser.add_argument("--step-seconds", type=float, default=DEFAULT_STEP_S, help="length of each ramp step (default %(default)s)")
    parser.add_argument("--watch-interval", type=float, default=2.0,
                        help="seconds between polls of the autoscaler during the load phase (its decisions are 2 s "
                        "apart; default %(default)s)")
    parser.add_argument("--zero-gpu-nodes", action=argparse.BooleanOptionalAction, default=True,
                        help="with a GPU predictor, wait until the GPU pool has no node before the ramp, so the first "
                        "request measures a GPU node from zero (the autoscaler removes an idle node after about 10 min)")


def _rates(text: str) -> list[float]:
    if text.strip().lower() == "none":
        return []
    try:
        rates = [float(r) for r in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--ramp {text!r}: expected requests/s like 1,4,8 or 'none'") from None
    if not rates or any(r <= 0 or not math.isfinite(r) for r in rates):
        raise argparse.ArgumentTypeError(f"--ramp {text!r}: every rate must be a positive number of requests/s")
    return rates


class _Watcher:
    """Polls what the autoscaler does and keeps a snapshot whenever something that matters changed.
    managedFields are dropped: polled every 2 s they would dominate the recording and say nothing
    about scaling."""

    def __init__(self, session: LabSession, namespace: str, selector: str, gpu_selector: str | None):
        self.session, self.ns, self.selector, self.gpu_selector = session, namespace, selector, gpu_selector
        self.last: dict[str, Any] = {}
        self.zero = False
        self.summary = ""  # what the last poll saw, for the progress line

    def poll(self) -> bool:
        cluster = self.session.cluster
        pas = [_slim(o) for o in cluster.list(*PODAUTOSCALER, self.ns, self.selector)]
        deployments = [_slim(o) for o in cluster.list(*DEPLOYMENT, self.ns, self.selector)]
        pods = [_slim(o) for o in cluster.list("v1", "Pod", self.ns, self.selector)]
        nodes = [_slim(o) for o in cluster.list("v1", "Node", None, self.gpu_selector)] if self.gpu_selector else None
        self._keep("scale", _scale_key(pas, deployments), {"podautoscalers": pas, "deployments": deployments})
        self._keep("pods", _pods_key(pods), {"pods": pods})
        if nodes is not None:
            self._keep("nodes", _nodes_key(nodes), {"gpu_nodes": nodes})
        desired = sum(int((pa.get("status") or {}).get("desiredScale") or 0) for pa in pas)
        replicas = sum(int((d.get("spec") or {}).get("replicas") or 0) for d in deployments)
        ready = sum(int((d.get("status") or {}).get("readyReplicas") or 0) for d in deployments)
        self.zero = not pods and desired == 0 and replicas == 0
        self.summary = f"replicas: desired {desired}, ready {ready}; {len(pods)} predictor pod(s)"
        return self.zero

    def _keep(self, what: str, key: Any, objects: dict[str, list[dict[str, Any]]]) -> None:
        if self.last.get(what) != key:
            self.last[what] = key
            self.session.snapshots.append(Snapshot(at=now(), objects=objects))


def _slim(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {**obj, "metadata": meta}


def _scale_key(pas: list[dict[str, Any]], deployments: list[dict[str, Any]]) -> Any:
    def pa(o: dict[str, Any]) -> tuple:
        st = o.get("status") or {}
        active = condition(o, "Active") or {}
        return o["metadata"]["name"], st.get("desiredScale"), st.get("actualScale"), active.get("status")

    def dep(o: dict[str, Any]) -> tuple:
        st = o.get("status") or {}
        return o["metadata"]["name"], (o.get("spec") or {}).get("replicas"), st.get("readyReplicas"), st.get("replicas")

    return sorted(map(pa, pas)), sorted(map(dep, deployments))


def _pods_key(pods: list[dict[str, Any]]) -> Any:
    return sorted(
        (p["metadata"]["name"], phase(p), (p.get("spec") or {}).get("nodeName"),
         (condition(p, "Ready") or {}).get("status"), bool(p["metadata"].get("deletionTimestamp")))
        for p in pods
    )


def _nodes_key(nodes: list[dict[str, Any]]) -> Any:
    return sorted((n["metadata"]["name"], (condition(n, "Ready") or {}).get("status")) for n in nodes)


def record(session: LabSession, args: argparse.Namespace, target: ClientTarget, body: str,
           at_zero: Callable[[str], None]) -> None:
    """Run the ramp and watch the autoscaler until the predictor is back at zero. Fills the session's
    snapshots and logs; the client Job's name goes to session.client["load_job"]."""
    s = settings(session.outputs)
    cluster, ns = session.cluster, s.inference_namespace
    selector = f"{ISVC_LABEL}={s.inference_service}"
    gpu_selector = ",".join(f"{k}={v}" for k, v in gpu_placement(session.outputs)[0].items()) if s.gpu_predictor else None
    watcher = _Watcher(session, ns, selector, gpu_selector)
    at_zero("load ramp")
    if gpu_selector and args.zero_gpu_nodes:
        wait_until("load ramp: GPU pool at zero nodes", lambda: cluster.list("v1", "Node", None, gpu_selector),
                   lambda nodes: not nodes, args.timeout, interval_s=args.poll, progress=session.log,
                   describe=lambda nodes: f"{len(nodes)} GPU node(s) still up")
    watcher.poll()
    objs = ramp_job(f"g5-load-{session.run_id[-4:]}", target, body, args.ramp, args.step_seconds, s.request_timeout_s)
    for obj in objs:
        session.scope.create(obj)
    name = objs[-1]["metadata"]["name"]
    session.client["load_job"] = name
    run_selector = f"{RUN_LABEL}={session.run_id}"

    def finished() -> bool:
        watcher.poll()
        jobs = [j for j in cluster.list("batch/v1", "Job", ns, run_selector) if j["metadata"]["name"] == name]
        return bool(jobs) and any(condition(jobs[0], c) and condition(jobs[0], c).get("status") == "True"
                                  for c in ("Complete", "Failed"))

    ramp_s = len(args.ramp) * args.step_seconds
    wait_until("load ramp", finished, bool, args.timeout + ramp_s, interval_s=args.watch_interval, progress=session.log,
               describe=lambda _: watcher.summary)
    for pod in cluster.list("v1", "Pod", ns, f"batch.kubernetes.io/job-name={name}"):
        session.logs[pod["metadata"]["name"]] = cluster.pod_log(ns, pod["metadata"]["name"])
    if s.runtime == "triton":
        # Where Triton placed the model, from each live predictor's start-up log, before they scale away.
        for pod in cluster.list("v1", "Pod", ns, selector):
            session.logs[pod["metadata"]["name"]] = cluster.pod_log(ns, pod["metadata"]["name"], container=MODEL_CONTAINER)
    expected = STABLE_WINDOW_S + max(s.scale_to_zero_grace_s, s.scale_to_zero_retention_s)
    try:
        wait_until("load ramp: back to zero replicas", watcher.poll, bool, expected + 300, interval_s=args.watch_interval,
                   progress=session.log, describe=lambda _: watcher.summary)
    except WaitTimeout as e:  # the ramp's numbers stand; the report says zero was not seen
        session.notes.append(str(e))


def measure(rec: Recording) -> LoadPhase | None:
    job = rec.client.get("load_job")
    if not job:
        return None
    s = settings(rec.outputs)
    log = parse_ramp_log("".join(text for pod, text in rec.logs.items() if pod.startswith(f"{job}-")))
    if log.plan is None:
        raise LabError(f"the load client {job} logged no ramp start: see its log in recording.json")
    plan = log.plan
    series = replica_series(rec.snapshots, plan.t0)
    ramp = [r for r in log.requests if r.step != COLD_STEP]
    cold = next((r for r in log.requests if r.step == COLD_STEP), None)
    pods: dict[str, dict[str, Any]] = {}
    nodes = {n["metadata"]["name"]: n for n in rec.nodes}
    gpu_counts = []
    for snap in rec.snapshots:
        for pod in snap.objects.get("pods", []):
            # The pod as it served, not as it was going away (a terminating pod is no longer Ready).
            if not pod["metadata"].get("deletionTimestamp") or pod["metadata"]["name"] not in pods:
                pods[pod["metadata"]["name"]] = pod
        if "gpu_nodes" in snap.objects:
            nodes.update({n["metadata"]["name"]: n for n in snap.objects["gpu_nodes"]})
            if cold is not None and snap.at.timestamp() <= cold.t_sched:
                gpu_counts.append(len(snap.objects["gpu_nodes"]))
    return LoadPhase(
        plan=plan,
        scale_metric=s.scale_metric,
        scale_target=s.scale_target,
        max_replicas=s.max_replicas,
        runtime=s.runtime,
        cold_start=None if cold is None or cold.t_send is None else cold_start(
            0, cold.t_send, cold.t_first_byte, cold.status, cold.error, pods, nodes),
        cold_sent_s=None if cold is None or cold.t_send is None else round(cold.t_send - plan.t0, 3),
        gpu_nodes_at_start=gpu_counts[-1] if gpu_counts else None,
        requests=len(ramp),
        errors=sum(1 for r in ramp if not r.ok),
        client_finished=log.ended_at is not None,
        steps=step_stats(ramp, series, plan, s.scale_metric, s.scale_target, s.max_replicas),
        scale_steps=scale_steps(series, plan),
        series=series,
        latency=latency_buckets(ramp, plan),
        return_to_zero=return_to_zero(series, ramp, plan, s.scale_to_zero_grace_s, s.scale_to_zero_retention_s),
        triton_instances={pod: found for pod, text in rec.logs.items() if (found := triton_instances(text))},
    )


def checks(load: LoadPhase) -> list[Check]:
    out = []
    c = load.cold_start
    if c is not None:
        nodes = "" if load.gpu_nodes_at_start is None else f", {load.gpu_nodes_at_start} GPU node(s) when it was sent"
        first = c.stages.get("first byte")
        out.append(Check(
            name="the first request woke the predictor from zero",
            passed=c.status == 200,
            evidence=f"status {c.status or c.error}; first byte after {first:.1f}s{nodes}" if first is not None
            else f"status {c.status or c.error}{nodes}",
        ))
    peak_rate = max(load.plan.rates)
    want = max(st.expected_replicas for st in load.steps)
    peak = max((s.desired for s in load.series if 0 <= s.t < load.plan.end_s), default=0)
    out.append(Check(
        name="replicas followed the ramp up to Knative's steady state",
        passed=peak == want and all(s.desired <= load.max_replicas for s in load.series),
        evidence=f"peak desired {peak} replica(s) (max {load.max_replicas}); ceil({peak_rate:g} {load.scale_metric} / "
        f"({load.scale_target} x 70 %)) within 1..{load.max_replicas} = {want}; "
        f"{len(load.scale_steps)} scale step(s)",
    ))
    z = load.return_to_zero
    out.append(Check(
        name="back to zero replicas after the ramp",
        passed=z.actual_zero_after_s is not None,
        evidence=(f"no pod left {z.actual_zero_after_s:.0f}s after the last request (autoscaler decided 0 after "
                  f"{z.desired_zero_after_s:.0f}s; stable window + grace = {z.expected_after_s:.0f}s)")
        if z.actual_zero_after_s is not None and z.desired_zero_after_s is not None
        else "zero replicas not seen before the benchmark stopped watching",
    ))
    share = load.errors / load.requests if load.requests else 1.0
    out.append(Check(
        name="ramp requests answered (errors under 1 %)",
        passed=load.requests > 0 and share < 0.01 and load.client_finished,
        evidence=f"{load.requests - load.errors} of {load.requests} answered 200"
        + ("" if load.client_finished else "; the client did not finish its ramp"),
    ))
    if load.runtime == "triton":
        placed = sorted({i for found in load.triton_instances.values() for i in found})
        out.append(Check(
            name="Triton ran the model on the GPU",
            passed=bool(placed) and all(" on GPU " in i for i in placed),
            evidence=("Triton's start-up log: " + ", ".join(placed)) if placed else "no Triton start-up log was read",
        ))
    return out


def report(load: LoadPhase) -> str:
    p = load.plan
    lines = [
        "## Load ramp: replicas against request rate",
        "",
        f"Open-loop ramp from the in-cluster client: {', '.join(f'{r:g}' for r in p.rates)} requests/s, "
        f"{p.step_s:g} s each, after one request that woke the predictor from zero. Autoscaler: "
        f"{load.scale_metric} target {load.scale_target} per replica (Knative aims at 70 % of it), "
        f"1..{load.max_replicas} replicas while serving. Latency counts from each request's scheduled send time.",
        "",
    ]
    c = load.cold_start
    if c is not None:
        gpu = "" if load.gpu_nodes_at_start is None else f" with {load.gpu_nodes_at_start} GPU node(s) up"
        stages = ", ".join(f"{k} +{v:.1f}s" for k, v in sorted(c.stages.items(), key=lambda kv: kv[1] or 0) if v is not None)
        lines += [f"Cold start (zero replicas{gpu}): {stages} (pod {c.pod or '-'} on {c.node or '-'}).", ""]
    lines += [
        "| step | offered rps | requests | answered 200 | p50 ms | p99 ms | Knative's steady state | desired at step end |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for st in load.steps:
        lat = st.latency_ms
        lines.append(
            f"| {st.step + 1} | {st.rate:g} | {st.requests} | {st.ok} ({st.achieved_rps:.2f}/s) | "
            f"{'-' if lat is None else f'{lat.p50:.1f}'} | {'-' if lat is None else f'{lat.p99:.1f}'} | "
            f"{st.expected_replicas} | {'-' if st.desired_at_end is None else st.desired_at_end} |"
        )
    lines += [
        "",
        "Each change of the autoscaler's desired replicas, with the rate step that caused it (seconds from the ramp's "
        "start; replica changes are dated when the benchmark's poll saw them):",
        "",
        "| at (s) | desired replicas | caused by | after the cause (s) | ready after (s) |",
        "|---|---|---|---|---|",
    ]
    for s in load.scale_steps:
        lines.append(
            f"| {s.at_s:.1f} | {s.from_replicas} -> {s.to_replicas} | {s.cause} | "
            f"{'-' if s.after_cause_s is None else f'{s.after_cause_s:.1f}'} | "
            f"{'-' if s.ready_after_s is None else f'{s.ready_after_s:.1f}'} |"
        )
    z = load.return_to_zero
    lines += [
        "",
        f"Back to zero: the last request finished at {z.last_request_s:.1f} s; the autoscaler decided 0 replicas "
        f"{_after(z.desired_zero_after_s)}, the Deployment was scaled to 0 {_after(z.replicas_zero_after_s)} and the "
        f"last pod was gone {_after(z.actual_zero_after_s)} (expected: the {STABLE_WINDOW_S:.0f} s stable window, "
        f"then the grace period or pod retention: {z.expected_after_s:.0f} s).",
    ]
    if load.triton_instances:
        lines += ["", "Triton's model instances (from each predictor's start-up log): "
                  + "; ".join(f"{pod}: {', '.join(found)}" for pod, found in sorted(load.triton_instances.items()))]
    return "\n".join(lines)


def _after(seconds: float | None) -> str:
    return "(not seen)" if seconds is None else f"{seconds:.0f} s after it"


def plot(load: LoadPhase, folder: Path) -> list[str]:
    p = load.plan
    rate_steps = [(k * p.step_s, r) for k, r in enumerate(p.rates)] + [(p.end_s, 0.0)]
    if load.series:
        rate_steps.append((max(p.end_s, load.series[-1].t), 0.0))
    achieved = [(b.start_s + 2.5, (b.requests - b.errors) / 5.0) for b in load.latency]
    replicas = {
        "desired (PodAutoscaler)": [(s.t, s.desired) for s in load.series],
        "ready (Deployment)": [(s.t, s.ready) for s in load.series],
    }
    latency = {
        "p50 per 5 s": [(b.start_s + 2.5, b.p50_ms) for b in load.latency if b.p50_ms is not None],
        "p99 per 5 s": [(b.start_s + 2.5, b.p99_ms) for b in load.latency if b.p99_ms is not None],
    }
    marks = [(s.at_s, f"{s.from_replicas}->{s.to_replicas}") for s in load.scale_steps]
    c, cold = load.cold_start, {}
    if c is not None and load.cold_sent_s is not None and c.stages.get("first byte") is not None:
        cold = {"the request from zero (first byte)": [(load.cold_sent_s, 1000 * c.stages["first byte"])]}
    ramp_plot(rate_steps, achieved, replicas, latency, f"Load ramp ({load.scale_metric} target {load.scale_target})",
              folder / "load_ramp.png", marks, cold)
    return ["load_ramp.png"]
