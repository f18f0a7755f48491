"""What g5 and g7 share about InferenceServices: the in-cluster client Job, its log, the predictor's
access log, the Wilson interval, and reading an InferenceService's status."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from benchmarks.labs import images, objects
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


def client_job(
    name: str,
    namespace: str,
    node_selector: dict[str, str],
    gateway: dict[str, Any],
    host: str,
    path: str,
    count: int,
    body: str = IRIS_BODY,
) -> list[dict[str, Any]]:
    """ConfigMap + Job running scripts/http_client.py against the Kourier gateway, on the nodes
    `node_selector` picks (the system pool's: benchmarks.labs.stack.system_selector)."""
    cm = objects.scripts_config_map(f"{name}-scripts", namespace, ["http_client.py"])
    env = {
        "TARGET": f"http://{gateway['service']}.{gateway['namespace']}.svc.cluster.local:{gateway['port']}",
        "HOST": host,
        "PATH_": path,
        "BODY": body,
        "COUNT": str(count),
        "TIMEOUT_S": "1200",
    }
    # No CPU limit: the client times each response (podspec.security.WAIVERS).
    spec = objects.pod_spec(
        [objects.container("client", images.PYTHON, ["python", f"{objects.SCRIPT_MOUNT}/http_client.py"], env=env,
                           requests={"cpu": "100m", "memory": "64Mi"}, limits={"memory": "256Mi"}, with_scripts=True)],
        node_selector=node_selector,
        scripts_config_map=cm["metadata"]["name"],
    )
    return [cm, objects.job(name, namespace, spec)]


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
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in (isvc.get("status") or {}).get("conditions") or [])
