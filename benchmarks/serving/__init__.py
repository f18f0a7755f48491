"""Serving arithmetic for the g6 lab: GPU and model catalogue, KV-cache sizing and the decode roofline."""

from benchmarks.serving.catalogue import GPUS, MODELS, GpuSpec, ModelSpec, ServingError, get_gpu, get_model
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
