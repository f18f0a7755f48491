"""Where a cold start's minutes go, phase by phase, from the API objects, events and logs of one pod.

Pure functions over objects as the Kubernetes API returns them: the pod (conditions, container
statuses), the node it landed on (creationTimestamp, Ready condition), the core/v1 Events about the
pod (cluster-autoscaler's TriggeredScaleUp / NotTriggerScaleUp / FailedScaleUp, default-scheduler's
FailedScheduling / Scheduled, the kubelet's Pulling / Pulled / Failed / BackOff), the model server's
start-up log, and the client's own send and first-token times. Shared by g6 (vLLM) and g5 (Triton).

Each phase ends at one observed moment and starts where the previous observed one ended, so the
phases of a run add up to its total. A moment that was not observed makes its phase skipped, with the
reason; the time then falls to the next phase that was. API times are whole seconds; the servers' log
lines too (vLLM's carry no year: it is the container's).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict

from benchmarks.kube.timeline import condition_time, event_time, parse_time


class Phase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    start: datetime | None
    end: datetime | None
    seconds: float | None
    skipped: str | None = None  # why there is no figure (the moment that ends it was not observed)


class ColdStartPhases(BaseModel):
    """One cold start: its phases in order, the total from the first start to the last end, and the
    named failure when it did not reach its last phase."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pod: str | None
    node: str | None
    node_was_up: bool  # the pod landed on a node that existed before it: no scale-up to time
    phases: list[Phase]
    total_s: float | None
    image_bytes: int | None  # the kubelet's "Image size" of the pull; None: no pull (or not reported)
    failure: str | None = None
    pull_s: float | None = None  # the kubelet's own pull time (its "in X", without the wait for a pull slot)

    def seconds(self, name: str) -> float | None:
        return next((p.seconds for p in self.phases if p.name == name), None)


class LogMarker(NamedTuple):
    """A model server's start-up log line that ends a phase."""

    phase: str
    pattern: re.Pattern[str]
    absent: str  # why the phase is skipped when the line is not in the log


class ServerLog(NamedTuple):
    """How one model server logs its start-up: the lines that end its phases, and their time stamps."""

    markers: tuple[LogMarker, ...]
    time: Callable[[str, datetime], datetime | None]  # a line's time; the container's start gives the year


# vLLM's logger format (vllm/logger.py of the pinned v0.11.2): "%(levelname)s %(asctime)s [file:line]
# %(message)s" with asctime "%m-%d %H:%M:%S", in the container's time zone (UTC: the image sets none);
# the API server's and engine core's lines carry a "(APIServer pid=N) " prefix in ANSI cyan
# (vllm/utils/system_utils.py decorate_logs), written whether or not the output is a terminal.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_VLLM_TIME = re.compile(r"^(?:\(\S+ pid=\d+\) )?(?:DEBUG|INFO|WARNING|ERROR) (\d\d-\d\d \d\d:\d\d:\d\d) ")
# Triton's glog prefix: "I1130 09:05:41.518712 1 file.cc:462] ..." (UTC in the NGC image).
_GLOG_TIME = re.compile(r"^[IWEF](\d{4} \d\d:\d\d:\d\d\.\d+) ")


def _with_year(text: str, fmt: str, started: datetime) -> datetime:
    """A log time without a year: the container start's, or the next one across New Year."""
    t = datetime.strptime(f"{started.year} {text}", f"%Y {fmt}").replace(tzinfo=timezone.utc)
    return t.replace(year=t.year + 1) if t < started - timedelta(days=1) else t


def vllm_time(line: str, started: datetime) -> datetime | None:
    m = _VLLM_TIME.match(_ANSI.sub("", line))
    return _with_year(m.group(1), "%m-%d %H:%M:%S", started) if m else None


def glog_time(line: str, started: datetime) -> datetime | None:
    m = _GLOG_TIME.match(line)
    return _with_year(m.group(1), "%m%d %H:%M:%S.%f", started) if m else None


