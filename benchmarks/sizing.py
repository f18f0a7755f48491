"""`python -m benchmarks.sizing`: KV-cache pool, max concurrency and decode roofline for a model on a GPU.

Example:
    python -m benchmarks.sizing --model Qwen/Qwen2.5-1.5B-Instruct --gpu l4 \
        --max-model-len 4096 --gpu-memory-utilization 0.9 --json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from facts.catalogue import GIB, GPUS, ModelSpec, ServingError, get_gpu, get_model
from benchmarks.serving.sizing import (
    DTYPE_BYTES,
    QUANTIZED_WEIGHT_BYTES,
    RooflinePoint,
    Sizing,
    roofline,
    size,
)

DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DEFAULT_CONTEXT_LEN = 1024


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sizing", description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", help="a catalogue model name, e.g. Qwen/Qwen2.5-1.5B-Instruct")
    which.add_argument("--model-config", type=Path, help="a Hugging Face config.json for any other model")
    parser.add_argument("--gpu", default="l4", help=f"one of {', '.join(GPUS)} (default l4)")
    parser.add_argument("--max-model-len", type=int, help="default: the model's max_position_embeddings")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--dtype", choices=sorted(DTYPE_BYTES), help="default: the model's torch_dtype")
    parser.add_argument("--quantization", choices=sorted(QUANTIZED_WEIGHT_BYTES))
    parser.add_argument("--kv-cache-dtype", choices=["auto", "fp8"], default="auto")
    parser.add_argument("--max-num-seqs", type=int, help="default: vLLM's for the GPU (256 on an L4)")
    parser.add_argument(
        "--max-num-batched-tokens", type=int, help="default: vLLM's for the GPU (2048 on an L4)"
    )
    parser.add_argument(
        "--batch-sizes",
        default=",".join(map(str, DEFAULT_BATCH_SIZES)),
        help="comma-separated decode batch sizes for the roofline",
    )
    parser.add_argument(
        "--context-len",
        type=int,
        default=DEFAULT_CONTEXT_LEN,
        help="tokens in context per sequence for the roofline (capped at max-model-len)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parser


def _batch_sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ServingError(f"--batch-sizes must be comma-separated integers, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise ServingError(f"--batch-sizes must list integers >= 1, got {text!r}")
    return sizes


def _table(sizing: Sizing, points: list[RooflinePoint]) -> str:
    rows = [
        ("model", sizing.model),
        ("gpu", sizing.gpu),
        (
            "dtype / quantization / kv dtype",
            f"{sizing.dtype} / {sizing.quantization or 'none'} / {sizing.kv_cache_dtype}",
        ),
        ("parameters", f"{sizing.parameter_count / 1e9:.3f} B"),
        ("weights", f"{sizing.weight_bytes / GIB:.2f} GiB"),
        ("KV bytes per token", f"{sizing.kv_bytes_per_token:,} B"),
        (
            "memory budget",
            f"{sizing.memory_budget_bytes / GIB:.2f} GiB "
            f"({sizing.gpu_memory_utilization} x {sizing.gpu_total_memory_bytes / GIB:.2f} GiB)",
        ),
        ("activation peak (profile)", f"{sizing.activation_peak_bytes / GIB:.2f} GiB"),
        ("non-torch memory", f"{sizing.non_torch_bytes / GIB:.2f} GiB"),
        ("KV cache", f"{sizing.kv_cache_bytes / GIB:.2f} GiB"),
        ("GPU blocks (16 tokens)", f"{sizing.num_gpu_blocks:,}"),
        ("KV cache tokens", f"{sizing.kv_cache_tokens:,}"),
        ("max concurrency", f"{sizing.max_concurrency:.2f}x at {sizing.max_model_len:,} tokens per request"),
    ]
    width = max(len(label) for label, _ in rows)
    lines = [f"{label:<{width}}  {value}" for label, value in rows]
    context = points[0].context_len if points else 0
    lines += ["", f"decode roofline at {context:,} tokens of context per sequence:"]
    lines.append(f"{'batch':>6} {'step ms':>9} {'tok/s/stream':>13} {'tok/s total':>12}  bound")
    for point in points:
        lines.append(
            f"{point.batch:>6} {point.step_time_s * 1e3:>9.2f} {point.tokens_per_s_per_stream:>13.1f} "
            f"{point.tokens_per_s_total:>12.1f}  {point.bound}"
        )
    return "\n".join(lines)


def _load_model(args: argparse.Namespace) -> ModelSpec:
    if args.model_config is not None:
        return ModelSpec.from_config_file(args.model_config)
    try:
        return get_model(args.model)
    except ServingError as e:
        raise ServingError(f"{e}. For another llama/qwen2/mistral-style model pass its config.json with --model-config") from None


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        model = _load_model(args)
        sizing = size(
            model,
            get_gpu(args.gpu),
            max_model_len=args.max_model_len,
            gpu_memory_utilization=args.gpu_memory_utilization,
            dtype=args.dtype or model.torch_dtype,
            quantization=args.quantization,
            kv_cache_dtype=args.kv_cache_dtype,
            max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens,
        )
        points = roofline(sizing, _batch_sizes(args.batch_sizes), min(args.context_len, sizing.max_model_len))
    except ServingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({**sizing.model_dump(), "roofline": [p.model_dump() for p in points]}, indent=2))
    else:
        print(_table(sizing, points))
    return 0


if __name__ == "__main__":
    sys.exit(main())
