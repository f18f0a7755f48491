"""Server-side truth of one load point, the same shape whether read from Prometheus or scraped.

`GAUGES` is the one table of what is read: the result field, the metric, and how series from
several pods or GPUs combine (vLLM queue depths add up; KV use takes the fullest replica; DCGM
figures average over GPUs).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

GaugeField = Literal["running", "waiting", "kv_cache_usage", "gpu_util", "sm_active", "dram_active", "fb_used_mib"]
Agg = Literal["sum", "max", "avg"]

GAUGES: tuple[tuple[GaugeField, str, Agg], ...] = (
    ("running", "vllm:num_requests_running", "sum"),
    ("waiting", "vllm:num_requests_waiting", "sum"),
    ("kv_cache_usage", "vllm:kv_cache_usage_perc", "max"),  # a fraction 0..1 despite the name
    ("gpu_util", "DCGM_FI_DEV_GPU_UTIL", "avg"),  # percent of time a kernel ran
    ("sm_active", "DCGM_FI_PROF_SM_ACTIVE", "avg"),  # fraction 0..1
    ("dram_active", "DCGM_FI_PROF_DRAM_ACTIVE", "avg"),  # fraction 0..1
    ("fb_used_mib", "DCGM_FI_DEV_FB_USED", "sum"),  # MiB
)
PREEMPTIONS = "vllm:num_preemptions_total"
# Counters in tokens, as vLLM names them from 0.9.2 to the pinned v0.34.0 (vllm/v1/metrics/loggers.py:
# vllm:prefix_cache_queries and vllm:prefix_cache_hits, exposed with prometheus_client's _total suffix;
# tests/data/vllm/v0.34.0/metrics.txt has them).
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
# The simulator's own step counters (benchmarks/sim/metrics.py): steps run, and those the host made late.
SIM_STEPS = "sim:engine_steps_total"
SIM_STEPS_LATE = "sim:engine_steps_late_total"
COUNTERS = (("preemptions", PREEMPTIONS), ("prefix_cache_queries", PREFIX_QUERIES), ("prefix_cache_hits", PREFIX_HITS),
            ("sim_steps", SIM_STEPS), ("sim_steps_late", SIM_STEPS_LATE))  # fmt: skip
# Above this share of its steps late, a simulator's tails (ITL and TTFT p99) are the host's: a point is
# marked host-slowed. One step in a hundred late moves a p99 over the steps.
HOST_SLOWED_SHARE = 0.01
# Histograms whose mean over a point is read (the deltas of their _sum over their _count), in ms: vLLM
# v0.34.0's names (tests/data/vllm/v0.34.0/metrics.txt). The prefill time is from a request's first
# scheduling to its first token (vLLM's PREFILL phase), the queue time its WAITING phase.
MEANS = (("prefill_time_mean_ms", "vllm:request_prefill_time_seconds"),
         ("server_ttft_mean_ms", "vllm:time_to_first_token_seconds"),
         ("queue_time_mean_ms", "vllm:request_queue_time_seconds"))  # fmt: skip
CACHE_CONFIG = "vllm:cache_config_info"  # an info gauge: the cache configuration is in its labels
TTFT_BUCKETS = "vllm:time_to_first_token_seconds_bucket"


class GaugeStats(BaseModel):
    """Mean and maximum of a gauge over the point's window."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mean: float
    max: float


