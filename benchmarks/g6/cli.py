"""`python -m benchmarks g6`: vLLM serving measured against the simulator, a server or a stack.

Experiments (--experiment): `sweep` (default) max-num-seqs x concurrency, TTFT against throughput;
`kv` how many sequences of each context length fit in the KV cache, and what paging buys;
`quant` what quantized variants (--variants) buy in memory and throughput and cost in quality;
`cold-start` (a stack only) what the first request of a session waits for when the GPU pool is at zero,
phase by phase, with the settings that shorten it (--settings) and a warm pool's break-even;
`saturation` the open-loop request rate the server holds within the SLOs (--slo-*), searched for;
`prefix` requests sharing a system prompt, with vLLM's prefix cache on and off.

Against a stack (--stack or --outputs) the load generator runs inside the cluster: one Job per
point next to vLLM, on the system pool, its progress and records read back from the pod's log;
this machine reads vLLM's /metrics through the API server. `--client-manifest DIR` writes what it
would create, without touching the cluster. `--target URL` instead sends the load from this
machine to a server it can reach (the simulator, or a server of your own).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from benchmarks.g6.experiments.prefix import PrefixParams
from benchmarks.g6.experiments.table import EXPERIMENTS
from benchmarks.g6.flags import Parser, fraction, lengths, positive, positives, whole, wholes
from benchmarks.g6.incluster import DEFAULT_CPUS
from benchmarks.g6.invocation import Invocation
from benchmarks.g6.resolve import DEFAULT_REPEATS, SIM_SCRAPE_S, SIM_SPEEDUP
from benchmarks.g6.run import execute
from facts.catalogue import GPUS


def parser() -> Parser:
    p = Parser(
        prog="python -m benchmarks g6",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="offline: python -m benchmarks g6 --sim --model Qwen/Qwen2.5-1.5B-Instruct --max-num-seqs 8,32 "
        "--concurrency 1,8,32 --out results\n"
        "        python -m benchmarks g6 --sim --experiment kv --model Qwen/Qwen2.5-1.5B-Instruct --out results\n"
        "        python -m benchmarks g6 --sim --experiment quant --variants bf16,fp8,awq --out results\n"
        "        python -m benchmarks g6 --sim --experiment saturation --slo-ttft-ms 500 --out results\n"
        "        python -m benchmarks g6 --sim --experiment prefix --out results\n"
        "real stack (client in-cluster): python -m benchmarks g6 --stack g6 [--experiment kv|quant|saturation|prefix] "
        "--out results\n"
        "cold start: python -m benchmarks g6 --stack g6 --experiment cold-start --settings "
        "as-configured,image-streaming --repeats 3 --out results\n"
        "autoscale (a stack with autoscaling on): python -m benchmarks g6 --stack g6 --experiment autoscale --peak-rate 40 "
        "--slo-ttft-ms 500 --out results",
    )
    src = p.add_argument_group("target (one of --sim, --target, --stack, --outputs; --target may override a stack's endpoint)")
    src.add_argument("--sim", action="store_true", help="start the simulated vLLM backend for each max-num-seqs value")
    src.add_argument("--virtual", action="store_true",
                     help="with --sim: send no load, replay every point on the simulator's virtual clock (its engine "
                     "without this machine's jitter): the expected answer, in the time the engine takes")  # fmt: skip
    src.add_argument("--target", help="base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000")
    src.add_argument("--stack", help="Pulumi stack: endpoint, model and server parameters from its outputs; "
                     "server settings (max-num-seqs, a variant's model and quantization, the kv experiment's "
                     "memory) change through `pulumi config set` + `pulumi up` and are restored after")  # fmt: skip
    src.add_argument("--outputs", type=Path, help="stack outputs saved as JSON (`pulumi stack output --json --show-secrets`)")
    client = p.add_argument_group("the in-cluster client (with --stack or --outputs and no --target)")
    client.add_argument("--client-manifest", type=Path, metavar="DIR",
                        help="write the ConfigMap and the Jobs the run would create as YAML into DIR, and stop "
                        "(cold-start: its plan, what it scales, changes and puts back)")  # fmt: skip
    client.add_argument("--client-cpus", type=whole(1), default=DEFAULT_CPUS,
                        help=f"CPUs the load generator Job requests: one worker process each (default {DEFAULT_CPUS}, "
                        "which leaves the controllers room on the e2-standard-4 system node; no CPU limit)")  # fmt: skip
    p.add_argument("--model", help="served model name (default: from the stack outputs)")
    p.add_argument("--api", choices=["completions", "chat"], default="completions")
    p.add_argument("--concurrency", type=wholes(1),
                   help="closed-loop concurrency values (sweep: default 1,8,32; quant: 1,64; kv: fixed waves "
                   "at every length instead of the search around the prediction)")  # fmt: skip
    p.add_argument("--rate", type=positives, help="open-loop Poisson request rates per second, instead of --concurrency "
                   "(prefix: the one rate both arms are offered, requests/s of the GPU; default "
                   f"{PrefixParams().rate:g})")  # fmt: skip
    p.add_argument("--max-num-seqs", type=wholes(1), help="server batch sizes to sweep (needs --sim or --stack for more than one)")
    p.add_argument("--input-len", type=lengths, default=lengths("256"),
                   help="prompt tokens per request: N, uniform:LO,HI, lognormal:MEAN,SD or file:PATH (one length "
                   "a line), drawn per request with --seed and clipped to [1, max-model-len - 1]")  # fmt: skip
    p.add_argument("--output-len", type=lengths, default=lengths("128"),
                   help="output tokens per request, in the same forms (ignore_eos; with --eos the cap, max_tokens)")
    p.add_argument("--eos", action="store_true",
                   help="requests stop at EOS: no ignore_eos, --output-len only caps them (the simulator stops each "
                   "at a length uniform between 1 and its cap)")  # fmt: skip
    p.add_argument("--requests", type=whole(1),
                   help="counted requests per point, after the warm-up (default: 8 per concurrent request, at least 64)")
    p.add_argument("--warmup", type=whole(0), help="uncounted requests first (default: one per worker / one second)")
    p.add_argument("--duration", type=positive, help="stop sending after this many seconds per point")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prometheus", help="Prometheus base URL for server metrics (default: scrape /metrics directly)")
    p.add_argument("--scrape-interval", type=positive,
                   help=f"seconds between /metrics scrapes (default 1, {SIM_SCRAPE_S:g} with --sim: its points are short)")  # fmt: skip
    p.add_argument("--slo-ttft-ms", type=positive,
                   help="time to first token a request must meet to count towards goodput, ms of the GPU; its p99 "
                   "limits the cheapest setting and the saturation search")  # fmt: skip
    p.add_argument("--slo-tpot-ms", type=positive,
                   help="time per output token a request must meet to count towards goodput, ms (p99 as above)")
    p.add_argument("--slo-e2e-ms", type=positive,
                   help="end-to-end latency a request must meet to count towards goodput, ms (p99 as above)")
    p.add_argument("--slo-itl-ms", type=positive,
                   help="inter-token latency p99 limit, ms, for the cheapest setting and the saturation search (not per request)")
    p.add_argument("--max-client-lag-ms", type=positive, default=1.0, help="lag p99 above which a point is client-bound")
    p.add_argument("--timeout-connect", type=positive, default=5.0)
    p.add_argument("--timeout-first-token", type=positive, default=120.0)
    p.add_argument("--timeout-total", type=positive, default=600.0)
    p.add_argument("--health-timeout", type=positive, default=1800.0, help="seconds to wait for vLLM after a pulumi up")
    own_memory = "; ".join(f"{name}: default {e.gpu_memory_utilization:g}" for name, e in EXPERIMENTS.items()
                           if e.gpu_memory_utilization is not None)  # fmt: skip
    sim = p.add_argument_group("simulator and sizing")
    sim.add_argument("--gpu", help=f"GPU of the server ({', '.join(GPUS)}); default l4 for --sim, else from the outputs")
    sim.add_argument("--speedup", type=positive, help=f"--sim only: divide simulated time by this (default {SIM_SPEEDUP:g}, real "
                     "time: faster, this machine's CPUs shape the figures; below 1, the simulator runs slower than the GPU)")  # fmt: skip
    sim.add_argument("--gpu-memory-utilization", type=fraction,
                     help=f"the server's ({own_memory}, applied to the server)")  # fmt: skip
    sim.add_argument("--max-model-len", type=whole(1))
    sim.add_argument("--quantization", choices=["fp8", "awq", "gptq"])
    exp = p.add_argument_group("experiments")
    exp.add_argument("--experiment", choices=list(EXPERIMENTS), default="sweep")
    exp.add_argument("--repeats", type=whole(1),
                     help=f"runs of every point, each with its own seed, for the mean and the interval a rerun falls in "
                     f"(default {DEFAULT_REPEATS}; sweep: the grid over again, interleaved; saturation: runs of each held "
                     "rate, pooled; kv: of the deciding waves and the baselines); cold-start: cold "
                     "starts per setting, each from zero (default 3)")  # fmt: skip
    for name, experiment in EXPERIMENTS.items():
        before = len(p._actions)
        experiment.add_flags(p.add_argument_group(f"--experiment {name}"))
        p.owners.update({action.dest: name for action in p._actions[before:]})
    p.add_argument("--out", type=Path, default=Path("results"), help="results go to OUT/g6[-kv|-quant|-cold-start|-saturation|-prefix|-autoscale]-<UTC time>/")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    return p



def parse(argv: list[str]) -> Invocation:
    """The command line, typed once; a flag out of range exits 2 with argparse's one line. Every
    experiment's own flags are set aside: the chosen one's as `given`, the others' as `foreign`."""
    p = parser()
    flags: dict[str, Any] = vars(p.parse_args(argv))
    own = {dest: (owner, flags.pop(dest)) for dest, owner in p.owners.items()}
    chosen = flags["experiment"]
    given = {dest: value for dest, (owner, value) in own.items() if owner == chosen and value is not None}
    foreign = {dest: owner for dest, (owner, value) in own.items() if owner != chosen and value is not None}
    return Invocation(**flags, given=given, foreign=foreign)


def run(argv: list[str]) -> int:
    return execute(parse(argv), argv)
