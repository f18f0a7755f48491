"""`--experiment autoscale`: the vLLM fleet KEDA scales on its queue, under a burst of traffic, against one
fixed replica under the same burst.

Each arm sends one open-loop schedule (benchmarks.loadgen: Poisson arrivals whose rate follows it): the
base rate for `lead_seconds`, a step or a linear rise to the peak rate, the peak for `burst_seconds`, then
quiet. The **fixed** arm pauses the ScaledObject at one replica (KEDA's own annotation, removed however
the run ends); the **autoscaled** arm starts from the fleet at its floor and, once its requests have
ended, watches until the fleet is back at its floor and its extra GPU nodes are gone (the scale-down
window and the node autoscaler's removal: the tail the burst pays for).

Meanwhile a watcher reads the cluster every `watch_s`: the Deployment's desired and ready replicas, the
pods (each one's object when it turned Ready, and vLLM's log then), the GPU pool's nodes, and the HPA KEDA
made (the replicas it wants and the queue per replica it acted on). What was seen is kept as the arm's
record; everything the report says comes from the records alone (`summarise`), on one time axis: seconds
from the arm's first scheduled arrival, on the client's wall clock and the API server's.

The floor is one replica (the platform refuses 0: with no server nothing reports a queue), so the first
requests of the burst meet one warm replica; what they wait for is the new replicas' start, phase by
phase (benchmarks.kube.phases, as the cold-start experiment measures it).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from benchmarks.cluster import Cluster, KubeApiError
from benchmarks.g6.errors import G6Error
from benchmarks.g6.experiments.cold_start import CONTAINER, Where, _gpu_nodes, _pods, deployment
from benchmarks.g6.result import ExperimentResult, GpuPrice
from benchmarks.g6.config import G6Params
from benchmarks.g6.sweep import Measurement, Outcome, Target, interruptible, load_spec, point_seed
from benchmarks.g6.targets import ServerSettings
from benchmarks.harness import RunMeta
from benchmarks.harness.signals import shielded
from benchmarks.kube.phases import VLLM_LOG, ColdStartPhases, extract, failure, pod_events
from benchmarks.kube.timeline import condition_time, parse_time
from benchmarks.loadgen import LoadRun, Slo
from benchmarks.loadgen.core import arrival_offsets
from benchmarks.loadgen.spec import scheduled_requests
from benchmarks.loadgen.stats import meets_slo
from benchmarks.metrics import MetricsError, PrometheusClient

Arm = Literal["fixed", "autoscaled"]
SCALED_OBJECT = ("keda.sh/v1alpha1", "ScaledObject")
HPA = ("autoscaling/v2", "HorizontalPodAutoscaler")
# KEDA's apis/keda/v1alpha1/scaledobject_types.go (PausedReplicasAnnotation): scale to this and stop.
PAUSED_REPLICAS = "autoscaling.keda.sh/paused-replicas"
# How long the node autoscaler leaves an empty node before removing it (cluster-autoscaler's
# --scale-down-unneeded-time default, which GKE's balanced profile keeps), plus its scan and the VM's deletion.
NODE_REMOVAL_S = 600 + 120
QUEUE_STEP_S = 5.0  # the queue's resolution from Prometheus (which scrapes the servers every 15 s)


class ScalingPolicy(BaseModel):
    """outputs.benchmark.autoscaling of a g6 stack with autoscaling on (stacks/compose_serving.py)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    scaled_object: str
    metric: str  # vllm:num_requests_waiting or vllm:num_requests_running
    query: str  # the trigger's PromQL: the whole fleet's value
    target: float  # per replica
    min_replicas: int
    max_replicas: int
    polling_interval_s: int
    scale_up_stabilization_s: int
    scale_down_stabilization_s: int


class AutoscaleParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    peak_rate: float = Field(gt=0, description="requests/s at the top of the burst")
    base_rate: float = Field(0.5, ge=0, description="requests/s before the burst")
    lead_seconds: float = Field(60.0, ge=0, description="seconds at the base rate before the rise")
    rise_seconds: float = Field(0.0, ge=0, description="seconds from base to peak: 0 is a step, more a linear ramp")
    burst_seconds: float = Field(600.0, gt=0, description="seconds at the peak; then no traffic")
    arms: list[Arm] = Field(["fixed", "autoscaled"], min_length=1)
    # How requests meet the Service, which balances connections: on the one freed last, or each its own.
    connections: Literal["reuse", "per-request"] = "reuse"
    watch_s: float = Field(5.0, gt=0, description="how often the cluster is read")
    settle_timeout_s: float | None = Field(None, gt=0, description="longest wait for the fleet's floor after "
                                           "the burst (None: the scale-down window plus the node's removal)")  # fmt: skip

    def schedule(self) -> list[tuple[float, float]]:
        """(seconds, requests/s) knots of the arms' rate: base, rise, peak, then the schedule ends."""
        rise_at = self.lead_seconds
        knots = [(0.0, self.base_rate)] + ([(rise_at, self.base_rate)] if rise_at > 0 else [])
        return knots + [(rise_at + self.rise_seconds, self.peak_rate),
                        (rise_at + self.rise_seconds + self.burst_seconds, self.peak_rate)]  # fmt: skip

    @property
    def burst_at_s(self) -> float:
        """When the rate starts to leave the base, seconds from the arm's start."""
        return self.lead_seconds

    def settle_s(self, policy: ScalingPolicy) -> float:
        return self.settle_timeout_s or policy.scale_down_stabilization_s + NODE_REMOVAL_S


class Sample(BaseModel):
    """The fleet as one read of the cluster saw it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    at: datetime
    desired: int  # the Deployment's spec.replicas: what the HPA (or the pause) set
    pods: int  # its pods not being deleted
    pending: int  # of those, not yet scheduled: waiting for a GPU
    ready: int  # of those, Ready: in the Service's endpoints, serving
    gpu_nodes: int
    hpa_desired: int | None  # None: no HPA (paused, or KEDA has not made it yet)
    hpa_metric: float | None  # the queue per replica the HPA last acted on (KEDA's value)


class RequestSeen(BaseModel):
    """One request as the client saw it, on the arm's time axis."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sent_s: float  # scheduled send, seconds from the arm's start
    ttft_ms: float | None
    e2e_ms: float
    output_tokens: int
    error: str | None
    slo_met: bool


class ArmRecord(BaseModel):
    """What one arm saw, raw: enough to measure it again."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    arm: Arm
    started: datetime  # the first scheduled arrival's offset 0, on the client's wall clock
    schedule: list[tuple[float, float]]
    planned_requests: int  # what the schedule sent: every one must come back counted
    floor: int
    requests: list[RequestSeen]
    samples: list[Sample]
    pods: list[dict[str, Any]]  # every pod of the Deployment seen, as last seen (Ready, when it was)
    logs: dict[str, str]  # vLLM's log of each pod that turned Ready, read then
    nodes: list[dict[str, Any]]  # every GPU node seen, as last seen
    events: list[dict[str, Any]]  # the namespace's events at the end
    queue: list[tuple[float, float]] = []  # (seconds, the trigger's query) from Prometheus; [] without one
    queue_by_pod: dict[str, list[tuple[float, float]]] = {}  # the same gauge, each replica's own
    settled_at_s: float | None = None  # back at the floor with no extra node (None: not within the wait)
    ended_s: float  # when the watcher stopped


class NewReplica(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    pod: str
    created_s: float
    ready_s: float | None
    phases: ColdStartPhases
    waiting_for: str | None  # why it never served (a quota, a failed scale-up), from its events


class ArmSummary(BaseModel):
    """An arm's figures, every one from its record."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    arm: Arm
    sent: int
    completed: int
    failed: dict[str, int]  # by the client's error
    lost: int  # planned but never counted by the client: must be 0
    slo_met: int
    goodput_rps: float | None  # requests within the SLO per second of arrivals
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    short_ttft_p99_ms: float | None  # requests sent while fewer replicas served than were wanted
    short_requests: int
    peak_desired: int
    peak_ready: int
    scale_ups: int  # times the replicas wanted rose from the floor (more than one in a burst: the fleet cycled)
    first_wanted_s: float | None  # more replicas wanted than the floor: the first read, or a new pod's creation
    first_served_s: float | None  # more replicas ready than the floor: the first read, or a new pod's Ready
    replica_minutes: float  # pods holding (or waiting for) a GPU, integrated over the arm
    extra_replica_minutes: float  # those above the floor: the burst's GPU time (one L4 each on GKE)
    extra_node_minutes: float  # GPU nodes above the arm's first count, integrated over the arm
    extra_cost_usd: float | None  # those node-minutes at the GPU node's hourly price
    settled: bool
    new_replicas: list[NewReplica]
    # Each replica's share of the fleet's queue (waiting requests x time over the arm): how the Service
    # spread the load; {} without Prometheus.
    queue_share: dict[str, float] = {}


