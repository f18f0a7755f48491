"""The g6 sweep: max-num-seqs x load, one measured point at a time, with server-side truth beside it.

`measure_point` is the one "run one load point -> labelled point" step every g6 run uses (the sweep
and the experiments), whichever runner sends the load (this machine, or a Job in the cluster).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from benchmarks.cluster import KubeApiError
from benchmarks.g6.analysis import analyse
from benchmarks.g6.config import G6Params
from benchmarks.g6.price import prices_per_million
from benchmarks.g6.result import G6Point, GpuPrice
from benchmarks.g6.targets import ServerSettings
from benchmarks.harness import RunProgress
from benchmarks.harness.server import Server, server_versions
from benchmarks.harness.signals import Interrupted
from benchmarks.loadgen import LoadRun, LoadSpec, PointRunner, summarize
from benchmarks.loadgen.steady import steady_state
from benchmarks.metrics import (
    KvCacheConfig,
    MetricsError,
    PrometheusClient,
    Scraper,
    ServerMetrics,
    metrics_from_scrapes,
    read_cache_config,
    with_gpu_metrics,
)
from benchmarks.serving.sizing import Sizing


class Target(Protocol):
    def session(self) -> AbstractContextManager[None]:
        """Around the whole run (a stack restores its config on exit)."""

    def serving(self, settings: ServerSettings) -> AbstractContextManager[Server]:
        """The server with these settings in place."""


class Measurement(NamedTuple):
    """How every point of a run is measured: where the load generator runs, the stack's Prometheus
    (the GPU series; None without one), the progress display, and the GPU price points are priced at."""

    runner: PointRunner
    prom: PrometheusClient | None
    progress: RunProgress
    price: GpuPrice | None
    # The server's figures over a window (start, end, counters from; unix seconds) where they are not
    # scraped from its /metrics: the virtual clock's replay (benchmarks.g6.virtual).
    server_metrics: Callable[[float, float, float | None], ServerMetrics] | None = None


# A point outside the prefix experiment whose prompt tokens the prefix cache served above this share
# was not sent fresh prompts: its TTFT is not a cold prefill's, and the report says so.
REUSE_HIT_RATE = 0.01


def point_seed(seed: int, *key: object) -> int:
    """The seed of one point: the run's `--seed` and what names the point (its load, its repeat...), so
    no two points of a run send the same prompts, lengths or arrivals, and the same run sends them again."""
    digest = hashlib.sha256(repr((seed, *key)).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def load_spec(params: G6Params, base_url: str, **shape: Any) -> LoadSpec:
    """A LoadSpec from the run's parameters; `shape` overrides any field (concurrency, lengths, model...)."""
    common: dict[str, Any] = dict(
        base_url=base_url,
        model=params.model,
        api=params.api,
        input_len=params.input_len,
        output_len=params.output_len,
        eos=params.eos,
        max_model_len=params.max_model_len,
        duration_s=params.duration_s,
        warmup=params.warmup,
        seed=params.seed,
        timeouts=params.timeouts,
        slo=params.slo,
        max_client_lag_ms=params.max_client_lag_ms,
    )
    spec = {**common, **shape}
    return LoadSpec(**{"requests": params.requests_at(spec.get("concurrency")), **spec})


def load_specs(params: G6Params, base_url: str, *key: object) -> list[LoadSpec]:
    """One LoadSpec per concurrency (closed loop) or rate (open loop), each seeded by its load and `key`
    (the server's setting, the repeat)."""
    if params.concurrency:
        return [load_spec(params, base_url, concurrency=c, seed=point_seed(params.seed, *key, "c", c))
                for c in params.concurrency]  # fmt: skip
    return [load_spec(params, base_url, rate=r, seed=point_seed(params.seed, *key, "rate", r)) for r in params.rate]


def metrics_of(server: Server) -> tuple[Callable[[], str], str]:
    """One /metrics scrape of `server` the way this process reads it, and where that is, for messages."""
    return (lambda: server.get("/metrics")), f"{server.where}/metrics"


