"""The g6 sweep: max-num-seqs x load, one measured point at a time, with server-side truth beside it.

`measure_point` is the one "run one load point -> labelled point" step every g6 run uses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, NamedTuple, Protocol

from benchmarks.g6.analysis import analyse
from benchmarks.g6.config import G6Params
from benchmarks.g6.price import usd_per_million_output_tokens
from benchmarks.g6.result import G6Point, GpuPrice
from benchmarks.g6.targets import ServerSettings
from benchmarks.harness import RunProgress
from benchmarks.harness.server import server_versions
from benchmarks.loadgen import LoadSpec, PointStats, run_load, summarize
from benchmarks.metrics import MetricsError, PrometheusClient, Scraper, ServerMetrics, with_gpu_metrics
from benchmarks.serving.sizing import Sizing


class Target(Protocol):
    def session(self) -> AbstractContextManager[None]:
        """Around the whole run (a stack restores its config on exit)."""

    def serving(self, settings: ServerSettings) -> AbstractContextManager[str]:
        """The server with these settings in place; yields its base URL."""


def load_spec(params: G6Params, base_url: str, **shape: Any) -> LoadSpec:
    """A LoadSpec from the run's parameters; `shape` overrides any field (concurrency, lengths, model...)."""
    common: dict[str, Any] = dict(
        base_url=base_url,
        model=params.model,
        api=params.api,
        input_len=params.input_len,
        output_len=params.output_len,
        requests=params.requests,
        duration_s=params.duration_s,
        warmup=params.warmup,
        seed=params.seed,
        timeouts=params.timeouts,
        slo=params.slo,
        max_client_lag_ms=params.max_client_lag_ms,
    )
    return LoadSpec(**{**common, **shape})


def load_specs(params: G6Params, base_url: str) -> list[LoadSpec]:
    """One LoadSpec per concurrency (closed loop) or rate (open loop)."""
    if params.concurrency:
        return [load_spec(params, base_url, concurrency=c) for c in params.concurrency]
    return [load_spec(params, base_url, rate=r) for r in params.rate]


async def _measure(
    spec: LoadSpec, scrape_url: str | None, interval_s: float, on_done: Callable[[object], None]
) -> tuple[PointStats, ServerMetrics | None, str | None]:
    scraper = Scraper(scrape_url, interval_s) if scrape_url else None
    error = None
    if scraper is not None:
        try:
            await scraper.start()
        except MetricsError as exc:
            scraper, error = None, str(exc)
    stats = summarize(await run_load(spec, on_done), spec)
    server = None
    if scraper is not None:
        try:
            server = await scraper.stop()
        except MetricsError as exc:
            error = str(exc)
    return stats, server, error


class PointContext(NamedTuple):
    """What labels and prices a point besides its load: the server's batch cap, its sizing, the GPU price."""

    max_num_seqs: int | None
    sizing: Sizing | None
    price: GpuPrice | None


def measure_point(
    params: G6Params,
    spec: LoadSpec,
    label: str,
    context: PointContext,
    progress: RunProgress,
    prom: PrometheusClient | None,
) -> tuple[G6Point, list[str]]:
    """Run one load point and label it: client figures, the server's metrics over its window, what
    bounds it, its price per million output tokens; plus the errors met, for the report.

    Every g6 run (the sweep and the experiments) measures its points through this one function.
    """
    errors = []
    on_done = progress.point(label, spec.requests)
    # The server's own gauges are scraped directly, as often as the client likes: a Prometheus
    # scraping every 15 s holds one sample or none of a point of seconds.
    scrape_url = spec.base_url.rstrip("/") + "/metrics"
    stats, server, error = asyncio.run(_measure(spec, scrape_url, params.scrape_interval_s, on_done))
    if prom is not None and stats.window is not None:
        try:
            server = with_gpu_metrics(
                server,
                prom.window_metrics(
                    stats.window.start.timestamp(), stats.window.end.timestamp(), params.scrape_interval_s
                ),
            )
        except MetricsError as exc:
            error = str(exc)
    if error:
        errors.append(f"{label}: server metrics: {error}")
    if stats.failed:
        errors.append(f"{label}: {stats.failed} failed requests {stats.failures}")
    analysis = analyse(
        output_tokens_per_s=stats.output_tokens_per_s,
        mean_decoding=stats.mean_decoding,
        concurrency=stats.concurrency,
        server=server,
        max_num_seqs=context.max_num_seqs,
        sizing=context.sizing,
        context_len=spec.input_len + spec.output_len // 2,
        speedup=params.speedup,
    )
    price = usd_per_million_output_tokens(context.price, stats.output_tokens_per_s, params.speedup)
    point = G6Point.model_validate(
        {**dict(stats), "max_num_seqs": context.max_num_seqs, "server": server, **dict(analysis),
         "usd_per_million_output_tokens": price}
    )  # fmt: skip
    return point, errors


def prometheus(params: G6Params) -> PrometheusClient | None:
    return PrometheusClient.over_http(params.prometheus) if params.prometheus else None


class SweepOutcome(NamedTuple):
    points: list[G6Point]
    errors: list[str]  # kept for the report
    server_versions: dict[str, str]


def run_sweep(
    params: G6Params,
    target: Target,
    sizing: Callable[[int | None], Sizing | None],
    progress: RunProgress,
    price: GpuPrice | None = None,
) -> SweepOutcome:
    """All points of the grid, the errors met on the way and what the server said it was."""
    prom = prometheus(params)
    points: list[G6Point] = []
    errors: list[str] = []
    versions: dict[str, str] = {}
    with target.session():
        for mns in params.max_num_seqs:
            settings = ServerSettings() if mns is None else ServerSettings(max_num_seqs=mns)
            with target.serving(settings) as base_url:
                versions = versions or server_versions(base_url)
                for spec in load_specs(params, base_url):
                    load = f"c={spec.concurrency}" if spec.concurrency else f"rate={spec.rate}/s"
                    label = f"max-num-seqs={mns if mns is not None else '?'} {load}"
                    point, point_errors = measure_point(
                        params, spec, label, PointContext(mns, sizing(mns), price), progress, prom
                    )
                    points.append(point)
                    errors += point_errors
    return SweepOutcome(points, errors, versions)