class AutoscaleResult(ExperimentResult):
    autoscale: AutoscaleParams
    policy: ScalingPolicy
    arms: list[ArmRecord]
    summary: list[ArmSummary]


@dataclass
class AutoscaleOutcome(Outcome):
    params: AutoscaleParams | None = None
    policy: ScalingPolicy | None = None
    records: list[ArmRecord] = field(default_factory=list)

    @property
    def measured(self) -> int:
        return len(self.records)

    def done(self) -> str:
        return f"{self.measured} of {len(self.params.arms) if self.params else 0} arms"


def policy_of(outputs: dict[str, Any] | None) -> ScalingPolicy:
    """The stack's autoscaling policy; G6Error, naming the key, when the stack's vLLM is not autoscaled."""
    found = ((outputs or {}).get("benchmark") or {}).get("autoscaling")
    if not found:
        raise G6Error("--experiment autoscale needs a stack whose vLLM is autoscaled: outputs.benchmark.autoscaling "
                      "is empty (pulumi config set --path autoscaling.enabled true, then pulumi up)")  # fmt: skip
    policy = ScalingPolicy.model_validate(found)
    if policy.max_replicas <= policy.min_replicas:
        raise G6Error(f"--experiment autoscale: the fleet cannot grow (autoscaling.max_replicas {policy.max_replicas} is "
                      "its floor): raise max_replicas, and gpu_max_nodes with it, within your L4 quota")  # fmt: skip
    return policy


# Reading the cluster -----------------------------------------------------------------------------------


def _ready(pod: dict[str, Any]) -> bool:
    return condition_time(pod, "Ready") is not None