def kv_cache_config(server: Server) -> KvCacheConfig | None:
    """The KV cache vLLM allocated, from one scrape of its /metrics; MetricsError when unreadable."""
    return read_cache_config(*metrics_of(server))


class PointContext(NamedTuple):
    """What labels a point besides its load: the server's batch cap and its sizing."""

    max_num_seqs: int | None
    sizing: Sizing | None


class Measured(NamedTuple):
    """One measured point, the errors met on the way (for the report) and its raw records."""

    point: G6Point
    errors: list[str]
    run: LoadRun


def measure_point(
    params: G6Params, spec: LoadSpec, server: Server, label: str, context: PointContext, how: Measurement,
    steady: bool = False,
) -> Measured:  # fmt: skip
    """Run one load point against `server` and label it: client figures, the server's metrics over
    its window, what bounds it, its price per million output tokens; plus the errors met, for the report.
    With `steady`, also its steady state (benchmarks.loadgen.steady) and the server's metrics over it."""
    errors = []
    on_progress = how.progress.point(label, spec.requests)
    # The server's own gauges are scraped directly, as often as the client likes: a Prometheus
    # scraping every 15 s holds one sample or none of a point of seconds.
    fetch, where = metrics_of(server)
    scraper: Scraper | None = Scraper(fetch, params.scrape_interval_s, where) if how.server_metrics is None else None
    error = None
    try:
        if scraper is not None:
            scraper.start()
    except MetricsError as exc:
        scraper, error = None, str(exc)
    # Converted to GPU time here, once: every latency, rate, SLO judgement and price below is the GPU's.
    run = how.runner.run(spec, on_progress)
    stats = summarize(run, spec, params.speedup)
    settled = steady_state(run, spec, params.speedup) if steady else None
    window = stats.window
    metrics = settled_metrics = None
    # The server's gauges over the same window as the client's (the warm-up before it is not the point's);
    # its counters over the point's own requests, warm-up included (prefix-cache lookups are counted as a
    # request is admitted, before its first token opens the window): from the scrape taken before its
    # first send, whose timing no clock between this process, the client's and the server's can blur.
    counted_from = window.sent_from.timestamp() if window is not None and window.sent_from is not None else None
    # The steady window is measured from the counted requests' first send (benchmarks.loadgen.steady).
    steady_from = min((r.scheduled for r in run.records), default=0.0) + run.wall_offset
    if scraper is not None:
        try:
            scrapes = scraper.stop()
            span = (window.start.timestamp(), window.end.timestamp()) if window is not None else (None, None)
            metrics = metrics_from_scrapes(scrapes, *span, scrapes[0].t).in_time_scale(params.speedup)
            if settled is not None:
                settled_metrics = metrics_from_scrapes(scrapes, steady_from + settled.start_s / params.speedup,
                                                       steady_from + settled.end_s / params.speedup)  # fmt: skip
                settled_metrics = settled_metrics.in_time_scale(params.speedup)
        except MetricsError as exc:
            error = str(exc)
    if how.server_metrics is not None and window is not None and counted_from is not None:
        metrics = how.server_metrics(window.start.timestamp(), window.end.timestamp(), counted_from)
        metrics = metrics.in_time_scale(params.speedup)
        if settled is not None:
            settled_metrics = how.server_metrics(steady_from + settled.start_s / params.speedup,
                                                 steady_from + settled.end_s / params.speedup, None)  # fmt: skip
            settled_metrics = settled_metrics.in_time_scale(params.speedup)
    if how.prom is not None and window is not None:
        try:
            metrics = with_gpu_metrics(
                metrics,
                how.prom.window_metrics(window.start.timestamp(), window.end.timestamp(), params.scrape_interval_s,
                                        counted_from).in_time_scale(params.speedup),  # fmt: skip
            )
        except (MetricsError, KubeApiError) as exc:  # KubeApiError: the API server's proxy to the stack's Prometheus
            error = str(exc)
    if error:
        errors.append(f"{label}: server metrics: {error}")
    if stats.failed:
        errors.append(f"{label}: {stats.failed} failed requests {stats.failures}")
        # Said here too: a point that failed whole is no figure to wait for the report to reveal.
        share = "every request" if not stats.completed else f"{stats.failed} of {stats.failed + stats.completed} requests"
        how.progress.log(f"g6: {label}: {share} failed: {stats.failures}")
    hit_rate = metrics.prefix_cache_hit_rate if metrics is not None else None
    if spec.prefix_len == 0 and hit_rate is not None and hit_rate > REUSE_HIT_RATE:
        errors.append(f"{label}: {hit_rate:.1%} of its prompt tokens were prefix-cache hits, though its prompts "
                      "share no prefix: its TTFT is not a cold prefill's")  # fmt: skip
    analysis = analyse(
        output_tokens_per_s=stats.output_tokens_per_s,
        mean_decoding=stats.mean_decoding,
        concurrency=stats.concurrency,
        server=metrics,
        max_num_seqs=context.max_num_seqs,
        sizing=context.sizing,
        context_len=round(spec.prefix_len + spec.input_len.mean + spec.output_len.mean / 2),
    )
    price = prices_per_million(how.price, stats)
    point = G6Point.model_validate(
        {**dict(stats), "max_num_seqs": context.max_num_seqs, "server": metrics, **dict(analysis),
         "usd_per_million_output_tokens": price, "steady": settled, "steady_server": settled_metrics}
    )  # fmt: skip
    return Measured(point, errors, run)


