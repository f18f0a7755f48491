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


class Summary(BaseModel):
    """Distribution of one latency, in milliseconds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mean: float
    p50: float
    p90: float
    p99: float


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
    """First counted scheduled send to last counted end, wall clock."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    start: datetime
    end: datetime
    seconds: float


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


class PointStats(BaseModel):
    """Client-side figures of one point; failed requests are counted apart from the latencies."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    concurrency: int | None
    rate: float | None
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
    # Rates and the decode batch count every request's activity inside the window, warm-up
    # requests included: they share the server with the counted ones (e.g. queued ahead of them).
    # mean_decoding is the time-averaged count of requests between first token and end (Little's
    # law on the client's own timings): the decode batch, independent of any scrape resolution.
    mean_decoding: float
    output_tokens_per_s: float
    requests_per_s: float
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


def summarize_ms(values_s: list[float] | np.ndarray) -> Summary | None:
    """mean/p50/p90/p99 in ms of values given in seconds; None when there are none."""
    a = np.asarray(values_s, dtype=float) * 1000.0
    if a.size == 0:
        return None
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return Summary(mean=float(a.mean()), p50=float(p50), p90=float(p90), p99=float(p99))


def _tpot_s(r: Record) -> float | None:
    # TPOT from token counts, not chunk gaps: a chunk may carry several tokens.
    if r.first_token is None or r.output_tokens < 2:
        return None
    return (r.end - r.first_token) / (r.output_tokens - 1)


def _meets(r: Record, slo: Slo) -> bool:
    tpot = _tpot_s(r)
    checks = (
        (slo.ttft_ms, (r.first_token or r.end) - r.scheduled),
        (slo.tpot_ms, tpot if tpot is not None else 0.0),
        (slo.e2e_ms, r.end - r.scheduled),
    )
    return all(limit is None or value * 1000.0 <= limit for limit, value in checks)


# Lag up to this share of the median TTFT leaves the TTFT figures readable as the server's.
LAG_SHARE_OF_TTFT = 0.05


def client_lag_limit_ms(spec: LoadSpec, ttft: Summary) -> float:
    """Lag p99 above which a point is client-bound: the larger of the set limit and 5% of TTFT p50."""
    return max(spec.max_client_lag_ms, LAG_SHARE_OF_TTFT * ttft.p50)


def _in_window(ok: list[Record], start: float, end: float) -> tuple[float, int, float]:
    """(output tokens, completions, decoding request-seconds) falling inside [start, end]."""
    tokens, done, decoding = 0.0, 0, 0.0
    for r in ok:
        if r.chunk_times:
            per_chunk = r.output_tokens / len(r.chunk_times)
            tokens += per_chunk * sum(1 for t in r.chunk_times if start <= t <= end)
        done += start <= r.end <= end
        if r.first_token is not None:
            decoding += max(0.0, min(r.end, end) - max(r.first_token, start))
    return tokens, done, decoding


def summarize(run: LoadRun, spec: LoadSpec) -> PointStats:
    """Latencies over the counted requests of one point; rates over its window."""
    ok = [r for r in run.records if r.ok]
    failures = Counter(r.error for r in run.records if not r.ok)
    window: Window | None = None
    seconds = 0.0
    start = end = 0.0
    if run.records:
        start = min(r.scheduled for r in run.records)
        end = max(r.end for r in run.records)
        seconds = max(end - start, 1e-9)
        window = Window(
            start=datetime.fromtimestamp(start + run.wall_offset, UTC),
            end=datetime.fromtimestamp(end + run.wall_offset, UTC),
            seconds=seconds,
        )
    lags = np.array([r.sent - r.scheduled for r in run.records]) * 1000.0
    lag = None
    if lags.size:
        lag = LagSummary(mean=float(lags.mean()), p99=float(np.percentile(lags, 99)))
    itls = [b - a for r in ok for a, b in zip(r.chunk_times, r.chunk_times[1:])]
    tpots = [t for r in ok if (t := _tpot_s(r)) is not None]
    tokens = sum(r.output_tokens for r in ok)
    ttft = summarize_ms([r.first_token - r.scheduled for r in ok])
    window_tokens, window_done, decoding = _in_window(ok + [r for r in run.warmup if r.ok], start, end)
    goodput = None
    if spec.slo.is_set() and ok and seconds:
        # The counted requests' SLO share, applied to the window's completion rate.
        fraction = sum(1 for r in ok if _meets(r, spec.slo)) / len(ok)
        goodput = Goodput(slo=spec.slo, requests_per_s=fraction * window_done / seconds, fraction=fraction)
    return PointStats(
        concurrency=spec.concurrency,
        rate=spec.rate,
        input_len=spec.input_len,
        output_len=spec.output_len,
        completed=len(ok),
        failed=sum(failures.values()),
        failures=dict(sorted(failures.items())),
        ttft_ms=ttft,
        itl_ms=summarize_ms(itls),
        tpot_ms=summarize_ms(tpots),
        e2e_ms=summarize_ms([r.end - r.scheduled for r in ok]),
        output_tokens=tokens,
        mean_decoding=decoding / seconds if seconds else 0.0,
        output_tokens_per_s=window_tokens / seconds if seconds else 0.0,
        requests_per_s=window_done / seconds if seconds else 0.0,
        client_lag_ms=lag,
        client_bound=lag is not None and ttft is not None and lag.p99 > client_lag_limit_ms(spec, ttft),
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