def _live(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _quantity(text: str | None) -> float | None:
    from kubernetes.utils import parse_quantity

    return None if text is None else float(parse_quantity(text))


def _hpa(cluster: Cluster, w: Where, policy: ScalingPolicy) -> dict[str, Any] | None:
    """The HPA KEDA keeps for the ScaledObject (its status names it; paused, there is none)."""
    so = next((s for s in cluster.list(*SCALED_OBJECT, w.namespace) if s["metadata"]["name"] == policy.scaled_object), None)
    name = ((so or {}).get("status") or {}).get("hpaName")
    return next((h for h in cluster.list(*HPA, w.namespace) if h["metadata"]["name"] == name), None) if name else None


class Watcher:
    """Reads the fleet every `interval_s` on a thread of its own until stopped, keeping every pod and node
    seen and each pod's log as it turned Ready (a pod scaled away takes its log with it)."""

    def __init__(self, cluster: Cluster, w: Where, policy: ScalingPolicy, interval_s: float,
                 log: Callable[[str], None], clock: Callable[[], datetime]) -> None:  # fmt: skip
        self.cluster, self.w, self.policy, self.interval_s, self.log, self.clock = cluster, w, policy, interval_s, log, clock
        self.samples: list[Sample] = []
        self.pods: dict[str, dict[str, Any]] = {}
        self.logs: dict[str, str] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="g6-autoscale-watch", daemon=True)

    def read(self) -> Sample:
        vllm = deployment(self.cluster, self.w)
        pods = _pods(self.cluster, self.w)
        nodes = _gpu_nodes(self.cluster, self.w)
        hpa = _hpa(self.cluster, self.w, self.policy)
        for p in pods:
            name = p["metadata"]["name"]
            if name in self.logs:
                continue  # kept as it was when it turned Ready: scaled away, it would lose that condition
            if _ready(p):
                self.logs[name] = self.cluster.pod_log(self.w.namespace, name, CONTAINER)
            self.pods[name] = p
        self.nodes.update({n["metadata"]["name"]: n for n in nodes})
        live = _live(pods)
        metrics = ((hpa or {}).get("status") or {}).get("currentMetrics") or []
        current = ((metrics[0].get("external") or {}).get("current") or {}) if metrics else {}
        sample = Sample(
            at=self.clock(), desired=int((vllm.get("spec") or {}).get("replicas") or 0), pods=len(live),
            pending=sum(1 for p in live if condition_time(p, "PodScheduled") is None),
            ready=sum(1 for p in live if _ready(p)), gpu_nodes=len(nodes),
            hpa_desired=None if hpa is None else int((hpa.get("status") or {}).get("desiredReplicas") or 0),
            hpa_metric=_quantity(current.get("averageValue")),
        )  # fmt: skip
        self.samples.append(sample)
        return sample

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.read()
            except KubeApiError as exc:  # one failed read is a gap in the timeline, not the end of the run
                self.errors.append(str(exc))

    def __enter__(self) -> Watcher:
        self.read()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def wait_for(self, what: str, done: Callable[[Sample], bool], timeout_s: float) -> bool:
        """Whether the fleet got to `what` within `timeout_s`, read on the watcher's own cadence; the fleet
        said each time it changes."""
        deadline, said = time.monotonic() + timeout_s, ""
        while not (self.samples and done(self.samples[-1])):
            if time.monotonic() >= deadline:
                return False
            seen = _fleet(self.samples[-1]) if self.samples else "not read yet"
            if seen != said:
                self.log(f"g6: autoscale: waiting for {what}: {seen}")
                said = seen
            time.sleep(self.interval_s)
        return True


def _fleet(s: Sample) -> str:
    return f"{s.desired} wanted, {s.ready} ready, {s.pending} waiting for a GPU, {s.gpu_nodes} GPU node(s)"


@contextmanager
def paused_at(cluster: Cluster, w: Where, policy: ScalingPolicy, replicas: int, log: Callable[[str], None]) -> Iterator[None]:
    """The ScaledObject paused at `replicas` (KEDA scales there and keeps no HPA), resumed however it ends."""
    so = policy.scaled_object
    cluster.patch(*SCALED_OBJECT, w.namespace, so, {"metadata": {"annotations": {PAUSED_REPLICAS: str(replicas)}}})
    try:
        yield
    finally:
        with shielded(lambda name: log(f"g6: {name} received; resuming the ScaledObject {so} first")):
            try:
                cluster.patch(*SCALED_OBJECT, w.namespace, so, {"metadata": {"annotations": {PAUSED_REPLICAS: None}}})
                log(f"g6: ScaledObject {w.namespace}/{so} autoscales again")
            except KubeApiError as exc:
                log(f"g6: FAILED to resume the ScaledObject ({exc}); finish it with: kubectl annotate scaledobject "
                    f"{so} -n {w.namespace} {PAUSED_REPLICAS}-")  # fmt: skip


# Running ----------------------------------------------------------------------------------------------


def now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Fleet:
    """Where the arms run: the cluster and its vLLM, the policy KEDA holds it to, the stack's Prometheus."""

    cluster: Cluster
    w: Where
    policy: ScalingPolicy
    prometheus: PrometheusClient | None
    clock: Callable[[], datetime] = now


def run_autoscale(params: G6Params, own: AutoscaleParams, target: Target, how: Measurement, fleet: Fleet,
                  outcome: AutoscaleOutcome, log: Callable[[str], None]) -> None:  # fmt: skip
    """Every arm into `outcome`; stops at Ctrl-C or SIGTERM with the arms it has (see `interruptible`)."""
    with interruptible(outcome), target.serving(ServerSettings()) as server:
        for arm in own.arms:
            outcome.records.append(one_arm(arm, params, own, server.base_url, how, fleet, outcome.errors, log))


