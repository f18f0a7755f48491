"""Direct /metrics scraping: the server's own gauges every second, more often than a Prometheus scrapes.

Scrapes are fetched on a background thread during the point (the load generator runs in its own
processes) and parsed only afterwards.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from benchmarks.metrics.errors import MetricsError
from benchmarks.metrics.model import (
    CACHE_CONFIG,
    COUNTERS,
    GAUGES,
    MEANS,
    TTFT_BUCKETS,
    GaugeStats,
    KvCacheConfig,
    Series,
    ServerMetrics,
    bucket_ms,
)

_WANTED = ({metric for _, metric, _ in GAUGES} | {metric for _, metric in COUNTERS} | {TTFT_BUCKETS}
           | {f"{h}_{part}" for _, h in MEANS for part in ("sum", "count")})  # fmt: skip
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


def histogram_bucket(q: float, cumulative: dict[float, float]) -> tuple[float, float | None] | None:
    """The bucket (lower, upper] holding the q-quantile of cumulative bucket counts: all a histogram
    knows of it (upper None: the +Inf bucket)."""
    bounds = sorted(cumulative)
    if not bounds or cumulative[bounds[-1]] <= 0:
        return None
    rank = q * cumulative[bounds[-1]]
    lower = 0.0
    for upper in bounds:
        if cumulative[upper] >= rank:
            return lower, None if math.isinf(upper) else upper
        lower = upper
    return lower, None


def _bracket(scrapes: list[Scrape], start: float | None, end: float | None) -> list[Scrape]:
    """The scrapes of the window [start, end]: the last one at or before its start, those inside, and
    the first at or after its end (the run's first and last where the window reaches past them)."""
    first = max((k for k, s in enumerate(scrapes) if start is not None and s.t <= start), default=0)
    last = min((k for k, s in enumerate(scrapes) if end is not None and s.t >= end), default=len(scrapes) - 1)
    return scrapes[first : last + 1]


def _delta(first: Scrape, last: Scrape, metric: str) -> float | None:
    end = last.combined(metric, "sum")
    return None if end is None else end - (first.combined(metric, "sum") or 0.0)


def metrics_from_scrapes(
    scrapes: list[Scrape], start: float | None = None, end: float | None = None, counted_from: float | None = None
) -> ServerMetrics:
    """Window statistics from scrapes taken at the start, during, and at the end of a point; with
    `start`/`end` (unix seconds) those of that window only (the point's counted requests, not its
    warm-up). Counters and histogram means count from `counted_from` (default `start`): the server
    admits a request, and counts its prefix-cache lookup, before its first token opens the window."""
    window = _bracket(scrapes, start, end)
    if len(window) < 2:
        raise MetricsError(f"need scrapes at the start and end of a point, got {len(window)}")
    counting = _bracket(scrapes, start if counted_from is None else counted_from, end)
    first, last = counting[0], counting[-1]
    # The start and end scrapes bracket the load (an idle server): gauges are read between them,
    # and a point shorter than one interval has no gauge figures rather than idle ones.
    inside = window[1:-1]
    fields: dict[str, GaugeStats] = {}
    series = []
    for name, metric, agg in GAUGES:
        points = [(s.t, v) for s in inside if (v := s.combined(metric, agg)) is not None]
        if points:
            values = [v for _, v in points]
            fields[name] = GaugeStats(mean=statistics.fmean(values), max=max(values))
            series.append(Series(name=name, points=points))
    # Counters: what they counted between the first and the last scrape.
    counted = {name: value for name, metric in COUNTERS if (value := _delta(first, last, metric)) is not None}
    means = {}
    for name, histogram in MEANS:
        total, count = _delta(first, last, f"{histogram}_sum"), _delta(first, last, f"{histogram}_count")
        if total is not None and count:
            means[name] = 1000.0 * total / count
    start_buckets, end_buckets = window[0].buckets(), window[-1].buckets()
    delta = {le: count - start_buckets.get(le, 0.0) for le, count in end_buckets.items()}
    return ServerMetrics(
        source="scrape",
        **fields,
        **counted,
        **means,
        ttft_p50_bucket_ms=bucket_ms(histogram_bucket(0.5, delta)),
        ttft_p99_bucket_ms=bucket_ms(histogram_bucket(0.99, delta)),
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
                caching = labels.get("enable_prefix_caching")
                return KvCacheConfig(
                    block_size=int(labels["block_size"]),
                    num_gpu_blocks=int(labels["num_gpu_blocks"]),
                    gpu_memory_utilization=None if utilization in (None, "None") else float(utilization),
                    cache_dtype=labels.get("cache_dtype"),
                    enable_prefix_caching=None if caching in (None, "None") else caching == "True",
                )
            except (KeyError, ValueError):
                return None
    return None


def read_cache_config(fetch: Callable[[], str], where: str = "/metrics") -> KvCacheConfig | None:
    """One /metrics scrape through `fetch` (as the Scraper's), read for vLLM's KV cache configuration;
    None when the server does not say."""
    try:
        text = fetch()
    except Exception as exc:  # whatever the transport raises: a plain GET's or the API server proxy's
        raise MetricsError(f"cannot read {where}: {exc or type(exc).__name__}") from exc
    return cache_config(text)


class Scraper:
    """Calls `fetch` (one /metrics scrape: a plain GET, or through the API server's service proxy)
    every `interval_s` on a background thread until stopped; parses the scrapes at the end."""

    def __init__(self, fetch: Callable[[], str], interval_s: float = 1.0, where: str = "/metrics") -> None:
        self.fetch = fetch
        self.interval_s = interval_s
        self.where = where
        self._raw: list[tuple[float, str]] = []
        self._last_error = "no answer"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _fetch(self) -> None:
        try:
            self._raw.append((time.time(), self.fetch()))
        except Exception as exc:  # one missed scrape only thins the series; start and end are checked
            self._last_error = str(exc) or type(exc).__name__

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._fetch()

    def start(self) -> None:
        self._fetch()
        if not self._raw:
            raise MetricsError(f"cannot scrape {self.where}: {self._last_error}")
        self._thread = threading.Thread(target=self._loop, name="metrics-scraper", daemon=True)
        self._thread.start()

    def stop(self) -> list[Scrape]:
        """Every scrape taken, parsed: metrics_from_scrapes reads any window of them."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._fetch()
        return [Scrape(t, text) for t, text in self._raw]