# The messages of vLLM's start-up, in order, as the pinned release writes them
# (tests/data/vllm/v0.34.0/startup-messages.txt): the model runner as it starts loading, weight_utils'
# download_weights_from_hf (logged only when the download took over 0.5 s), the model runner once the
# weights are on the GPU, EngineCore after profiling, KV cache allocation, compilation and CUDA-graph
# capture. The load starts with "Loading model from scratch..." in the V2 model runner (v0.33.0's default
# for a server like ours, v0.34.0's only one); "Starting to load model" is the V1 runner's (v0.11.2, or
# v0.33.0 with VLLM_USE_V2_MODEL_RUNNER=0), read too so that an older image's start is not lost.
VLLM_LOG = ServerLog(
    markers=(
        LogMarker("server process up", re.compile(r"Loading model from scratch\.\.\.|Starting to load model "),
                  "vLLM never logged 'Loading model from scratch...' (nor the V1 runner's 'Starting to load model')"),
        LogMarker("weights downloaded", re.compile(r"Time spent downloading weights for "),
                  "no download logged: vLLM logs one only when it takes over 0.5 s (weights cached, or read "
                  "from a mounted bucket, are loaded without one)"),  # fmt: skip
        LogMarker("weights loaded", re.compile(r"Model loading took [0-9.]+ GiB memory"), "vLLM never logged 'Model loading took'"),
        LogMarker("engine warmed up", re.compile(r"init engine \(profile, create kv cache, warmup model\) took"),
                  "vLLM never logged 'init engine ... took'"),  # fmt: skip
    ),
    time=vllm_time,
)
# Triton (the g5 predictor): model_lifecycle.cc's "successfully loaded 'NAME'" once every model is up.
TRITON_LOG = ServerLog(
    markers=(LogMarker("model loaded", re.compile(r"successfully loaded '"), "Triton never logged 'successfully loaded'"),),
    time=glog_time,
)

# A model server whose start-up log the extractor does not read (g5's sklearn server): platform phases only.
NO_LOG = ServerLog(markers=(), time=lambda line, started: None)

# Phases every cold start has, before and after the model server's own.
BEFORE = ("pod created", "scale-up triggered", "node created", "node ready", "GPU allocatable", "pod sandbox",
          "image pulled", "container started")  # fmt: skip
AFTER = ("engine ready (/health)", "first token")


def phase_names(server: ServerLog) -> list[str]:
    return [*BEFORE, *(m.phase for m in server.markers), *AFTER]


_IMAGE_SIZE = re.compile(r"Image size: (\d+) bytes")
# The kubelet's Pulled message (pkg/kubelet/images/image_manager.go, unchanged in the releases read, to 1.35):
# `Successfully pulled image %q in %v (%v including waiting). Image size: %v bytes.`, each %v a Go
# time.Duration truncated to the millisecond (1m57.6s, 794ms).
_PULL_TIME = re.compile(r'^Successfully pulled image "[^"]*" in (\S+) \(')
_GO_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_GO_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)")


def go_seconds(text: str) -> float | None:
    """Seconds of a Go time.Duration as it prints (1h2m3.5s, 2m30.871s, 794.767ms); None if it is not one."""
    parts = _GO_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return round(sum(float(n) * _GO_UNIT_S[u] for n, u in parts), 6)
_PULL_FAILED = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")


