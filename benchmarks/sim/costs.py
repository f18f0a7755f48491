"""Time one engine step of the simulated backend: the roofline of benchmarks.serving plus the
efficiency and overhead constants fitted to published vLLM measurements (docs/calibration.md).

A step runs a batch of sequences, each computing `new_tokens` tokens after `cached_tokens` already
in the KV cache (a decode is one new token; a prefill chunk is many). Its duration:

    STEP_OVERHEAD_S + PER_SEQUENCE_OVERHEAD_S x sequences
      + max(bytes moved / achieved bandwidth,
            FLOPs / (peak x COMPUTE_EFFICIENCY) + activation bytes / achieved bandwidth)

Bytes moved are the weights, every sequence's cached KV read, the new tokens' KV written and the
new tokens' activations streamed by the elementwise kernels between the matmuls (norms, residual
adds, rotary, SiLU-and-mul). Those kernels run one after another with the matmuls, so in a
compute-bound step (a prefill chunk) their time adds to the matmuls' instead of hiding under it.
For a small model they are a large share of a prefill: Qwen2.5-0.5B's hidden size is 896, so its
matmuls are short while the per-token activation traffic is not.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.serving.sizing import Sizing, dtype_bytes, prefill_flops

# Achieved fraction of datasheet memory bandwidth on a decode step. Fitted jointly with
# STEP_OVERHEAD_S to two single-stream decode figures: Qwen2.5-0.5B on an L4 (ITL 5.1 ms) and
# Llama-3.1-8B on an A100-40GB (75 tokens/s); see docs/calibration.md.
BANDWIDTH_EFFICIENCY = 0.77
# Fixed cost of a step that is not weight/KV traffic: kernel launches, scheduler, sampling.
STEP_OVERHEAD_S = 0.8e-3
# Extra cost per scheduled sequence (sampling, output processing); fitted with ACTIVATION_PASSES to
# the rise of the L4 Qwen2.5-0.5B ITL from 5.1 ms at concurrency 1 to 7.1 ms at 32.
PER_SEQUENCE_OVERHEAD_S = 38e-6
# Achieved fraction of dense tensor FLOP/s in the matmuls of a prefill chunk. Chosen between the L4
# Qwen2.5-0.5B throughput points and the A100 Llama-3.1-8B point at concurrency 8 (best above
# 0.8), where prefill stalls dominate; residuals in docs/calibration.md.
COMPUTE_EFFICIENCY = 0.6
# How many times a token's activations ((intermediate + hidden) elements per layer, in the model
# dtype) cross memory in the elementwise kernels of one forward pass: two RMSNorms, two residual
# adds, rotary on q and k, SiLU-and-mul over the gate/up output, the attention output layout.
# Counting reads and writes that is about 7 passes; fitted (with REQUEST_OVERHEAD_S) to the TTFT
# p50 of the L4 Qwen2.5-0.5B source at concurrency 1..32.
ACTIVATION_PASSES = 7
# Time from a request's arrival at the HTTP server to the engine seeing it (tokenisation,
# API-server to engine-core hop). Fitted to the L4 Qwen2.5-0.5B TTFT at concurrency 1 (27 ms)
# minus the simulated prefill step.
REQUEST_OVERHEAD_S = 20e-3


@dataclass(frozen=True)
class ScheduledWork:
    """One sequence's share of a step."""

    new_tokens: int
    cached_tokens: int


@dataclass(frozen=True)
class StepCost:
    duration_s: float
    memory_time_s: float
    compute_time_s: float
    bytes_moved: float  # weights, KV read and written, activations: what crosses the memory interface


def step_cost(sizing: Sizing, work: list[ScheduledWork]) -> StepCost:
    bandwidth = sizing.memory_bandwidth_bytes_per_s * BANDWIDTH_EFFICIENCY
    kv = sizing.kv_bytes_per_token
    # Attention reads each sequence's whole context (cached plus new) and writes the new tokens' KV.
    kv_bytes = sum((w.cached_tokens + 2 * w.new_tokens) * kv for w in work)
    activation_bytes = (
        sum(w.new_tokens for w in work)
        * sizing.activation_elements_per_token
        * ACTIVATION_PASSES
        * dtype_bytes(sizing.dtype)
    )
    moved = sizing.decode_weight_bytes + kv_bytes + activation_bytes
    memory = moved / bandwidth
    flops = sum(prefill_flops(sizing, w.new_tokens, w.cached_tokens) for w in work)
    compute = flops / (sizing.peak_flops * COMPUTE_EFFICIENCY) + activation_bytes / bandwidth
    duration = STEP_OVERHEAD_S + PER_SEQUENCE_OVERHEAD_S * len(work) + max(memory, compute)
    return StepCost(duration_s=duration, memory_time_s=memory, compute_time_s=compute, bytes_moved=moved)
