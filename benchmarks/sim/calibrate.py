"""Recompute the simulated backend's figures for the published vLLM measurements it is calibrated to.

`python -m benchmarks.sim.calibrate` prints the Markdown tables of docs/calibration.md: each
published figure, the sizing's or the simulator's figure for the same case, and the residual.
The simulator runs here on its virtual clock (virtual.py, no sleeping): a closed loop of `concurrency`
clients, each sending its next request as soon as the previous one finishes, as `vllm bench serve
--max-concurrency C --ignore-eos` does.
"""

from __future__ import annotations

import statistics
import sys

from pydantic import BaseModel, ConfigDict

from facts.catalogue import GIB, GpuSpec, get_gpu, get_model
from benchmarks.loadgen.core import Plan
from benchmarks.serving.sizing import size, weight_bytes
from benchmarks.sim.config import SimConfig
from benchmarks.sim.virtual import replay


class KvPoolCase(BaseModel):
    """A vLLM start-up log: the KV blocks it reported for a model, GPU and settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str
    note: str
    model: str
    gpu: GpuSpec
    max_model_len: int
    gpu_memory_utilization: float
    max_num_batched_tokens: int
    published_blocks: int


class WeightsCase(BaseModel):
    """A vLLM start-up log's weight memory for a checkpoint ("Model loading took X GiB")."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str
    model: str
    published_gib: float


