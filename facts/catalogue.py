"""Catalogue of GPUs and small open models: the hardware and architecture facts the sizing needs.

GPU figures come from the vendors' public datasheets (dense tensor-core throughput, not the
"with sparsity" headline). Model figures come from each model's published config.json on the
Hugging Face Hub; unknown models are read from a config.json with `ModelSpec.from_hf_config`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

GIB = 1024**3


class ServingError(Exception):
    """A catalogue lookup or a sizing request that cannot be answered, with a message saying why."""


class GpuSpec(BaseModel):
    """One GPU's memory, bandwidth and peak dense throughput (per second)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    product_name: str = Field(description="what nvidia-smi / DCGM call the device")
    memory_bytes: int = Field(gt=0, description="datasheet memory size")
    cuda_total_memory_bytes: int = Field(
        gt=0,
        description="total memory as CUDA reports it (what vLLM multiplies by gpu_memory_utilization); "
        "smaller than the datasheet size",
    )
    memory_bandwidth_bytes_per_s: float = Field(gt=0)
    bf16_flops: float = Field(gt=0, description="dense bf16/fp16 tensor FLOP/s")
    fp8_flops: float | None = Field(default=None, description="dense fp8 FLOP/s; None where unsupported")
    int8_ops: float = Field(gt=0, description="dense int8 tensor OP/s")
    tdp_watts: float = Field(gt=0)


def _gib(value: float) -> int:
    return int(value * GIB)


GPUS: dict[str, GpuSpec] = {
    # NVIDIA L4 datasheet (nvidia.com/en-us/data-center/l4): 24 GB GDDR6, 300 GB/s, bf16 121 TFLOPS
    # dense (242 with sparsity), fp8 242.5 dense, int8 242.5 TOPS dense, 72 W. CUDA total 22.03 GiB
    # as reported by torch on an L4 (public benchmark notes, "NVIDIA L4 (22.03 GiB)").
    "l4": GpuSpec(
        name="l4",
        product_name="NVIDIA L4",
        memory_bytes=24 * 10**9,
        cuda_total_memory_bytes=_gib(22.03),
        memory_bandwidth_bytes_per_s=300e9,
        bf16_flops=121e12,
        fp8_flops=242.5e12,
        int8_ops=242.5e12,
        tdp_watts=72,
    ),
    # NVIDIA A10 datasheet (nvidia.com/en-us/data-center/products/a10-gpu): 24 GB GDDR6, 600 GB/s,
    # bf16 125 TFLOPS dense, int8 250 TOPS dense, no fp8, 150 W. AWS's A10G (G5 instances) has the
    # same memory and bandwidth. CUDA total 22.07 GiB as logged by vLLM on a 24 GB A10.
    "a10g": GpuSpec(
        name="a10g",
        product_name="NVIDIA A10G",
        memory_bytes=24 * 10**9,
        cuda_total_memory_bytes=_gib(22.07),
        memory_bandwidth_bytes_per_s=600e9,
        bf16_flops=125e12,
        fp8_flops=None,
        int8_ops=250e12,
        tdp_watts=150,
    ),
    # NVIDIA A100 datasheet (nvidia.com/en-us/data-center/a100), SXM 40 GB: HBM2 1,555 GB/s,
    # bf16 312 TFLOPS dense, int8 624 TOPS dense, no fp8, 400 W. CUDA total 39.39 GiB.
    "a100-40gb": GpuSpec(
        name="a100-40gb",
        product_name="NVIDIA A100-SXM4-40GB",
        memory_bytes=40 * 10**9,
        cuda_total_memory_bytes=_gib(39.39),
        memory_bandwidth_bytes_per_s=1555e9,
        bf16_flops=312e12,
        fp8_flops=None,
        int8_ops=624e12,
        tdp_watts=400,
    ),
    # Same datasheet, SXM 80 GB: HBM2e 2,039 GB/s, 312 TFLOPS bf16 dense, 624 TOPS int8, 400 W.
    # CUDA total 79.15 GiB.
    "a100-80gb": GpuSpec(
        name="a100-80gb",
        product_name="NVIDIA A100-SXM4-80GB",
        memory_bytes=80 * 10**9,
        cuda_total_memory_bytes=_gib(79.15),
        memory_bandwidth_bytes_per_s=2039e9,
        bf16_flops=312e12,
        fp8_flops=None,
        int8_ops=624e12,
        tdp_watts=400,
    ),
    # NVIDIA H100 datasheet (nvidia.com/en-us/data-center/h100), SXM 80 GB: HBM3 3.35 TB/s,
    # bf16 989 TFLOPS dense (1,979 with sparsity), fp8 1,979 dense, int8 1,979 TOPS dense, 700 W.
    # CUDA total 79.11 GiB.
    "h100-80gb": GpuSpec(
        name="h100-80gb",
        product_name="NVIDIA H100 80GB HBM3",
        memory_bytes=80 * 10**9,
        cuda_total_memory_bytes=_gib(79.11),
        memory_bandwidth_bytes_per_s=3.35e12,
        bf16_flops=989e12,
        fp8_flops=1979e12,
        int8_ops=1979e12,
        tdp_watts=700,
    ),
}


