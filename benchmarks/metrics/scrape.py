"""Direct /metrics scraping for when no Prometheus is reachable.

Scrapes are fetched during the point but parsed only afterwards: parsing costs milliseconds of
CPU, and on the load generator's event loop that would show up as client lag.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from collections import defaultdict

import aiohttp
import httpx
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.metrics.errors import MetricsError
from benchmarks.metrics.model import (
    CACHE_CONFIG,
    GAUGES,
    PREEMPTIONS,
    TTFT_BUCKETS,
    GaugeStats,
    KvCacheConfig,
    Series,
    ServerMetrics,
)

_WANTED = {metric for _, metric, _ in GAUGES} | {PREEMPTIONS, TTFT_BUCKETS}
_COMBINE = {
    "sum": sum,
    "max": max,
    "avg": statistics.fmean,
}


class Scrape:
    """One parsed scrape: wall time and, per wanted sample name, the values of its series."""

    def __init__(self, t: float, text: str) -> None:
        self.t = t
        self.values: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in _WANTED:
                    self.values[sample.name].append((sample.labels, sample.value))

    def combined(self, metric: str, agg: str) -> float | None:
        values = [v for _, v in self.values.get(metric, []) if not math.isnan(v)]
        return _COMBINE[agg](values) if values else None

    def buckets(self) -> dict[float, float]:
        out: dict[float, float] = defaultdict(float)
        for labels, value in self.values.get(TTFT_BUCKETS, []):
            out[float(labels["le"])] += value
        return out


def histogram_quantile(q: float, cumulative: dict[float, float]) -> float | None:
    """Prometheus' histogram_quantile on cumulative bucket counts {upper bound: count}."""
    bounds = sorted(cumulative)
    if not bounds or cumulative[bounds[-1]] <= 0:
        return None
    rank = q * cumulative[bounds[-1]]
    lower, below = 0.0, 0.0
    for upper in bounds:
        count = cumulative[upper]
        if count >= rank:
            if math.isinf(upper):
                return lower  # as Prometheus: the +Inf bucket answers its lower bound
            return lower + (upper - lower) * (rank - below) / max(count - below, 1e-12)
        lower, below = upper, count
    return lower


def metrics_from_scrapes(scrapes: list[Scrape]) -> ServerMetrics:
    """Window statistics from scrapes taken at the start, during, and at the end of a point."""
    if len(scrapes) < 2:
        raise MetricsError(f"need scrapes at the start and end of a point, got {len(scrapes)}")
    first, last = scrapes[0], scrapes[-1]
    # The start and end scrapes bracket the load (an idle server): gauges are read between them,
    # and a point shorter than one interval has no gauge figures rather than idle ones.
    inside = scrapes[1:-1]
    fields: dict[str, GaugeStats] = {}
    series = []
    for name, metric, agg in GAUGES:
        points = [(s.t, v) for s in inside if (v := s.combined(metric, agg)) is not None]
        if points:
            values = [v for _, v in points]
            fields[name] = GaugeStats(mean=statistics.fmean(values), max=max(values))
            series.append(Series(name=name, points=points))
    preemptions = None
    if (end := last.combined(PREEMPTIONS, "sum")) is not None:
        preemptions = end - (first.combined(PREEMPTIONS, "sum") or 0.0)
    start_buckets, end_buckets = first.buckets(), last.buckets()
    delta = {le: count - start_buckets.get(le, 0.0) for le, count in end_buckets.items()}
    p50, p99 = histogram_quantile(0.5, delta), histogram_quantile(0.99, delta)
    return ServerMetrics(
        source="scrape",
        **fields,
        preemptions=preemptions,
        ttft_p50_ms=None if p50 is None else p50 * 1000.0,
        ttft_p99_ms=None if p99 is None else p99 * 1000.0,
        series=series,
    )


def cache_config(text: str) -> KvCacheConfig | None:
    """vLLM's KV cache from a /metrics text (`vllm:cache_config_info`), or None when it is absent or
    carries no block count (vLLM publishes it once its engine has profiled memory)."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name != CACHE_CONFIG:
                continue
            labels = sample.labels
            try:
                utilization = labels.get("gpu_memory_utilization")
                return KvCacheConfig(
                    block_size=int(labels["block_size"]),
                    num_gpu_blocks=int(labels["num_gpu_blocks"]),
                    gpu_memory_utilization=None if utilization in (None, "None") else float(utilization),
                    cache_dtype=labels.get("cache_dtype"),
                )
            except (KeyError, ValueError):
                return None
    return None


def read_cache_config(base_url: str, timeout_s: float = 10.0) -> KvCacheConfig | None:
    """GET /metrics once and read vLLM's KV cache configuration; None when the server does not say."""
    try:
        resp = httpx.get(base_url.rstrip("/") + "/metrics", timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise MetricsError(f"cannot read {base_url}/metrics: {exc or type(exc).__name__}") from exc
    return cache_config(resp.text) if resp.status_code == 200 else None


class Scraper:
    """Fetches `url` every `interval_s` on the running loop until stopped; parses at the end."""

    def __init__(self, url: str, interval_s: float = 1.0, timeout_s: float = 5.0) -> None:
        self.url = url
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._raw: list[tuple[float, str]] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None

    async def _fetch(self) -> None:
        assert self._session is not None
        try:
            async with self._session.get(self.url) as resp:
                if resp.status == 200:
                    self._raw.append((time.time(), await resp.text()))
        except (aiohttp.ClientError, TimeoutError):
            pass  # a missed scrape only thins the series; start and end are checked in stop()

    async def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                await asyncio.wait_for(self._stop.wait(), self.interval_s)
            except TimeoutError:
                await self._fetch()

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        await self._fetch()
        if not self._raw:
            await self._session.close()
            raise MetricsError(f"cannot scrape {self.url}: no answer within {self.timeout_s}s")
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> ServerMetrics:
        self._stop.set()
        if self._task is not None:
            await self._task
        await self._fetch()
        assert self._session is not None
        await self._session.close()
        return metrics_from_scrapes([Scrape(t, text) for t, text in self._raw])
