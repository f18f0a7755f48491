"""`python -m benchmarks.sim`: serve a simulated vLLM engine on a port."""

from __future__ import annotations

import argparse
import os
import sys
import threading

import uvicorn
from pydantic import ValidationError

from facts.catalogue import GPUS, MODELS, ServingError
from benchmarks.sim.app import build_app
from benchmarks.sim.config import SimConfig


def _parser() -> argparse.ArgumentParser:
    defaults = SimConfig(model=next(iter(MODELS)))
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sim", description=__doc__)
    parser.add_argument("--model", required=True, help=f"one of: {', '.join(MODELS)}")
    parser.add_argument("--gpu", default=defaults.gpu, help=f"one of: {', '.join(GPUS)}")
    parser.add_argument("--max-num-seqs", type=int, help="default: vLLM's for the GPU (256 on an L4)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=defaults.gpu_memory_utilization)
    parser.add_argument("--max-model-len", type=int)
    parser.add_argument("--max-num-batched-tokens", type=int, help="default: vLLM's for the GPU (2048 on an L4)")
    parser.add_argument("--quantization", choices=["fp8", "awq", "gptq"])
    parser.add_argument("--kv-cache-dtype", choices=["auto", "fp8"], default=defaults.kv_cache_dtype)
    parser.add_argument("--num-gpu-blocks-override", type=int)
    # vLLM v0.33.0's pair of flags (its serve --help): --enable-prefix-caching | --disable-prefix-caching.
    caching = parser.add_mutually_exclusive_group()
    caching.add_argument("--enable-prefix-caching", dest="enable_prefix_caching", action="store_true",
                         default=defaults.enable_prefix_caching, help="as vLLM: on by default")  # fmt: skip
    caching.add_argument("--disable-prefix-caching", dest="enable_prefix_caching", action="store_false")
    parser.add_argument("--host", default=defaults.host)
    parser.add_argument("--port", type=int, default=defaults.port)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--speedup", type=float, default=defaults.speedup,
                        help="divide every simulated duration by this (for fast tests)")
    parser.add_argument("--watch-stdin", action="store_true",
                        help="exit as soon as stdin closes: a parent holds it open, so the simulator never outlives it")
    return parser


def _exit_when_stdin_closes() -> None:
    """Read stdin until it closes, then end the process at once: the parent that started it is gone
    (however it ended: its pipe closes with it) or wants it gone; a simulator has nothing to save."""

    def watch() -> None:
        # os.read on the descriptor, not sys.stdin.buffer: a thread blocked in the buffered reader holds
        # its lock, and an interpreter shutting down meanwhile (an early error exit) dies on that lock
        # ("Fatal Python error: _enter_buffered_busy").
        fd = sys.stdin.fileno()
        while os.read(fd, 4096):
            pass
        os._exit(0)

    threading.Thread(target=watch, name="watch-stdin", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    args = vars(_parser().parse_args(argv))
    if args.pop("watch_stdin"):
        _exit_when_stdin_closes()
    try:
        config = SimConfig(**args)
        app = build_app(config)
    except (ValidationError, ServingError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sizing = config.sizing()
    print(
        f"simulated vLLM: {sizing.model} on {sizing.gpu}; GPU KV cache size: {sizing.kv_cache_tokens:,} tokens; "
        f"maximum concurrency for {sizing.max_model_len:,} tokens per request: {sizing.max_concurrency:.2f}x",
        file=sys.stderr,
    )
    uvicorn.run(app, host=config.host, port=config.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