def one_arm(arm: Arm, params: G6Params, own: AutoscaleParams, base_url: str, how: Measurement, fleet: Fleet,
            errors: list[str], log: Callable[[str], None]) -> ArmRecord:  # fmt: skip
    cluster, w, policy = fleet.cluster, fleet.w, fleet.policy
    floor = 1 if arm == "fixed" else policy.min_replicas
    schedule = own.schedule()
    spec = load_spec(params, base_url, schedule=schedule, requests=scheduled_requests(schedule), warmup=0,
                     duration_s=None, seed=point_seed(params.seed, "autoscale", arm), connections=own.connections)  # fmt: skip

    def at_floor(s: Sample) -> bool:
        # Paused, KEDA has removed its HPA: until then the HPA could still scale the fixed arm.
        paused = arm == "autoscaled" or s.hpa_desired is None
        return s.desired == floor and s.ready == floor and s.pods == floor and paused

    pause = paused_at(cluster, w, policy, 1, log) if arm == "fixed" else nullcontext()
    with pause, Watcher(cluster, w, policy, own.watch_s, log, fleet.clock) as watch:
        if not watch.wait_for(f"the fleet at its floor of {floor}", at_floor, own.settle_s(policy)):
            raise G6Error(f"autoscale {arm}: the fleet never settled at {floor} replica(s) ({_fleet(watch.samples[-1])})")
        nodes = watch.samples[-1].gpu_nodes
        log(f"g6: autoscale {arm}: {spec.requests} requests over {schedule[-1][0]:g} s, {own.base_rate:g} -> "
            f"{own.peak_rate:g} req/s from the fleet at {floor} ({nodes} GPU node(s))")  # fmt: skip
        run = how.runner.run(spec, how.progress.point(f"autoscale {arm}", spec.requests))
        started, seen = requests_seen(run, arrival_offsets(spec.plan()), params.slo)
        settled = None
        if arm == "autoscaled":
            back = watch.wait_for(f"the fleet back at {floor} replica(s) and {nodes} GPU node(s)",
                                  lambda s: at_floor(s) and s.gpu_nodes <= nodes, own.settle_s(policy))  # fmt: skip
            settled = _s(watch.samples[-1].at, started) if back else None
        events = cluster.list("v1", "Event", w.namespace)
    errors += [f"autoscale {arm}: reading the cluster: {e}" for e in dict.fromkeys(watch.errors)]
    ended = fleet.clock()
    before = [x for x in watch.samples if x.at <= started]
    samples = [x.model_copy(update={"at": started}) for x in before[-1:]] + [x for x in watch.samples if x.at > started]
    return ArmRecord(arm=arm, started=started, schedule=schedule, planned_requests=spec.requests, floor=floor,
                     requests=seen, samples=samples, pods=list(watch.pods.values()), logs=watch.logs,
                     nodes=list(watch.nodes.values()), events=events,
                     **_queues(fleet, started, ended, errors, arm), settled_at_s=settled,
                     ended_s=_s(ended, started) or 0.0)  # fmt: skip


def _queues(fleet: Fleet, started: datetime, ended: datetime, errors: list[str], arm: Arm) -> dict[str, Any]:
    """The trigger's own query over the arm from the stack's Prometheus (the value KEDA read), and the same
    gauge per replica (how the Service spread the requests)."""
    if fleet.prometheus is None:
        return {}
    zero, span = started.timestamp(), (started.timestamp(), ended.timestamp(), QUEUE_STEP_S)
    query = fleet.policy.query
    try:
        total = fleet.prometheus.query_range(query, *span)
        # The trigger sums over the server's pods (components/keda.py); kept apart by pod here.
        by_pod = fleet.prometheus.query_range_by(query.replace("sum(", "sum by (pod) (", 1), *span, "pod") \
            if query.startswith("sum(") else {}  # fmt: skip
    except (MetricsError, KubeApiError) as exc:
        errors.append(f"autoscale {arm}: the queue from Prometheus: {exc}")
        return {}
    return {"queue": [(round(t - zero, 3), v) for t, v in total],
            "queue_by_pod": {pod: [(round(t - zero, 3), v) for t, v in points] for pod, points in by_pod.items()}}