class Series(BaseModel):
    """One gauge over time: (unix seconds, value) pairs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: GaugeField
    points: list[tuple[float, float]]


class ServerMetrics(BaseModel):
    """What the server says happened during one point; None where the server has no such series."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: Literal["prometheus", "scrape", "scrape+prometheus", "virtual"]  # virtual: the oracle (sim/virtual.py)
    running: GaugeStats | None = None
    waiting: GaugeStats | None = None
    kv_cache_usage: GaugeStats | None = None
    gpu_util: GaugeStats | None = None
    sm_active: GaugeStats | None = None
    dram_active: GaugeStats | None = None
    fb_used_mib: GaugeStats | None = None
    preemptions: float | None = None
    prefix_cache_queries: float | None = None  # prompt tokens looked up in the prefix cache during the point
    prefix_cache_hits: float | None = None  # of them, tokens the cache served
    sim_steps: float | None = None  # a simulator's engine steps during the point (None: not a simulator)
    sim_steps_late: float | None = None  # of them, those the host delivered late
    # Means of the server's histograms over the point (MEANS); None where it has no such histogram.
    prefill_time_mean_ms: float | None = None
    server_ttft_mean_ms: float | None = None
    queue_time_mean_ms: float | None = None
    # vLLM's TTFT histogram knows a quantile only to its bucket: (lower, upper] in ms, upper None for
    # the +Inf bucket. No point inside the bucket is more likely than another.
    ttft_p50_bucket_ms: tuple[float, float | None] | None = None
    ttft_p99_bucket_ms: tuple[float, float | None] | None = None
    series: list[Series] = []

    @property
    def prefix_cache_hit_rate(self) -> float | None:
        """Hits over queries (tokens) over the point; None when the cache was not asked (or not counted)."""
        if not self.prefix_cache_queries or self.prefix_cache_hits is None:
            return None
        return self.prefix_cache_hits / self.prefix_cache_queries

    @property
    def late_step_share(self) -> float | None:
        """The share of a simulator's steps this host delivered late; None when not a simulator in real time."""
        if not self.sim_steps or self.sim_steps_late is None:
            return None
        return self.sim_steps_late / self.sim_steps

    @property
    def host_slowed(self) -> bool:
        """More than HOST_SLOWED_SHARE of a simulator's steps late: its tails are this host's."""
        share = self.late_step_share
        return share is not None and share > HOST_SLOWED_SHARE

    def in_time_scale(self, k: float) -> ServerMetrics:
        """These metrics with their times multiplied by `k` (a simulator's seconds into GPU seconds);
        gauges and counts are unchanged, series keep their wall-clock stamps."""
        return self.model_copy(update={
            "ttft_p50_bucket_ms": _scaled(self.ttft_p50_bucket_ms, k),
            "ttft_p99_bucket_ms": _scaled(self.ttft_p99_bucket_ms, k),
            **{name: None if (v := getattr(self, name)) is None else v * k for name, _ in MEANS},
        })  # fmt: skip


def _scaled(bucket: tuple[float, float | None] | None, k: float) -> tuple[float, float | None] | None:
    return None if bucket is None else (bucket[0] * k, None if bucket[1] is None else bucket[1] * k)


def bucket_ms(bucket: tuple[float, float | None] | None) -> tuple[float, float | None] | None:
    """A histogram bucket in seconds, in milliseconds."""
    return _scaled(bucket, 1000.0)


# Series of the GPU itself: DCGM runs on the node, not in the server, so a direct scrape of the
# server lacks them (the simulator, which fakes them, aside).
GPU_FIELDS: tuple[GaugeField, ...] = ("gpu_util", "sm_active", "dram_active", "fb_used_mib")


def with_gpu_metrics(scraped: ServerMetrics | None, prometheus: ServerMetrics) -> ServerMetrics:
    """The server's own figures from the direct scrape (every second, enough samples for a point of
    a few seconds), completed with the GPU figures only Prometheus has (scraped every 15 s or so)."""
    if scraped is None:
        return prometheus
    missing = [f for f in GPU_FIELDS if getattr(scraped, f) is None and getattr(prometheus, f) is not None]
    if not missing:
        return scraped
    return scraped.model_copy(
        update={
            **{f: getattr(prometheus, f) for f in missing},
            "series": scraped.series + [s for s in prometheus.series if s.name in missing],
            "source": "scrape+prometheus",
        }
    )


class KvCacheConfig(BaseModel):
    """The KV cache vLLM allocated, as its `vllm:cache_config_info` labels say."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    block_size: int
    num_gpu_blocks: int
    gpu_memory_utilization: float | None = None
    cache_dtype: str | None = None
    enable_prefix_caching: bool | None = None

    @property
    def kv_cache_tokens(self) -> int:
        return self.block_size * self.num_gpu_blocks
