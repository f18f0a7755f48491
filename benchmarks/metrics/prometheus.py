"""The kit's one Prometheus client: PromQL over Prometheus' HTTP API, through one of two transports.

- `HttpTransport`: a URL this process can reach (a local Prometheus, a port-forward, or the in-cluster
  URL when the client itself runs in the cluster).
- `ServiceProxy`: any Prometheus Service the stack outputs name (`outputs.prometheus`), reached through
  the Kubernetes API server's service proxy, so nothing is port-forwarded or exposed.

On top of either: instant queries evaluated at a time (a window's end, with a range equal to the
window: avg_over_time, max_over_time, increase), range queries for the series
plotted over time, the raw answer of an instant query (the lab benchmarks keep it as is in their
recordings), and the pure parsing of such an answer into labelled samples.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import httpx
from pydantic import BaseModel, ConfigDict

from benchmarks.harness.answers import body_text
from benchmarks.metrics.errors import MetricsError
from benchmarks.metrics.model import COUNTERS, GAUGES, MEANS, TTFT_BUCKETS, GaugeStats, Series, ServerMetrics, bucket_ms
from benchmarks.metrics.scrape import histogram_bucket

QUERY = "api/v1/query"
QUERY_RANGE = "api/v1/query_range"
Params = dict[str, str | float]


@dataclass(frozen=True)
class Reply:
    """What a transport got back for one GET."""

    status: int  # HTTP status
    body: dict[str, Any]  # the decoded JSON answer; {} when the server sent none
    text: str


class Transport(Protocol):
    where: str  # names the server in error messages

    def get(self, path: str, params: Params) -> Reply: ...


class HttpTransport:
    """GETs on a URL; `client` is a seam for tests (any httpx.Client with base_url set)."""

    def __init__(self, base_url: str, client: httpx.Client | None = None, timeout_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.where = f"Prometheus at {self.base_url}"
        self._client = client or httpx.Client(base_url=self.base_url, timeout=timeout_s)

    def get(self, path: str, params: Params) -> Reply:
        try:
            resp = self._client.get(path, params=params)
        except httpx.HTTPError as exc:
            raise MetricsError(f"{self.where} unreachable: {exc}") from exc
        body = resp.json() if resp.headers.get("content-type", "").startswith("application/json") else {}
        return Reply(status=resp.status_code, body=body, text=resp.text)


class ServiceGetter(Protocol):
    """The part of benchmarks.cluster.Cluster this transport uses."""

    def service_get(self, namespace: str, service: str, port: int, path: str, params: dict[str, str]) -> str: ...


class ServiceRef(Protocol):
    """A Service as the stack outputs name one (`outputs.prometheus`, an `outputs.endpoints` entry)."""

    namespace: str
    service: str
    port: int


class ServiceProxy:
    """GETs on a ClusterIP Service through the API server's service proxy.

    The cluster layer answers only 2xx replies; its errors (API server unreachable, no ready endpoint,
    no such service) reach the caller as the cluster layer raised them.
    """

    def __init__(self, cluster: ServiceGetter, target: ServiceRef) -> None:
        self._cluster = cluster
        self._service = (target.namespace, target.service, target.port)
        self.where = f"Prometheus service {target.namespace}/{target.service}:{target.port}"

    def get(self, path: str, params: Params) -> Reply:
        text = self._cluster.service_get(*self._service, path, {k: str(v) for k, v in params.items()})
        return Reply(status=200, body=json.loads(text), text=text)


def _said(reply: Reply) -> str:
    """Prometheus's own error, or what the answer was instead (never a whole web page)."""
    return str(reply.body["error"]) if "error" in reply.body else body_text(reply.text, 200)


