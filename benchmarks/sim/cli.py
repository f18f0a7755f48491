"""`python -m benchmarks.sim`: serve a simulated vLLM engine on a port, or, with --virtual, answer what a
load point against it would measure, computed on its virtual clock (virtual.py) in seconds.

    python -m benchmarks.sim --model Qwen/Qwen2.5-0.5B-Instruct --port 8000
    python -m benchmarks.sim --virtual --model Qwen/Qwen2.5-1.5B-Instruct --concurrency 8 --requests 64

The server flags are vLLM's; --virtual adds a load point's (the load generator's: concurrency or
rate, requests, lengths, EOS, shared prefixes; --seed seeds the server and the point, as g6 does).
Every --virtual figure is GPU time. Bad input: one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from typing import NoReturn

import uvicorn
from pydantic import ValidationError

from facts.catalogue import GPUS, MODELS, ServingError
from benchmarks.loadgen.errors import LoadgenError
from benchmarks.loadgen.lengths import FORMS, lengths_argument, parse_lengths
from benchmarks.loadgen.spec import LoadSpec
from benchmarks.sim.app import build_app
from benchmarks.sim.config import SimConfig
from benchmarks.sim.virtual import replay

SERVE_ONLY = ("host", "port", "speedup", "watch_stdin")
LOAD = ("concurrency", "rate", "requests", "input_len", "output_len", "eos", "prefix_len", "prefix_groups", "warmup",
        "duration", "api", "json")  # fmt: skip


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, not argparse's usage block: the message names the flag.
        self.exit(2, f"error: {message} (see --help)\n")


def _parser() -> argparse.ArgumentParser:
    defaults = SimConfig(model=next(iter(MODELS)))
    parser = _Parser(prog="python -m benchmarks.sim", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help=f"one of: {', '.join(MODELS)}")
    parser.add_argument("--gpu", default=defaults.gpu, help=f"one of: {', '.join(GPUS)}")
    parser.add_argument("--max-num-seqs", type=int, help="default: vLLM's for the GPU (256 on an L4)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=defaults.gpu_memory_utilization)
    parser.add_argument("--max-model-len", type=int)
    parser.add_argument("--max-num-batched-tokens", type=int, help="default: vLLM's for the GPU (2048 on an L4)")
    parser.add_argument("--quantization", choices=["fp8", "awq", "gptq"])
    parser.add_argument("--kv-cache-dtype", choices=["auto", "fp8"], default=defaults.kv_cache_dtype)
    parser.add_argument("--num-gpu-blocks-override", type=int)
    # vLLM v0.34.0's pair of flags (its serve --help): --enable-prefix-caching | --disable-prefix-caching.
    caching = parser.add_mutually_exclusive_group()
    caching.add_argument("--enable-prefix-caching", dest="enable_prefix_caching", action="store_true",
                         default=defaults.enable_prefix_caching, help="as vLLM: on by default")  # fmt: skip
    caching.add_argument("--disable-prefix-caching", dest="enable_prefix_caching", action="store_false")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    serve = parser.add_argument_group("serving (not with --virtual)")
    serve.add_argument("--host", default=None, help=f"default {defaults.host}")
    serve.add_argument("--port", type=int, default=None, help=f"default {defaults.port}")
    serve.add_argument("--speedup", type=float, default=None,
                       help="divide every simulated duration by this (for fast tests); default 1")  # fmt: skip
    serve.add_argument("--watch-stdin", action="store_true",
                       help="exit as soon as stdin closes: a parent holds it open, so the simulator never outlives it")
    load = parser.add_argument_group("--virtual: one load point, answered on the virtual clock")
    load.add_argument("--virtual", action="store_true", help="replay the point on the engine's virtual clock and print its figures")
    arrival = load.add_mutually_exclusive_group()
    arrival.add_argument("--concurrency", type=int, help="closed loop: requests in flight")
    arrival.add_argument("--rate", type=float, help="open loop: Poisson arrivals per second")
    load.add_argument("--requests", type=int, default=64, help="counted requests (default 64)")
    load.add_argument("--input-len", type=lengths_argument, default=parse_lengths("256"), help=f"prompt tokens: {FORMS} (default 256)")
    load.add_argument("--output-len", type=lengths_argument, default=parse_lengths("128"), help=f"output tokens: {FORMS} (default 128)")
    load.add_argument("--eos", action="store_true", help="requests stop at EOS: --output-len is the cap (max_tokens)")
    load.add_argument("--prefix-len", type=int, default=0, help="tokens every prompt of a group starts with")
    load.add_argument("--prefix-groups", type=int, default=1, help="groups of shared prefixes, requests dealt in turn")
    load.add_argument("--warmup", type=int, help="uncounted requests first (default: one per slot, or one second of arrivals)")
    load.add_argument("--duration", type=float, help="stop sending after this many seconds")
    load.add_argument("--api", choices=["completions", "chat"], default="completions")
    load.add_argument("--json", action="store_true", help="print the point and the server's figures as JSON")
    return parser


def config_from_flags(flags: list[str]) -> SimConfig:
    """The SimConfig a `python -m benchmarks.sim` command line starts, from its server flags."""
    return _config(vars(_parser().parse_args(flags)))


def _config(args: dict[str, object]) -> SimConfig:
    server = {k: v for k, v in args.items() if k not in LOAD and k not in ("virtual", "watch_stdin") and v is not None}
    return SimConfig(**server)


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


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = vars(parser.parse_args(argv))
    if args["virtual"]:
        return _virtual(args)
    given = [f"--{k.replace('_', '-')}" for k in LOAD if args[k] != parser.get_default(k)]
    if given:
        return _fail(f"{', '.join(given)}: load flags, for --virtual only")
    if args["watch_stdin"]:
        _exit_when_stdin_closes()
    try:
        config = _config(args)
        app = build_app(config)
    except (ValidationError, ServingError) as exc:
        return _fail(str(exc))
    sizing = config.sizing()
    print(
        f"simulated vLLM: {sizing.model} on {sizing.gpu}; GPU KV cache size: {sizing.kv_cache_tokens:,} tokens; "
        f"maximum concurrency for {sizing.max_model_len:,} tokens per request: {sizing.max_concurrency:.2f}x",
        file=sys.stderr,
    )
    uvicorn.run(app, host=config.host, port=config.port, log_level="warning")
    return 0


def _virtual(args: dict[str, object]) -> int:
    serving = [f"--{k.replace('_', '-')}" for k in SERVE_ONLY if args[k] not in (None, False)]
    if serving:
        return _fail(f"{', '.join(serving)}: no server runs with --virtual (its figures are GPU time)")
    if args["concurrency"] is None and args["rate"] is None:
        return _fail("--virtual needs --concurrency N (closed loop) or --rate R (open-loop Poisson)")
    try:
        config = _config(args)
        sizing = config.sizing()
        spec = LoadSpec(
            base_url="http://virtual", model=config.model, api=args["api"], input_len=args["input_len"],
            output_len=args["output_len"], eos=args["eos"], max_model_len=sizing.max_model_len,
            prefix_len=args["prefix_len"], prefix_groups=args["prefix_groups"], concurrency=args["concurrency"],
            rate=args["rate"], requests=args["requests"], duration_s=args["duration"], warmup=args["warmup"],
            seed=config.seed,
        )  # fmt: skip
        plan = spec.plan()
    except (ValidationError, ServingError, LoadgenError) as exc:
        return _fail(_one_line(exc))
    stats, server = replay(plan, config).point(spec)
    if args["json"]:
        drop = {"series"}
        print(json.dumps({"config": config.model_dump(exclude={"host", "port", "speedup"}), "load": spec.model_dump(mode="json"),
                          "point": stats.model_dump(mode="json"),
                          "server": None if server is None else server.model_dump(mode="json", exclude=drop)}, indent=2))  # fmt: skip
        return 0
    print(_figures(config, spec, stats, server, sizing.num_gpu_blocks))
    return 0


def _one_line(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(f"--{'.'.join(map(str, e['loc'])).replace('_', '-')}: {e['msg']}" for e in exc.errors())
    return str(exc)


def _ms(summary: object) -> str:
    if summary is None:
        return "none completed"
    return "   ".join(f"{q} {getattr(summary, q):,.1f}" for q in ("p50", "p90", "p99"))


def _figures(config: SimConfig, spec: LoadSpec, stats: object, server: object, blocks: int) -> str:
    load = f"closed loop, concurrency {spec.concurrency}" if spec.concurrency else f"open loop, Poisson {spec.rate:g}/s"
    lines = [
        f"{config.model} on the simulated {config.gpu}, virtual clock (GPU time, no host in it): {spec.requests} requests, "
        f"{load}, input {spec.input_len.describe()}, output {spec.output_len.describe()}{' (cap, EOS)' if spec.eos else ''}",
        f"  completed     {stats.completed} ({stats.failed} failed{': ' + str(stats.failures) if stats.failed else ''})",
        f"  throughput    {stats.requests_per_s:,.2f} req/s, {stats.output_tokens_per_s:,.0f} output tok/s",
        f"  TTFT ms       {_ms(stats.ttft_ms)}",
        f"  ITL ms        {_ms(stats.itl_ms)}",
        f"  E2E ms        {_ms(stats.e2e_ms)}",
    ]
    if server is not None:
        rate = server.prefix_cache_hits / server.prefix_cache_queries if server.prefix_cache_queries else None
        hits = "prefix caching off" if not config.enable_prefix_caching else (
            "no lookups" if rate is None else f"{rate:.1%} of {server.prefix_cache_queries:,.0f} prompt tokens hit")
        lines += [
            f"  prefix cache  {hits}",
            f"  KV cache      peak {server.kv_cache_usage.max:.1%} of {blocks:,} blocks; {server.preemptions:,.0f} preemptions",
            f"  batch         {server.running.mean:,.1f} running on average (max {server.running.max:,.0f}), "
            f"{server.waiting.mean:,.1f} waiting; DRAM active {server.dram_active.mean:.2f}",
        ]  # fmt: skip
    return "\n".join(lines)
