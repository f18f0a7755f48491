"""The g6 sweep: max-num-seqs x load, one measured point at a time, with server-side truth beside it."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import NamedTuple, Protocol

from benchmarks.g6.analysis import analyse
from benchmarks.g6.config import G6Params
from benchmarks.g6.result import G6Point
from benchmarks.harness import RunProgress
from benchmarks.harness.server import Server, server_versions
from benchmarks.loadgen import LoadSpec, PointRunner, PointStats, summarize
from benchmarks.metrics import MetricsError, PrometheusClient, Scraper, ServerMetrics, with_gpu_metrics
from benchmarks.serving.sizing import Sizing


class Target(Protocol):
    def session(self) -> AbstractContextManager[None]:
        """Around the whole sweep (a stack restores its config on exit)."""

    def serving(self, max_num_seqs: int | None) -> AbstractContextManager[Server]:
        """The server with this max-num-seqs in place."""


def load_specs(params: G6Params, base_url: str) -> list[LoadSpec]:
    """One LoadSpec per concurrency (closed loop) or rate (open loop)."""
    common = dict(
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
    if params.concurrency:
        return [LoadSpec(concurrency=c, **common) for c in params.concurrency]
    return [LoadSpec(rate=r, **common) for r in params.rate]


def measure_point(
    spec: LoadSpec, runner: PointRunner, server: Server, scrape_interval_s: float, on_progress: Callable[[int], None]
) -> tuple[PointStats, ServerMetrics | None, str | None]:
    """One point: the load generator's figures, the server's own gauges scraped meanwhile, and the
    error that kept the server's figures out, if any."""
    # The server's gauges are scraped directly, as often as the client likes: a Prometheus scraping
    # every 15 s holds one sample or none of a point of seconds.
    scraper: Scraper | None = Scraper(lambda: server.get("/metrics"), scrape_interval_s, f"{server.where}/metrics")
    error = None
    try:
        scraper.start()
    except MetricsError as exc:
        scraper, error = None, str(exc)
    stats = summarize(runner.run(spec, on_progress), spec)
    metrics = None
    if scraper is not None:
        try:
            metrics = scraper.stop()
        except MetricsError as exc:
            error = str(exc)
    return stats, metrics, error


class SweepOutcome(NamedTuple):
    points: list[G6Point]
    errors: list[str]  # kept for the report
    server_versions: dict[str, str]


def run_sweep(
    params: G6Params,
    target: Target,
    runner: PointRunner,
    prom: PrometheusClient | None,
    sizing: Callable[[int | None], Sizing | None],
    progress: RunProgress,
) -> SweepOutcome:
    """All points of the grid, the errors met on the way and what the server said it was.

    `prom` (the stack's Prometheus, if any) adds the GPU series. The caller holds `target.session()`
    and the runner's context around it.
    """
    points: list[G6Point] = []
    errors: list[str] = []
    versions: dict[str, str] = {}
    for mns in params.max_num_seqs:
        with target.serving(mns) as endpoint:
            versions = versions or server_versions(endpoint)
            for spec in load_specs(params, endpoint.base_url):
                load = f"c={spec.concurrency}" if spec.concurrency else f"rate={spec.rate}/s"
                label = f"max-num-seqs={mns if mns is not None else '?'} {load}"
                on_progress = progress.point(label, spec.requests)
                stats, server, error = measure_point(spec, runner, endpoint, params.scrape_interval_s, on_progress)
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
                    max_num_seqs=mns,
                    sizing=sizing(mns),
                    context_len=params.context_len,
                    speedup=params.speedup,
                )
                points.append(
                    G6Point.model_validate(
                        {**dict(stats), "max_num_seqs": mns, "server": server, **dict(analysis)}
                    )
                )
    return SweepOutcome(points, errors, versions)
