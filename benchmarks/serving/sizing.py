"""Serving arithmetic: weight bytes, KV bytes per token, the KV pool vLLM allocates at start-up, and
the decode/prefill roofline.

KV pool, as vLLM's start-up memory profile computes it:

    budget       = gpu_memory_utilization x CUDA total memory
    kv_cache     = budget - weights - activation_peak - non_torch
    num_blocks   = floor(kv_cache / (block_size x kv_bytes_per_token))
    kv_tokens    = num_blocks x block_size

activation_peak is the larger of the two profiling passes vLLM runs (they do not overlap):
  * the forward pass over `max_num_batched_tokens` tokens, whose live tensors per token are about
    3 x intermediate (gate/up output and the activated product) + 2.8 x hidden elements, in the
    model dtype (fitted to vLLM's logged peaks for Llama-3.1-8B at 20k and 29k tokens);
  * the sampler pass over `max_num_seqs` rows of fp32 logits, with SAMPLER_LOGIT_COPIES copies
    alive at once (softmax, sorted top-p/top-k values, indices), fitted to Qwen2.5-1.5B's log.
non_torch is the CUDA context share torch does not track; docs/calibration.md lists the sources.

Decode roofline: a step over `batch` sequences of `context` tokens reads every weight once and each
sequence's KV once, and does 2 FLOPs per matmul weight per sequence:

    step >= max((weight_bytes + batch x context x kv_bytes_per_token) / bandwidth,
                (2 x matmul_params + 4 x layers x heads x head_dim x context) x batch / FLOP/s)
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from facts.catalogue import GIB, GpuSpec, ModelSpec, ServingError

DTYPE_BYTES: dict[str, float] = {"bfloat16": 2, "float16": 2, "float32": 4}
# Weight bytes per quantized linear weight. fp8: 1 byte plus a per-channel scale (negligible).
# awq/gptq: 4-bit weights with one fp16 scale and one 4-bit zero point per group of 128 weights,
# 0.5 + (2 + 0.5) / 128 bytes. Embeddings, lm_head and norms stay in the model dtype, as in vLLM.
QUANTIZED_WEIGHT_BYTES: dict[str, float] = {"fp8": 1.0, "awq": 0.5 + 2.5 / 128, "gptq": 0.5 + 2.5 / 128}
KV_DTYPE_BYTES: dict[str, float] = {"fp8": 1}

BLOCK_SIZE = 16
# vLLM's defaults for the OpenAI server (EngineArgs.get_batch_defaults, V1 engine): 256 sequences
# and a 2048-token scheduling budget per step (chunked prefill); GPUs with >= 70 GiB that are not
# A100s get 1024 and 8192.
DEFAULT_MAX_NUM_SEQS = 256
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
LARGE_GPU_MAX_NUM_SEQS = 1024
LARGE_GPU_MAX_NUM_BATCHED_TOKENS = 8192
LARGE_GPU_BYTES = 70 * GIB

# Live activation elements per profiled token, in units of intermediate and hidden size.
ACTIVATION_INTERMEDIATE_FACTOR = 3.0
ACTIVATION_HIDDEN_FACTOR = 2.8
# fp32 logits copies alive at the sampler's peak during the profile run.
SAMPLER_LOGIT_COPIES = 9.7
# Memory outside torch's allocator during the profile (CUDA context share, cuBLAS workspace) for a
# single-GPU engine, as vLLM logs it ("non_torch_memory takes 0.05GiB").
NON_TORCH_BYTES = int(0.05 * GIB)


class Sizing(BaseModel):
    """What a vLLM engine for this model on this GPU allocates at start-up, plus roofline inputs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    gpu: str
    dtype: str
    quantization: str | None
    kv_cache_dtype: str
    max_model_len: int
    gpu_memory_utilization: float
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    parameter_count: int
    weight_bytes: int
    kv_bytes_per_token: int
    gpu_total_memory_bytes: int
    memory_budget_bytes: int
    activation_peak_bytes: int
    non_torch_bytes: int
    kv_cache_bytes: int
    num_gpu_blocks: int
    kv_cache_tokens: int
    max_concurrency: float
    # Roofline inputs, kept here so a Sizing alone answers step-time questions.
    decode_weight_bytes: int = Field(description="weight bytes streamed from memory per decode step")
    flops_per_token: float = Field(description="2 x matmul parameters")
    attention_flops_per_token_per_context: float = Field(
        description="4 x layers x heads x head_dim: QK^T and AV FLOPs per token per context token"
    )
    memory_bandwidth_bytes_per_s: float
    peak_flops: float = Field(description="dense FLOP/s of the compute path the weights use")
    activation_elements_per_token: int = Field(
        0,
        description="(intermediate + hidden) x layers: the activation elements one token produces in the "
        "decoder layers, which elementwise kernels stream through memory; 0 in results saved before it existed",
    )


