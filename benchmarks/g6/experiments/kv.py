"""`--experiment kv`: the KV cache as the binding constraint on the batch, and what paging buys.

For each context length L (prompt + output tokens per sequence) the experiment asks how many such
sequences vLLM holds side by side. It starts from the prediction (vLLM's own block count from
`vllm:cache_config_info`, else the sizing's) and runs waves of C sequences at once (C workers, one
request each): a wave without a preemption that the server held at C running proves C fits; a
preemption proves C does not. The next C comes from what the earlier probes found (up 25% after a
fit, down 20% after a preemption, then halving the gap) until the gap is within the tolerance.

Half of each sequence's length L is prompt, half the output's cap (OUTPUT_SHARE: max_tokens), and
requests stop at EOS, as real ones do: sequences grow in decode and end at lengths the server does
not know in advance. With long prompts and short outputs chunked prefill admits sequences more slowly
than they finish and the cache never fills, which answers a different question.

A sequence run to its cap needs ceil((L - 1) / block_size) blocks (the last output token's KV is never
written): the prediction the search starts from. Paging's gain is measured against what a server
without paging must reserve, not knowing where a request will stop: max-model-len tokens per sequence
(kv_cache_tokens // max_model_len sequences at every length), or at best the request's own prompt +
max_tokens (kv_cache_tokens // L). Paging holds only the tokens that exist, so sequences that stop
early leave room for more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from benchmarks.g6.analysis import predict
from benchmarks.g6.config import G6Params
from benchmarks.g6.errors import G6Error
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
from benchmarks.serving.sizing import Sizing

# A KV pool of about 85k tokens for Qwen2.5-1.5B on an L4 (0.3 x 22 GiB - 2.9 GiB weights - 1.4 GiB
# activations), so the cache binds at 20-85 sequences of 1-4k tokens: concurrencies a 2-core client
# drives, waves of seconds. A real L4 at 0.9 holds 580k tokens: the same lesson at 7x the batch.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.3
DEFAULT_CONTEXT_LENS = (1024, 2048, 4096)
OUTPUT_SHARE = 0.5
STEP_UP = 1.25
STEP_DOWN = 0.8


class KvParams(BaseModel):
    """What the KV experiment probes (the server's own settings are in G6Params)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    context_lens: list[int] = Field(min_length=1)
    max_concurrency: int = Field(256, ge=1, description="never offer more sequences than this")
    concurrency: list[int] = Field([], description="fixed concurrencies at every length instead of the search")
    # Seven: from the cap-length prediction up 25% a wave reaches about twice it, where EOS puts the answer.
    max_probes: int = Field(7, ge=1, description="search probes per length")
    tolerance: float = Field(0.05, gt=0, description="stop when fit and preemption are this close (share of the prediction)")

    @staticmethod
    def shape(context_len: int) -> tuple[int, int]:
        """(prompt, output) tokens of a sequence of `context_len` tokens."""
        output = max(1, round(context_len * OUTPUT_SHARE))
        return context_len - output, output


class KvProbe(BaseModel):
    """One wave: `concurrency` sequences of `context_len` tokens sent at once."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    context_len: int
    concurrency: int
    point: G6Point

    @property
    def preemptions(self) -> float | None:
        server = self.point.server
        return None if server is None else server.preemptions

    @property
    def held(self) -> int | None:
        """Sequences the server ran at once: its running gauge's peak, at most the wave's size."""
        server = self.point.server
        if server is None or server.running is None:
            return None
        return min(self.concurrency, round(server.running.max))

    @property
    def fits(self) -> bool | None:
        """Whether the wave ran without a preemption (None: the server said nothing)."""
        preemptions = self.preemptions
        if preemptions is None or not self.point.completed:
            return None
        return preemptions == 0


Binding = Literal["kv-cache", "max-num-seqs", "concurrency cap", "unknown"]


class KvLength(BaseModel):
    """The answer at one context length, from this run's figures."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    context_len: int
    blocks_per_sequence: int
    predicted_max_batch: int = Field(description="vLLM's blocks (or the sizing's) over blocks per sequence, capped by max-num-seqs")
    sizing_max_batch: int | None = Field(description="the same from the kit's sizing alone")
    measured_max_batch: int | None = Field(description="the most sequences held at once without a preemption")
    preemption_from: int | None = Field(description="the smallest wave that preempted")
    binding: Binding
    contiguous_max_len_max_batch: int = Field(
        description="kv_cache_tokens // max_model_len: the batch a max-model-len reservation per sequence allows")
    contiguous_request_max_batch: int = Field(
        description="kv_cache_tokens // (prompt + max_tokens): the batch a reservation of each request's own cap allows")
    held_bytes_at_measured: int | None = Field(
        description="KV the measured batch really held at its peak: the server's KV usage gauge x the pool")
    contiguous_max_len_bytes_for_measured: int | None = Field(description="what a max-model-len reservation needs for the measured batch")
    contiguous_request_bytes_for_measured: int | None = Field(description="what a prompt + max_tokens reservation needs for it")


class KvResult(ExperimentResult):
    kv: KvParams
    max_num_seqs: int | None
    sizing: Sizing | None
    cache: KvCacheConfig | None = Field(description="what vLLM reported of its KV cache")
    probes: list[KvProbe]
    lengths: list[KvLength]

    @property
    def block_size(self) -> int:
        return pool(self.cache, self.sizing)[0]

    @property
    def kv_cache_tokens(self) -> int:
        block, blocks = pool(self.cache, self.sizing)
        return block * blocks


def pool(cache: KvCacheConfig | None, sizing: Sizing | None) -> tuple[int, int]:
    """(block size, blocks) of the KV cache: vLLM's own figures where it said, else the sizing's."""
    if cache is not None:
        return cache.block_size, cache.num_gpu_blocks
    if sizing is not None:
        return sizing.block_size, sizing.num_gpu_blocks
    raise G6Error("neither vLLM (no vllm:cache_config_info) nor the sizing (model or GPU not in the catalogue) "
                  "says how many KV blocks there are: nothing to predict the batch from")  # fmt: skip


def blocks_per_sequence(context_len: int, block_size: int) -> int:
    return math.ceil((context_len - 1) / block_size)


def max_batch(num_blocks: int, context_len: int, block_size: int, max_num_seqs: int | None) -> int:
    batch = num_blocks // blocks_per_sequence(context_len, block_size)
    return batch if max_num_seqs is None else min(batch, max_num_seqs)


def next_concurrency(fit: int | None, over: int | None, predicted: int, cap: int, tolerance: float) -> int | None:
    """The next wave's size from the largest that fitted and the smallest that preempted so far;
    None when the answer is known to the tolerance, or the cap (max-num-seqs, the client's limit)
    stops the search."""
    if fit is None and over is None:
        return max(1, min(predicted, cap))
    if over is None:
        assert fit is not None
        return None if fit >= cap else min(cap, max(fit + 1, math.ceil(fit * STEP_UP)))
    if fit is None:
        return None if over <= 1 else max(1, min(over - 1, math.floor(over * STEP_DOWN)))
    if over - fit <= max(1, math.ceil(tolerance * predicted)):
        return None
    return (fit + over) // 2


def _answer(
    context_len: int, probes: list[KvProbe], predicted: int, sizing: Sizing | None, cache: KvCacheConfig | None,
    max_num_seqs: int | None, kv: KvParams, max_model_len: int,
) -> KvLength:  # fmt: skip
    """The length's answer from its probes: what fitted, what preempted, and the paging comparison."""
    block, blocks = pool(cache, sizing)
    kv_tokens = block * blocks
    held = [p.held for p in probes if p.fits and p.held is not None]
    measured = max(held) if held else None
    preempted = [p.concurrency for p in probes if p.fits is False]
    over = min(preempted) if preempted else None
    # The largest wave that fitted: with early stops a wave may run without all of it resident at once.
    offered = max((p.concurrency for p in probes if p.fits), default=None)
    binding: Binding = "unknown"
    if over is not None:
        binding = "kv-cache"
    elif offered is not None and max_num_seqs is not None and offered >= max_num_seqs:
        binding = "max-num-seqs"
    elif offered is not None and offered >= kv.max_concurrency:
        binding = "concurrency cap"
    kv_bytes = sizing.kv_bytes_per_token if sizing else None
    per_seq = blocks_per_sequence(context_len, block)
    best = next((p for p in probes if p.fits and p.held == measured), None)
    usage = None if best is None or best.point.server is None else best.point.server.kv_cache_usage

    def reserved(tokens_each: int) -> int | None:
        return None if measured is None or kv_bytes is None else measured * tokens_each * kv_bytes

    return KvLength(
        context_len=context_len,
        blocks_per_sequence=per_seq,
        predicted_max_batch=predicted,
        sizing_max_batch=None if sizing is None else max_batch(sizing.num_gpu_blocks, context_len, block, max_num_seqs),
        measured_max_batch=measured,
        preemption_from=over,
        binding=binding,
        contiguous_max_len_max_batch=kv_tokens // max_model_len,
        contiguous_request_max_batch=kv_tokens // context_len,
        held_bytes_at_measured=None if usage is None or kv_bytes is None else round(usage.max * kv_tokens * kv_bytes),
        contiguous_max_len_bytes_for_measured=reserved(max_model_len),
        contiguous_request_bytes_for_measured=reserved(context_len),
    )  # fmt: skip


@dataclass
class KvOutcome(Outcome):
    cache: KvCacheConfig | None = None
    probes: list[KvProbe] = field(default_factory=list)
    lengths: list[KvLength] = field(default_factory=list)
    planned_lengths: int = 0

    @property
    def measured(self) -> int:
        return len(self.probes)

    def done(self) -> str:
        return f"{self.measured} wave{'s' if self.measured != 1 else ''} ({len(self.lengths)} of {self.planned_lengths} lengths)"


def check_lengths(params: G6Params, kv: KvParams) -> int:
    """The max-model-len every length must fit in; G6Error naming the lengths that do not."""
    if params.max_model_len is None:
        raise G6Error("--experiment kv needs a max-model-len (--max-model-len, or the stack's vllm.max_model_len)")
    too_long = [n for n in kv.context_lens if n > params.max_model_len]
    if too_long:
        raise G6Error(
            f"--context-len {','.join(map(str, too_long))} exceed max-model-len {params.max_model_len}: "
            "give lengths up to it, or raise --max-model-len"
        )
    return params.max_model_len


def _cap(kv: KvParams, max_num_seqs: int | None) -> int:
    # More sequences than max-num-seqs only wait: the search never offers them.
    return kv.max_concurrency if max_num_seqs is None else min(kv.max_concurrency, max_num_seqs)


def wave_spec(params: G6Params, base_url: str, context_len: int, concurrency: int) -> LoadSpec:
    """One wave: `concurrency` sequences of at most `context_len` tokens (they stop at EOS under the
    output cap), one request per worker, no warm-up."""
    prompt, output = KvParams.shape(context_len)
    return load_spec(params, base_url, concurrency=concurrency, requests=concurrency, warmup=0,
                     input_len=prompt, output_len=output, eos=True, duration_s=None)  # fmt: skip


def first_waves(params: G6Params, kv: KvParams, base_url: str) -> list[LoadSpec]:
    """The waves a run starts each length with, from the sizing's prediction (with fixed --concurrency,
    every wave): what --client-manifest shows. A search's later waves follow from what these find, and
    a real run predicts from vLLM's own block count where it publishes one."""
    check_lengths(params, kv)
    mns = params.max_num_seqs[0]
    if kv.concurrency:
        return [wave_spec(params, base_url, n, c) for n in kv.context_lens for c in kv.concurrency]
    block, blocks = pool(None, predict(params, mns))
    return [
        wave_spec(params, base_url, n, next_concurrency(None, None, max_batch(blocks, n, block, mns), _cap(kv, mns),
                                                         kv.tolerance) or 1)
        for n in kv.context_lens
    ]  # fmt: skip


def run_kv(params: G6Params, kv: KvParams, target: Target, how: Measurement, outcome: KvOutcome) -> None:
    """Every length's search (or fixed grid) into `outcome`, against one server run at the params'
    memory settings. The caller holds `target.session()` and the runner's context around it."""
    max_model_len = check_lengths(params, kv)
    mns = params.max_num_seqs[0]
    sizing = predict(params, mns)
    settings = ServerSettings(gpu_memory_utilization=params.gpu_memory_utilization, max_model_len=max_model_len)
    outcome.planned_lengths = len(kv.context_lens)
    with interruptible(outcome), target.serving(settings) as server:
        outcome.server_versions = server_versions(server)
        try:
            outcome.cache = kv_cache_config(server)
        except MetricsError as exc:
            outcome.errors.append(f"vLLM's KV cache configuration: {exc}")
        block, blocks = pool(outcome.cache, sizing)
        said = "sizing" if outcome.cache is None else "the simulator" if params.target_kind == "sim" else "vLLM"
        how.progress.log(f"KV cache: {blocks:,} blocks of {block} tokens ({said})")
        cap = _cap(kv, mns)
        for context_len in kv.context_lens:
            predicted = max_batch(blocks, context_len, block, mns)
            here: list[KvProbe] = []
            fixed = iter(kv.concurrency)
            try:
                while len(here) < (len(kv.concurrency) or kv.max_probes):
                    if kv.concurrency:
                        concurrency = next(fixed)
                    else:
                        fits = [p.concurrency for p in here if p.fits]
                        overs = [p.concurrency for p in here if p.fits is False]
                        found = next_concurrency(max(fits, default=None), min(overs, default=None), predicted, cap,
                                                 kv.tolerance)  # fmt: skip
                        if found is None or any(p.concurrency == found for p in here):
                            break
                        concurrency = found
                    spec = wave_spec(params, server.base_url, context_len, concurrency)
                    label = f"L={context_len} c={concurrency}"
                    point, errors = measure_point(params, spec, server, label, PointContext(mns, sizing), how)
                    here.append(KvProbe(context_len=context_len, concurrency=concurrency, point=point))
                    outcome.errors += errors
                    if here[-1].fits is None:
                        outcome.errors.append(f"{label}: no preemption count from the server: the search stops at this length")
                        break
            finally:
                # A length stopped half way (an interrupt) still answers from the waves it ran.
                if here:
                    outcome.probes += here
                    outcome.lengths.append(_answer(context_len, here, predicted, sizing, outcome.cache, mns, kv,
                                                   max_model_len))  # fmt: skip


def kv_result(meta: RunMeta, params: G6Params, kv: KvParams, outcome: KvOutcome, price: GpuPrice | None,
              cost: str | None) -> KvResult:  # fmt: skip
    mns = params.max_num_seqs[0]
    return KvResult(
        meta=meta, params=params, kv=kv, max_num_seqs=mns, sizing=predict(params, mns), cache=outcome.cache,
        probes=outcome.probes, lengths=outcome.lengths, gpu_price=price, cost=cost,
    )  # fmt: skip
