"""`--experiment cold-start`: what the user waits for when the first request of a session meets a GPU
pool at zero, phase by phase, and what the settings that shorten it buy.

Each repeat: the vLLM Deployment is scaled to zero and the experiment waits until its pod is gone and
(unless the pool keeps a warm node) the GPU node too; then it scales the Deployment to one and, at
that instant, sends one request (max_tokens 1) through the API server's service proxy, again every
`poll_s` until vLLM answers. What it saw (the pod, its node, the Events about the pod, vLLM's log,
the send and answer times) is kept as a record (recording.json); the phases come from those records
alone (benchmarks.kube.phases), so a saved recording can be measured again without a cluster.

Settings (`--settings`), each put in place with `pulumi config set` + `pulumi up` as the other
experiments change the server, and restored when the run ends: the stack as configured, image
streaming from the Artifact Registry cache, weights from a Cloud Storage bucket, a warm pool. The
Deployment's replicas are put back too, however the run ends.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from benchmarks.cluster import Cluster, KubeApiError, wait_until
from benchmarks.g6.client import vllm_endpoint
from benchmarks.g6.config import G6Params
from benchmarks.g6.result import ExperimentResult, GpuPrice
from benchmarks.g6.sweep import Outcome, Target, interruptible
from benchmarks.g6.targets import ServerSettings
from benchmarks.harness import HarnessError, RunMeta
from benchmarks.harness.server import Server
from benchmarks.harness.signals import shielded
from benchmarks.kube.phases import VLLM_LOG, ColdStartPhases, Phase, extract, failure, pod_events
from benchmarks.kube.timeline import parse_time

Setting = Literal["as-configured", "image-streaming", "gcs-weights", "warm-pool"]
# What each setting changes in the stack's config (`pulumi config set --path KEY VALUE`).
SETTINGS: dict[str, ServerSettings] = {
    "as-configured": ServerSettings(),
    "image-streaming": ServerSettings(image_streaming=True),
    "gcs-weights": ServerSettings(weights="gcs"),
    "warm-pool": ServerSettings(gpu_min_nodes=1),
}
DEPLOYMENT = ("apps/v1", "Deployment")
CONTAINER = "vllm"  # components/vllm.py NAME
POD_SELECTOR = "app.kubernetes.io/name=vllm"
NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"  # GKE's label on every node of a pool


class ColdStartParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    settings: list[Setting] = Field(["as-configured"], min_length=1)
    repeats: int = Field(3, ge=1)
    timeout_s: float = Field(1800.0, gt=0, description="per wait: the node to go, the server to answer")
    poll_s: float = Field(2.0, gt=0, description="between requests while the server is not up, and between polls")


class ColdStartRecord(BaseModel):
    """What one cold start showed, as the API and the server returned it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    setting: str
    settings: dict[str, str | None]  # config key -> the value this setting put in place (None: unset)
    repeat: int
    warm_pool: bool  # the pool keeps a node: the experiment did not wait for it to go
    tail_s: float | None = None  # how long the previous node stayed after its pod was gone (the idle tail)
    sent: datetime
    first_token: datetime | None
    error: str | None = None  # why no answer came (a named failure, or the timeout)
    pod: dict[str, Any] | None
    node: dict[str, Any] | None
    events: list[dict[str, Any]]
    log: str


class ColdStartRecording(BaseModel):
    """Every record of a run, saved beside its result (recording.json)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = 1
    # "live", or what else made the records (a fixture built for the tests and the example says so).
    source: str = "live"
    records: list[ColdStartRecord]


class ColdStartRun(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    setting: str
    settings: dict[str, str | None]
    repeat: int
    phases: list[Phase]
    total_s: float | None
    # The GPU node's list price over the time it was up before the server answered (0: the node was
    # already up, its hours are the warm pool's); None without a price.
    cost_usd: float | None
    failure: str | None
    pod: str | None
    node: str | None
    node_was_up: bool
    image_bytes: int | None
    tail_s: float | None
    pull_s: float | None = None  # the kubelet's pull time (phases.ColdStartPhases.pull_s)


# --- Did image streaming take effect? -------------------------------------------------------------
# With streaming the kubelet's pull ends once the image's metadata is mounted: seconds, whatever the size.
# Without it the whole image crosses the network and is unpacked first, so the time scales with the size.
# A pull that moved the image faster than the node's network can carry it was streamed: 10 Gbit/s is the
# bandwidth of the g2-standard-4 (the lab's GPU node; larger G2 shapes have 16-100 Gbit/s, still far
# below a streamed pull's apparent rate of many GB/s). A pull slower than that and longer than
# STREAMED_PULL_MAX_S was a whole pull.
NODE_NETWORK_BYTES_PER_S = 10e9 / 8
STREAMED_PULL_MAX_S = 20.0
PullVerdict = Literal["streamed", "whole pull", "not known"]


def pull_verdict(run: ColdStartRun) -> PullVerdict | None:
    """How an image-streaming run's image came: None when nothing was pulled (or it is another setting)."""
    if run.setting != "image-streaming" or run.pull_s is None:
        return None
    if run.image_bytes is not None and run.image_bytes > run.pull_s * NODE_NETWORK_BYTES_PER_S:
        return "streamed"
    return "whole pull" if run.pull_s > STREAMED_PULL_MAX_S else "not known"


