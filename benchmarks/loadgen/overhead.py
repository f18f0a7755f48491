"""Measure the load generator's own overhead on this machine (a script, not a test).

`python -m benchmarks.loadgen.overhead [--json]` starts the cheap streaming server of
fastserver.py in its own process on loopback and reports:
- the reference workload of the peer-client comparison (512 requests, concurrency 64, 256 in / 128 out,
  server TTFT 30 ms, ITL 20 ms): client CPU seconds, and client mean TTFT minus the server's own;
- the same TTFT gap at concurrency 8 with ITL 5 ms (256 requests);
- the highest concurrency (doubling from 1) whose client lag p99 stays under 1 ms, and the
  output tokens/s the client sustained there.

The search runs twice: with streams in lockstep (same TTFT and ITL for all, as vLLM's batched
decode steps with equal output lengths: completions arrive in bursts, the hardest case for a
single-loop client) and with each ITL spread +-50% so streams drift apart.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from benchmarks.loadgen import LoadSpec, run_load, summarize

_REPO = Path(__file__).resolve().parents[2]
LAG_LIMIT_MS = 1.0
SEARCHES = (("lockstep", 0.0), ("itl_jitter_50pct", 0.5))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class FastServerProcess:
    def __init__(self, ttft_ms: float, itl_ms: float, jitter: float = 0.0) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = [sys.executable, "-m", "benchmarks.loadgen.fastserver", "--port", str(self.port),
                     "--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms), "--jitter", str(jitter)]  # fmt: skip

    def __enter__(self) -> FastServerProcess:
        self.proc = subprocess.Popen(self.argv, cwd=_REPO)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                httpx.get(self.url + "/truth", timeout=1)
                return self
            except httpx.HTTPError:
                time.sleep(0.05)
        self.proc.kill()
        raise RuntimeError(f"fast server did not start: {' '.join(self.argv)}")

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)

    def truth(self) -> dict[str, list[float]]:
        return httpx.get(self.url + "/truth", timeout=10).json()


def measure(ttft_ms: float, itl_ms: float, concurrency: int, requests: int, jitter: float = 0.0) -> dict[str, float]:
    """One closed-loop point against a fresh fast server: client CPU, lag, TTFT gap, tokens/s."""
    with FastServerProcess(ttft_ms, itl_ms, jitter) as server:
        spec = LoadSpec(base_url=server.url, model="fast", input_len=256, output_len=128,
                        concurrency=concurrency, requests=requests)  # fmt: skip
        cpu0 = time.process_time()
        run = asyncio.run(run_load(spec))
        cpu = time.process_time() - cpu0
        truth = server.truth()
    stats = summarize(run, spec)
    # The server's requests that the client counted: those that arrived after the first counted send.
    first = min(r.sent for r in run.records)
    server_ttfts = [f - a for a, f in zip(truth["arrival"], truth["first_token"]) if a >= first]
    server_ttft_ms = 1000.0 * sum(server_ttfts) / len(server_ttfts)
    return {
        "concurrency": concurrency,
        "requests": requests,
        "client_cpu_s": cpu,
        "client_ttft_ms": stats.ttft_ms.mean,
        "server_ttft_ms": server_ttft_ms,
        "ttft_gap_ms": stats.ttft_ms.mean - server_ttft_ms,
        "lag_mean_ms": stats.client_lag_ms.mean,
        "lag_p99_ms": stats.client_lag_ms.p99,
        "output_tokens_per_s": stats.output_tokens_per_s,
        "failed": stats.failed,
    }


def max_concurrency(
    ttft_ms: float, itl_ms: float, limit: int, jitter: float
) -> tuple[dict[str, float] | None, list[dict[str, float]]]:
    """Doubling concurrency from 1 until lag p99 reaches the limit; the last point under it."""
    best, tried = None, []
    concurrency = 1
    while concurrency <= limit:
        point = measure(ttft_ms, itl_ms, concurrency, max(32, 2 * concurrency), jitter)
        tried.append(point)
        if point["lag_p99_ms"] >= LAG_LIMIT_MS or point["failed"]:
            break
        best = point
        concurrency *= 2
    return best, tried


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.loadgen.overhead", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--max-concurrency", type=int, default=1024, help="stop the doubling search here")
    args = parser.parse_args(argv)
    reference = measure(30.0, 20.0, 64, 512)
    c8 = measure(30.0, 5.0, 8, 256)
    searches = {name: max_concurrency(30.0, 20.0, args.max_concurrency, jitter) for name, jitter in SEARCHES}
    if args.json:
        figures = {"reference_c64": reference, "c8_itl5": c8}
        figures |= {name: {"best": best, "tried": tried} for name, (best, tried) in searches.items()}
        print(json.dumps(figures, indent=2))
        return 0
    print(f"reference (512 req, c=64, 256/128, TTFT 30 ms, ITL 20 ms): client CPU {reference['client_cpu_s']:.2f} s, "
          f"TTFT gap {reference['ttft_gap_ms']:+.2f} ms, lag mean/p99 {reference['lag_mean_ms']:.2f}/{reference['lag_p99_ms']:.2f} ms")  # fmt: skip
    print(f"c=8, ITL 5 ms (256 req): TTFT gap {c8['ttft_gap_ms']:+.2f} ms, lag p99 {c8['lag_p99_ms']:.2f} ms, "
          f"client CPU {c8['client_cpu_s']:.2f} s")  # fmt: skip
    for name, (best, tried) in searches.items():
        print(f"{name}:")
        for p in tried:
            print(f"  c={p['concurrency']:>5}: lag p99 {p['lag_p99_ms']:6.2f} ms, {p['output_tokens_per_s']:9,.0f} tok/s, "
                  f"TTFT gap {p['ttft_gap_ms']:+.2f} ms")  # fmt: skip
        if best is None:
            print(f"  not even concurrency 1 kept lag p99 under {LAG_LIMIT_MS:g} ms")
        else:
            print(f"  max concurrency with lag p99 < {LAG_LIMIT_MS:g} ms: {best['concurrency']} "
                  f"({best['output_tokens_per_s']:,.0f} output tokens/s)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
