"""Server-side truth for a load point: a direct /metrics scrape and/or Prometheus (PromQL over the window)."""

from benchmarks.metrics.errors import MetricsError
from benchmarks.metrics.model import GaugeStats, Series, ServerMetrics, with_gpu_metrics
from benchmarks.metrics.prometheus import PrometheusClient
from benchmarks.metrics.scrape import Scraper, histogram_quantile, metrics_from_scrapes

__all__ = [
    "GaugeStats",
    "MetricsError",
    "PrometheusClient",
    "Scraper",
    "Series",
    "ServerMetrics",
    "histogram_quantile",
    "metrics_from_scrapes",
    "with_gpu_metrics",
]
