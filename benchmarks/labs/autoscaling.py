"""The g5 load phase measured: a request-rate ramp against a Knative-autoscaled predictor, read from the
in-cluster client's log and the PodAutoscaler/Deployment objects the benchmark polled.

Pure functions over a recording. Replica counts come from Knative's PodAutoscaler (status.desiredScale:
what the autoscaler wants; status.actualScale: pods it counts) and the revision's Deployment
(spec.replicas, status.readyReplicas), summed over the InferenceService's revisions. Times are seconds
from the ramp's start on the client's clock; an object's change is dated when the benchmark saw it
(polled every few seconds from the benchmark's machine).

What the autoscaler does, from Knative Serving 1.21.1's defaults (pkg/autoscaler/config/config.go,
pkg/autoscaler/scaling/multiscaler.go): it decides every 2 s; desired replicas = ceil(observed metric /
(target x 0.7 target utilisation)), averaged over a 60 s stable window; when the 6 s panic window (10 %
of it) asks for at least twice the ready pods it scales up at once and does not scale down for a
stable window; it removes at most half the pods per decision; the last pod goes once the revision has
seen no request for the stable window and then the scale-to-zero grace period (or the pod retention
period, if longer) has passed (pkg/reconciler/autoscaling/kpa/scaler.go).
"""

from __future__ import annotations

import json
import math
from typing import Any

from benchmarks.kube.record import Snapshot
from benchmarks.labs.result import Frozen
from benchmarks.loadgen.stats import Summary, summarize_ms

PODAUTOSCALER = ("autoscaling.internal.knative.dev/v1alpha1", "PodAutoscaler")
DEPLOYMENT = ("apps/v1", "Deployment")
TARGET_UTILIZATION = 0.7
STABLE_WINDOW_S = 60.0
COLD_STEP = -1  # the client's step index of the request that wakes the predictor from zero
LATENCY_BUCKET_S = 5.0


class RampPlan(Frozen):
    t0: float  # epoch seconds (client clock) when the first step began
    rates: list[float]  # requests per second, one per step
    step_s: float

    @property
    def end_s(self) -> float:
        return len(self.rates) * self.step_s

    def previous_rate(self, step: int) -> float:
        """The rate before `step` (the ramp starts from no load)."""
        return self.rates[step - 1] if step > 0 else 0.0


class RampRequest(Frozen):
    i: int
    step: int
    t_sched: float
    t_send: float | None
    t_first_byte: float | None
    t_done: float | None
    status: int | None
    error: str | None

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.t_done is not None

    @property
    def latency_s(self) -> float | None:
        """From the scheduled send time, so a late send counts against the server, not for it."""
        return None if self.t_done is None else self.t_done - self.t_sched


class RampLog(Frozen):
    plan: RampPlan | None
    requests: list[RampRequest]
    ended_at: float | None  # epoch; None when the client did not finish


def parse_ramp_log(text: str) -> RampLog:
    """The ramp client's JSON lines (benchmarks/labs/scripts/ramp_client.py); other lines are skipped."""
    plan, ended, requests = None, None, []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if obj.get("event") == "ramp":
            plan = RampPlan(t0=obj["t0"], rates=obj["rates"], step_s=obj["step_s"])
        elif obj.get("event") == "end":
            ended = obj["t"]
        elif "i" in obj:
            requests.append(RampRequest.model_validate(obj))
    return RampLog(plan=plan, requests=sorted(requests, key=lambda r: r.i), ended_at=ended)


class ReplicaSample(Frozen):
    """The InferenceService's replicas at one poll, summed over its revisions."""

    t: float  # seconds from the ramp's start
    desired: int  # PodAutoscaler status.desiredScale
    actual: int  # PodAutoscaler status.actualScale
    replicas: int  # Deployment spec.replicas
    ready: int  # Deployment status.readyReplicas
    revisions: list[str]