class SettingSummary(BaseModel):
    """One setting's cold starts: how many were asked, measured and served, and the served ones' total."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    setting: str
    asked: int
    measured: int
    served: int
    median_total_s: float | None = Field(description="the median wait of its served cold starts: its headline")
    min_total_s: float | None
    max_total_s: float | None


class ColdStartResult(ExperimentResult):
    cold_start: ColdStartParams
    source: str = "live"  # the recording's: "live", or a constructed fixture's own words
    runs: list[ColdStartRun]
    summary: list[SettingSummary] = []


def summarise(cs: ColdStartParams, runs: list[ColdStartRun]) -> list[SettingSummary]:
    """Every setting asked for (and any other the runs hold), in order."""
    out = []
    for setting in dict.fromkeys([*cs.settings, *(r.setting for r in runs)]):
        mine = [r for r in runs if r.setting == setting]
        totals = [r.total_s for r in mine if r.failure is None and r.total_s is not None]
        out.append(SettingSummary(setting=setting, asked=cs.repeats, measured=len(mine), served=len(totals),
                                  median_total_s=statistics.median(totals) if totals else None,
                                  min_total_s=min(totals, default=None), max_total_s=max(totals, default=None)))  # fmt: skip
    return out


def shortfalls(summary: list[SettingSummary], runs: list[ColdStartRun]) -> list[str]:
    """What the report's Errors must say: settings measured fewer times than asked, cold starts that failed."""
    lines = [f"{s.setting}: {s.measured} cold start(s) measured of the {s.asked} asked"
             for s in summary if s.measured < s.asked]  # fmt: skip
    lines += [f"{r.setting} repeat {r.repeat + 1} failed: {r.failure}" for r in runs if r.failure]
    return lines


@dataclass
class ColdStartOutcome(Outcome):
    params: ColdStartParams = field(default_factory=ColdStartParams)
    records: list[ColdStartRecord] = field(default_factory=list)
    source: str = "live"

    @property
    def planned(self) -> int:
        return len(self.params.settings) * self.params.repeats

    @property
    def measured(self) -> int:
        return len(self.records)

    def done(self) -> str:
        return f"{self.measured} of {self.planned} cold starts"


@dataclass(frozen=True)
class Where:
    """The stack's vLLM: its namespace and Deployment, and the GPU pool its node comes from."""

    namespace: str
    deployment: str
    gpu_pool: str  # a label selector of the pool's nodes
    min_nodes: int  # the stack's gpu_min_nodes: a warm node never goes


def where(outputs: dict[str, Any], namespace: str) -> Where:
    pool = outputs.get("gpu_pool") or {}
    # The pool's own node selector, as its pods use it (an existing cluster's pool has no GKE pool name).
    selector = pool.get("node_selector") or {NODEPOOL_LABEL: pool.get("name") or "gpu"}
    return Where(namespace=namespace, deployment=CONTAINER, gpu_pool=",".join(f"{k}={v}" for k, v in sorted(selector.items())),
                 min_nodes=int(pool.get("min_nodes") or 0))  # fmt: skip


def vllm_where(outputs: dict[str, Any] | None) -> Where:
    """The stack's vLLM Deployment and its GPU pool (a run that reads the cluster always names a stack)."""
    assert outputs is not None
    return where(outputs, vllm_endpoint(outputs).namespace)


def now() -> datetime:
    return datetime.now(UTC)


Clock = Callable[[], datetime]


def deployment(cluster: Cluster, w: Where) -> dict[str, Any]:
    """The stack's vLLM Deployment as the API has it; KubeApiError when the stack has none."""
    found = [d for d in cluster.list(*DEPLOYMENT, w.namespace) if d["metadata"]["name"] == w.deployment]
    if not found:
        raise KubeApiError(f"no Deployment {w.namespace}/{w.deployment}: is vllm.enabled in the stack?")
    return found[0]


