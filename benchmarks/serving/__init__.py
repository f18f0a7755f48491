"""Serving arithmetic for the g6 lab: KV-cache sizing and the decode roofline, over the GPU and model
catalogue of `facts.catalogue` (re-exported here)."""

from facts.catalogue import GPUS, MODELS, GpuSpec, ModelSpec, ServingError, get_gpu, get_model
from benchmarks.serving.sizing import (
    RooflinePoint,
    Sizing,
    decode_step_time_s,
    kv_bytes_per_token,
    prefill_time_s,
    roofline,
    size,
    weight_bytes,
)

__all__ = [
    "GPUS",
    "MODELS",
    "GpuSpec",
    "ModelSpec",
    "RooflinePoint",
    "ServingError",
    "Sizing",
    "decode_step_time_s",
    "get_gpu",
    "get_model",
    "kv_bytes_per_token",
    "prefill_time_s",
    "roofline",
    "size",
    "weight_bytes",
]
