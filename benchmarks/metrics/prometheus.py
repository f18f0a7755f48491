"""Prometheus HTTP API client: PromQL over one point's window.

Instant queries evaluated at the window's end with a range equal to the window (avg_over_time,
max_over_time, increase, histogram_quantile), and range queries for the series plotted over time.
"""

from __future__ import annotations

import math
import time
from datetime import datetime

import httpx

from benchmarks.metrics.errors import MetricsError
from benchmarks.metrics.model import GAUGES, PREEMPTIONS, TTFT_BUCKETS, GaugeStats, Series, ServerMetrics


class PrometheusClient:
    """Reads one Prometheus; `client` is a seam for tests (any httpx.Client with base_url set)."""

    def __init__(self, base_url: str, client: httpx.Client | None = None, timeout_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._client = client or httpx.Client(base_url=self.base_url, timeout=timeout_s)

    def _get(self, path: str, params: dict[str, str | float]) -> list[dict]:
        try:
            resp = self._client.get(path, params=params)
        except httpx.HTTPError as exc:
            raise MetricsError(f"Prometheus at {self.base_url} unreachable: {exc}") from exc
        body = resp.json() if resp.headers.get("content-type", "").startswith("application/json") else {}
        if resp.status_code != 200 or body.get("status") != "success":
            raise MetricsError(
                f"Prometheus at {self.base_url} rejected {params.get('query')!r}: "
                f"HTTP {resp.status_code} {body.get('error', resp.text[:200])}"
            )
        return body["data"]["result"]

    def query(self, promql: str, at: float) -> float | None:
        """First value of an instant query at unix time `at`; None when empty or NaN."""
        result = self._get("/api/v1/query", {"query": promql, "time": at})
        if not result:
            return None
        value = float(result[0]["value"][1])
        return None if math.isnan(value) else value

    def query_range(self, promql: str, start: float, end: float, step_s: float) -> list[tuple[float, float]]:
        result = self._get(
            "/api/v1/query_range", {"query": promql, "start": start, "end": end, "step": step_s}
        )
        if not result:
            return []
        return [(float(t), float(v)) for t, v in result[0]["values"] if not math.isnan(float(v))]

    def wait_for_scrape(self, after: float, timeout_s: float = 30.0) -> None:
        """Wait until Prometheus holds a vLLM sample newer than `after` (unix seconds)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            latest = self.query("max(timestamp(vllm:num_requests_running))", time.time())
            if latest is not None and latest >= after:
                return
            time.sleep(0.25)
        raise MetricsError(
            f"Prometheus at {self.base_url} has no vllm:num_requests_running sample after "
            f"{datetime.fromtimestamp(after).isoformat()} within {timeout_s}s: is it scraping the server?"
        )

    def window_metrics(self, start: float, end: float, step_s: float = 1.0) -> ServerMetrics:
        """Server metrics over [start, end] (unix seconds)."""
        self.wait_for_scrape(end)
        rng = f"[{max(1, math.ceil(end - start))}s]"
        fields: dict[str, GaugeStats] = {}
        series = []
        for name, metric, agg in GAUGES:
            mean = self.query(f"{agg}(avg_over_time({metric}{rng}))", end)
            peak = self.query(f"{agg}(max_over_time({metric}{rng}))", end)
            if mean is not None and peak is not None:
                fields[name] = GaugeStats(mean=mean, max=peak)
                series.append(Series(name=name, points=self.query_range(f"{agg}({metric})", start, end, step_s)))
        buckets = f"sum by (le) (increase({TTFT_BUCKETS}{rng}))"
        p50 = self.query(f"histogram_quantile(0.5, {buckets})", end)
        p99 = self.query(f"histogram_quantile(0.99, {buckets})", end)
        return ServerMetrics(
            source="prometheus",
            **fields,
            preemptions=self.query(f"sum(increase({PREEMPTIONS}{rng}))", end),
            ttft_p50_ms=None if p50 is None else p50 * 1000.0,
            ttft_p99_ms=None if p99 is None else p99 * 1000.0,
            series=series,
        )
