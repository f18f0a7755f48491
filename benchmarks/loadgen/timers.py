"""Send-time schedules: open-loop Poisson arrivals computed up front from a seed.

Closed-loop concurrency needs no table: a worker's next request is scheduled at the moment its
previous one ended (see runner.py).
"""

from __future__ import annotations

import asyncio

import numpy as np

# Wake this long before a scheduled send and yield until it is due: the event loop's timer sleeps
# in whole milliseconds, which alone would add up to 1 ms of lag to every open-loop request.
_SPIN_S = 0.0015


def poisson_offsets(rate: float, count: int, seed: int) -> list[float]:
    """Seconds from the start of the run of `count` Poisson arrivals at `rate` per second."""
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=count)
    return np.cumsum(gaps).tolist()


async def sleep_until(when: float) -> None:
    """Return as close after loop time `when` as the loop allows, without blocking other tasks."""
    loop = asyncio.get_running_loop()
    delay = when - loop.time() - _SPIN_S
    if delay > 0:
        await asyncio.sleep(delay)
    while loop.time() < when:
        await asyncio.sleep(0)