@dataclass
class Outcome:
    """What a run has measured so far, filled in as it goes: a run stopped half way (Ctrl-C, SIGTERM,
    an error) still reports what it measured."""

    errors: list[str] = field(default_factory=list)  # kept for the report
    server_versions: dict[str, str] = field(default_factory=dict)
    interrupted: str | None = None  # the signal that stopped the run ("Ctrl-C", "SIGTERM")

    @property
    def measured(self) -> int:
        """Load points measured."""
        raise NotImplementedError

    def done(self) -> str:
        """How far the run got, in words ("4 of 6 points")."""
        raise NotImplementedError


@contextmanager
def interruptible(outcome: Outcome) -> Iterator[None]:
    """Ctrl-C or SIGTERM inside the block ends it and is noted on `outcome`; the caller then puts the
    target back and reports what was measured."""
    try:
        yield
    except (KeyboardInterrupt, Interrupted) as exc:
        outcome.interrupted = "SIGTERM" if isinstance(exc, Interrupted) else "Ctrl-C"


@dataclass
class SweepOutcome(Outcome):
    points: list[G6Point] = field(default_factory=list)
    planned: int = 0

    @property
    def measured(self) -> int:
        return len(self.points)

    def done(self) -> str:
        return f"{self.measured} of {self.planned} points"


def run_sweep(
    params: G6Params, target: Target, sizing: Callable[[int | None], Sizing | None], how: Measurement,
    outcome: SweepOutcome,
) -> None:  # fmt: skip
    """Every point of the grid into `outcome`, with the errors met on the way and what the server said it
    was. The caller holds `target.session()` and the runner's context around it."""
    outcome.planned = len(params.max_num_seqs) * len(params.concurrency or params.rate) * params.repeats
    with interruptible(outcome):
        for mns in params.max_num_seqs:
            settings = ServerSettings() if mns is None else ServerSettings(max_num_seqs=mns)
            with target.serving(settings) as server:
                outcome.server_versions = outcome.server_versions or server_versions(server)
                for repeat in range(params.repeats):
                    for spec in load_specs(params, server.base_url, "max-num-seqs", mns, "repeat", repeat):
                        load = f"c={spec.concurrency}" if spec.concurrency else f"rate={spec.rate}/s"
                        label = f"max-num-seqs={mns if mns is not None else '?'} {load}"
                        label += f" (repeat {repeat + 1} of {params.repeats})" if params.repeats > 1 else ""
                        measured = measure_point(params, spec, server, label, PointContext(mns, sizing(mns)), how)
                        outcome.points.append(measured.point.model_copy(update={"repeat": repeat}))
                        outcome.errors += measured.errors
