"""`--experiment prefix`: what vLLM's prefix cache saves when requests share a system prompt.

`groups` groups of requests; every prompt of a group starts with the group's prefix of `prefix_len`
tokens (a system prompt) and goes on with tokens of its own (--input-len). Both arms are sent the same
open-loop Poisson arrivals at one rate (`rate`, below what the server holds without the cache, so
neither arm's TTFT is a queue's), on one server each: prefix caching on, then off (the simulator
started with --enable-prefix-caching or --disable-prefix-caching, as vLLM takes them; a stack's
`vllm.enable_prefix_caching` set and `pulumi up`, restored after, as the kv experiment does with the
memory setting; a server given by URL runs as it is, one arm). Each arm runs `repeats` times, run k of
each arm with the same seed (the same prompts, prefixes and arrivals), another seed for each k.

A cached prefix is paid for once per group instead of once per request: its prefill is skipped and its
KV blocks are held once, shared by every sequence of the group. What is measured, never restated:
the hit rate from the server's own counters, `vllm:prefix_cache_hits` over `vllm:prefix_cache_queries`
(tokens) over each run; the prefill time per request from the server's own timings
(`vllm:request_prefill_time_seconds`, vLLM's PREFILL phase; a server without it: its TTFT histogram's
mean less its queue-time histogram's); and from those, per pair of runs, the prefill time saved per
cached token.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from benchmarks.g6.analysis import predict
from benchmarks.g6.config import G6Params
from benchmarks.g6.result import ExperimentResult, Figures, G6Point, GpuPrice, figures
from benchmarks.g6.sweep import (
    Measurement,
    Outcome,
    PointContext,
    Target,
    interruptible,
    kv_cache_config,
    load_spec,
    measure_point,
    point_seed,
)
from benchmarks.g6.targets import ServerSettings
from benchmarks.harness import RunMeta
from benchmarks.harness.server import server_versions
from benchmarks.loadgen import LoadSpec
from benchmarks.loadgen.reruns import Rerun, rerun
from benchmarks.metrics import KvCacheConfig, MetricsError, ServerMetrics
from benchmarks.serving.sizing import Sizing, prefill_flops

# A long system prompt before each question: on an L4 a 1.5B model prefills the 2,048 shared tokens in
# tens of milliseconds, a difference each run of a minute's arrivals shows.
DEFAULT_PREFIX_LEN = 2048
DEFAULT_GROUPS = 4
# Requests/s of the GPU both arms are offered: about half of what the simulated L4 serves of these
# requests with the cache off (3.5/s in a closed loop of 16), so the cache-off arm does not queue.
DEFAULT_RATE = 2.0


class PrefixParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    prefix_len: int = Field(DEFAULT_PREFIX_LEN, ge=16, description="tokens every prompt of a group starts with")
    groups: int = Field(DEFAULT_GROUPS, ge=1, description="distinct prefixes, requests dealt to them in turn")
    rate: float = Field(DEFAULT_RATE, gt=0, description="open-loop requests/s of the GPU, the same for both arms")
    arms: list[bool] = Field([True, False], min_length=1, description="prefix caching on / off, in this order")


class PrefixRun(BaseModel):
    """One run of one arm and what the server said of it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run: int = Field(description="which run, from 0: run k of every arm had the same seed")
    prefix_cache_hit_rate: float | None = Field(description="hits / queries of the server's counters, in tokens")
    cached_tokens_per_request: float | None = Field(description="the hit rate times the prompt tokens per request")
    prefill_ms: float | None = Field(description="the server's mean prefill time per request (GPU time)")
    prefill_source: str | None = Field(description="the server's series it comes from")
    point: G6Point


class PrefixArm(BaseModel):
    """One setting of the prefix cache and what the same load did under it, over its runs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prefix_caching: bool | None = Field(description="as set (or, for a server given by URL, as it says); None: not known")
    cache: KvCacheConfig | None = Field(description="the KV cache the server said it runs (blocks, prefix caching)")
    runs: list[PrefixRun]
    figures: Figures
    prefix_cache_hit_rate: Rerun | None
    cached_tokens_per_request: Rerun | None
    prefill_ms: Rerun | None
    kv_blocks_peak: Rerun | None = Field(description="the KV blocks in use at the gauge's peak")


class PrefixResult(ExperimentResult):
    prefix: PrefixParams
    sizing: Sizing | None
    arms: list[PrefixArm]
    # Paired run by run (the same seed on and off): the server's prefill time saved per token the cache served.
    prefill_saved_us_per_cached_token: Rerun | None = None
    ttft_p50_saved_ms: Rerun | None = None

    def arm(self, caching: bool) -> PrefixArm | None:
        return next((a for a in self.arms if a.prefix_caching is caching and a.runs), None)


def roofline_s_per_prefix_token(sizing: Sizing | None, prefix_len: int) -> float | None:
    """The prefill of the prefix at the GPU's peak FLOP/s, per token: the least a cached token can save."""
    if sizing is None:
        return None
    return prefill_flops(sizing, prefix_len) / sizing.peak_flops / prefix_len


def prefix_spec(params: G6Params, prefix: PrefixParams, base_url: str, run: int) -> LoadSpec:
    """The point every arm's run `run` sends: open loop at the experiment's rate (the simulator `speedup`
    times it), prompts of a group's prefix plus their own --input-len tokens."""
    return load_spec(params, base_url, rate=prefix.rate * params.speedup, prefix_len=prefix.prefix_len,
                     prefix_groups=prefix.groups, seed=point_seed(params.seed, "prefix", "run", run))  # fmt: skip


