"""`--experiment kv`: the KV cache as the binding constraint on the batch, and what paging buys.

For each context length L the experiment asks how many sequences vLLM keeps running side by side at
steady state, and what throughput that buys against a server without paging. Traffic like production:
prompts drawn lognormal (mean L/2, sd L/4), outputs capped at L/2 (max_tokens) and stopping at EOS, so
no server knows in advance where a request ends. Each probe is a closed loop of C sequences (a finished
request replaced at once) for REQUESTS_PER_SLOT requests per slot, read at steady state
(benchmarks.loadgen.steady: after the ramp of the first requests, which all start together, to the
last send): C fits when the server preempted nothing in that window.

The search starts from the prediction (vLLM's own block count from `vllm:cache_config_info`, else the
sizing's, over the blocks a sequence needs at its cap: ceil((L - 1) / block_size)) and moves up 25% after
a fit, down 20% after a preemption, then halves the gap, until the gap is within the tolerance. The
largest C that fitted is then run again until it has `seeds` runs (still without a preemption in any,
or the search goes on below it).

What paging buys is measured, not implied: a server without paging must reserve each sequence's region
when it admits it, not knowing where it will stop: max-model-len tokens (kv_cache_tokens // max_model_len
sequences), or at best the request's own prompt + max_tokens (kv_cache_tokens // L on average). The same
traffic runs at those concurrencies too (`seeds` runs each): the throughput a contiguous server of the
same compute would at best get; paging's gain is the measured throughput at the largest batch that fits
over each, run k against run k. The server's own gauges say what each sequence really held: KV use x
the pool / the sequences running, at the scrape where KV use peaked.
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
    point_seed,
)
from benchmarks.g6.targets import ServerSettings
from benchmarks.harness import RunMeta
from benchmarks.harness.server import server_versions
from benchmarks.loadgen import LoadSpec
from benchmarks.loadgen.lengths import Lengths
from benchmarks.loadgen.reruns import Rerun, rerun
from benchmarks.metrics import KvCacheConfig, MetricsError, ServerMetrics
from benchmarks.serving.sizing import Sizing

# A KV pool of 19,312 tokens for Qwen2.5-1.5B on an L4 (0.22 x 22 GiB - 2.9 GiB weights - 1.4 GiB
# activations), so the cache binds at 5-30 sequences of 1-4k tokens: a closed loop whose tokens (a few
# thousand a second) a 2-core machine streams in real time, which is what the simulator then measures.
# A real L4 at 0.9 holds 580k tokens: the same lesson at 30x the batch.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.22
# Two lengths: a closed loop of 4,096-token sequences at x1 takes a minute and a half per probe (six of the
# 15 s request lifetimes), a dozen probes a length; --context-len adds it.
DEFAULT_CONTEXT_LENS = (1024, 2048)
OUTPUT_SHARE = 0.5
PROMPT_SPREAD = 0.5  # the prompts' standard deviation over their mean
# Requests per slot of a probe's closed loop: the ramp (two E2E) and then about three request lifetimes
# at steady state.
REQUESTS_PER_SLOT = 6
STEP_UP = 1.25
STEP_DOWN = 0.8


class KvParams(BaseModel):
    """What the KV experiment probes (the server's own settings are in G6Params)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    context_lens: list[int] = Field(min_length=1)
    max_concurrency: int = Field(256, ge=1, description="never offer more sequences than this")
    concurrency: list[int] = Field([], description="fixed concurrencies at every length instead of the search")
    max_probes: int = Field(7, ge=1, description="search probes per length (the deciding reruns and baselines aside)")
    tolerance: float = Field(0.05, gt=0, description="stop when fit and preemption are this close (share of the prediction)")
    seeds: int = Field(3, ge=1, description="runs of the largest batch that fits and of each baseline")

    @staticmethod
    def shape(context_len: int) -> tuple[Lengths, int]:
        """(prompt lengths, output cap) of the sequences of `context_len`: prompts lognormal around L/2, the
        cap L/2 (a sequence run to its cap holds L tokens on average)."""
        output = max(1, round(context_len * OUTPUT_SHARE))
        prompt = context_len - output
        return Lengths(kind="lognormal", a=prompt, b=PROMPT_SPREAD * prompt), output


class KvProbe(BaseModel):
    """One run of a closed loop of `concurrency` sequences of `context_len` tokens."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    context_len: int
    concurrency: int
    run: int = 0  # which run of this concurrency, from 0 (each with its own seed)
    role: Literal["search", "paged", "max-model-len", "prompt + max_tokens"] = "search"
    point: G6Point

    @property
    def _steady(self) -> ServerMetrics | None:
        return self.point.steady_server

    @property
    def preemptions(self) -> float | None:
        """Preemptions at steady state (the server's counter over the steady window)."""
        server = self._steady
        return None if server is None else server.preemptions

    @property
    def held(self) -> float | None:
        """Sequences the server ran at once at steady state: its running gauge's mean over the window."""
        server = self._steady
        return None if server is None or server.running is None else server.running.mean

    @property
    def fits(self) -> bool | None:
        """Whether the server ran the probe's steady state without a preemption (None: it said nothing)."""
        preemptions = self.preemptions
        if preemptions is None or not self.point.completed:
            return None
        return preemptions == 0

    def tokens_per_sequence_at_peak(self, kv_tokens: int) -> float | None:
        """What each running sequence held when KV use peaked in the steady window: use x pool / running."""
        server = self._steady
        if server is None:
            return None
        usage = next((s.points for s in server.series if s.name == "kv_cache_usage"), [])
        running = dict(next((s.points for s in server.series if s.name == "running"), []))
        paired = [(u, running[t]) for t, u in usage if running.get(t)]
        if not paired:
            return None
        u, n = max(paired)
        return u * kv_tokens / n

    @property
    def output_tokens_per_s(self) -> float | None:
        return None if self.point.steady is None else self.point.steady.output_tokens_per_s


Binding = Literal["kv-cache", "max-num-seqs", "concurrency cap", "unknown"]


class Baseline(BaseModel):
    """What a server without paging would hold in the same pool, and the throughput the same traffic had at
    that many sequences."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reserves: Literal["max-model-len", "prompt + max_tokens"]
    tokens_per_sequence: int
    max_batch: int
    concurrency: int = Field(description="what its throughput was measured at: its batch, within max-num-seqs and the client's cap")
    output_tokens_per_s: Rerun | None = Field(description="steady output tokens/s at that concurrency")
    gain: Rerun | None = Field(description="paging's steady output tokens/s over this, run k against run k")


class KvLength(BaseModel):
    """The answer at one context length, from this run's figures."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    context_len: int
    blocks_per_sequence: int = Field(description="blocks a sequence of context_len tokens needs at its cap")
    predicted_max_batch: int = Field(description="vLLM's blocks (or the sizing's) over blocks per sequence, capped by max-num-seqs")
    sizing_max_batch: int | None = Field(description="the same from the kit's sizing alone")
    measured_max_batch: int | None = Field(description="the largest concurrency whose every run had no preemption at steady state")
    held: Rerun | None = Field(description="sequences running at once at steady state there (the gauge's mean)")
    preemption_from: int | None = Field(description="the smallest concurrency that preempted")
    binding: Binding
    tokens_per_sequence_at_peak: Rerun | None = Field(
        description="what each running sequence held when KV use peaked (use x pool / running), at the measured batch")
    kv_peak: Rerun | None = Field(description="the KV use gauge's peak at the measured batch (share of the pool)")
    output_tokens_per_s: Rerun | None = Field(description="steady output tokens/s at the measured batch")
    baselines: list[Baseline]


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
    """The next probe's size from the largest that fitted and the smallest that preempted so far;
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


def verdicts(probes: list[KvProbe]) -> tuple[int | None, int | None]:
    """(largest concurrency every run of which fitted, smallest with a run that preempted) of one length's
    search and paged probes."""
    by: dict[int, list[bool | None]] = {}
    for p in probes:
        if p.role in ("search", "paged"):
            by.setdefault(p.concurrency, []).append(p.fits)
    fits = [c for c, f in by.items() if all(f)]
    overs = [c for c, f in by.items() if False in f]
    return max(fits, default=None), min(overs, default=None)


def _rerun_of(probes: list[KvProbe], value: object, most: float | None = None) -> Rerun | None:
    return rerun([value(p) for p in probes], most=most)  # type: ignore[operator]


def _answer(
    context_len: int, probes: list[KvProbe], predicted: int, sizing: Sizing | None, cache: KvCacheConfig | None,
    max_num_seqs: int | None, kv: KvParams, max_model_len: int,
) -> KvLength:  # fmt: skip
    """The length's answer from its probes: what fitted, what preempted, and what paging's batch bought."""
    block, blocks = pool(cache, sizing)
    kv_tokens = block * blocks
    measured, over = verdicts(probes)
    binding: Binding = "unknown"
    if over is not None:
        binding = "kv-cache"
    elif measured is not None and max_num_seqs is not None and measured >= max_num_seqs:
        binding = "max-num-seqs"
    elif measured is not None and measured >= kv.max_concurrency:
        binding = "concurrency cap"
    at = sorted((p for p in probes if p.concurrency == measured and p.role in ("search", "paged")), key=lambda p: p.run)
    paged = {p.run: p.output_tokens_per_s for p in at}
    baselines = []
    for reserves, tokens in (("max-model-len", max_model_len), ("prompt + max_tokens", context_len)):
        batch = kv_tokens // tokens
        runs = sorted((p for p in probes if p.role == reserves), key=lambda p: p.run)
        ran_at = min(batch, _cap(kv, max_num_seqs))
        gains = [paged[p.run] / p.output_tokens_per_s for p in runs
                 if paged.get(p.run) and p.output_tokens_per_s]  # fmt: skip
        baselines.append(Baseline(reserves=reserves, tokens_per_sequence=tokens, max_batch=batch, concurrency=ran_at,
                                  output_tokens_per_s=_rerun_of(runs, lambda p: p.output_tokens_per_s),
                                  gain=rerun(gains)))  # fmt: skip
    return KvLength(
        context_len=context_len,
        blocks_per_sequence=blocks_per_sequence(context_len, block),
        predicted_max_batch=predicted,
        sizing_max_batch=None if sizing is None else max_batch(sizing.num_gpu_blocks, context_len, block, max_num_seqs),
        measured_max_batch=measured,
        held=_rerun_of(at, lambda p: p.held),
        preemption_from=over,
        binding=binding,
        tokens_per_sequence_at_peak=_rerun_of(at, lambda p: p.tokens_per_sequence_at_peak(kv_tokens), most=context_len),
        kv_peak=_rerun_of(at, lambda p: p.point.steady_server.kv_cache_usage.max
                          if p.point.steady_server and p.point.steady_server.kv_cache_usage else None, most=1.0),
        output_tokens_per_s=_rerun_of(at, lambda p: p.output_tokens_per_s),
        baselines=baselines,
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
        return f"{self.measured} probe{'s' if self.measured != 1 else ''} ({len(self.lengths)} of {self.planned_lengths} lengths)"


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


def probe_spec(params: G6Params, base_url: str, context_len: int, concurrency: int, run: int = 0,
               role: str = "search") -> LoadSpec:  # fmt: skip
    """One probe: a closed loop of `concurrency` sequences of `context_len`'s lengths, stopping at EOS under
    the cap, REQUESTS_PER_SLOT requests per slot, no warm-up (the steady window starts after the ramp)."""
    prompt, output = KvParams.shape(context_len)
    seed = point_seed(params.seed, "kv", context_len, "c", concurrency, "run", run, role)
    return load_spec(params, base_url, concurrency=concurrency, requests=REQUESTS_PER_SLOT * concurrency, warmup=0,
                     input_len=prompt, output_len=output, eos=True, duration_s=None, seed=seed)  # fmt: skip


def first_waves(params: G6Params, kv: KvParams, base_url: str) -> list[LoadSpec]:
    """The probes a run starts each length with, from the sizing's prediction (with fixed --concurrency,
    every probe): what --client-manifest shows. A search's later probes follow from what these find, and
    a real run predicts from vLLM's own block count where it publishes one."""
    check_lengths(params, kv)
    mns = params.max_num_seqs[0]
    if kv.concurrency:
        return [probe_spec(params, base_url, n, c) for n in kv.context_lens for c in kv.concurrency]
    block, blocks = pool(None, predict(params, mns))
    return [
        probe_spec(params, base_url, n, next_concurrency(None, None, max_batch(blocks, n, block, mns), _cap(kv, mns),
                                                          kv.tolerance) or 1)
        for n in kv.context_lens
    ]  # fmt: skip


def _next_probe(here: list[KvProbe], kv: KvParams, predicted: int, cap: int, kv_tokens: int,
                max_model_len: int, context_len: int) -> tuple[int, int, str] | None:  # fmt: skip
    """The next (concurrency, run, role) of one length: the search, then the largest batch that fitted
    again until it has its seeds, then each baseline's concurrency; None when the length is answered."""
    searched = [p for p in here if p.role == "search"]
    fit, over = verdicts(here)
    if kv.concurrency:
        left = [c for c in kv.concurrency if all(p.concurrency != c for p in searched)]
        if left:
            return left[0], 0, "search"
    elif len(searched) < kv.max_probes:
        found = next_concurrency(fit, over, predicted, cap, kv.tolerance)
        if found is not None and all(p.concurrency != found for p in searched):
            return found, 0, "search"
    if fit is None:
        return None
    runs = [p for p in here if p.concurrency == fit and p.role in ("search", "paged")]
    if len(runs) < kv.seeds:
        return fit, len(runs), "paged"
    for role, tokens in (("max-model-len", max_model_len), ("prompt + max_tokens", context_len)):
        done = [p for p in here if p.role == role]
        if len(done) < kv.seeds and kv_tokens // tokens >= 1:
            return min(kv_tokens // tokens, cap), len(done), role
    return None


def run_kv(params: G6Params, kv: KvParams, target: Target, how: Measurement, outcome: KvOutcome) -> None:
    """Every length's search (or fixed grid), its reruns and baselines into `outcome`, against one server
    run at the params' memory settings. The caller holds `target.session()` and the runner's context around it."""
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
            try:
                while (todo := _next_probe(here, kv, predicted, cap, block * blocks, max_model_len, context_len)):
                    concurrency, run, role = todo
                    spec = probe_spec(params, server.base_url, context_len, concurrency, run, role)
                    label = f"L={context_len} c={concurrency}" + (f" ({role}, run {run + 1})" if role != "search" else "")
                    measured = measure_point(params, spec, server, label, PointContext(mns, sizing), how, steady=True)
                    here.append(KvProbe(context_len=context_len, concurrency=concurrency, run=run, role=role,  # type: ignore[arg-type]
                                        point=measured.point))  # fmt: skip
                    outcome.errors += measured.errors
                    if here[-1].fits is None:
                        outcome.errors.append(f"{label}: no preemption count from the server at steady state: the "
                                              "search stops at this length")  # fmt: skip
                        break
            finally:
                # A length stopped half way (an interrupt) still answers from the probes it ran.
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
