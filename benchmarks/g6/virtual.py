"""`--sim --virtual`: any g6 experiment on the simulator's virtual clock (benchmarks.sim.virtual).

The experiment is the same code: the same points, seeds, searches and verdicts. The simulator is started
as for --sim (its model card, its KV cache configuration and the quality pipeline's toy model answer
as they do), but no load is sent to it: each point's plan is replayed on its engine's virtual clock, and
the server's figures over the point are read from that replay. What is left out is what the host adds
to a real-time run (client lag, the loopback hop, event-loop and timer delays): the answer the
simulated L4 gives, in the time its engine takes, and the oracle a real-time run is checked against
(python -m benchmarks.g6.agreement).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from benchmarks.g6.targets import ServerSettings, SimTarget
from benchmarks.harness.server import Server
from benchmarks.loadgen import LoadRun, LoadSpec
from benchmarks.loadgen.runner import Progress
from benchmarks.metrics import ServerMetrics
from benchmarks.sim.config import SimConfig
from benchmarks.sim.virtual import Replay, replay


class VirtualTarget:
    """A simulator target whose points are replayed: `config` is the simulator the current `serving` runs."""

    def __init__(self, sim: SimTarget) -> None:
        self.sim = sim
        self.config: SimConfig | None = None

    def session(self) -> AbstractContextManager[None]:
        return self.sim.session()

    @contextmanager
    def serving(self, settings: ServerSettings) -> Iterator[Server]:
        with self.sim.serving(settings) as server:
            self.config = self.sim.config(settings)
            try:
                yield server
            finally:
                self.config = None


class VirtualRunner:
    """A PointRunner that replays each point against the simulator its target serves, and reads the
    server's figures over any window of the last replay (on the replay's clock, as its records are)."""

    def __init__(self, target: VirtualTarget, scrape_interval_s: float) -> None:
        self.target = target
        self.scrape_interval_s = scrape_interval_s
        self.last: Replay | None = None

    def __enter__(self) -> VirtualRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def run(self, spec: LoadSpec, on_progress: Progress | None = None) -> LoadRun:
        assert self.target.config is not None, "a point replayed outside target.serving()"
        self.last = replay(spec.plan(), self.target.config)
        if on_progress is not None:
            on_progress(len(self.last.run.records))
        return self.last.run

    def server_metrics(self, start: float, end: float, counted_from: float | None) -> ServerMetrics:
        """Gauges over [start, end], counters from `counted_from` (as a scrape's are: sweep.measure_point)."""
        assert self.last is not None
        gauges = self.last.metrics(start, end, self.scrape_interval_s)
        if counted_from is None or counted_from >= start:
            return gauges
        counters = self.last.metrics(counted_from, end, self.scrape_interval_s)
        return gauges.model_copy(update={name: getattr(counters, name)
                                         for name in ("preemptions", "prefix_cache_queries", "prefix_cache_hits")})  # fmt: skip