def prefill_ms(server: ServerMetrics | None) -> tuple[float | None, str | None]:
    """The server's mean prefill time per request over a run, and which of its series said so."""
    if server is None:
        return None, None
    if server.prefill_time_mean_ms is not None:
        return server.prefill_time_mean_ms, "vllm:request_prefill_time_seconds"
    if server.server_ttft_mean_ms is not None and server.queue_time_mean_ms is not None:
        return (server.server_ttft_mean_ms - server.queue_time_mean_ms,
                "vllm:time_to_first_token_seconds less vllm:request_queue_time_seconds")  # fmt: skip
    return None, None


def prefix_run(run: int, point: G6Point) -> PrefixRun:
    """A run with what the server's counters and timings say of it: the counters cover the warm-up's lookups
    too, so the rate (a share of queried tokens) is applied to the counted requests' prompt tokens."""
    rate = point.server.prefix_cache_hit_rate if point.server is not None else None
    prompts = point.realised.input_tokens if point.realised else None
    ms, source = prefill_ms(point.server)
    return PrefixRun(run=run, prefix_cache_hit_rate=rate,
                     cached_tokens_per_request=None if rate is None or prompts is None else rate * prompts.mean,
                     prefill_ms=ms, prefill_source=source, point=point)  # fmt: skip


def prefix_arm(caching: bool | None, cache: KvCacheConfig | None, runs: list[PrefixRun]) -> PrefixArm:
    blocks = [r.point.server.kv_cache_usage.max * cache.num_gpu_blocks
              if cache is not None and r.point.server and r.point.server.kv_cache_usage else None for r in runs]  # fmt: skip
    return PrefixArm(
        prefix_caching=caching, cache=cache, runs=runs, figures=figures([r.point for r in runs]),
        prefix_cache_hit_rate=rerun([r.prefix_cache_hit_rate for r in runs], most=1.0),
        cached_tokens_per_request=rerun([r.cached_tokens_per_request for r in runs]),
        prefill_ms=rerun([r.prefill_ms for r in runs]), kv_blocks_peak=rerun(blocks),
    )  # fmt: skip


def paired(on: PrefixArm | None, off: PrefixArm | None) -> tuple[Rerun | None, Rerun | None]:
    """(prefill saved per cached token in us, TTFT p50 saved in ms), run k on against run k off."""
    if on is None or off is None:
        return None, None
    saved, ttft = [], []
    for a, b in zip(on.runs, off.runs):
        if a.prefill_ms is not None and b.prefill_ms is not None and a.cached_tokens_per_request:
            saved.append(1000 * (b.prefill_ms - a.prefill_ms) / a.cached_tokens_per_request)
        if a.point.ttft_ms is not None and b.point.ttft_ms is not None:
            ttft.append(b.point.ttft_ms.p50 - a.point.ttft_ms.p50)
    return rerun(saved, signed=True), rerun(ttft, signed=True)


@dataclass
class PrefixOutcome(Outcome):
    arms: list[PrefixArm] = field(default_factory=list)
    planned: int = 0

    @property
    def measured(self) -> int:
        return sum(len(a.runs) for a in self.arms)

    def done(self) -> str:
        return f"{self.measured} of {self.planned} runs"


def run_prefix(params: G6Params, prefix: PrefixParams, target: Target, how: Measurement, outcome: PrefixOutcome) -> None:
    """Both arms into `outcome`. The caller holds `target.session()` and the runner's context around it."""
    mns = params.max_num_seqs[0]
    sizing = predict(params, mns)
    changeable = params.target_kind in ("sim", "stack")
    arms: list[bool | None] = list(prefix.arms) if changeable else [None]
    outcome.planned = len(arms) * params.repeats
    with interruptible(outcome):
        for caching in arms:
            settings = ServerSettings() if caching is None else ServerSettings(enable_prefix_caching=caching)
            with target.serving(settings) as server:
                outcome.server_versions = outcome.server_versions or server_versions(server)
                try:
                    cache = kv_cache_config(server)
                except MetricsError as exc:
                    cache = None
                    outcome.errors.append(f"the server's cache configuration: {exc}")
                if caching is None:
                    caching = None if cache is None else cache.enable_prefix_caching
                name = f"prefix caching {'on' if caching else 'off' if caching is False else 'as the server runs'}"
                runs: list[PrefixRun] = []
                outcome.arms.append(prefix_arm(caching, cache, runs))
                for run in range(params.repeats):
                    label = name + (f" (run {run + 1} of {params.repeats})" if params.repeats > 1 else "")
                    measured = measure_point(params, prefix_spec(params, prefix, server.base_url, run), server, label,
                                             PointContext(mns, sizing), how)  # fmt: skip
                    outcome.errors += measured.errors
                    runs.append(prefix_run(run, measured.point.model_copy(update={"repeat": run})))
                    outcome.arms[-1] = prefix_arm(caching, cache, runs)


def prefix_result(meta: RunMeta, params: G6Params, prefix: PrefixParams, outcome: PrefixOutcome,
                  price: GpuPrice | None, cost: str | None) -> PrefixResult:  # fmt: skip
    arms = [a for a in outcome.arms if a.runs]
    on = next((a for a in arms if a.prefix_caching is True), None)
    off = next((a for a in arms if a.prefix_caching is False), None)
    saved, ttft = paired(on, off)
    return PrefixResult(meta=meta, params=params, prefix=prefix, sizing=predict(params, params.max_num_seqs[0]),
                        arms=arms, prefill_saved_us_per_cached_token=saved, ttft_p50_saved_ms=ttft,
                        gpu_price=price, cost=cost)  # fmt: skip