# Measuring from the records ----------------------------------------------------------------------------


def requests_seen(run: LoadRun, plan_offsets: list[float], slo: Slo) -> tuple[datetime, list[RequestSeen]]:
    """The arm's start on the client's wall clock, and every counted request on its time axis: offset 0
    is the schedule's own (a record's scheduled send less its planned offset)."""
    records = sorted(run.records, key=lambda r: r.i)
    zero = records[0].scheduled - plan_offsets[records[0].i] if records else 0.0
    started = datetime.fromtimestamp(zero + run.wall_offset, UTC)
    seen = [
        RequestSeen(sent_s=round(r.scheduled - zero, 4),
                    ttft_ms=None if r.first_token is None else round((r.first_token - r.scheduled) * 1000, 2),
                    e2e_ms=round((r.end - r.scheduled) * 1000, 2), output_tokens=r.output_tokens, error=r.error,
                    slo_met=r.ok and meets_slo(r, slo))
        for r in records
    ]  # fmt: skip
    return started, seen


def _s(at: datetime | None, started: datetime) -> float | None:
    return None if at is None else round((at - started).total_seconds(), 3)


def _integral(rec: ArmRecord, value: Callable[[Sample], float]) -> float:
    """Seconds x value over the arm: each read's value held until the next (to the watcher's last read)."""
    s = rec.samples
    return sum(value(a) * (b.at - a.at).total_seconds() for a, b in zip(s, s[1:]))


def _p99(values: list[float]) -> float | None:
    return round(float(np.percentile(values, 99)), 1) if values else None


def _short(rec: ArmRecord, sent_s: float) -> bool:
    """Whether fewer replicas served than were wanted at `sent_s` (the last read before it says)."""
    before = [x for x in rec.samples if _s(x.at, rec.started) <= sent_s]  # type: ignore[operator]
    return bool(before) and before[-1].ready < before[-1].desired


def new_replicas(rec: ArmRecord) -> list[NewReplica]:
    """Every pod created during the arm, with the phases of its start from its creation."""
    out = []
    nodes = {n["metadata"]["name"]: n for n in rec.nodes}
    for pod in sorted(rec.pods, key=lambda p: p["metadata"]["creationTimestamp"]):
        created = parse_time(pod["metadata"]["creationTimestamp"])
        if created is None or created < rec.started.replace(microsecond=0):
            continue
        name = pod["metadata"]["name"]
        node = nodes.get((pod.get("spec") or {}).get("nodeName") or "")
        phases = extract(pod, node, rec.events, rec.logs.get(name, ""), VLLM_LOG, container=CONTAINER)
        ready = condition_time(pod, "Ready")
        why = None if ready else failure(pod, pod_events(rec.events, pod), CONTAINER)
        out.append(NewReplica(pod=name, created_s=_s(created, rec.started), ready_s=_s(ready, rec.started),
                              phases=phases, waiting_for=why))  # fmt: skip
    return out


def autoscale_result(meta: RunMeta, params: G6Params, outcome: AutoscaleOutcome, price: GpuPrice | None,
                     cost: str | None) -> AutoscaleResult:  # fmt: skip
    assert outcome.params is not None and outcome.policy is not None
    summary = [summarise(r, price) for r in outcome.records]
    meta = meta.model_copy(update={"errors": [*meta.errors, *shortfalls(summary)]})
    return AutoscaleResult(meta=meta, params=params, gpu_price=price, cost=cost, autoscale=outcome.params,
                           policy=outcome.policy, arms=outcome.records, summary=summary)  # fmt: skip


