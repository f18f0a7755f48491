"""What g5 and g7 share about InferenceServices: the in-cluster client Jobs and their logs, the example
requests, what the model servers say (sklearn's access log, Triton's log and metrics), the Wilson
interval, and reading an InferenceService's status."""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timezone
from typing import Any

from benchmarks.kube import images, objects
from benchmarks.kube.errors import LabError
from benchmarks.kube.phases import NO_LOG, TRITON_LOG, ColdStartPhases, extract
from benchmarks.kube.timeline import condition, condition_time, parse_time
from benchmarks.labs import workloads
from benchmarks.labs.result import Frozen

ISVC = ("serving.kserve.io/v1beta1", "InferenceService")
ISVC_LABEL = "serving.kserve.io/inferenceservice"
REVISION_LABEL = "serving.knative.dev/revision"
# The model server's container in a predictor pod (KServe's constant; queue-proxy runs beside it).
MODEL_CONTAINER = "kserve-container"
# The iris example's input: two flowers, as in KServe's own sklearn example.
IRIS_BODY = json.dumps({"instances": [[6.8, 2.8, 4.8, 1.4], [6.0, 3.4, 4.5, 1.6]]})
# uvicorn's access log line of the KServe model server for a v1 predict call that returned 200.
_PREDICT_200 = re.compile(r'"POST /v1/models/[^ ]+(:|%3A)predict HTTP/1\.1" 200')
# The CIFAR-10 example's v2 input: one 3x32x32 image (a blank one: the content does not change the
# work), named and shaped as its config.pbtxt declares (INPUT__0, FP32, batch of 1).
CIFAR10_BODY = json.dumps(
    {"inputs": [{"name": "INPUT__0", "shape": [1, 3, 32, 32], "datatype": "FP32", "data": [0.0] * 3072}]},
    separators=(",", ":"),
)
# What each example model is sent: the iris flowers (v1 protocol), or the image (Triton, v2).
EXAMPLE_BODIES = {("kserve-v1", "iris"): IRIS_BODY, ("kserve-v2", "cifar10"): CIFAR10_BODY}
# Triton logs where each model instance runs as it loads (its backends' ModelInstanceInitialize line).
_TRITON_INSTANCE = re.compile(r"TRITONBACKEND_ModelInstanceInitialize: (\S+) \((\w+) device (\d+)\)")
_TRITON_SUCCESS = re.compile(r'^nv_inference_request_success\{([^}]*)\} ([0-9.eE+]+)$', re.M)
# Triton's port for Prometheus metrics (the runtime's prometheus.kserve.io/port annotation).
TRITON_METRICS_PORT = 8002


class Response(Frozen):
    """One request as the in-cluster client saw it (epoch seconds on the client's clock)."""

    i: int
    t_send: float
    t_first_byte: float | None
    t_done: float | None
    status: int | None
    error: str | None
    headers: dict[str, str]
    body: str


class ClientTarget(Frozen):
    """Where an in-cluster client Job runs (namespace, nodes: the system pool's selector from
    benchmarks.kube.stack.system_selector) and what it calls: the Kourier gateway with a route's Host
    header and path."""

    namespace: str
    node_selector: dict[str, str]
    gateway: dict[str, Any]
    host: str
    path: str


def client_job(name: str, target: ClientTarget, count: int, body: str = IRIS_BODY) -> list[dict[str, Any]]:
    """ConfigMap + Job running scripts/http_client.py: COUNT requests, one at a time."""
    return _gateway_client(name, target, "http_client.py", {"BODY": body, "COUNT": str(count), "TIMEOUT_S": "1200"})


def ramp_job(name: str, target: ClientTarget, body: str, rates: list[float], step_s: float, timeout_s: int) -> list[dict[str, Any]]:
    """ConfigMap + Job running scripts/ramp_client.py: one request from zero, then the rate ramp."""
    env = {"BODY": body, "RATES": ",".join(f"{r:g}" for r in rates), "STEP_S": f"{step_s:g}", "TIMEOUT_S": str(timeout_s)}
    return _gateway_client(name, target, "ramp_client.py", env, {"cpu": "250m", "memory": "128Mi"})