def _replicas(cluster: Cluster, w: Where) -> int:
    return int((deployment(cluster, w).get("spec") or {}).get("replicas") or 0)


def _scale(cluster: Cluster, w: Where, replicas: int) -> None:
    cluster.patch(*DEPLOYMENT, w.namespace, w.deployment, {"spec": {"replicas": replicas}})


@contextmanager
def replicas_kept(cluster: Cluster, w: Where, log: Callable[[str], None]) -> Iterator[None]:
    """The Deployment's replicas as they were before the run, put back however it ends (a second
    Ctrl-C or SIGTERM does not stop that)."""
    original = _replicas(cluster, w)
    try:
        yield
    finally:
        with shielded(lambda name: log(f"g6: {name} received; putting {w.deployment}'s replicas back first")):
            try:
                _scale(cluster, w, original)
                log(f"g6: {w.namespace}/{w.deployment} back at {original} replica(s)")
            except KubeApiError as exc:
                log(f"g6: FAILED to put {w.namespace}/{w.deployment} back at {original} replica(s) ({exc}); "
                    f"finish it with: kubectl scale deployment/{w.deployment} -n {w.namespace} --replicas={original}")  # fmt: skip


def _pods(cluster: Cluster, w: Where) -> list[dict[str, Any]]:
    return cluster.list("v1", "Pod", w.namespace, POD_SELECTOR)


def _gpu_nodes(cluster: Cluster, w: Where) -> list[dict[str, Any]]:
    return cluster.list("v1", "Node", None, w.gpu_pool)


def _at_zero(cluster: Cluster, w: Where, warm: bool, cs: ColdStartParams, log: Callable[[str], None]) -> float | None:
    """Scale to zero and wait for the pod (and, from a pool at zero, the node) to go; the seconds the
    node stayed after its pod was gone, when the experiment saw it go."""
    _scale(cluster, w, 0)
    wait_until("vLLM scaled to zero", lambda: _pods(cluster, w), lambda pods: not pods, cs.timeout_s,
               interval_s=cs.poll_s, progress=log, describe=lambda pods: f"{len(pods)} pod(s)")  # fmt: skip
    if warm:
        return None
    gone_from = time.monotonic()
    wait_until("GPU node scaled away (the autoscaler removes it once unneeded, ~10 min)",
               lambda: _gpu_nodes(cluster, w), lambda ns: not ns, cs.timeout_s, interval_s=cs.poll_s,
               progress=log, describe=lambda ns: f"{len(ns)} node(s)")  # fmt: skip
    return round(time.monotonic() - gone_from, 1)


def _answer(server: Server, model: str, timeout_s: float) -> None:
    """One completion of one token; HarnessError while the server cannot answer."""
    text = server.post("/v1/completions", {"model": model, "prompt": "Hello", "max_tokens": 1}, timeout_s)
    try:
        if not json.loads(text).get("choices"):
            raise HarnessError(f"answer without choices: {text[:200]}")
    except ValueError as exc:
        raise HarnessError(f"answer is not JSON: {text[:200]}") from exc


def _fatal(cluster: Cluster, w: Where) -> str | None:
    """A named failure that ends the wait: an image that does not pull, a failed scale-up (the
    autoscaler retries after a back-off of minutes; the run does not wait for it), a crash loop.
    Unschedulable and NotTriggerScaleUp are what every pod from zero sees at first: not failures."""
    pods = _pods(cluster, w)
    if not pods:
        return None
    why = failure(pods[0], pod_events(cluster.list("v1", "Event", w.namespace), pods[0]), CONTAINER)
    return why if why and not why.startswith(("the pod was never scheduled", "the autoscaler added no node")) else None


def _first_token(server: Server, cluster: Cluster, w: Where, model: str, cs: ColdStartParams,
                 log: Callable[[str], None], clock: Clock) -> tuple[datetime | None, str | None]:  # fmt: skip
    """Ask every `poll_s` until vLLM answers; (when it answered, None) or (None, why it never did)."""
    deadline = time.monotonic() + cs.timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            _answer(server, model, cs.timeout_s)
            return clock(), None
        except HarnessError as exc:
            last = str(exc)
        fatal = _fatal(cluster, w)
        if fatal:
            return None, fatal
        log(f"  cold start: waiting ({cs.timeout_s - (deadline - time.monotonic()):.0f}s): {last[:120]}")
        time.sleep(cs.poll_s)
    return None, f"no answer within {cs.timeout_s:.0f}s (last: {last[:200]})"