def summarise(rec: ArmRecord, price: GpuPrice | None) -> ArmSummary:
    ok = [r for r in rec.requests if r.error is None]
    span = max((r.sent_s for r in rec.requests), default=0.0) - min((r.sent_s for r in rec.requests), default=0.0)
    ttfts = [r.ttft_ms for r in ok if r.ttft_ms is not None]
    short = [r for r in ok if r.ttft_ms is not None and _short(rec, r.sent_s)]
    first_node_count = rec.samples[0].gpu_nodes if rec.samples else 0
    extra_node_s = _integral(rec, lambda x: max(0, x.gpu_nodes - first_node_count))
    grown = new_replicas(rec)
    # The earliest the reads or the API's own times say (a pod's creation and Ready condition are whole
    # seconds, the reads every watch_s).
    wanted = min([_s(x.at, rec.started) for x in rec.samples if x.desired > rec.floor][:1] + [r.created_s for r in grown],
                 default=None)  # fmt: skip
    served = min([_s(x.at, rec.started) for x in rec.samples if x.ready > rec.floor][:1]
                 + [r.ready_s for r in grown if r.ready_s is not None], default=None)  # fmt: skip
    met = sum(r.slo_met for r in rec.requests)
    return ArmSummary(
        arm=rec.arm, sent=rec.planned_requests, completed=len(ok),
        failed=dict(sorted(Counter(r.error for r in rec.requests if r.error is not None).items())),
        lost=rec.planned_requests - len(rec.requests), slo_met=met, goodput_rps=round(met / span, 3) if span else None,
        ttft_p50_ms=round(float(np.percentile(ttfts, 50)), 1) if ttfts else None, ttft_p99_ms=_p99(ttfts),
        short_ttft_p99_ms=_p99([r.ttft_ms for r in short if r.ttft_ms is not None]), short_requests=len(short),
        peak_desired=max((x.desired for x in rec.samples), default=0),
        peak_ready=max((x.ready for x in rec.samples), default=0),
        scale_ups=sum(1 for a, b in zip(rec.samples, rec.samples[1:]) if a.desired <= rec.floor < b.desired),
        first_wanted_s=wanted, first_served_s=served,
        replica_minutes=round(_integral(rec, lambda x: x.pods) / 60, 2),
        extra_replica_minutes=round(_integral(rec, lambda x: max(0, x.pods - rec.floor)) / 60, 2),
        extra_node_minutes=round(extra_node_s / 60, 2),
        extra_cost_usd=None if price is None else round(extra_node_s / 3600 * price.gpu_node, 4),
        settled=rec.settled_at_s is not None, new_replicas=grown, queue_share=queue_share(rec),
    )  # fmt: skip


def queue_share(rec: ArmRecord) -> dict[str, float]:
    """Each replica's share of the queue's integral over the arm (trapezoids on Prometheus' steps)."""
    areas = {pod: sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in zip(points, points[1:]))
             for pod, points in rec.queue_by_pod.items()}  # fmt: skip
    total = sum(areas.values())
    return {pod: round(area / total, 3) for pod, area in sorted(areas.items())} if total > 0 else {}


def pending_label(why: str | None) -> str | None:
    """'pending: quota' for a replica the GPU pool had no room for (its node ceiling, or the project's GPU
    quota), so the report says so rather than hiding it behind a flat replica count."""
    if why is None:
        return None
    quota = "max node group size reached" in why or "quota" in why.lower()
    return "pending: quota" if quota else "pending"


def shortfalls(summary: list[ArmSummary]) -> list[str]:
    """What the report must not let pass quietly: a request lost, an arm that never settled."""
    out = []
    for a in summary:
        if a.lost:
            out.append(f"{a.arm}: {a.lost} of {a.sent} requests the schedule sent were never counted by the client")
        if a.arm == "autoscaled" and not a.settled:
            out.append("autoscaled: the fleet was not back at its floor (with no extra GPU node) when the wait "
                       "ended: its cost is a lower bound")  # fmt: skip
        for r in a.new_replicas:
            if r.waiting_for:
                out.append(f"{a.arm}: replica {r.pod} never served: {r.waiting_for}")
    return out
