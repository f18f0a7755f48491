"""`--experiment prefix`: what vLLM's prefix cache saves when requests share a system prompt.

`groups` groups of requests; every prompt of a group starts with the group's prefix of `prefix_len`
tokens (a system prompt) and goes on with tokens of its own (--input-len). The same closed-loop point
runs twice on one server, prefix caching on and then off (the simulator started with
--enable-prefix-caching or --disable-prefix-caching, as vLLM takes them; a stack's `vllm.enable_prefix_caching` set and `pulumi up`, restored
after, as the kv experiment does with the memory setting; a server given by URL runs as it is, one arm).

A cached prefix is paid for once per group instead of once per request: its prefill is skipped (TTFT
falls by the time those tokens' prefill took) and its KV blocks are held once, shared by every
sequence of the group. The hit rate is vLLM's own: `vllm:prefix_cache_hits` over
`vllm:prefix_cache_queries` (in tokens) over the point.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from benchmarks.g6.analysis import predict
from benchmarks.g6.config import G6Params
from benchmarks.g6.result import ExperimentResult, G6Point, GpuPrice
from benchmarks.g6.sweep import (
    Measurement,
    Outcome,
    PointContext,
    Target,
    interruptible,
    kv_cache_config,
    load_spec,
    measure_point,
)
from benchmarks.g6.targets import ServerSettings
from benchmarks.harness import RunMeta
from benchmarks.harness.server import server_versions
from benchmarks.loadgen import LoadSpec
from benchmarks.metrics import KvCacheConfig, MetricsError
from benchmarks.serving.sizing import Sizing, prefill_flops

# A long system prompt before each question: on an L4 a 1.5B model prefills the 2,048 shared tokens in
# tens of milliseconds, a TTFT difference a closed loop of 16 shows in a minute.
DEFAULT_PREFIX_LEN = 2048
DEFAULT_GROUPS = 4
DEFAULT_CONCURRENCY = 16


class PrefixParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    prefix_len: int = Field(DEFAULT_PREFIX_LEN, ge=16, description="tokens every prompt of a group starts with")
    groups: int = Field(DEFAULT_GROUPS, ge=1, description="distinct prefixes, requests dealt to them in turn")
    arms: list[bool] = Field([True, False], min_length=1, description="prefix caching on / off, in this order")


class PrefixArm(BaseModel):
    """One setting of the prefix cache and what the same load did under it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prefix_caching: bool | None = Field(description="as set (or, for a server given by URL, as it says); None: not known")
    prefix_cache_hit_rate: float | None = Field(description="hits / queries of the server's counters, in tokens")
    cached_tokens_per_request: float | None = Field(description="the hit rate times the prompt tokens per request")
    cache: KvCacheConfig | None = Field(description="the KV cache the server said it runs (blocks, prefix caching)")
    points: list[G6Point]


class PrefixResult(ExperimentResult):
    prefix: PrefixParams
    sizing: Sizing | None
    arms: list[PrefixArm]

    def arm(self, caching: bool) -> PrefixArm | None:
        return next((a for a in self.arms if a.prefix_caching is caching and a.points), None)


def roofline_s_per_prefix_token(sizing: Sizing | None, prefix_len: int) -> float | None:
    """The prefill of the prefix at the GPU's peak FLOP/s, per token: the least a cached token can save."""
    if sizing is None:
        return None
    return prefill_flops(sizing, prefix_len) / sizing.peak_flops / prefix_len


def prefix_spec(params: G6Params, prefix: PrefixParams, base_url: str) -> LoadSpec:
    """The point both arms run: closed loop, prompts of a group's prefix plus their own --input-len tokens."""
    return load_spec(params, base_url, concurrency=params.concurrency[0], prefix_len=prefix.prefix_len,
                     prefix_groups=prefix.groups)  # fmt: skip


def _hit_rate(point: G6Point) -> tuple[float | None, float | None]:
    """(hit rate, cached tokens per request): the counters cover the warm-up's lookups too, so the rate
    (a share of queried tokens) is applied to the counted requests' prompt tokens."""
    server = point.server
    if server is None or not server.prefix_cache_queries or server.prefix_cache_hits is None:
        return None, None
    rate = server.prefix_cache_hits / server.prefix_cache_queries
    prompts = point.realised.input_tokens if point.realised else None
    return rate, None if prompts is None else rate * prompts.mean


@dataclass
class PrefixOutcome(Outcome):
    arms: list[PrefixArm] = field(default_factory=list)
    planned: int = 0

    @property
    def measured(self) -> int:
        return sum(len(a.points) for a in self.arms)

    def done(self) -> str:
        return f"{len(self.arms)} of {self.planned} arms"


def run_prefix(params: G6Params, prefix: PrefixParams, target: Target, how: Measurement, outcome: PrefixOutcome) -> None:
    """Both arms into `outcome`. The caller holds `target.session()` and the runner's context around it."""
    mns = params.max_num_seqs[0]
    sizing = predict(params, mns)
    changeable = params.target_kind in ("sim", "stack")
    arms: list[bool | None] = list(prefix.arms) if changeable else [None]
    outcome.planned = len(arms)
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
                label = f"prefix caching {'on' if caching else 'off' if caching is False else 'as the server runs'}"
                point, errors = measure_point(params, prefix_spec(params, prefix, server.base_url), server, label,
                                              PointContext(mns, sizing), how)  # fmt: skip
                outcome.errors += errors
                rate, per_request = _hit_rate(point)
                outcome.arms.append(PrefixArm(prefix_caching=caching, prefix_cache_hit_rate=rate,
                                              cached_tokens_per_request=per_request, cache=cache, points=[point]))  # fmt: skip


def prefix_result(meta: RunMeta, params: G6Params, prefix: PrefixParams, outcome: PrefixOutcome,
                  price: GpuPrice | None, cost: str | None) -> PrefixResult:  # fmt: skip
    return PrefixResult(meta=meta, params=params, prefix=prefix, sizing=predict(params, params.max_num_seqs[0]),
                        arms=outcome.arms, gpu_price=price, cost=cost)  # fmt: skip
