"""What bounds each g6 point, read from the server's metrics, and its throughput against the roofline.

Order matters: a full KV cache (or preemptions) and a full max-num-seqs batch cap the batch
before the GPU's roofline can; only a point capped by neither is labelled by the roofline.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from benchmarks.g6.config import G6Params
from benchmarks.g6.result import Bound
from benchmarks.metrics import ServerMetrics
from facts.catalogue import GPUS, ServingError, get_gpu, get_model
from benchmarks.serving.sizing import Sizing, roofline, size

# KV use at or above this counts as full: vLLM preempts as soon as a step finds no free block.
KV_FULL = 0.95


def size_for(params: G6Params, max_num_seqs: int | None, model: str | None = None) -> Sizing:
    """What vLLM would allocate for `model` (default: the run's) with the run's server settings;
    ServingError where vLLM would refuse to start, or the model or GPU is not known (each says which)."""
    if params.gpu is None:
        raise ServingError(f"the server's GPU is not known: give --gpu ({', '.join(GPUS)})")
    spec = get_model(model or params.model)
    return size(
        spec,
        get_gpu(params.gpu),
        max_model_len=params.max_model_len,
        gpu_memory_utilization=params.gpu_memory_utilization,
        dtype=spec.torch_dtype,
        quantization=params.quantization,
        max_num_seqs=max_num_seqs,
    )


def predict(params: G6Params, max_num_seqs: int | None, model: str | None = None) -> Sizing | None:
    """size_for(), or None where it has no answer."""
    try:
        return size_for(params, max_num_seqs, model)
    except ServingError:
        return None


def sizing_gap(params: G6Params) -> str | None:
    """Why the run has no sizing (the GPU not given, a model not in the catalogue, a setting vLLM
    would refuse), or None when it has one."""
    try:
        size_for(params, params.max_num_seqs[0])
    except ServingError as exc:
        return str(exc)
    return None


# A queue behind a full batch, as the server's gauges see it: requests waiting in at least half of the
# scrapes on average. One scrape that caught a request between its arrival and its admission (a closed
# loop at concurrency = max-num-seqs does this at every turnover) is not a bound.
QUEUED_MEAN = 0.5


class Analysis(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    bound: Bound
    bound_reason: str
    observed_batch: float | None
    roofline_tokens_per_s: float | None
    roofline_share: float | None


def analyse(
    *,
    output_tokens_per_s: float,
    mean_decoding: float,
    concurrency: int | None,
    server: ServerMetrics | None,
    max_num_seqs: int | None,
    sizing: Sizing | None,
    context_len: int,
) -> Analysis:
    """Label one point; its throughput and the roofline's are both in GPU time.

    The batch compared with the roofline is the client's mean count of decoding requests: exact
    for the window, where the server's running gauge is only sampled once per scrape.
    """
    batch = mean_decoding if mean_decoding > 0 else None
    rf = None
    if sizing is not None and batch is not None:
        rf = roofline(sizing, [max(1, round(batch))], context_len)[0]
    roof = rf.tokens_per_s_total if rf is not None else None
    share = output_tokens_per_s / roof if roof else None
    kv = server.kv_cache_usage if server is not None else None
    preemptions = (server.preemptions or 0) if server is not None else 0
    running = server.running if server is not None else None
    waiting = server.waiting if server is not None else None
    bound: Bound
    if kv is not None and kv.max >= KV_FULL or preemptions > 0:
        kv_text = f"KV cache peaked at {kv.max:.0%}" if kv is not None else "KV cache use unknown"
        bound, reason = "kv-cache", f"{kv_text}, {preemptions:.0f} preemptions"
    elif (max_num_seqs is not None and running and waiting and running.max >= max_num_seqs
          and waiting.mean >= QUEUED_MEAN):  # fmt: skip
        bound = "max-num-seqs"
        reason = (f"{running.max:.0f} running = max-num-seqs with {waiting.mean:.1f} waiting on average "
                  f"(up to {waiting.max:.0f})")  # fmt: skip
    elif max_num_seqs is not None and concurrency is not None and concurrency > max_num_seqs and batch and batch >= 0.9 * max_num_seqs:
        # The client's own evidence, for points too short for the server's gauges to catch a queue.
        bound = "max-num-seqs"
        reason = f"{concurrency} requests offered, decode batch {batch:.1f} held at max-num-seqs {max_num_seqs}"
    elif rf is not None:
        bound = rf.bound
        reason = (
            f"decode step at batch {rf.batch}: memory {rf.memory_time_s * 1e3:.2f} ms vs "
            f"compute {rf.compute_time_s * 1e3:.2f} ms on the roofline"
        )
    else:
        bound, reason = "unknown", "no sizing for this model and GPU, or no completed request"
    return Analysis(
        bound=bound, bound_reason=reason, observed_batch=batch, roofline_tokens_per_s=roof, roofline_share=share
    )
