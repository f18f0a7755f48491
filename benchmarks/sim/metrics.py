"""Prometheus series of the simulated backend: vLLM's metric names and DCGM-exporter-like GPU series.

Counters and histograms are updated as tokens and requests finish; gauges (queue depths, KV use and
the GPU series) are computed at scrape time from the engine's state and its recent steps. vLLM's
series carry its labels `model_name` and `engine` (the engine core's index, "0" with one engine),
and `vllm:cache_config_info` is its info-style gauge (value 1) whose labels are the engine's cache
configuration as strings, `num_gpu_blocks` and `block_size` among them (vLLM's CacheConfig.metrics_info).
GPU series over the last WINDOW_S seconds, each meaning what DCGM means by it (NVIDIA's field
definitions: docs.nvidia.com/datacenter/dcgm/latest/dcgm-api/dcgm-api-field-ids.html, and the
profiling metrics of docs.nvidia.com/datacenter/dcgm/latest/user-guide/feature-overview.html):
  DCGM_FI_DEV_GPU_UTIL            "percent of time over the past sample period during which one or more
                                  kernels was executing": the share of time a step was running
  DCGM_FI_PROF_SM_ACTIVE          "ratio of cycles an SM has at least 1 warp assigned", averaged over
                                  SMs: a warp waiting on memory counts, so a memory-bound decode keeps it
                                  near GPU_UTIL. Modelled as the time a step runs (a step's kernels launch
                                  grids over every SM; the gaps between kernels are not modelled, so this
                                  is an upper bound)
  DCGM_FI_PROF_PIPE_TENSOR_ACTIVE "ratio of cycles the tensor (HMMA) pipe is active": the compute share
                                  of steps (roofline compute time / step time), low for decode
  DCGM_FI_PROF_DRAM_ACTIVE        "ratio of cycles the device memory interface is active sending or
                                  receiving data": the bytes the steps moved over what the interface
                                  moves at its peak bandwidth in the window (213 GB/s of an L4's 300 is
                                  0.71); the achieved bandwidth of a decode is below peak (costs.py
                                  BANDWIDTH_EFFICIENCY), so even a wholly memory-bound step reads below 1
  DCGM_FI_DEV_POWER_USAGE         IDLE_POWER_SHARE x TDP plus the rest of TDP scaled by the busier unit
  DCGM_FI_DEV_FB_USED/FREE        what vLLM reserves (budget) plus the CUDA context, in MiB
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterable, Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from facts.catalogue import GpuSpec
from benchmarks.serving.sizing import Sizing
from benchmarks.sim.engine import Engine, SimRequest, StepRecord

WINDOW_S = 1.0  # at most engine.STEP_HISTORY_S
IDLE_POWER_SHARE = 0.25
CUDA_CONTEXT_BYTES = 512 * 1024**2
MIB = 1024**2
ENGINE = "0"  # vLLM labels every series with its engine core's index; one engine here

# Bucket boundaries as vLLM declares them.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
               20.0, 40.0, 80.0)
REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                   120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)


class SimMetrics:
    """Owns the registry the /metrics route renders."""

    def __init__(
        self, *, model_name: str, gpu: GpuSpec, sizing: Sizing, num_gpu_blocks_override: int | None = None
    ) -> None:
        self.registry = CollectorRegistry()
        self.model_name = model_name
        labels = ["model_name", "engine"]
        self.prompt_tokens = Counter(
            "vllm:prompt_tokens", "Prefill tokens processed.", labels, registry=self.registry
        ).labels(model_name, ENGINE)
        self.generation_tokens = Counter(
            "vllm:generation_tokens", "Generation tokens processed.", labels, registry=self.registry
        ).labels(model_name, ENGINE)
        self.request_success = Counter(
            "vllm:request_success", "Successfully processed requests.", [*labels, "finished_reason"],
            registry=self.registry,
        )
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds", "Time to first token in seconds.", labels,
            buckets=TTFT_BUCKETS, registry=self.registry,
        ).labels(model_name, ENGINE)
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds", "Inter-token latency in seconds.", labels,
            buckets=ITL_BUCKETS, registry=self.registry,
        ).labels(model_name, ENGINE)
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds", "End-to-end request latency in seconds.", labels,
            buckets=REQUEST_BUCKETS, registry=self.registry,
        ).labels(model_name, ENGINE)
        self.queue_time = Histogram(
            "vllm:request_queue_time_seconds", "Time spent in the WAITING phase in seconds.", labels,
            buckets=REQUEST_BUCKETS, registry=self.registry,
        ).labels(model_name, ENGINE)
        self._gpu = gpu
        self._sizing = sizing
        self._num_gpu_blocks_override = num_gpu_blocks_override

    def attach(self, engine: Engine) -> None:
        """Register the scrape-time gauges for this engine (preemptions and prefix-cache counts are read from it too)."""
        self.registry.register(
            _EngineCollector(engine, self.model_name, self._gpu, self._sizing, self._num_gpu_blocks_override)
        )

    def on_token(self, request: SimRequest) -> None:
        self.generation_tokens.inc()
        times = request.token_times_s
        if len(times) == 1:
            self.prompt_tokens.inc(request.prompt_tokens)
            self.ttft.observe(times[0] - request.arrival_s)
        else:
            self.itl.observe(times[-1] - times[-2])

    def on_finish(self, request: SimRequest) -> None:
        if request.finish_reason in ("length", "stop") and request.finish_s is not None:
            self.request_success.labels(self.model_name, ENGINE, request.finish_reason).inc()
            self.e2e.observe(request.finish_s - request.arrival_s)
        if request.first_scheduled_s is not None:
            self.queue_time.observe(max(0.0, request.first_scheduled_s - request.ready_s))


class _EngineCollector(Collector):
    def __init__(
        self, engine: Engine, model_name: str, gpu: GpuSpec, sizing: Sizing, num_gpu_blocks_override: int | None
    ) -> None:
        self._engine = engine
        self._model_name = model_name
        self._gpu = gpu
        self._hostname = socket.gethostname()
        self._fb_used_mib = fb_used_mib(sizing)
        self._fb_free_mib = max(0.0, gpu.memory_bytes / MIB - self._fb_used_mib)
        # As vLLM's CacheConfig.metrics_info(): every field as a string. No CPU swap space is simulated.
        self._cache_config = {
            "block_size": str(sizing.block_size),
            "cache_dtype": sizing.kv_cache_dtype,
            "enable_prefix_caching": str(engine.scheduler.prefix_caching),
            "gpu_memory_utilization": str(sizing.gpu_memory_utilization),
            "is_attention_free": "False",
            "num_cpu_blocks": "None",
            "num_gpu_blocks": str(sizing.num_gpu_blocks),
            "num_gpu_blocks_override": str(num_gpu_blocks_override),
            "sliding_window": "None",
            "engine": ENGINE,
        }

    def _gauge(self, name: str, documentation: str, value: float, **labels: str) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, documentation, labels=list(labels))
        family.add_metric(list(labels.values()), value)
        return family

    def collect(self) -> Iterable[Metric]:
        scheduler = self._engine.scheduler
        model = {"model_name": self._model_name, "engine": ENGINE}
        yield self._gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", 1, **self._cache_config)
        yield self._gauge("vllm:num_requests_running", "Requests in model execution batches.",
                          len(scheduler.running), **model)
        yield self._gauge("vllm:num_requests_waiting", "Requests waiting to be processed.",
                          len(scheduler.waiting), **model)
        yield self._gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                          scheduler.kv_cache_usage, **model)
        yield _counter("vllm:num_preemptions", "Cumulative number of preemptions from the engine.",
                       scheduler.preemptions_total, model)
        # vLLM's names and help texts (v0.34.0's /metrics: tests/data/vllm/v0.34.0/metrics.txt), in tokens.
        yield _counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
                       scheduler.prefix_queries, model)
        yield _counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
                       scheduler.prefix_hits, model)
        # The simulator's own (not vLLM's): how often this host, not the simulated GPU, timed a step.
        yield _counter("sim:engine_steps", "Engine steps run.", self._engine.steps_total, model)
        yield _counter("sim:engine_steps_late", "Engine steps whose tokens the host delivered late (more than "
                       "a quarter of the step's duration after its timeline).", self._engine.steps_late, model)
        now = time.monotonic()
        busy, compute, memory = gpu_activity(self._engine.steps, now - WINDOW_S, now)
        gpu = {
            "gpu": "0",
            "UUID": f"GPU-sim-{self._gpu.name}",
            "device": "nvidia0",
            "modelName": self._gpu.product_name,
            "hostname": self._hostname,
        }
        power = self._gpu.tdp_watts * (IDLE_POWER_SHARE + (1 - IDLE_POWER_SHARE) * max(compute, memory))
        yield self._gauge("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", round(100 * busy), **gpu)
        yield self._gauge("DCGM_FI_PROF_SM_ACTIVE", "Ratio of cycles an SM has at least 1 warp assigned.",
                          busy, **gpu)
        yield self._gauge("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active.",
                          compute, **gpu)
        yield self._gauge("DCGM_FI_PROF_DRAM_ACTIVE", "Ratio of cycles the device memory interface is active.",
                          memory, **gpu)
        yield self._gauge("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).",
                          round(self._fb_used_mib), **gpu)
        yield self._gauge("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).",
                          round(self._fb_free_mib), **gpu)
        yield self._gauge("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", power, **gpu)


def fb_used_mib(sizing: Sizing) -> float:
    """GPU memory in use: what vLLM reserves (its budget) plus the CUDA context, in MiB."""
    return (sizing.memory_budget_bytes + CUDA_CONTEXT_BYTES) / MIB


def gpu_activity(steps: Sequence[StepRecord], start: float, end: float) -> tuple[float, float, float]:
    """(busy, tensor-active, DRAM-active) fractions of the window [start, end] from the steps run in it
    (`steps` in the order they ran, newest last: the walk back stops at the window's start)."""
    busy = compute = memory = 0.0
    for step in reversed(steps):
        if step.end_s <= start:
            break
        overlap = min(step.end_s, end) - max(step.start_s, start)
        if overlap > 0:
            busy += overlap
            compute += overlap * step.compute_share
            memory += overlap * step.dram_share
    span = end - start
    return busy / span, compute / span, memory / span


def _counter(name: str, documentation: str, value: float, labels: dict[str, str]) -> Metric:
    family = CounterMetricFamily(name, documentation, labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family
