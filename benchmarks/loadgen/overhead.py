"""Measure the load generator's own overhead on this machine (a script, not a test).

`python -m benchmarks.loadgen.overhead [--repeat 3] [--workers N] [--search] [--json]` starts the
cheap streaming server of fastserver.py in its own process on loopback, runs the load generator
against it and compares what the client saw with the server's own stamps:
- the reference workload on which peers' clients were measured (512 requests, concurrency 64,
  256 in / 128 out, server TTFT 30 ms, ITL 20 ms): client CPU seconds (the load generator's whole
  process tree), client mean TTFT minus the server's, client ITL mean/p50/p99 minus the server's;
- the same at concurrency 8 with ITL 5 ms (256 requests);
- each `--repeat` times, printed as median [min..max];
- with `--search`, the highest concurrency (doubling from 1) whose client lag p99 stays under
  1 ms and the output tokens/s the client sustained there, twice: with streams in lockstep (same
  TTFT and ITL for all, as vLLM's batched decode steps: chunks arrive in bursts, the hardest case)
  and with each ITL spread +-50% so streams drift apart.
"""

from __future__ import annotations

import argparse
import json
import resource
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from benchmarks.loadgen import LoadSpec, PointStats, run_load, summarize
from benchmarks.loadgen.stats import summarize_ms

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

    def truth(self) -> dict[str, list]:
        return httpx.get(self.url + "/truth", timeout=10).json()


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(
    ttft_ms: float, itl_ms: float, concurrency: int, requests: int, jitter: float = 0.0, workers: int | None = None
) -> dict[str, float]:
    """One closed-loop point against a fresh fast server: client CPU, lag, TTFT gap, tokens/s.

    Client CPU is everything the load generator's process tree used (its interpreter start-up and
    worker processes included: they are children of ours, and the server's process is still running
    so it is not counted yet), plus what this process spent reading its output.
    """
    with FastServerProcess(ttft_ms, itl_ms, jitter) as server:
        spec = LoadSpec(base_url=server.url, model="fast", input_len=256, output_len=128,
                        concurrency=concurrency, requests=requests)  # fmt: skip
        cpu0, children0 = time.process_time(), _children_cpu_s()
        run = run_load(spec, workers=workers)
        cpu = time.process_time() - cpu0 + _children_cpu_s() - children0
        truth = server.truth()
    stats = summarize(run, spec)
    return {
        "concurrency": concurrency,
        "requests": requests,
        "workers": run.client["workers"],
        "client_cpu_s": cpu,
        **errors(stats, truth, min(r.sent for r in run.records)),
        "lag_mean_ms": stats.client_lag_ms.mean,
        "lag_p99_ms": stats.client_lag_ms.p99,
        "output_tokens_per_s": stats.output_tokens_per_s,
        "failed": stats.failed,
    }


def errors(stats: PointStats, truth: dict[str, list], first_sent: float) -> dict[str, float]:
    """The client's figures minus the server's own, over the requests the client counted (those the
    server received after the first counted send): mean TTFT, and ITL mean, p50 and p99."""
    counted = [(a, stamps) for a, stamps in zip(truth["arrival"], truth["tokens"]) if a >= first_sent and stamps]
    server_ttft = summarize_ms([stamps[0] - a for a, stamps in counted])
    server_itl = summarize_ms([b - a for _, stamps in counted for a, b in zip(stamps, stamps[1:])])
    assert stats.ttft_ms is not None and stats.itl_ms is not None and server_ttft and server_itl
    return {
        "client_ttft_ms": stats.ttft_ms.mean,
        "server_ttft_ms": server_ttft.mean,
        "ttft_gap_ms": stats.ttft_ms.mean - server_ttft.mean,
        "itl_mean_gap_ms": stats.itl_ms.mean - server_itl.mean,
        "itl_p50_gap_ms": stats.itl_ms.p50 - server_itl.p50,
        "itl_p99_gap_ms": stats.itl_ms.p99 - server_itl.p99,
    }


def max_concurrency(
    ttft_ms: float, itl_ms: float, limit: int, jitter: float, workers: int | None = None
) -> tuple[dict[str, float] | None, list[dict[str, float]]]:
    """Doubling concurrency from 1 until lag p99 reaches the limit; the last point under it."""
    best, tried = None, []
    concurrency = 1
    while concurrency <= limit:
        point = measure(ttft_ms, itl_ms, concurrency, max(32, 2 * concurrency), jitter, workers)
        tried.append(point)
        if point["lag_p99_ms"] >= LAG_LIMIT_MS or point["failed"]:
            break
        best = point
        concurrency *= 2
    return best, tried


REFERENCES = {
    "c64_itl20": dict(ttft_ms=30.0, itl_ms=20.0, concurrency=64, requests=512),
    "c8_itl5": dict(ttft_ms=30.0, itl_ms=5.0, concurrency=8, requests=256),
}
SHOWN = ("client_cpu_s", "ttft_gap_ms", "itl_mean_gap_ms", "itl_p50_gap_ms", "itl_p99_gap_ms", "lag_p99_ms")


def _spread(runs: list[dict[str, float]], key: str) -> str:
    values = [r[key] for r in runs]
    f = "{:+.2f}" if "gap" in key else "{:.2f}"  # a gap is signed: the client's figure minus the server's
    return f"{f.format(statistics.median(values))} [{f.format(min(values))}..{f.format(max(values))}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.loadgen.overhead", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print every run's figures as JSON")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each reference workload (default 3)")
    parser.add_argument("--workers", type=int, help="load generator processes (default: one per CPU)")
    parser.add_argument("--search", action="store_true", help="also search the highest concurrency with lag p99 < 1 ms")
    parser.add_argument("--max-concurrency", type=int, default=1024, help="stop the doubling search here")
    args = parser.parse_args(argv)
    figures: dict[str, object] = {}
    for name, ref in REFERENCES.items():
        runs = [measure(**ref, workers=args.workers) for _ in range(args.repeat)]
        figures[name] = runs
        if not args.json:
            print(f"{name} ({ref['requests']} req, c={ref['concurrency']}, 256/128, TTFT {ref['ttft_ms']:g} ms, "
                  f"ITL {ref['itl_ms']:g} ms; {runs[0]['workers']} worker(s); median [min..max] of {len(runs)}):")  # fmt: skip
            for key in SHOWN:
                print(f"  {key:16} {_spread(runs, key)}")
    if args.search:
        for name, jitter in SEARCHES:
            best, tried = max_concurrency(30.0, 20.0, args.max_concurrency, jitter, args.workers)
            figures[name] = {"best": best, "tried": tried}
            if args.json:
                continue
            print(f"{name}:")
            for p in tried:
                print(f"  c={p['concurrency']:>5}: lag p99 {p['lag_p99_ms']:6.2f} ms, {p['output_tokens_per_s']:9,.0f} tok/s, "
                      f"TTFT gap {p['ttft_gap_ms']:+.2f} ms")  # fmt: skip
            if best is None:
                print(f"  not even concurrency 1 kept lag p99 under {LAG_LIMIT_MS:g} ms")
            else:
                print(f"  max concurrency with lag p99 < {LAG_LIMIT_MS:g} ms: {best['concurrency']} "
                      f"({best['output_tokens_per_s']:,.0f} output tokens/s)")  # fmt: skip
    if args.json:
        print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
