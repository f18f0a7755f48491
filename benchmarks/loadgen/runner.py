"""Drive one load point on a single asyncio loop, bounded by request count and seconds.

Every request carries its scheduled send time; latencies are measured from it, so queueing in the
client (coordinated omission) shows up as latency and as client lag instead of vanishing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from yarl import URL

from benchmarks.loadgen.backend import (
    RequestRecord,
    build_bodies,
    endpoint_path,
    make_session,
    send_request,
    wall_clock_offset,
)
from benchmarks.loadgen.spec import LoadSpec
from benchmarks.loadgen.timers import poisson_offsets, sleep_until


@dataclass(frozen=True, slots=True)
class LoadRun:
    """Counted requests of one point, the warm-up's apart, and how the point ended."""

    records: list[RequestRecord]
    warmup: list[RequestRecord]
    stopped_by: str  # "requests" or "duration"
    wall_offset: float  # add to a monotonic stamp to get time.time()


async def run_load(spec: LoadSpec, on_done: Callable[[RequestRecord], None] | None = None) -> LoadRun:
    """Run `spec.warmup_requests` uncounted requests, then `spec.requests` counted ones."""
    total = spec.warmup_requests + spec.requests
    bodies = build_bodies(spec, total)
    url = URL(spec.base_url.rstrip("/") + endpoint_path(spec.api))
    slots: list[RequestRecord | None] = [None] * total
    loop = asyncio.get_running_loop()
    async with make_session(spec) as session:
        t0 = loop.time()
        deadline = t0 + spec.duration_s if spec.duration_s is not None else float("inf")

        async def one(i: int, scheduled: float) -> RequestRecord:
            rec = await send_request(session, url, bodies[i], RequestRecord(scheduled), spec.timeouts)
            slots[i] = rec
            if on_done is not None and i >= spec.warmup_requests:
                on_done(rec)
            return rec

        if spec.concurrency is not None:
            issued = 0

            async def worker() -> None:
                nonlocal issued
                scheduled = t0
                while issued < total and scheduled < deadline:
                    i, issued = issued, issued + 1
                    scheduled = (await one(i, scheduled)).end

            await asyncio.gather(*(worker() for _ in range(spec.concurrency)))
        else:
            tasks = []
            for i, offset in enumerate(poisson_offsets(spec.rate or 1.0, total, spec.seed)):
                if t0 + offset >= deadline:
                    break
                await sleep_until(t0 + offset)
                tasks.append(asyncio.create_task(one(i, t0 + offset)))
            await asyncio.gather(*tasks)
    counted = [r for r in slots[spec.warmup_requests :] if r is not None]
    warmup = [r for r in slots[: spec.warmup_requests] if r is not None]
    stopped_by = "requests" if len(counted) == spec.requests else "duration"
    return LoadRun(records=counted, warmup=warmup, stopped_by=stopped_by, wall_offset=wall_clock_offset())