class CheckpointQuantization(BaseModel):
    """How a checkpoint's own weights are quantized (config.json `quantization_config`): vLLM reads
    it and picks the kernel itself (awq_marlin / gptq_marlin on Ampere and newer)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: Literal["awq", "gptq"]
    bits: Literal[4, 8]
    group_size: int = Field(gt=0, description="weights sharing one fp16 scale and one zero point")

    @property
    def bytes_per_weight(self) -> float:
        """Packed weight bits plus, per group, an fp16 scale and a zero point of `bits` bits."""
        return self.bits / 8 + (2 + self.bits / 8) / self.group_size

    @property
    def label(self) -> str:
        return f"{self.method} int{self.bits}"


class ModelSpec(BaseModel):
    """Architecture facts of a llama/qwen2/mistral-style decoder (GQA attention, gated MLP)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    num_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    max_position_embeddings: int = Field(gt=0)
    tie_word_embeddings: bool
    qkv_bias: bool = False
    torch_dtype: str = "bfloat16"
    parameter_count_override: int | None = Field(
        default=None, gt=0, description="use instead of the count derived from the architecture"
    )
    quantization: CheckpointQuantization | None = Field(default=None, description="the checkpoint's own")

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelSpec:
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_kv_heads ({self.num_kv_heads})"
            )
        return self

    @property
    def layer_linear_parameters(self) -> int:
        """Weights of the matmuls inside the decoder layers (what weight quantization shrinks)."""
        q = self.num_attention_heads * self.head_dim
        kv = self.num_kv_heads * self.head_dim
        attention = self.hidden_size * (q + 2 * kv) + q * self.hidden_size
        mlp = 3 * self.hidden_size * self.intermediate_size  # gate, up, down
        return self.num_layers * (attention + mlp)

    @property
    def embedding_parameters(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_parameters(self) -> int:
        """Parameters of a separate output projection; 0 when it is the tied input embedding."""
        return 0 if self.tie_word_embeddings else self.embedding_parameters

    @property
    def small_parameters(self) -> int:
        """Norm weights and attention biases: never quantized, negligible for bandwidth."""
        bias = (self.num_attention_heads + 2 * self.num_kv_heads) * self.head_dim if self.qkv_bias else 0
        return self.num_layers * (2 * self.hidden_size + bias) + self.hidden_size

    @property
    def parameter_count(self) -> int:
        if self.parameter_count_override is not None:
            return self.parameter_count_override
        return (
            self.layer_linear_parameters
            + self.embedding_parameters
            + self.lm_head_parameters
            + self.small_parameters
        )

    @property
    def matmul_parameters(self) -> int:
        """Weights multiplied per token: the layers plus the output projection (tied or not).

        The input embedding is a row gather, not a matmul, so an untied embedding adds no FLOPs
        and is not streamed from memory on a decode step.
        """
        return self.parameter_count - self.small_parameters - (
            self.embedding_parameters if not self.tie_word_embeddings else 0
        )

    @classmethod
    def from_hf_config(cls, config: dict[str, Any], name: str) -> ModelSpec:
        """Read a Hugging Face config.json (llama/qwen2/mistral/phi3-style keys)."""
        required = (
            "num_hidden_layers",
            "hidden_size",
            "num_attention_heads",
            "intermediate_size",
            "vocab_size",
            "max_position_embeddings",
        )
        missing = [key for key in required if key not in config]
        if missing:
            raise ServingError(
                f"config.json for {name!r} lacks {', '.join(missing)}; a llama/qwen2/mistral-style "
                f"decoder config needs {', '.join(required)}"
            )
        heads = config["num_attention_heads"]
        head_dim = config.get("head_dim") or config["hidden_size"] // heads
        quant = config.get("quantization_config")
        try:
            return cls(
                name=name,
                num_layers=config["num_hidden_layers"],
                hidden_size=config["hidden_size"],
                num_attention_heads=heads,
                num_kv_heads=config.get("num_key_value_heads") or heads,
                head_dim=head_dim,
                intermediate_size=config["intermediate_size"],
                vocab_size=config["vocab_size"],
                max_position_embeddings=config["max_position_embeddings"],
                tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
                # Qwen2 always carries q/k/v biases; llama-style configs say so explicitly.
                qkv_bias=config.get("model_type") == "qwen2" or bool(config.get("attention_bias", False)),
                torch_dtype=config.get("torch_dtype") or config.get("dtype") or "bfloat16",
                quantization=None if quant is None else CheckpointQuantization(
                    method=quant.get("quant_method"), bits=quant.get("bits"), group_size=quant.get("group_size")
                ),
            )
        except ValidationError as exc:
            raise ServingError(f"config.json for {name!r} is not a usable decoder config: {exc}") from exc

    @classmethod
    def from_config_file(cls, path: Path) -> ModelSpec:
        try:
            config = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ServingError(f"cannot read model config {path}: {exc}") from exc
        if not isinstance(config, dict):
            raise ServingError(f"model config {path} is not a JSON object")
        return cls.from_hf_config(config, name=config.get("_name_or_path") or path.parent.name or path.stem)


def _hf(name: str, **config: Any) -> ModelSpec:
    return ModelSpec.from_hf_config(config, name)


# Values copied from each model's published config.json on huggingface.co/<name>.
MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        _hf("Qwen/Qwen2.5-0.5B-Instruct", model_type="qwen2", num_hidden_layers=24, hidden_size=896,
            num_attention_heads=14, num_key_value_heads=2, intermediate_size=4864, vocab_size=151936,
            max_position_embeddings=32768, tie_word_embeddings=True, torch_dtype="bfloat16"),
        _hf("Qwen/Qwen2.5-1.5B-Instruct", model_type="qwen2", num_hidden_layers=28, hidden_size=1536,
            num_attention_heads=12, num_key_value_heads=2, intermediate_size=8960, vocab_size=151936,
            max_position_embeddings=32768, tie_word_embeddings=True, torch_dtype="bfloat16"),
        _hf("Qwen/Qwen2.5-3B-Instruct", model_type="qwen2", num_hidden_layers=36, hidden_size=2048,
            num_attention_heads=16, num_key_value_heads=2, intermediate_size=11008, vocab_size=151936,
            max_position_embeddings=32768, tie_word_embeddings=True, torch_dtype="bfloat16"),
        _hf("Qwen/Qwen2.5-7B-Instruct", model_type="qwen2", num_hidden_layers=28, hidden_size=3584,
            num_attention_heads=28, num_key_value_heads=4, intermediate_size=18944, vocab_size=152064,
            max_position_embeddings=32768, tie_word_embeddings=False, torch_dtype="bfloat16"),
        _hf("meta-llama/Llama-3.2-1B-Instruct", model_type="llama", num_hidden_layers=16, hidden_size=2048,
            num_attention_heads=32, num_key_value_heads=8, head_dim=64, intermediate_size=8192,
            vocab_size=128256, max_position_embeddings=131072, tie_word_embeddings=True,
            torch_dtype="bfloat16"),
        _hf("meta-llama/Llama-3.2-3B-Instruct", model_type="llama", num_hidden_layers=28, hidden_size=3072,
            num_attention_heads=24, num_key_value_heads=8, head_dim=128, intermediate_size=8192,
            vocab_size=128256, max_position_embeddings=131072, tie_word_embeddings=True,
            torch_dtype="bfloat16"),
        _hf("microsoft/Phi-3-mini-4k-instruct", model_type="phi3", num_hidden_layers=32, hidden_size=3072,
            num_attention_heads=32, num_key_value_heads=32, intermediate_size=8192, vocab_size=32064,
            max_position_embeddings=4096, tie_word_embeddings=False, torch_dtype="bfloat16"),
        _hf("mistralai/Mistral-7B-Instruct-v0.3", model_type="mistral", num_hidden_layers=32,
            hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
            intermediate_size=14336, vocab_size=32768, max_position_embeddings=32768,
            tie_word_embeddings=False, torch_dtype="bfloat16"),
        _hf("meta-llama/Llama-3.1-8B-Instruct", model_type="llama", num_hidden_layers=32, hidden_size=4096,
            num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336, vocab_size=128256,
            max_position_embeddings=131072, tie_word_embeddings=False, torch_dtype="bfloat16"),
        # The publisher's quantized checkpoints of the default model (FACTS.md, 2026-12-01): the
        # Qwen2.5-1.5B architecture with the decoder layers' matmuls at 4 or 8 bits in groups of 128,
        # embeddings in fp16. The GPTQ-Int8 file (1.81 GB) is 1.34 GB of 8-bit layers plus one 0.47 GB
        # embedding, shared with the output head; the AWQ file (1.61 GB) is 0.68 GB of 4-bit layers plus
        # two such matrices, so its output head is stored apart and sized that way.
        *(
            _hf(f"Qwen/Qwen2.5-1.5B-Instruct-{suffix}", model_type="qwen2", num_hidden_layers=28,
                hidden_size=1536, num_attention_heads=12, num_key_value_heads=2, intermediate_size=8960,
                vocab_size=151936, max_position_embeddings=32768, tie_word_embeddings=tied, torch_dtype="float16",
                quantization_config={"quant_method": method, "bits": bits, "group_size": 128})
            for suffix, method, bits, tied in (
                ("AWQ", "awq", 4, False), ("GPTQ-Int8", "gptq", 8, True), ("GPTQ-Int4", "gptq", 4, True)
            )
        ),
    )
}


def get_gpu(name: str) -> GpuSpec:
    try:
        return GPUS[name.lower()]
    except KeyError:
        raise ServingError(f"unknown GPU {name!r}; known GPUs: {', '.join(GPUS)}") from None


def get_model(name: str) -> ModelSpec:
    if name in MODELS:
        return MODELS[name]
    # Accept the short name without the organisation, e.g. "Qwen2.5-0.5B-Instruct".
    by_short = {key.split("/")[-1].lower(): spec for key, spec in MODELS.items()}
    if name.lower() in by_short:
        return by_short[name.lower()]
    # No flag is named here: the commands that read a config.json for other models add their own.
    raise ServingError(f"unknown model {name!r}; known models: {', '.join(MODELS)}")
