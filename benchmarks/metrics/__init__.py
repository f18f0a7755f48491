"""Server-side truth: a direct /metrics scrape, and the kit's one Prometheus client (PromQL over a
URL, or over the API server's service proxy to the stack's in-cluster Prometheus)."""

from benchmarks.metrics.errors import MetricsError
from benchmarks.metrics.model import GaugeStats, KvCacheConfig, Series, ServerMetrics, with_gpu_metrics
from benchmarks.metrics.prometheus import (
    HttpTransport,
    PrometheusClient,
    Sample,
    ServiceProxy,
    gpu_util_query,
    scalar,
    vector,
)
from benchmarks.metrics.scrape import (
    Scraper,
    cache_config,
    histogram_bucket,
    metrics_from_scrapes,
    read_cache_config,
)

__all__ = [
    "GaugeStats",
    "HttpTransport",
    "KvCacheConfig",
    "MetricsError",
    "PrometheusClient",
    "Sample",
    "Scraper",
    "Series",
    "ServerMetrics",
    "ServiceProxy",
    "cache_config",
    "gpu_util_query",
    "histogram_bucket",
    "metrics_from_scrapes",
    "read_cache_config",
    "scalar",
    "vector",
    "with_gpu_metrics",
]