def replica_series(snapshots: list[Snapshot], t0: float) -> list[ReplicaSample]:
    """One sample per snapshot that holds PodAutoscalers (the load phase's polls), oldest first."""
    out = []
    for snap in sorted(snapshots, key=lambda s: s.at):
        if "podautoscalers" not in snap.objects:
            continue
        pas = snap.objects["podautoscalers"]
        deployments = snap.objects.get("deployments", [])
        out.append(
            ReplicaSample(
                t=round(snap.at.timestamp() - t0, 3),
                desired=sum(_int((pa.get("status") or {}).get("desiredScale")) for pa in pas),
                actual=sum(_int((pa.get("status") or {}).get("actualScale")) for pa in pas),
                replicas=sum(_int((d.get("spec") or {}).get("replicas")) for d in deployments),
                ready=sum(_int((d.get("status") or {}).get("readyReplicas")) for d in deployments),
                revisions=sorted(pa["metadata"]["name"] for pa in pas),
            )
        )
    return out


def _int(value: Any) -> int:
    return int(value or 0)


class ScaleStep(Frozen):
    """One change of the autoscaler's desired replicas, and the rate step it answered."""

    at_s: float  # seconds from the ramp's start
    from_replicas: int
    to_replicas: int
    cause: str
    cause_step: int | None  # index of the rate step; None for the cold request or the end of the ramp
    after_cause_s: float | None  # seconds after that step began (or after the ramp ended)
    ready_after_s: float | None  # seconds after the decision until ready replicas matched it; None: never seen


def scale_steps(series: list[ReplicaSample], plan: RampPlan) -> list[ScaleStep]:
    """Each change of desired replicas, attributed to the latest rate change in the same direction
    that preceded it: the step up that made it scale up, the step down (or the end of the ramp)
    that made it scale down."""
    out = []
    for prev, cur in zip(series, series[1:]):
        if cur.desired == prev.desired:
            continue
        up = cur.desired > prev.desired
        cause, step, since = _cause(cur.t, up, plan)
        out.append(
            ScaleStep(
                at_s=cur.t,
                from_replicas=prev.desired,
                to_replicas=cur.desired,
                cause=cause,
                cause_step=step,
                after_cause_s=None if since is None else round(cur.t - since, 3),
                ready_after_s=_ready_after(series, cur),
            )
        )
    return out