class ServingCase(BaseModel):
    """A published closed-loop benchmark point: median ITL and output throughput at a concurrency."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str
    model: str
    gpu: GpuSpec
    concurrency: int
    input_len: int
    output_len: int
    max_model_len: int
    gpu_memory_utilization: float
    published_itl_ms: float | None
    published_output_tokens_per_s: float | None
    published_ttft_ms: float | None = None


class ServingResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    itl_p50_ms: float
    ttft_p50_ms: float
    output_tokens_per_s: float


def _gpu_with_total(base: str, name: str, cuda_total_gib: float) -> GpuSpec:
    """A GPU as a log reports it: its CUDA total memory is the figure the log prints."""
    return get_gpu(base).model_copy(update={"name": name, "cuda_total_memory_bytes": int(cuda_total_gib * GIB)})


L4 = get_gpu("l4")
WMX = "https://ai.wmx.dev/benchmarks"
MUSGRAVE = "https://johnmusgrave.com/p/vllm-throughput-latency-sweep-on"
YOBITEL = "https://yobitelcomm.github.io/bench/recipes/concurrency-sweep/"

VLLAMA = "a public repository's docs/models.md (vLLama: RTX 4090, vLLM V1 engine)"
RTX4090 = _gpu_with_total("a10g", "rtx4090", 23.65)

KV_POOL_CASES = [
    KvPoolCase(
        source="a public repository's vLLM 0.7.2 log (GPU not named)",
        note="Qwen2.5-Math-1.5B (the Qwen2.5-1.5B architecture); V0 engine profiling 4096 tokens",
        model="Qwen/Qwen2.5-1.5B-Instruct",
        gpu=_gpu_with_total("l4", "unnamed 24 GB", 22.06),
        max_model_len=4096,
        gpu_memory_utilization=0.9,
        max_num_batched_tokens=4096,
        published_blocks=36332,
    ),
    *(
        KvPoolCase(
            source=VLLAMA,
            note=f"V1 engine; published as {published_k}K tokens at {max_concurrency}x of 32,768{extra}",
            model=model,
            gpu=RTX4090,
            max_model_len=32768,
            gpu_memory_utilization=utilization,
            max_num_batched_tokens=2048,
            published_blocks=round(max_concurrency * 32768 / 16),
        )
        for model, utilization, published_k, max_concurrency, extra in (
            ("Qwen/Qwen2.5-0.5B-Instruct", 0.5, 819, 25.01, ""),
            ("Qwen/Qwen2.5-1.5B-Instruct", 0.5, 277, 8.46, ""),
            ("Qwen/Qwen2.5-7B-Instruct", 0.9, 88, 2.68, "; 7B residual unexplained (see text)"),
            ("mistralai/Mistral-7B-Instruct-v0.3", 0.9, 47, 1.43, "; 7B residual unexplained (see text)"),
        )
    ),
    KvPoolCase(
        source="https://github.com/vllm-project/vllm/issues/10517",
        note="RTX 3090; log shows non_torch_memory 0.35 GiB (desktop GPU) against our 0.05",
        model="meta-llama/Llama-3.1-8B-Instruct",
        gpu=_gpu_with_total("a10g", "rtx3090", 23.58),
        max_model_len=20000,
        gpu_memory_utilization=0.9,
        max_num_batched_tokens=20000,
        published_blocks=1952,
    ),
    KvPoolCase(
        source="https://github.com/vllm-project/vllm/issues/10517",
        note="same, --max-model-len 29000 (profiles 29k tokens; the pool then holds 23,648)",
        model="meta-llama/Llama-3.1-8B-Instruct",
        gpu=_gpu_with_total("a10g", "rtx3090", 23.58),
        max_model_len=23648,  # the log's limit; 29k itself does not fit, as the log says
        gpu_memory_utilization=0.9,
        max_num_batched_tokens=29000,
        published_blocks=1478,
    ),
    KvPoolCase(
        source="https://github.com/oracle-samples/oci-data-science-ai-samples (AI Quick Actions "
        "troubleshooting guide)",
        note="A10; V0 with chunked prefill logged a 0.22 GiB activation peak, without the "
        "full-width sampler pass V1 profiles",
        model="meta-llama/Llama-3.1-8B-Instruct",
        gpu=_gpu_with_total("a10g", "a10", 22.07),
        max_model_len=8192,  # the pool does not depend on it; the log's 131072 did not fit
        gpu_memory_utilization=0.9,
        max_num_batched_tokens=2048,
        published_blocks=2356,
    ),
]

QUANT_SOURCE = (
    "a public repository's docs/benchmarks.md (RTX 4060 Laptop 8 GB, vLLM 0.30, start-up log: "
    "Marlin kernels for both GPTQ checkpoints)"
)
WEIGHTS_CASES = [
    WeightsCase(source=QUANT_SOURCE, model="Qwen/Qwen2.5-1.5B-Instruct", published_gib=2.98),
    WeightsCase(source=QUANT_SOURCE, model="Qwen/Qwen2.5-1.5B-Instruct-GPTQ-Int8", published_gib=1.74),
    WeightsCase(source=QUANT_SOURCE, model="Qwen/Qwen2.5-1.5B-Instruct-GPTQ-Int4", published_gib=1.10),
]

# (concurrency, ITL p50 ms, output tok/s, TTFT p50 ms)
_WMX_POINTS = [
    (1, 5.1, 168, 27.0),
    (2, 5.2, 367, 37.8),
    (4, 5.3, 698, 50.1),
    (8, 5.5, 1312, 60.9),
    (16, 6.0, 2277, 103.8),
    (32, 7.1, 3773, 135.3),
]
SERVING_CASES = [
    ServingCase(
        source=WMX,
        model="Qwen/Qwen2.5-0.5B-Instruct",
        gpu=L4,
        concurrency=c,
        input_len=256,
        output_len=128,
        max_model_len=8192,
        gpu_memory_utilization=0.6,
        published_itl_ms=itl,
        published_output_tokens_per_s=tps,
        published_ttft_ms=ttft,
    )
    for c, itl, tps, ttft in _WMX_POINTS
] + [
    ServingCase(
        source=MUSGRAVE,
        model="meta-llama/Llama-3.1-8B-Instruct",
        gpu=get_gpu("a100-40gb"),
        concurrency=1,
        input_len=1024,
        output_len=128,
        max_model_len=8192,
        gpu_memory_utilization=0.9,
        published_itl_ms=1000 / 75,
        published_output_tokens_per_s=None,
    ),
    ServingCase(
        source=MUSGRAVE + " ('6.6x gain' at C=8 over 75 tok/s)",
        model="meta-llama/Llama-3.1-8B-Instruct",
        gpu=get_gpu("a100-40gb"),
        concurrency=8,
        input_len=1024,
        output_len=128,
        max_model_len=8192,
        gpu_memory_utilization=0.9,
        published_itl_ms=None,
        published_output_tokens_per_s=6.6 * 75,
    ),
] + [
    # "chatbot-short" workload: lengths not stated; 256 in / 128 out assumed (TPOT at C=1..4
    # barely depends on them).
    ServingCase(
        source=YOBITEL,
        model="meta-llama/Llama-3.1-8B-Instruct",
        gpu=get_gpu("h100-80gb"),
        concurrency=c,
        input_len=256,
        output_len=128,
        max_model_len=8192,
        gpu_memory_utilization=0.9,
        published_itl_ms=tpot,
        published_output_tokens_per_s=None,
        published_ttft_ms=ttft,
    )
    for c, tpot, ttft in [(1, 6.48, 13.98), (4, 6.59, 22.75)]
]


def kv_pool_blocks(case: KvPoolCase) -> int:
    sizing = size(
        get_model(case.model),
        case.gpu,
        max_model_len=case.max_model_len,
        gpu_memory_utilization=case.gpu_memory_utilization,
        max_num_batched_tokens=case.max_num_batched_tokens,
    )
    return sizing.num_gpu_blocks


def weights_gib(case: WeightsCase) -> float:
    model = get_model(case.model)
    return weight_bytes(model, dtype=model.torch_dtype) / GIB


def simulate(case: ServingCase, requests_per_client: int = 20) -> ServingResult:
    """The case's closed loop replayed on the simulator's virtual clock (virtual.py): no warm-up, every
    request alike, forced to its length, as `vllm bench serve --max-concurrency C --ignore-eos` runs."""
    total = case.concurrency * requests_per_client
    plan = Plan(base_url="http://sim", model=case.model, requests=total, warmup=0, input_lens=[case.input_len] * total,
                output_lens=[case.output_len] * total, concurrency=case.concurrency)  # fmt: skip
    config = SimConfig(model=case.model, gpu=case.gpu.name, max_model_len=case.max_model_len,
                       gpu_memory_utilization=case.gpu_memory_utilization)  # fmt: skip
    records = replay(plan, config).run.records
    itls = [b - a for r in records for a, b in zip(r.chunk_times, r.chunk_times[1:])]
    ttfts = [r.first_token - r.scheduled for r in records if r.first_token is not None]
    start = min(r.scheduled for r in records)
    end = max(r.end for r in records)
    return ServingResult(
        itl_p50_ms=1000 * statistics.median(itls),
        ttft_p50_ms=1000 * statistics.median(ttfts),
        output_tokens_per_s=sum(r.output_tokens for r in records) / (end - start),
    )


def _residual(sim: float, published: float) -> str:
    return f"{100 * (sim - published) / published:+.1f}%"


def _compare(published: float | None, simulated: float, fmt: str) -> list[str]:
    """Cells: published, simulated, residual (blank where nothing was published)."""
    if published is None:
        return ["", fmt.format(simulated), ""]
    return [fmt.format(published), fmt.format(simulated), _residual(simulated, published)]


def report() -> str:
    lines = [
        "### KV pool at start-up (GPU blocks of 16 tokens)",
        "",
        "| source | model | GPU (CUDA total) | max_model_len, util | published | sizing | residual | note |",
        "|---|---|---|---|---:|---:|---:|---|",
    ]
    for case in KV_POOL_CASES:
        blocks = kv_pool_blocks(case)
        lines.append(
            f"| {case.source} | {case.model} | {case.gpu.name} ({case.gpu.cuda_total_memory_bytes / GIB:.2f} GiB) "
            f"| {case.max_model_len}, {case.gpu_memory_utilization} | {case.published_blocks:,} | {blocks:,} | "
            f"{_residual(blocks, case.published_blocks)} | {case.note} |"
        )
    lines += [
        "",
        "### Weights at start-up (quantized checkpoints)",
        "",
        "| source | model | published GiB | sizing GiB | residual |",
        "|---|---|---:|---:|---:|",
    ]
    for weights in WEIGHTS_CASES:
        gib = weights_gib(weights)
        lines.append(
            f"| {weights.source} | {weights.model} | {weights.published_gib:.2f} | {gib:.2f} | "
            f"{_residual(gib, weights.published_gib)} |"
        )
    lines += [
        "",
        "### Decode latency and throughput (closed loop, --ignore-eos)",
        "",
        "| source | case | C | ITL p50 published | ITL p50 sim | residual | out tok/s published "
        "| out tok/s sim | residual | TTFT p50 published | TTFT p50 sim | residual |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case in SERVING_CASES:
        result = simulate(case)
        cells = [
            case.source,
            f"{case.model} on {case.gpu.name}, {case.input_len} in / {case.output_len} out",
            str(case.concurrency),
            *_compare(case.published_itl_ms, result.itl_p50_ms, "{:.1f}"),
            *_compare(case.published_output_tokens_per_s, result.output_tokens_per_s, "{:.0f}"),
            *_compare(case.published_ttft_ms, result.ttft_p50_ms, "{:.1f}"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(report() + "\n")