def _gateway_client(
    name: str, target: ClientTarget, script: str, env: dict[str, str], requests: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    cm = workloads.scripts_config_map(f"{name}-scripts", target.namespace, [script])
    gw = target.gateway
    env = {"TARGET": f"http://{gw['service']}.{gw['namespace']}.svc.cluster.local:{gw['port']}", "HOST": target.host,
           "PATH_": target.path, **env}
    # No CPU limit: the client times each response (podspec.security.WAIVERS).
    spec = objects.pod_spec(
        [objects.container("client", images.PYTHON, ["python", f"{objects.SCRIPT_MOUNT}/{script}"], env=env,
                           requests=requests or {"cpu": "100m", "memory": "64Mi"}, limits={"memory": "256Mi"},
                           with_scripts=True)],
        node_selector=target.node_selector,
        scripts_config_map=cm["metadata"]["name"],
    )
    return [cm, objects.job(name, target.namespace, spec)]


def parse_client_log(text: str) -> list[Response]:
    """The client's JSON lines; anything else in the log (warnings) is skipped."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(Response.model_validate_json(line))
            except ValueError:
                continue
    return out


def example_body(protocol: str, model: str) -> str:
    """The request body for the served example, or a LabError naming the ones the benchmark knows."""
    try:
        return EXAMPLE_BODIES[(protocol, model)]
    except KeyError:
        known = ", ".join(f"{m} ({p})" for p, m in EXAMPLE_BODIES)
        raise LabError(f"no example request for model {model!r} over {protocol}: the g5 benchmark knows {known}") from None


def triton_instances(log: str) -> list[str]:
    """Where Triton placed each model instance, e.g. 'cifar10_0 on GPU 0', from its start-up log."""
    return [f"{name} on {kind} {device}" for name, kind, device in _TRITON_INSTANCE.findall(log)]


def triton_success_count(metrics: str, model: str) -> int:
    """Successful inference requests of `model` (all versions) in Triton's Prometheus metrics text."""
    return sum(int(float(value)) for labels, value in _TRITON_SUCCESS.findall(metrics) if f'model="{model}"' in labels)


def predict_count(log: str) -> int:
    """Predict calls answered 200 in a model server's log."""
    return sum(1 for line in log.splitlines() if _PREDICT_200.search(line))


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials (95% by default), as fractions."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def traffic(isvc: dict[str, Any]) -> list[dict[str, Any]]:
    """status.components.predictor.traffic: which revision gets which percent."""
    return (((isvc.get("status") or {}).get("components") or {}).get("predictor") or {}).get("traffic") or []


def is_ready(isvc: dict[str, Any]) -> bool:
    return (condition(isvc, "Ready") or {}).get("status") == "True"


# The stages of a cold start, in the order they happen.
STAGES = ("pod created", "pod scheduled", "node ready", "container ready", "first byte")


class ColdStart(Frozen):
    repeat: int
    status: int | None
    error: str | None
    pod: str | None
    node: str | None
    node_was_up: bool
    stages: dict[str, float | None]  # stage -> seconds after the request was sent
    # The same wait phase by phase from the pod's events, statuses and the model server's log (the
    # shared extractor g6 uses); None in results written before it existed.
    phases: ColdStartPhases | None = None


def cold_start(
    repeat: int,
    t_send: float,
    t_first_byte: float | None,
    status: int | None,
    error: str | None,
    pods: dict[str, dict[str, Any]],
    nodes: dict[str, dict[str, Any]],
    events: list[dict[str, Any]] | None = None,
    logs: dict[str, str] | None = None,
    runtime: str = "sklearn",
) -> ColdStart:
    """The stages of one request that met zero replicas (client clock, epoch seconds), from the predictor
    pod it woke (the first one created at or after the send: the API server's times are whole seconds)
    and that pod's node; and its phases from `events` and the pod's log in `logs` (Triton's start-up
    lines end a phase of their own)."""
    sent = datetime.fromtimestamp(t_send, timezone.utc)
    woke = sorted(
        (x for x in pods.values() if (parse_time(x["metadata"]["creationTimestamp"]) or sent).timestamp() >= int(t_send)),
        key=lambda x: x["metadata"]["creationTimestamp"],
    )
    pod = woke[0] if woke else None
    node_name = (pod or {}).get("spec", {}).get("nodeName")
    node_ready = condition_time(nodes[node_name], "Ready") if node_name in nodes else None
    node_was_up = node_ready is None or node_ready <= sent

    def after(t: datetime | None) -> float | None:
        return None if t is None else round((t - sent).total_seconds(), 3)

    stages = {
        "pod created": after(parse_time(pod["metadata"]["creationTimestamp"])) if pod else None,
        "pod scheduled": after(condition_time(pod, "PodScheduled")) if pod else None,
        "node ready": None if node_was_up else after(node_ready),
        "container ready": after(condition_time(pod, "Ready")) if pod else None,
        "first byte": None if t_first_byte is None else round(t_first_byte - t_send, 3),
    }
    name = (pod or {}).get("metadata", {}).get("name")
    phases = None if pod is None else extract(
        pod, nodes.get(node_name or ""), events or [], (logs or {}).get(name or "", ""), TRITON_LOG if runtime == "triton" else NO_LOG,
        container=MODEL_CONTAINER, sent=sent,
        first_token=None if t_first_byte is None else datetime.fromtimestamp(t_first_byte, timezone.utc),
    )  # fmt: skip
    return ColdStart(repeat=repeat, status=status, error=error, pod=name, node=node_name, node_was_up=node_was_up,
                     stages=stages, phases=phases)  # fmt: skip
