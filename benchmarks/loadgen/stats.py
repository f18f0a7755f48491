"""Collector: turn one point's request records into typed client-side statistics."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from benchmarks.loadgen.core import LoadRun, Record
from benchmarks.loadgen.lengths import Lengths
from benchmarks.loadgen.spec import LoadSpec, Slo


Interval = tuple[float, float]

# Seeded, so a saved result's intervals are reproduced exactly from its records.
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0
# A p99 over fewer samples than this rests on its one or two largest values.
P99_MIN_SAMPLES = 100


class Summary(BaseModel):
    """Distribution of one latency, in milliseconds: `n` samples, and a bootstrap 95% interval for
    each figure (`ci95["p99"] == (lo, hi)`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mean: float
    p50: float
    p90: float
    p99: float
    n: int
    ci95: dict[Literal["mean", "p50", "p90", "p99"], Interval]

    @property
    def p99_thin(self) -> bool:
        """The p99 rests on fewer than P99_MIN_SAMPLES samples: near the maximum, not a tail estimate."""
        return self.n < P99_MIN_SAMPLES


class LagSummary(BaseModel):
    """Client scheduling lag (actual minus scheduled send time), in milliseconds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mean: float
    p99: float


class TokenSummary(BaseModel):
    """Tokens per request, as the server's usage counted them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    n: int  # requests whose usage said
    mean: float
    p50: float
    p99: float


class Realised(BaseModel):
    """The lengths the counted requests really had (the server's usage), against those asked for."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_tokens: TokenSummary | None  # None: the server sent no usage
    output_tokens: TokenSummary


class Goodput(BaseModel):
    """Completed requests that met every SLO: a rate over the window and a share of completions."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    slo: Slo
    requests_per_s: float
    fraction: float


class Window(BaseModel):
    """The counted requests' first token (or answer, for a failure) to their last end: `start` and `end`
    on the wall clock (when the point ran), `seconds` on the figures' time scale (GPU time for a
    simulator run faster)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    start: datetime
    end: datetime
    seconds: float
    # The point's first scheduled send, warm-up included (wall clock): the server's counters (prefix-cache
    # lookups, preemptions) count the point's own requests from there, as it admits a request before its
    # first token opens the window.
    sent_from: datetime | None = None


class ClientPlace(BaseModel):
    """Where the load generator ran for a point, as it reported itself (and, in-cluster, its node)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    where: Literal["local", "in-cluster"]
    host: str
    node: str | None = None
    machine_type: str | None = None
    cpus: int
    workers: int
    python: str
    cpu_s: float | None = None
    load_avg: float | None = None  # the machine's 1-minute load average as the point ended


class PointStats(BaseModel):
    """Client-side figures of one point; failed requests are counted apart from the latencies."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    concurrency: int | None
    rate: float | None
    seed: int | None = None  # the point's own seed: its prompts, lengths and arrivals (LoadSpec.seed)
    input_len: Lengths
    output_len: Lengths
    completed: int
    failed: int
    failures: dict[str, int]
    ttft_ms: Summary | None
    itl_ms: Summary | None
    tpot_ms: Summary | None
    e2e_ms: Summary | None
    output_tokens: int
    # Every rate, the decode batch and the in-flight count are of the counted requests over the
    # window (their first token to their last end), which holds every token and completion of them:
    # so output_tokens_per_s = requests_per_s x tokens per request. The window opens when the server
    # starts answering them, not when they were sent: requests queued behind the warm-up (concurrency
    # above max-num-seqs) would otherwise open it on the warm-up's work, which counts for nothing.
    # mean_decoding is the time-averaged count of requests between first token and end (Little's
    # law on the client's own timings): the decode batch, independent of any scrape resolution.
    mean_decoding: float
    # Time-averaged counted requests in flight (scheduled send to end) within the window: the
    # concurrency the point ran at.
    in_flight_mean: float
    output_tokens_per_s: float
    requests_per_s: float
    # Bootstrap 95% intervals of the token rate over equal slices of the window (its variation within
    # the point); the request rate's is the same per request.
    output_tokens_per_s_ci95: Interval | None
    requests_per_s_ci95: Interval | None
    client_lag_ms: LagSummary | None
    client_bound: bool
    goodput: Goodput | None
    window: Window | None
    stopped_by: str
    client: ClientPlace | None = None
    eos: bool = False  # output_len was a cap and requests stopped at EOS
    realised: Realised | None = None
    # Least-squares slope of the completed requests' end times against their scheduled send times: about
    # 1 when the server keeps up with open-loop arrivals, offered rate / capacity when it falls behind.
    end_slope: float | None = None


def token_summary(counts: list[int]) -> TokenSummary | None:
    if not counts:
        return None
    a = np.asarray(counts, dtype=float)
    p50, p99 = np.percentile(a, [50, 99])
    return TokenSummary(n=a.size, mean=float(a.mean()), p50=float(p50), p99=float(p99))


def realised(ok: list[Record]) -> Realised | None:
    """Per-request token counts of the completed requests; None without any."""
    outputs = token_summary([r.output_tokens for r in ok])
    if outputs is None:
        return None
    return Realised(input_tokens=token_summary([r.input_tokens for r in ok if r.input_tokens is not None]),
                    output_tokens=outputs)  # fmt: skip


_FIGURES = ("mean", "p50", "p90", "p99")


def _figures(a: np.ndarray) -> np.ndarray:
    """mean, p50, p90, p99 along the last axis."""
    return np.concatenate([a.mean(axis=-1, keepdims=True), np.moveaxis(np.percentile(a, [50, 90, 99], axis=-1), 0, -1)], axis=-1)


def _interval(resampled: np.ndarray) -> list[Interval]:
    lo, hi = np.percentile(resampled, [2.5, 97.5], axis=0)
    return [(float(x), float(y)) for x, y in zip(np.atleast_1d(lo), np.atleast_1d(hi))]


def summarize_ms(values_s: list[float] | np.ndarray, groups: list[int] | None = None) -> Summary | None:
    """mean/p50/p90/p99 in ms of values given in seconds, with their sample count and bootstrap 95%
    intervals; None when there are none. `groups[k]` counts the consecutive values that belong
    together (one request's chunk gaps): those are resampled whole, as they are not independent."""
    a = np.asarray(values_s, dtype=float) * 1000.0
    if a.size == 0:
        return None
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    if groups is None:
        resampled = _figures(a[rng.integers(0, a.size, (BOOTSTRAP_RESAMPLES, a.size))])
    else:
        sizes = np.asarray([g for g in groups if g], dtype=int)
        starts = np.cumsum(sizes) - sizes
        draws = rng.integers(0, sizes.size, (BOOTSTRAP_RESAMPLES, sizes.size))
        # Each resample's values: the drawn groups' index ranges laid end to end, as one index array.
        resampled = np.array([_figures(a[np.repeat(starts[row] - np.cumsum(sizes[row]) + sizes[row], sizes[row])
                                         + np.arange(sizes[row].sum())]) for row in draws])  # fmt: skip
    point = _figures(a)
    return Summary(
        **{name: float(v) for name, v in zip(_FIGURES, point)},
        n=int(a.size),
        ci95=dict(zip(_FIGURES, _interval(resampled))),
    )


# Slices of the window a rate's interval is drawn from: enough for a bootstrap, each long enough
# to hold several completions at the points g6 runs.
RATE_SLICES = 10


def rate_interval(times: list[float], weights: list[float], start: float, seconds: float) -> Interval | None:
    """Bootstrap 95% interval of a rate (sum of `weights` at `times` over the window), resampling the
    per-slice rates of RATE_SLICES equal slices of the window."""
    if not times or seconds <= 0:
        return None
    slice_s = seconds / RATE_SLICES
    index = np.minimum(((np.asarray(times) - start) / slice_s).astype(int), RATE_SLICES - 1)
    rates = np.bincount(index, weights=weights, minlength=RATE_SLICES) / slice_s
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    means = rates[rng.integers(0, RATE_SLICES, (BOOTSTRAP_RESAMPLES, RATE_SLICES))].mean(axis=1)
    return _interval(means)[0]


def tpot_s(r: Record) -> float | None:
    # TPOT from token counts, not chunk gaps: a chunk may carry several tokens.
    if r.first_token is None or r.output_tokens < 2:
        return None
    return (r.end - r.first_token) / (r.output_tokens - 1)


def meets_slo(r: Record, slo: Slo) -> bool:
    tpot = tpot_s(r)
    checks = (
        (slo.ttft_ms, (r.first_token or r.end) - r.scheduled),
        (slo.tpot_ms, tpot if tpot is not None else 0.0),
        (slo.e2e_ms, r.end - r.scheduled),
    )
    return all(limit is None or value * 1000.0 <= limit for limit, value in checks)


# Lag up to this share of the median TTFT leaves the TTFT figures readable as the server's.
LAG_SHARE_OF_TTFT = 0.05


def client_lag_limit_ms(spec: LoadSpec, ttft: Summary, time_scale: float = 1.0) -> float:
    """Lag p99 above which a point is client-bound: the larger of the set limit and 5% of TTFT p50
    (on the client's clock: a TTFT reported on a `time_scale` is divided back)."""
    return max(spec.max_client_lag_ms, LAG_SHARE_OF_TTFT * ttft.p50 / time_scale)


def scaled(r: Record, k: float) -> Record:
    """`r` with every time multiplied by `k`: durations k times longer, on another scale."""
    return Record(
        i=r.i, scheduled=r.scheduled * k, sent=r.sent * k, first_token=None if r.first_token is None else r.first_token * k,
        end=r.end * k, chunk_times=[t * k for t in r.chunk_times], output_tokens=r.output_tokens, error=r.error,
        input_tokens=r.input_tokens,
    )  # fmt: skip


def summarize(run: LoadRun, spec: LoadSpec, time_scale: float = 1.0) -> PointStats:
    """Latencies over the counted requests of one point; rates over its window.

    `time_scale` converts the client's clock to the time the figures are reported in (a simulator
    running x4 faster than the GPU: 4, so every latency, rate and SLO judgement is in GPU time). The
    window's start and end stay on the wall clock: they say when the point ran. Client lag is the
    client's own and is not scaled.
    """
    records = [scaled(r, time_scale) for r in run.records] if time_scale != 1.0 else run.records
    ok = [r for r in records if r.ok]
    failures = Counter(r.error for r in records if not r.ok)
    window: Window | None = None
    seconds = 0.0
    start = 0.0
    if records:
        start = min(r.end if r.first_token is None else r.first_token for r in records)
        end = max(r.end for r in records)
        seconds = max(end - start, 1e-9)
        window = Window(
            start=datetime.fromtimestamp(start / time_scale + run.wall_offset, UTC),
            end=datetime.fromtimestamp(end / time_scale + run.wall_offset, UTC),
            seconds=seconds,
            sent_from=datetime.fromtimestamp(min(r.scheduled for r in [*run.warmup, *run.records]) + run.wall_offset, UTC),
        )
    lags = np.array([r.sent - r.scheduled for r in run.records]) * 1000.0
    lag = None
    if lags.size:
        lag = LagSummary(mean=float(lags.mean()), p99=float(np.percentile(lags, 99)))
    itls = [b - a for r in ok for a, b in zip(r.chunk_times, r.chunk_times[1:])]
    tpots = [t for r in ok if (t := tpot_s(r)) is not None]
    tokens = sum(r.output_tokens for r in ok)
    ttft = summarize_ms([r.first_token - r.scheduled for r in ok])
    decoding = sum(r.end - r.first_token for r in ok if r.first_token is not None)
    in_flight = sum(r.end - max(r.scheduled, start) for r in records)
    goodput = None
    if spec.slo.is_set() and ok and seconds:
        met = sum(1 for r in ok if meets_slo(r, spec.slo))
        goodput = Goodput(slo=spec.slo, requests_per_s=met / seconds, fraction=met / len(ok))
    chunks = [(t, r.output_tokens / len(r.chunk_times)) for r in ok for t in r.chunk_times]
    tokens_ci = rate_interval([t for t, _ in chunks], [w for _, w in chunks], start, seconds)
    per_token = len(ok) / tokens if tokens else 0.0
    return PointStats(
        concurrency=spec.concurrency,
        rate=spec.rate,
        seed=spec.seed,
        input_len=spec.input_len,
        output_len=spec.output_len,
        completed=len(ok),
        failed=sum(failures.values()),
        failures=dict(sorted(failures.items())),
        ttft_ms=ttft,
        itl_ms=summarize_ms(itls, [max(0, len(r.chunk_times) - 1) for r in ok]),
        tpot_ms=summarize_ms(tpots),
        e2e_ms=summarize_ms([r.end - r.scheduled for r in ok]),
        output_tokens=tokens,
        mean_decoding=decoding / seconds if seconds else 0.0,
        in_flight_mean=in_flight / seconds if seconds else 0.0,
        output_tokens_per_s=tokens / seconds if seconds else 0.0,
        requests_per_s=len(ok) / seconds if seconds else 0.0,
        output_tokens_per_s_ci95=tokens_ci,
        # Requests carry their tokens: the same interval per request (completions come in waves, which
        # slices of the window would read as noise).
        requests_per_s_ci95=None if tokens_ci is None or not tokens else (tokens_ci[0] * per_token, tokens_ci[1] * per_token),
        client_lag_ms=lag,
        # The lag is on the client's clock: held against the TTFT on the same clock.
        client_bound=lag is not None and ttft is not None and lag.p99 > client_lag_limit_ms(spec, ttft, time_scale),
        goodput=goodput,
        window=window,
        stopped_by=run.stopped_by,
        client=_place(run),
        eos=spec.eos,
        realised=realised(ok),
        end_slope=_slope([r.scheduled for r in ok], [r.end for r in ok]),
    )


def _slope(x: list[float], y: list[float]) -> float | None:
    # A fit, not first and last: one request's queueing wait moves the endpoints, hardly the slope.
    if len(x) < 3 or max(x) - min(x) <= 0:
        return None
    return float(np.polyfit(x, y, 1)[0])


def _place(run: LoadRun) -> ClientPlace | None:
    """The runner's report of where it ran (none for a run without one, e.g. in-process in a test)."""
    if "where" not in run.client:
        return None
    return ClientPlace.model_validate({k: run.client.get(k) for k in ClientPlace.model_fields})