Seen = tuple[dict[str, Any] | None, dict[str, Any] | None, list[dict[str, Any]], str]


def _seen(cluster: Cluster, w: Where, since: datetime | None) -> Seen:
    """The newest vLLM pod (created since `since`, the API's whole seconds), its node, the namespace's
    events and the server's log."""
    cut = None if since is None else since.replace(microsecond=0)
    pods = [p for p in _pods(cluster, w) if cut is None or (parse_time(p["metadata"].get("creationTimestamp")) or cut) >= cut]
    pod = max(pods, key=lambda p: p["metadata"]["creationTimestamp"], default=None)
    node_name = ((pod or {}).get("spec") or {}).get("nodeName")
    node = next((n for n in cluster.list("v1", "Node") if n["metadata"]["name"] == node_name), None)
    events = cluster.list("v1", "Event", w.namespace)
    log = ""
    if pod is not None and ((pod.get("status") or {}).get("containerStatuses") or [{}])[0].get("state", {}).get("running"):
        log = cluster.pod_log(w.namespace, pod["metadata"]["name"], CONTAINER)
    return pod, node, events, log


def one_cold_start(cluster: Cluster, w: Where, server: Server, model: str, setting: str, repeat: int,
                   cs: ColdStartParams, log: Callable[[str], None], clock: Clock = now) -> ColdStartRecord:  # fmt: skip
    warm = setting == "warm-pool" or w.min_nodes > 0
    tail = _at_zero(cluster, w, warm, cs, log)
    _scale(cluster, w, 1)
    sent = clock()
    log(f"g6: cold start {repeat + 1} ({setting}): scaled to one and sent the request at {sent:%H:%M:%S}")
    first, error = _first_token(server, cluster, w, model, cs, log, clock)
    pod, node, events, text = _seen(cluster, w, sent)
    return ColdStartRecord(setting=setting, settings=SETTINGS[setting].changes(), repeat=repeat, warm_pool=warm,
                           tail_s=tail, sent=sent, first_token=first, error=error, pod=pod, node=node,
                           events=events, log=text)  # fmt: skip


class FirstServing:
    """A target whose first server put in place is looked at once (its pod, node, events and log): the
    GPU node a sweep, kv or quant run had to bring up, for its report's "What the user waited for"."""

    def __init__(self, target: Target, cluster: Cluster, w: Where, log: Callable[[str], None]) -> None:
        self.target, self.cluster, self.w, self.log = target, cluster, w, log
        self._seen: Seen | None = None

    def session(self) -> AbstractContextManager[None]:
        return self.target.session()

    @contextmanager
    def serving(self, settings: ServerSettings) -> Iterator[Server]:
        with self.target.serving(settings) as server:
            if self._seen is None:
                try:
                    self._seen = _seen(self.cluster, self.w, None)
                except KubeApiError as exc:  # the section is a bonus: the run goes on without it
                    self.log(f"g6: the vLLM pod and its node could not be read ({exc}): no cold-start section")
                    self._seen = (None, None, [], "")
            yield server

    def waited(self, since: datetime) -> ColdStartPhases | None:
        """The phases of the first server's start when its node came up after `since`, else None."""
        if self._seen is None or self._seen[0] is None:
            return None
        pod, node, events, log = self._seen
        phases = extract(pod, node, events, log, VLLM_LOG, container=CONTAINER)
        created = parse_time(((node or {}).get("metadata") or {}).get("creationTimestamp"))
        brought_up = not phases.node_was_up and created is not None and created >= since.replace(microsecond=0)
        return phases if brought_up else None


@contextmanager
def _in_place(target: Target, settings: ServerSettings, server: Server) -> Iterator[Server]:
    """The server with `settings` put in place (config + `pulumi up`, which returns once it serves); the
    stack as configured is taken as it is, down or up: its pool may well be at zero already."""
    if not settings.changes():
        yield server
        return
    with target.serving(settings) as changed:
        yield changed


def run_cold_start(params: G6Params, target: Target, server: Server, cluster: Cluster, w: Where,
                   outcome: ColdStartOutcome, log: Callable[[str], None], clock: Clock = now) -> None:  # fmt: skip
    """Every setting's repeats; stops at Ctrl-C or SIGTERM with what it has (see `interruptible`).
    `server` is vLLM as this process reaches it; `clock` dates the request and its answer (the test
    seam: a recorded cluster's own times)."""
    cs = outcome.params
    with interruptible(outcome), replicas_kept(cluster, w, log):
        for setting in cs.settings:
            with _in_place(target, SETTINGS[setting], server) as serving:
                for repeat in range(cs.repeats):
                    outcome.records.append(
                        one_cold_start(cluster, w, serving, params.model, setting, repeat, cs, log, clock))