class RooflinePoint(BaseModel):
    """Lower bound on one decode step for `batch` sequences of `context_len` tokens."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    batch: int
    context_len: int
    memory_time_s: float
    compute_time_s: float
    step_time_s: float
    tokens_per_s_per_stream: float
    tokens_per_s_total: float
    bound: Literal["memory-bandwidth", "compute"]


def dtype_bytes(dtype: str) -> float:
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise ServingError(f"unknown dtype {dtype!r}; allowed: {', '.join(DTYPE_BYTES)}") from None


def _weight_element_bytes(quantization: str | None, dtype: str) -> float:
    if quantization is None:
        return dtype_bytes(dtype)
    try:
        return QUANTIZED_WEIGHT_BYTES[quantization]
    except KeyError:
        raise ServingError(
            f"unknown quantization {quantization!r}; allowed: none, {', '.join(QUANTIZED_WEIGHT_BYTES)}"
        ) from None


def weight_bytes(model: ModelSpec, *, dtype: str = "bfloat16", quantization: str | None = None) -> int:
    """Bytes of all weights on the GPU; quantization shrinks only the decoder layers' matmuls.

    Without a `quantization` flag a quantized checkpoint (AWQ, GPTQ) keeps its own format.
    """
    # Embeddings, lm_head and norms come from the architecture; with a parameter-count override the
    # remainder is taken to be the layers' matmuls.
    rest = model.embedding_parameters + model.lm_head_parameters + model.small_parameters
    linear = max(0, model.parameter_count - rest)
    if quantization is None and model.quantization is not None:
        per_weight = model.quantization.bytes_per_weight
    else:
        per_weight = _weight_element_bytes(quantization, dtype)
    return int(linear * per_weight + rest * dtype_bytes(dtype))


def kv_bytes_per_token(model: ModelSpec, *, dtype: str = "bfloat16", kv_cache_dtype: str = "auto") -> int:
    """2 (K and V) x layers x KV heads x head_dim x bytes per element."""
    if kv_cache_dtype == "auto":
        element = dtype_bytes(dtype)
    elif kv_cache_dtype in KV_DTYPE_BYTES:
        element = KV_DTYPE_BYTES[kv_cache_dtype]
    else:
        raise ServingError(f"unknown kv_cache_dtype {kv_cache_dtype!r}; allowed: auto, fp8")
    return int(2 * model.num_layers * model.num_kv_heads * model.head_dim * element)


def activation_peak_bytes(
    model: ModelSpec, *, dtype: str, max_num_batched_tokens: int, max_num_seqs: int
) -> int:
    per_token = (
        ACTIVATION_INTERMEDIATE_FACTOR * model.intermediate_size + ACTIVATION_HIDDEN_FACTOR * model.hidden_size
    ) * dtype_bytes(dtype)
    forward = max_num_batched_tokens * per_token
    sampler = max_num_seqs * model.vocab_size * 4 * SAMPLER_LOGIT_COPIES
    return int(max(forward, sampler))


def vllm_default_limits(gpu: GpuSpec) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) that `vllm serve` picks on this GPU."""
    if gpu.cuda_total_memory_bytes >= LARGE_GPU_BYTES and "a100" not in gpu.name:
        return LARGE_GPU_MAX_NUM_SEQS, LARGE_GPU_MAX_NUM_BATCHED_TOKENS
    return DEFAULT_MAX_NUM_SEQS, DEFAULT_MAX_NUM_BATCHED_TOKENS


