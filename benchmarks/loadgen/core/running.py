"""Running a point: in this process (one loop) or across worker processes, and the command line
(`python -I -S -B loadgen.pyz [PLAN]`)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import resource
import socket
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import wait as wait_connections

from .decoding import decode
from .plan import LoadRun, Plan, PlanError, Record, arrival_offsets, build_requests, resolve, usable_cpus
from .wire import Out, OutputReader, encode
from .worker import HEARTBEAT_S, PROGRESS_S, SO_TIMESTAMPNS, Raw, Worker


PLAN_ENV = "LOADGEN_PLAN"


def run_in_process(plan: Plan, on_done: Callable[[Record], None] | None = None) -> LoadRun:
    """One worker on an event loop in this process: for tests that reach into the loop (`on_done`
    runs on it, after each request). Runs use `run` (worker processes) via `main`."""
    requests, address = build_requests(plan), resolve(plan)
    t0 = time.monotonic() + 0.01
    issued = iter(range(plan.total))

    def hook(raw: Raw) -> None:
        if on_done is not None and raw.i >= plan.warmup:
            on_done(decode(raw))

    kw = _share(plan, 0, 1, lambda: next(issued, None))
    raws = asyncio.run(Worker(plan, requests, address, t0, on_done=hook, **kw).run())
    items = [encode(decode(r), t0) for r in raws]
    reader = OutputReader()
    Out(reader.feed, lambda: None).records(items, {"t0": t0, "wall_offset": time.time() - time.monotonic()})
    return reader.result(plan.warmup, plan.requests)


def _share(plan: Plan, k: int, workers: int, claim: Callable[[], int | None]) -> dict[str, object]:
    """Worker k's part of the schedule: its request slots (closed loop) or its arrivals (open loop)."""
    if plan.concurrency is not None:
        return {"slots": plan.concurrency // workers + (k < plan.concurrency % workers), "claim": claim}
    offsets = arrival_offsets(plan)
    return {"arrivals": [(i, offsets[i]) for i in range(k, plan.total, workers)]}


def _worker_process(plan, requests, address, k, workers, shared, results) -> None:  # noqa: ANN001 (a process target)
    issued, completed, t0, ready = shared

    def claim() -> int | None:
        with issued.get_lock():
            i = issued.value
            if i >= plan.total:
                return None
            issued.value = i + 1
            return i

    def counted(raw: Raw) -> None:
        if raw.i >= plan.warmup:
            with completed.get_lock():
                completed.value += 1

    ready.wait()
    worker = Worker(plan, requests, address, t0.value, on_done=counted, **_share(plan, k, workers, claim))
    raws = asyncio.run(worker.run())
    # Decoded here, after the run: each worker decodes its own share, in parallel with the others.
    results.send([encode(decode(r), t0.value) for r in raws])
    results.close()


def run(plan: Plan, out: Out) -> int:
    """Run the point across worker processes and write its output; the exit status."""
    address = resolve(plan)
    requests = build_requests(plan)
    workers = plan.worker_count()
    out.start({
        "host": socket.gethostname(), "node": os.environ.get("NODE_NAME"), "cpus": usable_cpus(), "workers": workers,
        "python": sys.version.split()[0], "address": f"{address[1][0]}:{address[1][1]}", "total": plan.total,
        "kernel_stamps": SO_TIMESTAMPNS is not None,
    })  # fmt: skip
    # fork where it is safe and cheap (Linux; this process has no threads); spawn elsewhere (macOS).
    ctx = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    shared = (ctx.Value("q", 0), ctx.Value("q", 0), ctx.Value("d", 0.0), ctx.Event())
    issued, completed, t0, ready = shared
    pipes, procs = [], []
    for k in range(workers):
        receiver, sender = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_worker_process, args=(plan, requests, address, k, workers, shared, sender), daemon=True)
        proc.start()
        sender.close()
        pipes.append(receiver)
        procs.append(proc)
    # Start every worker on the same monotonic instant (CLOCK_MONOTONIC is system-wide), once all exist.
    t0.value = time.monotonic() + 0.05 + 0.01 * workers
    ready.set()
    items: list[list[object]] = []
    waiting, shown, shown_at = list(pipes), -1, 0.0
    try:
        while waiting:
            for conn in wait_connections(waiting, timeout=PROGRESS_S):
                try:
                    items += conn.recv()
                except EOFError:
                    out.error("a worker process died before sending its records")
                    return 1
                waiting.remove(conn)
            if completed.value != shown or time.monotonic() - shown_at >= HEARTBEAT_S:
                shown, shown_at = completed.value, time.monotonic()
                out.progress(shown, plan.requests)
    finally:
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    cpu_s = sum(u.ru_utime + u.ru_stime for u in usage)
    items.sort(key=lambda item: item[0])  # type: ignore[arg-type, return-value]
    # The machine's load while the point ran (1-minute average, runnable processes): a client sharing its
    # CPUs with other work (or with a simulator) says so.
    load = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
    out.records(items, {"t0": t0.value, "wall_offset": time.time() - time.monotonic(), "cpu_s": round(cpu_s, 3),
                        "load_avg": load})
    return 0


def main(argv: list[str]) -> int:
    """The plan comes from the file named by the first argument, else from the environment variable
    LOADGEN_PLAN (a Job's), else from stdin."""
    out = Out()
    try:
        if argv:
            with open(argv[0]) as f:
                text = f.read()
        else:
            text = os.environ.get(PLAN_ENV) or sys.stdin.read()
        return run(Plan.from_json(text), out)
    except (OSError, PlanError) as exc:
        out.error(str(exc))
        return 2