class Sample(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    labels: dict[str, str]
    value: float


class PrometheusClient:
    """Reads one Prometheus through `transport`."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    @classmethod
    def over_http(cls, base_url: str, client: httpx.Client | None = None, timeout_s: float = 10.0) -> PrometheusClient:
        return cls(HttpTransport(base_url, client, timeout_s))

    @classmethod
    def through_service_proxy(cls, cluster: ServiceGetter, target: ServiceRef) -> PrometheusClient:
        """The Prometheus Service `target` (e.g. the stack outputs' `prometheus`) of `cluster`."""
        return cls(ServiceProxy(cluster, target))

    def answer(self, promql: str) -> dict[str, Any]:
        """The JSON answer of an instant query at the server's now, as Prometheus wrote it."""
        return self.transport.get(QUERY, {"query": promql}).body

    def _result(self, path: str, params: Params) -> list[dict]:
        reply = self.transport.get(path, params)
        if reply.status != 200 or reply.body.get("status") != "success":
            raise MetricsError(f"{self.transport.where} rejected {params.get('query')!r}: HTTP {reply.status} {_said(reply)}")
        return reply.body["data"]["result"]

    def check(self) -> None:
        """One query before a run: a wrong or unreachable URL fails here, not as a note on every point."""
        self._result(QUERY, {"query": "vector(1)"})

    def query(self, promql: str, at: float) -> float | None:
        """First value of an instant query at unix time `at`; None when empty or NaN."""
        result = self._result(QUERY, {"query": promql, "time": at})
        if not result:
            return None
        value = float(result[0]["value"][1])
        return None if math.isnan(value) else value

    def query_range(self, promql: str, start: float, end: float, step_s: float) -> list[tuple[float, float]]:
        result = self._result(QUERY_RANGE, {"query": promql, "start": start, "end": end, "step": step_s})
        if not result:
            return []
        return [(float(t), float(v)) for t, v in result[0]["values"] if not math.isnan(float(v))]

    def query_range_by(self, promql: str, start: float, end: float, step_s: float, label: str) -> dict[str, list[tuple[float, float]]]:
        """Every series of a range query, by the value of its `label` (one series per value)."""
        result = self._result(QUERY_RANGE, {"query": promql, "start": start, "end": end, "step": step_s})
        return {r["metric"].get(label, ""): [(float(t), float(v)) for t, v in r["values"] if not math.isnan(float(v))]
                for r in result}  # fmt: skip

    def wait_for_scrape(self, after: float, timeout_s: float = 30.0) -> None:
        """Wait until Prometheus holds a vLLM sample newer than `after` (unix seconds)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            latest = self.query("max(timestamp(vllm:num_requests_running))", time.time())
            if latest is not None and latest >= after:
                return
            time.sleep(0.25)
        raise MetricsError(
            f"{self.transport.where} has no vllm:num_requests_running sample after "
            f"{datetime.fromtimestamp(after).isoformat()} within {timeout_s}s: is it scraping the server?"
        )

    def window_metrics(self, start: float, end: float, step_s: float = 1.0, counted_from: float | None = None) -> ServerMetrics:
        """Server metrics over [start, end] (unix seconds); counters and histogram means from
        `counted_from` (default `start`), as metrics_from_scrapes counts them."""
        self.wait_for_scrape(end)
        rng = f"[{max(1, math.ceil(end - start))}s]"
        counting = f"[{max(1, math.ceil(end - (start if counted_from is None else counted_from)))}s]"
        fields: dict[str, GaugeStats] = {}
        series = []
        for name, metric, agg in GAUGES:
            mean = self.query(f"{agg}(avg_over_time({metric}{rng}))", end)
            peak = self.query(f"{agg}(max_over_time({metric}{rng}))", end)
            if mean is not None and peak is not None:
                fields[name] = GaugeStats(mean=mean, max=peak)
                series.append(Series(name=name, points=self.query_range(f"{agg}({metric})", start, end, step_s)))
        increases = self._result(QUERY, {"query": f"sum by (le) (increase({TTFT_BUCKETS}{rng}))", "time": end})
        buckets = {float(r["metric"]["le"]): float(r["value"][1]) for r in increases if "le" in r["metric"]}
        means = {}
        for name, histogram in MEANS:
            total = self.query(f"sum(increase({histogram}_sum{counting}))", end)
            count = self.query(f"sum(increase({histogram}_count{counting}))", end)
            if total is not None and count:
                means[name] = 1000.0 * total / count
        return ServerMetrics(
            source="prometheus",
            **fields,
            **{name: self.query(f"sum(increase({metric}{counting}))", end) for name, metric in COUNTERS},
            **means,
            ttft_p50_bucket_ms=bucket_ms(histogram_bucket(0.5, buckets)),
            ttft_p99_bucket_ms=bucket_ms(histogram_bucket(0.99, buckets)),
            series=series,
        )


def vector(answer: dict[str, Any]) -> list[Sample]:
    """Samples of an instant-vector answer; a Prometheus error becomes a MetricsError with its message."""
    if answer.get("status") != "success":
        raise MetricsError(f"Prometheus answered {answer.get('errorType', 'error')}: {answer.get('error', answer)}")
    data = answer.get("data") or {}
    if data.get("resultType") != "vector":
        raise MetricsError(f"expected an instant vector from Prometheus, got {data.get('resultType')!r}")
    return [Sample(labels=r["metric"], value=float(r["value"][1])) for r in data.get("result", [])]


def scalar(answer: dict[str, Any] | None) -> float | None:
    """The single value of a one-sample answer (an aggregate), or None if it has none or failed."""
    if not answer or answer.get("status") != "success":
        return None
    samples = vector(answer)
    return round(samples[0].value, 1) if samples else None


def gpu_util_query(seconds: int) -> str:
    """DCGM GPU utilisation (% of time a kernel ran) averaged over the last `seconds`, over all GPUs."""
    return f"avg(avg_over_time(DCGM_FI_DEV_GPU_UTIL[{max(1, seconds)}s]))"