def _peak_flops(gpu: GpuSpec, quantization: str | None) -> float:
    # fp8 checkpoints run fp8 GEMMs where the GPU has them (W8A8); 4-bit AWQ/GPTQ kernels
    # dequantize to 16 bits and multiply at the bf16 rate (W4A16).
    if quantization == "fp8" and gpu.fp8_flops is not None:
        return gpu.fp8_flops
    return gpu.bf16_flops


def size(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    max_model_len: int | None = None,
    gpu_memory_utilization: float = 0.9,
    dtype: str = "bfloat16",
    quantization: str | None = None,
    kv_cache_dtype: str = "auto",
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    num_gpu_blocks_override: int | None = None,
) -> Sizing:
    """Size a vLLM engine; raises ServingError where vLLM would refuse to start.

    max_num_seqs and max_num_batched_tokens default to what vLLM picks on this GPU.
    """
    default_seqs, default_tokens = vllm_default_limits(gpu)
    max_num_seqs = default_seqs if max_num_seqs is None else max_num_seqs
    max_num_batched_tokens = default_tokens if max_num_batched_tokens is None else max_num_batched_tokens
    if not 0 < gpu_memory_utilization <= 1:
        raise ServingError(
            f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}"
        )
    if max_num_seqs < 1 or max_num_batched_tokens < 1:
        raise ServingError(
            f"max_num_seqs and max_num_batched_tokens must be >= 1, got {max_num_seqs} and "
            f"{max_num_batched_tokens}"
        )
    if max_model_len is None:
        max_model_len = model.max_position_embeddings
    if not 0 < max_model_len <= model.max_position_embeddings:
        raise ServingError(
            f"max_model_len {max_model_len} is outside 1..{model.max_position_embeddings} "
            f"(max_position_embeddings of {model.name})"
        )
    weights = weight_bytes(model, dtype=dtype, quantization=quantization)
    if quantization is None and model.quantization is not None:
        quantization = model.quantization.method  # what the engine runs: the checkpoint's own method
    kv_per_token = kv_bytes_per_token(model, dtype=dtype, kv_cache_dtype=kv_cache_dtype)
    budget = int(gpu_memory_utilization * gpu.cuda_total_memory_bytes)
    activation = activation_peak_bytes(
        model, dtype=dtype, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs
    )
    kv_cache = budget - weights - activation - NON_TORCH_BYTES
    if num_gpu_blocks_override is not None:
        num_blocks = num_gpu_blocks_override
        kv_cache = num_blocks * BLOCK_SIZE * kv_per_token
    else:
        num_blocks = max(0, math.floor(kv_cache / (BLOCK_SIZE * kv_per_token)))
    if num_blocks <= 0:
        raise ServingError(
            f"no memory left for the KV cache of {model.name} on {gpu.name}: budget "
            f"{budget / GIB:.2f} GiB ({gpu_memory_utilization} x {gpu.cuda_total_memory_bytes / GIB:.2f} GiB) "
            f"minus weights {weights / GIB:.2f} GiB, activations {activation / GIB:.2f} GiB and "
            f"non-torch {NON_TORCH_BYTES / GIB:.2f} GiB; raise gpu_memory_utilization or quantize"
        )
    kv_tokens = num_blocks * BLOCK_SIZE
    if kv_tokens < max_model_len:
        raise ServingError(
            f"vLLM would refuse to start: max_model_len {max_model_len} is larger than the "
            f"{kv_tokens} tokens the KV cache can hold on {gpu.name}; lower max_model_len to at most "
            f"{kv_tokens} or raise gpu_memory_utilization"
        )
    # An untied input embedding is only gathered from, never streamed whole, on a decode step.
    untied_embedding = 0 if model.tie_word_embeddings else int(model.embedding_parameters * dtype_bytes(dtype))
    decode_weights = weights - untied_embedding
    return Sizing(
        model=model.name,
        gpu=gpu.name,
        dtype=dtype,
        quantization=quantization,
        kv_cache_dtype=kv_cache_dtype,
        max_model_len=max_model_len,
        gpu_memory_utilization=gpu_memory_utilization,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        block_size=BLOCK_SIZE,
        parameter_count=model.parameter_count,
        weight_bytes=weights,
        kv_bytes_per_token=kv_per_token,
        gpu_total_memory_bytes=gpu.cuda_total_memory_bytes,
        memory_budget_bytes=budget,
        activation_peak_bytes=activation,
        non_torch_bytes=NON_TORCH_BYTES,
        kv_cache_bytes=kv_cache,
        num_gpu_blocks=num_blocks,
        kv_cache_tokens=kv_tokens,
        max_concurrency=kv_tokens / max_model_len,
        decode_weight_bytes=decode_weights,
        flops_per_token=2.0 * model.matmul_parameters,
        attention_flops_per_token_per_context=4.0 * model.num_layers * model.num_attention_heads * model.head_dim,
        memory_bandwidth_bytes_per_s=gpu.memory_bandwidth_bytes_per_s,
        peak_flops=_peak_flops(gpu, quantization),
        activation_elements_per_token=(model.intermediate_size + model.hidden_size) * model.num_layers,
    )


