"""Lab g6's result.json: run metadata, parameters, sizing, and one point per (max_num_seqs, load)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from benchmarks.g6.config import G6Params
from benchmarks.harness import RunMeta
from benchmarks.labs.phases import ColdStartPhases
from benchmarks.loadgen import PointStats
from benchmarks.metrics import ServerMetrics
from benchmarks.serving.sizing import Sizing

SCHEMA_VERSION = 1

Bound = Literal["kv-cache", "max-num-seqs", "memory-bandwidth", "compute", "unknown"]


class GpuPrice(BaseModel):
    """One GPU node's list price per hour (machine and boot disk), and where it comes from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    usd_per_hour: float
    node: str
    region: str
    price_date: str
    source: str

    def describe(self) -> str:
        return (
            f"${self.usd_per_hour:.3f}/h for one {self.node} in {self.region} (list prices of "
            f"{self.price_date}, {self.source})"
        )


class G6Point(PointStats):
    """Client figures (flat, from PointStats) plus the server's and the analysis of what bounds them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_num_seqs: int | None
    server: ServerMetrics | None
    bound: Bound
    bound_reason: str
    observed_batch: float | None
    roofline_tokens_per_s: float | None
    roofline_share: float | None
    # The GPU node's list price over this point's output tokens (price.py); None without a price.
    usd_per_million_output_tokens: float | None = None


class G6Result(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = SCHEMA_VERSION
    meta: RunMeta
    params: G6Params
    sizing: list[Sizing] = []
    sizing_gap: str | None = None  # why there is no sizing, when there is none
    points: list[G6Point]
    cost: str | None = None  # Markdown cost section (stacks.cost_estimate), stored so the report stays pure
    gpu_price: GpuPrice | None = None
    waited: ColdStartPhases | None = None  # the GPU node the run had to bring up, phase by phase

    def sizing_for(self, max_num_seqs: int | None) -> Sizing | None:
        matches = [s for s in self.sizing if max_num_seqs is None or s.max_num_seqs == max_num_seqs]
        return matches[0] if matches else None


class ExperimentResult(BaseModel):
    """What the result.json of every g6 experiment (kv, quant) holds besides its own figures."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = SCHEMA_VERSION
    meta: RunMeta
    params: G6Params
    gpu_price: GpuPrice | None = None
    cost: str | None = None  # Markdown cost section (stacks.cost_estimate), stored so the report stays pure
    waited: ColdStartPhases | None = None  # the GPU node the run had to bring up, phase by phase
