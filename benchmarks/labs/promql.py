"""PromQL instant queries against the stack's in-cluster Prometheus, reached through the API server's
service proxy (no port-forward), and the pure parsing of Prometheus' HTTP API answers.

The harness's PrometheusClient (benchmarks.metrics) reads a URL the client can reach and returns one
number per query; the lab checks need the label sets (which node a DCGM series belongs to) and reach
Prometheus through the API server, so they use this small reader instead.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict

from benchmarks.cluster import Cluster
from benchmarks.harness import PrometheusRef
from benchmarks.labs.errors import LabError


class Sample(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    labels: dict[str, str]
    value: float


def query(cluster: Cluster, target: PrometheusRef, promql: str) -> dict[str, Any]:
    """The raw JSON answer of GET /api/v1/query (kept as is in recordings)."""
    text = cluster.service_get(target.namespace, target.service, target.port, "api/v1/query", {"query": promql})
    return json.loads(text)


def vector(answer: dict[str, Any]) -> list[Sample]:
    """Samples of an instant-vector answer; a Prometheus error becomes a LabError with its message."""
    if answer.get("status") != "success":
        raise LabError(f"Prometheus answered {answer.get('errorType', 'error')}: {answer.get('error', answer)}")
    data = answer.get("data") or {}
    if data.get("resultType") != "vector":
        raise LabError(f"expected an instant vector from Prometheus, got {data.get('resultType')!r}")
    return [Sample(labels=r["metric"], value=float(r["value"][1])) for r in data.get("result", [])]


def gpu_util_query(seconds: int) -> str:
    """DCGM GPU utilisation (% of time a kernel ran) averaged over the last `seconds`, over all GPUs."""
    return f"avg(avg_over_time(DCGM_FI_DEV_GPU_UTIL[{max(1, seconds)}s]))"


def scalar(answer: dict[str, Any] | None) -> float | None:
    """The single value of a one-sample answer (an aggregate), or None if it has none or failed."""
    if not answer or answer.get("status") != "success":
        return None
    samples = vector(answer)
    return round(samples[0].value, 1) if samples else None