def measure(record: ColdStartRecord) -> ColdStartPhases:
    return extract(record.pod, record.node, record.events, record.log, VLLM_LOG, container=CONTAINER,
                   sent=record.sent, first_token=record.first_token)  # fmt: skip


def node_cost(phases: ColdStartPhases, price: GpuPrice | None) -> float | None:
    """The node's price over the time it was up before the server answered: from the node object's
    creation (the closest the API shows to the VM's start) to the last moment seen."""
    if price is None:
        return None
    if phases.node_was_up:
        return 0.0
    created = next((p.end for p in phases.phases if p.name == "node created"), None)
    last = next((p.end for p in reversed(phases.phases) if p.end is not None), None)
    if created is None or last is None:
        return 0.0  # no node came up: nothing billed
    return round((last - created).total_seconds() / 3600 * price.gpu_node, 4)


def to_run(record: ColdStartRecord, price: GpuPrice | None) -> ColdStartRun:
    phases = measure(record)
    return ColdStartRun(
        setting=record.setting, settings=record.settings, repeat=record.repeat, phases=phases.phases,
        total_s=phases.total_s, cost_usd=node_cost(phases, price), failure=phases.failure or record.error,
        pod=phases.pod, node=phases.node, node_was_up=phases.node_was_up, image_bytes=phases.image_bytes,
        tail_s=record.tail_s, pull_s=phases.pull_s,
    )  # fmt: skip


def cold_start_result(meta: RunMeta, params: G6Params, outcome: ColdStartOutcome, price: GpuPrice | None,
                      cost: str | None) -> ColdStartResult:  # fmt: skip
    runs = [to_run(r, price) for r in outcome.records]
    summary = summarise(outcome.params, runs)
    meta = meta.model_copy(update={"errors": [*meta.errors, *shortfalls(summary, runs)]})
    return ColdStartResult(meta=meta, params=params, cold_start=outcome.params, source=outcome.source, runs=runs,
                           summary=summary, gpu_price=price, cost=cost)  # fmt: skip


def recorded(recording: ColdStartRecording, poll_s: float) -> ColdStartOutcome:
    """A saved recording as the outcome of the run that made it: its settings and repeats from its records."""
    records = recording.records
    settings = list(dict.fromkeys(r.setting for r in records)) or ["as-configured"]
    repeats = max((r.repeat + 1 for r in records), default=1)
    return ColdStartOutcome(params=ColdStartParams(settings=settings, repeats=repeats, poll_s=poll_s),
                            records=records, source=recording.source)  # fmt: skip


def plan(outputs: dict[str, Any], w: Where, cs: ColdStartParams, stack: str | None) -> dict[str, Any]:
    """What the experiment will do, in order, without touching the cluster (--client-manifest)."""
    steps = []
    for setting in cs.settings:
        changes = SETTINGS[setting].changes()
        if changes:
            steps.append({"config": changes, "then": f"pulumi up -s {stack or 'STACK'}"})
        warm = setting == "warm-pool" or w.min_nodes > 0
        steps.append({
            "setting": setting, "repeats": cs.repeats,
            "each": [
                f"kubectl scale deployment/{w.deployment} -n {w.namespace} --replicas=0",
                "wait: no vLLM pod" + ("" if warm else f", no GPU pool node ({w.gpu_pool})"),
                f"kubectl scale deployment/{w.deployment} -n {w.namespace} --replicas=1",
                f"POST /v1/completions (max_tokens 1) every {cs.poll_s:g}s until it answers (at most {cs.timeout_s:.0f}s)",
                "read: the pod, its node, the namespace's Events, vLLM's log",
            ],
        })  # fmt: skip
    return {
        "experiment": "cold-start",
        "steps": steps,
        "restored_on_exit": {
            "replicas": f"deployment/{w.deployment} in {w.namespace} as it was before the run",
            "config": "every key a setting changed, then one `pulumi up`" if any(
                SETTINGS[s].changes() for s in cs.settings) else "nothing changed",
        },
        "cost": f"one GPU node from zero per repeat; the pool's nodes are {w.gpu_pool}, {outputs.get('gpu_pool', {}).get('machine_type', '?')}",
    }  # fmt: skip
