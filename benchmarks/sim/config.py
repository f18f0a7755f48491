"""Configuration of the simulated backend: the same knobs as `vllm serve`, plus seed and speedup."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from facts.catalogue import get_gpu, get_model
from benchmarks.serving.sizing import Sizing, size


class SimConfig(BaseModel):
    """What `python -m benchmarks.sim` accepts; defaults are vLLM's own."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    gpu: str = "l4"
    max_num_seqs: int | None = Field(default=None, ge=1, description="default: vLLM's for the GPU")
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    max_model_len: int | None = Field(default=None, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=1, description="default: vLLM's for the GPU")
    quantization: Literal["fp8", "awq", "gptq"] | None = None
    kv_cache_dtype: Literal["auto", "fp8"] = "auto"
    num_gpu_blocks_override: int | None = Field(default=None, ge=1)
    enable_prefix_caching: bool = Field(default=True, description="vLLM's V1 default: on")
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    seed: int = 0
    speedup: float = Field(default=1.0, gt=0, description="every simulated duration is divided by this")

    def sizing(self) -> Sizing:
        """The engine's start-up sizing; raises ServingError where vLLM would refuse to start."""
        model = get_model(self.model)
        return size(
            model,
            get_gpu(self.gpu),
            max_model_len=self.max_model_len,
            gpu_memory_utilization=self.gpu_memory_utilization,
            dtype=model.torch_dtype,
            quantization=self.quantization,
            kv_cache_dtype=self.kv_cache_dtype,
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            num_gpu_blocks_override=self.num_gpu_blocks_override,
        )
