"""A figure across repeats with different seeds, and the interval a rerun's figure falls in.

Measured n times, each time with its own seed (its own prompts, lengths and arrivals) and at its own
moment on the machine, a figure has n values. Their mean is the figure. Its interval is where the mean
of a rerun of n more repeats falls 95% of the time: the prediction interval
mean +- t(n-1) * s * sqrt(1/n + 1/n) (s the repeats' standard deviation, t Student's 97.5% quantile).
It holds what differs between runs (seeds, the host's jitter, the server's state), which a bootstrap
within one run cannot see: within-run intervals were 2-10x narrower than a rerun's spread.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

# Student's t, 97.5% quantile, by degrees of freedom (any published table; e.g. NIST/SEMATECH
# e-Handbook of Statistical Methods, 1.3.6.7.2); beyond 30 the normal's 1.96 is within 4%.
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
        20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048,
        29: 2.045, 30: 2.042}  # fmt: skip


class Rerun(BaseModel):
    """One figure over `n` repeats: their mean and the 95% interval of a rerun's mean (None with one run)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mean: float
    n: int
    lo: float | None
    hi: float | None
    values: list[float]

    def contains(self, value: float) -> bool:
        return self.lo is not None and self.hi is not None and self.lo <= value <= self.hi


def t975(df: int) -> float:
    return T975.get(df, 1.96)


def rerun(values: Sequence[float | None], signed: bool = False, most: float | None = None) -> Rerun | None:
    """The figure over the repeats that have it; None when none has. A figure that cannot be negative (a
    rate, a latency: unless `signed`) has its interval cut at zero, one that cannot pass `most` (a share) there."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return None
    mean = statistics.fmean(xs)
    if len(xs) < 2:
        return Rerun(mean=mean, n=1, lo=None, hi=None, values=xs)
    half = t975(len(xs) - 1) * statistics.stdev(xs) * math.sqrt(2 / len(xs))
    lo = mean - half if signed else max(0.0, mean - half)
    hi = mean + half if most is None else min(most, mean + half)
    return Rerun(mean=mean, n=len(xs), lo=lo, hi=hi, values=xs)
