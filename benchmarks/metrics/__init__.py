"""Server-side truth for a load point: Prometheus (PromQL over the window) or a direct /metrics scrape."""

from benchmarks.metrics.errors import MetricsError
from benchmarks.metrics.model import GaugeStats, Series, ServerMetrics
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
]