def pod_events(events: list[dict[str, Any]], pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The events about `pod` (by uid where the event names one, else by name), oldest first; the API
    lists them in no promised order."""
    meta = pod.get("metadata") or {}
    mine = []
    for e in events:
        obj = e.get("involvedObject") or {}
        if obj.get("kind") != "Pod" or obj.get("name") != meta.get("name"):
            continue
        if obj.get("uid") and meta.get("uid") and obj["uid"] != meta["uid"]:
            continue  # an earlier pod of the same name
        mine.append(e)
    return sorted(mine, key=lambda e: _first_time(e) or datetime.min.replace(tzinfo=timezone.utc))


def _first_time(e: dict[str, Any]) -> datetime | None:
    """When the event first happened: a repeated event (count > 1) keeps its firstTimestamp."""
    return parse_time(e.get("firstTimestamp")) or event_time(e)


def _first(events: list[dict[str, Any]], reason: str, after: datetime | None = None,
           message: str | None = None) -> dict[str, Any] | None:  # fmt: skip
    for e in events:
        t = _first_time(e)
        if e.get("reason") != reason or (message is not None and message not in (e.get("message") or "")):
            continue
        if after is None or (t is not None and t >= after):
            return e
    return None


def _container(pod: dict[str, Any], name: str | None) -> dict[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((c for c in statuses if name is None or c.get("name") == name), {})


def _started_at(status: dict[str, Any]) -> datetime | None:
    """When the container first ran: its running state, or (after a restart) the last terminated one's start."""
    state, last = status.get("state") or {}, status.get("lastState") or {}
    starts = [parse_time((s.get("running") or s.get("terminated") or {}).get("startedAt")) for s in (last, state)]
    return next((t for t in starts if t is not None), None)


def failure(pod: dict[str, Any] | None, events: list[dict[str, Any]], container: str | None = None) -> str | None:
    """Why the cold start did not reach its server, named from the pod's events and statuses: a failed
    scale-up (quota, spot stock-out), an autoscaler that would not add a node, an image that does
    not pull, a server that keeps crashing, a pod never scheduled; None when nothing failed."""
    if pod is None:
        return "no pod was created (is the Deployment scaled up?)"
    status = _container(pod, container)
    waiting = ((status.get("state") or {}).get("waiting") or {})
    scheduled = condition_time(pod, "PodScheduled") is not None
    failed_up = [e for e in events if e.get("reason") == "FailedScaleUp"]
    if failed_up and not scheduled:
        msg = failed_up[-1].get("message", "")
        why = msg.split(" failed: ", 1)[-1].removesuffix(" Pod is at risk of not being scheduled.").rstrip(".")
        stock = " (a stock-out: no capacity for this machine type in the zone)" if "out of resources" in why else ""
        return f"the node scale-up failed (cluster-autoscaler FailedScaleUp): {why}{stock}"
    if not scheduled and _first(events, "TriggeredScaleUp") is None:
        no_up = [e for e in events if e.get("reason") == "NotTriggerScaleUp"]
        if no_up:
            return f"the autoscaler added no node (NotTriggerScaleUp): {no_up[-1].get('message', '')}"
    if waiting.get("reason") in _PULL_FAILED:
        # The kubelet's "Failed to pull image ...: <why>" says what is wrong; "Error: ErrImagePull" does not.
        pulls = [e for e in events if e.get("reason") == "Failed" and (e.get("message") or "").startswith("Failed to pull")]
        detail = (pulls[-1].get("message") if pulls else None) or waiting.get("message") or ""
        return f"the image did not pull ({waiting['reason']}): {detail}"
    if waiting.get("reason") == "CrashLoopBackOff":
        return f"the server keeps crashing (CrashLoopBackOff, {status.get('restartCount', 0)} restarts): read its log"
    if not scheduled:
        unsched = [e for e in events if e.get("reason") == "FailedScheduling"]
        if unsched:
            return f"the pod was never scheduled (FailedScheduling): {unsched[-1].get('message', '')}"
    return None


def extract(
    pod: dict[str, Any] | None,
    node: dict[str, Any] | None,
    events: list[dict[str, Any]],
    log: str,
    server: ServerLog,
    *,
    container: str | None = None,
    sent: datetime | None = None,
    first_token: datetime | None = None,
) -> ColdStartPhases:
    """The phases of one cold start. `events` may hold any events (those about the pod are picked);
    `sent` is when the client sent the request that waits (None: the pod's creation starts the
    clock), `first_token` when its first token came back (None: it never did)."""
    names = phase_names(server)
    if pod is None:
        skipped = [Phase(name=n, start=None, end=None, seconds=None, skipped="no pod") for n in names]
        return ColdStartPhases(pod=None, node=None, node_was_up=False, phases=skipped, total_s=None,
                               image_bytes=None, failure=failure(None, []))  # fmt: skip
    mine = pod_events(events, pod)
    created = parse_time(pod["metadata"].get("creationTimestamp"))
    node_created = parse_time(((node or {}).get("metadata") or {}).get("creationTimestamp"))
    node_was_up = node is not None and node_created is not None and created is not None and node_created <= created
    scheduled = condition_time(pod, "PodScheduled")
    status = _container(pod, container)
    started = _started_at(status)
    not_started = "the container never started" if status else "the pod holds no status of the container"
    pulling = _first(mine, "Pulling", after=scheduled)
    pulled = _first(mine, "Pulled", after=scheduled, message="Successfully pulled")
    present = _first(mine, "Pulled", message="already present on machine")
    size = _IMAGE_SIZE.search((pulled or {}).get("message") or "")
    took = _PULL_TIME.match((pulled or {}).get("message") or "")
    up = (None, "the pod landed on a node that was already up: no scale-up") if node_was_up else None
    no_node = None if node is not None else (None, "no node came up for the pod")

    ends: dict[str, tuple[datetime | None, str]] = {
        "pod created": (created, "the pod has no creationTimestamp") if sent is not None else
        (None, "no request time: the clock starts at the pod's creation"),
        "scale-up triggered": up or (_time(_first(mine, "TriggeredScaleUp")), "no TriggeredScaleUp event"),
        "node created": up or no_node or (node_created, "the node has no creationTimestamp"),
        "node ready": up or no_node or (condition_time(node or {}, "Ready"), "the node never became Ready"),
        # The scheduler binds a pod asking for a GPU only to a node whose nvidia.com/gpu is allocatable,
        # i.e. once the driver is installed and the device plugin has registered.
        "GPU allocatable": (scheduled, "the pod was never scheduled"),
        "pod sandbox": (_time(pulling), "no pull started" if present is None else "no pull: the image was already on the node"),
        "image pulled": (_time(pulled), "no pull finished" if present is None else "no pull: the image was already on the node"),
        "container started": (started, not_started),
    }
    if started is not None:
        for marker in server.markers:
            line = next((x for x in log.splitlines() if marker.pattern.search(x)), None)
            ends[marker.phase] = (None if line is None else server.time(line, started), marker.absent)
    ends["engine ready (/health)"] = (condition_time(pod, "Ready"), "the pod never became Ready (its /health probe)")
    ends["first token"] = (first_token, "no first token (no request, or it failed)")

    origin = sent if sent is not None else created
    phases, last = [], origin
    for name in names:
        end, why = ends.get(name) or (None, not_started)
        if end is None or last is None:
            phases.append(Phase(name=name, start=None, end=None, seconds=None, skipped=why))
            continue
        # Whole-second API times can put a moment a fraction before the one it follows: no negative phase.
        end = max(end, last)
        phases.append(Phase(name=name, start=last, end=end, seconds=round((end - last).total_seconds(), 3)))
        last = end
    total = None if origin is None or last is None else round((last - origin).total_seconds(), 3)
    return ColdStartPhases(
        pod=pod["metadata"]["name"],
        node=(pod.get("spec") or {}).get("nodeName"),
        node_was_up=node_was_up,
        phases=phases,
        total_s=total,
        image_bytes=int(size.group(1)) if size else None,
        failure=failure(pod, mine, container),
        pull_s=go_seconds(took.group(1)) if took else None,
    )


def _time(event: dict[str, Any] | None) -> datetime | None:
    return None if event is None else _first_time(event)