def _cause(t: float, up: bool, plan: RampPlan) -> tuple[str, int | None, float | None]:
    if t < 0:
        return "the cold-start request", None, None
    if not up and t >= plan.end_s:
        return f"the end of the ramp ({plan.rates[-1]:g} -> 0 rps)", None, plan.end_s
    for k in range(min(int(t // plan.step_s), len(plan.rates) - 1), -1, -1):
        before, rate = plan.previous_rate(k), plan.rates[k]
        if (rate > before) if up else (rate < before):
            return f"step {k + 1}: {before:g} -> {rate:g} rps", k, k * plan.step_s
    return "no rate change (the autoscaler settling)", None, None


def _ready_after(series: list[ReplicaSample], change: ReplicaSample) -> float | None:
    for s in series:
        if s.t < change.t:
            continue
        if s.desired != change.desired:
            return None  # overtaken by the next decision before the pods caught up
        if s.ready == change.desired and s.actual == change.desired:
            return round(s.t - change.t, 3)
    return None


def expected_replicas(rate: float, metric: str, target: int, max_replicas: int, latency_s: float | None) -> int:
    """Knative's steady state for a constant load: ceil(load / (target x utilisation)), within 1..max.
    Concurrency is rate x latency (Little's law)."""
    load = rate if metric == "rps" else rate * (latency_s or 0.0)
    return max(1, min(max_replicas, math.ceil(round(load / (target * TARGET_UTILIZATION), 9))))


class StepStats(Frozen):
    step: int
    rate: float
    start_s: float
    requests: int
    ok: int
    errors: int
    achieved_rps: float  # answered 200 per second of the step
    latency_ms: Summary | None  # of the requests answered 200, from their scheduled time
    expected_replicas: int  # Knative's steady state for this rate
    desired_at_end: int | None  # the autoscaler's desired replicas as the step ended
    peak_desired: int | None


def step_stats(
    requests: list[RampRequest], series: list[ReplicaSample], plan: RampPlan, metric: str, target: int, max_replicas: int
) -> list[StepStats]:
    out = []
    for k, rate in enumerate(plan.rates):
        mine = [r for r in requests if r.step == k]
        ok = [r for r in mine if r.ok]
        start, end = k * plan.step_s, (k + 1) * plan.step_s
        # The samples are changes: the count in force at the step's start holds until the next one.
        before = [s.desired for s in series if s.t <= start]
        during = before[-1:] + [s.desired for s in series if start < s.t < end]
        at_end = [s.desired for s in series if s.t < end]
        latencies = [r.latency_s for r in ok if r.latency_s is not None]
        median = sorted(latencies)[len(latencies) // 2] if latencies else None
        out.append(
            StepStats(
                step=k,
                rate=rate,
                start_s=start,
                requests=len(mine),
                ok=len(ok),
                errors=len(mine) - len(ok),
                achieved_rps=round(len(ok) / plan.step_s, 3),
                latency_ms=summarize_ms(latencies),
                expected_replicas=expected_replicas(rate, metric, target, max_replicas, median),
                desired_at_end=at_end[-1] if at_end else None,
                peak_desired=max(during) if during else None,
            )
        )
    return out


class ReturnToZero(Frozen):
    last_request_s: float  # when the last ramp request finished, from the ramp's start
    desired_zero_after_s: float | None  # the autoscaler's decision, after the last request
    replicas_zero_after_s: float | None  # Deployment scaled to 0 (the last pod told to go)
    actual_zero_after_s: float | None  # no pod counted any more
    expected_after_s: float  # stable window + max(grace, retention)


def return_to_zero(series: list[ReplicaSample], requests: list[RampRequest], plan: RampPlan, grace_s: float,
                   retention_s: float) -> ReturnToZero:
    done = [r.t_done for r in requests if r.t_done is not None and r.step != COLD_STEP]
    last = (max(done) - plan.t0) if done else plan.end_s

    def first(pred) -> float | None:
        hit = next((s.t for s in series if s.t >= last and pred(s)), None)
        return None if hit is None else round(hit - last, 3)

    return ReturnToZero(
        last_request_s=round(last, 3),
        desired_zero_after_s=first(lambda s: s.desired == 0),
        replicas_zero_after_s=first(lambda s: s.desired == 0 and s.replicas == 0),
        actual_zero_after_s=first(lambda s: s.desired == 0 and s.replicas == 0 and s.actual == 0),
        expected_after_s=STABLE_WINDOW_S + max(grace_s, retention_s),
    )


class LatencyBucket(Frozen):
    """Latency of the requests scheduled in one bucket of time (for the plot)."""

    start_s: float
    requests: int
    errors: int
    p50_ms: float | None
    p99_ms: float | None


def latency_buckets(requests: list[RampRequest], plan: RampPlan, width_s: float = LATENCY_BUCKET_S) -> list[LatencyBucket]:
    buckets: dict[int, list[RampRequest]] = {}
    for r in requests:
        if r.step != COLD_STEP:
            buckets.setdefault(int((r.t_sched - plan.t0) // width_s), []).append(r)
    out = []
    for b, rs in sorted(buckets.items()):
        summary = summarize_ms([r.latency_s for r in rs if r.ok and r.latency_s is not None])
        out.append(
            LatencyBucket(
                start_s=b * width_s,
                requests=len(rs),
                errors=sum(1 for r in rs if not r.ok),
                p50_ms=None if summary is None else round(summary.p50, 2),
                p99_ms=None if summary is None else round(summary.p99, 2),
            )
        )
    return out