def decode_memory_time_s(sizing: Sizing, batch: int, context_len: int) -> float:
    return (sizing.decode_weight_bytes + batch * context_len * sizing.kv_bytes_per_token) / (
        sizing.memory_bandwidth_bytes_per_s
    )


def decode_compute_time_s(sizing: Sizing, batch: int, context_len: int) -> float:
    per_token = sizing.flops_per_token + sizing.attention_flops_per_token_per_context * context_len
    return per_token * batch / sizing.peak_flops


def decode_step_time_s(sizing: Sizing, batch: int, context_len: int) -> float:
    """Lower bound on one decode step: memory traffic or FLOPs, whichever takes longer."""
    return max(decode_memory_time_s(sizing, batch, context_len), decode_compute_time_s(sizing, batch, context_len))


def prefill_flops(sizing: Sizing, prompt_tokens: int, context_start: int = 0) -> float:
    """FLOPs to prefill `prompt_tokens` tokens after `context_start` already-cached ones.

    Token i attends to context_start + i earlier tokens, so attention costs the per-context rate
    times the sum of those lengths (causal: about n^2 / 2).
    """
    n = prompt_tokens
    attended = n * context_start + n * (n + 1) / 2
    return sizing.flops_per_token * n + sizing.attention_flops_per_token_per_context * attended


def prefill_time_s(sizing: Sizing, prompt_tokens: int) -> float:
    """Lower bound on prefilling a prompt alone: compute-bound for any realistic length."""
    compute = prefill_flops(sizing, prompt_tokens) / sizing.peak_flops
    memory = (sizing.decode_weight_bytes + prompt_tokens * sizing.kv_bytes_per_token) / (
        sizing.memory_bandwidth_bytes_per_s
    )
    return max(compute, memory)


def roofline(sizing: Sizing, batch_sizes: list[int], context_len: int) -> list[RooflinePoint]:
    """Decode roofline per batch size at a fixed context length per sequence."""
    points = []
    for batch in batch_sizes:
        if batch < 1:
            raise ServingError(f"batch sizes must be >= 1, got {batch}")
        memory = decode_memory_time_s(sizing, batch, context_len)
        compute = decode_compute_time_s(sizing, batch, context_len)
        step = max(memory, compute)
        points.append(
            RooflinePoint(
                batch=batch,
                context_len=context_len,
                memory_time_s=memory,
                compute_time_s=compute,
                step_time_s=step,
                tokens_per_s_per_stream=1.0 / step,
                tokens_per_s_total=batch / step,
                bound="memory-bandwidth" if memory >= compute else "compute",
            )
        )
    return points
