"""Lab g6's result.json: run metadata, parameters, sizing, and one point per (max_num_seqs, load)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from benchmarks.g6.config import G6Params
from benchmarks.harness import RunMeta
from benchmarks.kube.phases import ColdStartPhases
from benchmarks.loadgen import PointStats
from benchmarks.loadgen.reruns import Rerun, rerun
from benchmarks.loadgen.steady import SteadyState
from benchmarks.metrics import ServerMetrics
from benchmarks.serving.sizing import Sizing

SCHEMA_VERSION = 1

Bound = Literal["kv-cache", "max-num-seqs", "memory-bandwidth", "compute", "unknown"]


class GpuPrice(BaseModel):
    """The list prices per hour a point is priced at: one GPU node (machine and boot disk) spot and
    on-demand, and the rest of the cluster that runs beside it (system node(s), cluster fee)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_node_spot: float
    gpu_node_on_demand: float
    rest_of_cluster: float
    configured: Literal["spot", "on-demand"]  # the GPU pool's model as the stack configures it
    node: str
    region: str
    price_date: str  # the date the machine prices were read
    source: str

    @property
    def gpu_node(self) -> float:
        """The GPU node's price as the stack configures it."""
        return self.gpu_node_spot if self.configured == "spot" else self.gpu_node_on_demand

    def describe(self) -> str:
        return (
            f"one {self.node} in {self.region} at ${self.gpu_node_spot:.3f}/h spot or ${self.gpu_node_on_demand:.3f}/h "
            f"on-demand (the stack runs it {self.configured}), and ${self.rest_of_cluster:.3f}/h for the rest of the "
            f"cluster beside it (list prices read {self.price_date}, {self.source})"
        )


class TokenPrices(BaseModel):
    """USD per million output tokens of one point, on each basis a reader may pay or compare by."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_node_spot: float
    gpu_node_on_demand: float
    cluster_spot: float  # the whole cluster hour: the GPU node spot plus the rest of the cluster
    cluster_on_demand: float
    # GKE Inference Quickstart's convention: the GPU node spot over output + input/4 tokens, an input
    # token costing a quarter of an output one (its default output-to-input cost ratio of 4).
    giq_convention: float


class G6Point(PointStats):
    """Client figures (flat, from PointStats) plus the server's and the analysis of what bounds them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_num_seqs: int | None
    repeat: int = 0  # which run of the grid (--repeats), from 0
    server: ServerMetrics | None
    bound: Bound
    bound_reason: str
    observed_batch: float | None
    roofline_tokens_per_s: float | None
    roofline_share: float | None
    # List prices over this point's output tokens (price.py); None without a price.
    usd_per_million_output_tokens: TokenPrices | None = None
    # Where an experiment reads its steady state (saturation, kv): the window between ramp and last
    # arrival, and the server's metrics over it (its counters from the window's start).
    steady: SteadyState | None = None
    steady_server: ServerMetrics | None = None

    @property
    def host_slowed(self) -> bool:
        """A simulator the host slowed during the point (ServerMetrics.host_slowed): its tails are the host's."""
        return self.server is not None and self.server.host_slowed


class Figures(BaseModel):
    """One point's headline figures over its repeats, each run with its own seed: the mean and the 95%
    interval a rerun's mean falls in (benchmarks.loadgen.reruns), every figure in GPU time."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    runs: int
    output_tokens_per_s: Rerun | None
    requests_per_s: Rerun | None
    ttft_p50_ms: Rerun | None
    ttft_p99_ms: Rerun | None
    itl_p50_ms: Rerun | None
    itl_p99_ms: Rerun | None
    tpot_p99_ms: Rerun | None
    e2e_p50_ms: Rerun | None
    usd_per_million_output_tokens: Rerun | None = None  # the GPU node at spot
    prefix_cache_hit_rate: Rerun | None = None
    roofline_share: Rerun | None = None  # output tok/s over the decode roofline's at the observed batch


def figures(points: list[G6Point]) -> Figures:
    """The figures of one point measured once per repeat (`points`, one per run)."""
    done = [p for p in points if p.completed]

    def q(name: str, which: str) -> Rerun | None:
        return rerun([getattr(s, which) if (s := getattr(p, name)) is not None else None for p in done])

    return Figures(
        runs=len(points),
        output_tokens_per_s=rerun([p.output_tokens_per_s for p in done]),
        requests_per_s=rerun([p.requests_per_s for p in done]),
        ttft_p50_ms=q("ttft_ms", "p50"),
        ttft_p99_ms=q("ttft_ms", "p99"),
        itl_p50_ms=q("itl_ms", "p50"),
        itl_p99_ms=q("itl_ms", "p99"),
        tpot_p99_ms=q("tpot_ms", "p99"),
        e2e_p50_ms=q("e2e_ms", "p50"),
        usd_per_million_output_tokens=rerun([p.usd_per_million_output_tokens.gpu_node_spot
                                             if p.usd_per_million_output_tokens else None for p in done]),  # fmt: skip
        prefix_cache_hit_rate=rerun([p.server.prefix_cache_hit_rate if p.server else None for p in done], most=1.0),
        roofline_share=rerun([p.roofline_share for p in done]),
    )


class SweepFigures(Figures):
    """A sweep point's figures across its repeats, named by its server setting and load."""

    max_num_seqs: int | None
    concurrency: int | None
    rate: float | None


class G6Result(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = SCHEMA_VERSION
    meta: RunMeta
    params: G6Params
    sizing: list[Sizing] = []
    sizing_gap: str | None = None  # why there is no sizing, when there is none
    points: list[G6Point]
    # Each point's figures over its repeats (--repeats), in the grid's order: the report's answer.
    across: list[SweepFigures] = []
    cost: str | None = None  # Markdown cost section (stacks.cost_estimate), stored so the report stays pure
    gpu_price: GpuPrice | None = None
    waited: ColdStartPhases | None = None  # the GPU node the run had to bring up, phase by phase

    def sizing_for(self, max_num_seqs: int | None) -> Sizing | None:
        matches = [s for s in self.sizing if max_num_seqs is None or s.max_num_seqs == max_num_seqs]
        return matches[0] if matches else None


def sweep_figures(points: list[G6Point]) -> list[SweepFigures]:
    """One SweepFigures per (max-num-seqs, load) of `points`, in the order they first ran."""
    groups: dict[tuple[int | None, int | None, float | None], list[G6Point]] = {}
    for p in points:
        groups.setdefault((p.max_num_seqs, p.concurrency, p.rate), []).append(p)
    return [SweepFigures(max_num_seqs=mns, concurrency=c, rate=r, **dict(figures(ps))) for (mns, c, r), ps in groups.items()]


class ExperimentResult(BaseModel):
    """What the result.json of every g6 experiment (kv, quant) holds besides its own figures."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = SCHEMA_VERSION
    meta: RunMeta
    params: G6Params
    gpu_price: GpuPrice | None = None
    cost: str | None = None  # Markdown cost section (stacks.cost_estimate), stored so the report stays pure
    waited: ColdStartPhases | None = None  # the GPU node the run had to bring up, phase by phase
