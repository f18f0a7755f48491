"""Lab g6's parameters: what to sweep, against what, and the stack outputs section it reads."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from benchmarks.g6.errors import G6Error
from benchmarks.loadgen import Slo, Timeouts
from benchmarks.loadgen.lengths import Lengths

LAB = "g6"
# Counted requests per point when --requests is not given: at least MIN_REQUESTS, and REQUESTS_PER_SLOT
# per concurrent request, so that a closed-loop point runs many waves and its ramp-up and drain are a
# small part of its window (it then holds its concurrency for most of it).
MIN_REQUESTS = 64
REQUESTS_PER_SLOT = 8


class G6Sweep(BaseModel):
    """outputs.benchmark.sweep: the grid the stack proposes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_num_seqs: list[int] = []
    concurrency: list[int] = []


class G6Outputs(BaseModel):
    """outputs.benchmark of a g6 stack.

    Unknown keys are ignored: the block is shared with other readers (dashboards, other features).
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    model: str
    endpoint: str = Field("vllm", description="the key of the vLLM service in outputs.endpoints")
    max_num_seqs: int | None = None
    gpu: str | None = Field(None, description="catalogue name of the GPU, e.g. l4")
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    quantization: str | None = None
    sweep: G6Sweep = G6Sweep()


class G6Params(BaseModel):
    """Everything that decides what a g6 run measures; recorded in result.json."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    experiment: str = Field("sweep", description="a name in benchmarks.g6.experiments.table")
    target_kind: Literal["sim", "url", "stack"]
    target: str = Field(description="base URL, or 'sim' when each point starts its own simulator")
    stack: str | None = None
    # Where the load generator ran: a Job per point in the stack's cluster, or this machine.
    client: Literal["local", "in-cluster"] = "local"
    model: str
    api: Literal["completions", "chat"] = "completions"
    concurrency: list[int] = []
    rate: list[float] = []
    max_num_seqs: list[int | None] = [None]
    input_len: Lengths = Lengths(kind="fixed", a=256)
    output_len: Lengths = Lengths(kind="fixed", a=128)
    eos: bool = False  # requests stop at EOS, output_len their cap
    requests: int | None = Field(None, ge=1, description="counted requests per point; None: requests_at()")
    duration_s: float | None = Field(None, gt=0)
    warmup: int | None = Field(None, ge=0)
    seed: int = 0
    # Runs of every point, each with its own seed: the sweep runs its grid this many times over, point
    # after point (interleaved, so a drift in the server or the machine spreads over every point instead of
    # biasing one); the experiments run each point (saturation: each deciding rate) this many times.
    repeats: int = Field(1, ge=1)
    timeouts: Timeouts = Timeouts()
    slo: Slo = Slo()
    slo_itl_ms: float | None = Field(None, gt=0, description="ITL p99 limit for the cheapest setting within SLOs")
    max_client_lag_ms: float = Field(1.0, gt=0)
    prometheus: str | None = None
    scrape_interval_s: float = Field(1.0, gt=0)
    gpu: str | None = None
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    max_model_len: int | None = None
    quantization: Literal["fp8", "awq", "gptq"] | None = None
    speedup: float = Field(1.0, gt=0, description="the simulator's time compression; 1 for real servers")
    # --sim --virtual: every point replayed on the simulator's virtual clock, no load sent (benchmarks.g6.virtual).
    virtual: bool = False

    @model_validator(mode="after")
    def _coherent(self) -> G6Params:
        # One arrival process; the searches (kv, saturation) and the prefix A/B (one rate, its own) send none.
        if self.concurrency and self.rate:
            raise G6Error("give either --concurrency (closed loop) or --rate (open-loop Poisson), not both")
        changeable = self.target_kind in ("sim", "stack")
        if len(self.max_num_seqs) > 1 and not changeable:
            raise G6Error(
                f"--max-num-seqs {','.join(map(str, self.max_num_seqs))}: a sweep changes the server, which "
                "needs --sim or --stack STACK (config + pulumi up); with --target or --outputs alone give one value"
            )
        if self.virtual and self.target_kind != "sim":
            raise G6Error("--virtual replays the simulator's engine: it needs --sim")
        if self.speedup != 1.0 and self.target_kind != "sim":
            raise G6Error("--speedup applies to --sim only: a real server runs in real time")
        return self

    def requests_at(self, concurrency: int | None) -> int:
        """Counted requests of a point at `concurrency` (None: open loop): as given, or scaled with it."""
        if self.requests is not None:
            return self.requests
        return max(MIN_REQUESTS, REQUESTS_PER_SLOT * (concurrency or 0))

    @property
    def time_scale(self) -> str:
        """The scale every latency and rate of the run is reported on, for table headers and axes."""
        return f"GPU time: simulated x{self.speedup:g}, converted" if self.speedup != 1.0 else "GPU time"

    @property
    def context_len(self) -> int:
        """Mean context of a decoding sequence: the prompt plus half the output (cap, with --eos)."""
        return round(self.input_len.mean + self.output_len.mean / 2)

    @property
    def longest(self) -> int | None:
        """The longest request the lengths can draw (prompt + output); None if unbounded (clipped instead)."""
        if self.input_len.most is None or self.output_len.most is None:
            return None
        return self.input_len.most + self.output_len.most
