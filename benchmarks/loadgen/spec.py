"""What one load point is: target, request shape, arrival process, bounds, timeouts and SLOs."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from benchmarks.loadgen.core import Plan, expected_arrivals, schedule_problem
from benchmarks.loadgen.errors import LoadgenError
from benchmarks.loadgen.lengths import Lengths, draw_pairs


class Timeouts(BaseModel):
    """Finite per-phase limits, so a dead or stalled server can never hang a run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    connect_s: float = Field(5.0, gt=0)
    # Until the first bytes of the response body (a chat stream's role-only chunk counts).
    first_token_s: float = Field(120.0, gt=0)
    total_s: float = Field(600.0, gt=0)


class Slo(BaseModel):
    """Service-level objectives a request must meet to count towards goodput (None = no limit)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ttft_ms: float | None = Field(None, gt=0)
    tpot_ms: float | None = Field(None, gt=0)
    e2e_ms: float | None = Field(None, gt=0)

    def is_set(self) -> bool:
        return any(v is not None for v in (self.ttft_ms, self.tpot_ms, self.e2e_ms))


class LoadSpec(BaseModel):
    """One point of load: closed-loop `concurrency`, open-loop Poisson `rate`, or open-loop Poisson arrivals
    at a rate following `schedule`; exactly one."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str
    model: str
    api: Literal["completions", "chat"] = "completions"
    # A number (every request alike) or a seeded distribution (lengths.py).
    input_len: Lengths = Lengths(kind="fixed", a=256)
    output_len: Lengths = Lengths(kind="fixed", a=128)
    # Requests stop at EOS: output_len is the cap (max_tokens), not a forced length.
    eos: bool = False
    # Drawn lengths are clipped so a request fits the server's context.
    max_model_len: int | None = Field(None, ge=2)
    # Requests in prefix_groups groups, each group's prompts starting with its own prefix_len tokens
    # (a system prompt) before their input_len tokens.
    prefix_len: int = Field(0, ge=0)
    prefix_groups: int = Field(1, ge=1)
    concurrency: int | None = Field(None, ge=1)
    rate: float | None = Field(None, gt=0)
    # (seconds from the start, requests/s) knots of a piecewise-linear rate: a step, a ramp, a burst. Its
    # `requests` are the arrivals it offers on average (`scheduled_requests`), placed as a Poisson
    # process with that rate places them; no warm-up unless one is given (the first are the measurement).
    schedule: list[tuple[float, float]] | None = None
    # Open loop only: each request on the connection freed last ("reuse"), or on one of its own.
    connections: Literal["reuse", "per-request"] = "reuse"
    requests: int = Field(..., ge=1)
    duration_s: float | None = Field(None, gt=0)
    warmup: int | None = Field(None, ge=0)
    seed: int = 0
    timeouts: Timeouts = Timeouts()
    slo: Slo = Slo()
    # A lag p99 above this (or above 5% of TTFT p50, whichever is larger) says the client, not
    # the server, limited the point.
    max_client_lag_ms: float = Field(1.0, gt=0)

    @model_validator(mode="after")
    def _one_arrival_process(self) -> LoadSpec:
        if not self.base_url.startswith("http://"):
            raise LoadgenError(
                f"load spec: {self.base_url} is not an http:// URL; the load generator speaks plain HTTP, "
                "as vLLM's OpenAI server does"
            )
        if sum(x is not None for x in (self.concurrency, self.rate, self.schedule)) != 1:
            raise LoadgenError(
                f"load spec for {self.base_url}: give exactly one of concurrency (closed loop), rate (open-loop "
                f"Poisson) or schedule (open loop, a rate over time), got concurrency={self.concurrency} "
                f"rate={self.rate} schedule={self.schedule}"
            )
        if self.connections == "per-request" and self.concurrency is not None:
            raise LoadgenError(f"load spec for {self.base_url}: connections per-request is for open-loop arrivals "
                               "(rate or schedule); a closed loop's clients each keep their connection")  # fmt: skip
        if self.schedule is not None:
            knots = [list(k) for k in self.schedule]
            if problem := schedule_problem(knots):
                raise LoadgenError(f"load spec for {self.base_url}: schedule: {problem}")
            if self.warmup:
                raise LoadgenError(f"load spec for {self.base_url}: a schedule's first arrivals are what it "
                                   "measures (a ramp from quiet): warmup must be 0")  # fmt: skip
            if self.requests != scheduled_requests(self.schedule):
                raise LoadgenError(
                    f"load spec for {self.base_url}: the schedule offers {scheduled_requests(self.schedule)} "
                    f"requests on average, not requests={self.requests}"
                )
        return self

    @property
    def warmup_requests(self) -> int:
        """Requests sent first and not counted: one per worker (closed loop), one second of arrivals (a
        constant rate), none (a schedule)."""
        if self.warmup is not None:
            return self.warmup
        if self.concurrency is not None:
            return self.concurrency
        if self.schedule is not None:
            return 0
        return max(1, round(self.rate or 1))

    def lengths(self) -> tuple[list[int], list[int]]:
        """Every request's (prompt, output) lengths, warm-up first: the same seed, the same requests."""
        total = self.warmup_requests + self.requests
        room = None if self.max_model_len is None else self.max_model_len - self.prefix_len
        if room is not None and room < 2:
            raise LoadgenError(f"a prefix of {self.prefix_len} tokens leaves no room in max-model-len {self.max_model_len}")
        return draw_pairs(self.input_len, self.output_len, total, self.seed, room)

    def plan(self, workers: int | None = None) -> Plan:
        """What the load generator core runs; `workers` processes (default: one per CPU it may use)."""
        input_lens, output_lens = self.lengths()
        return Plan(
            base_url=self.base_url,
            model=self.model,
            requests=self.requests,
            warmup=self.warmup_requests,
            api=self.api,
            input_lens=input_lens,
            output_lens=output_lens,
            eos=self.eos,
            prefix_len=self.prefix_len,
            prefix_groups=self.prefix_groups,
            concurrency=self.concurrency,
            rate=self.rate,
            schedule=None if self.schedule is None else [list(k) for k in self.schedule],
            connections=self.connections,
            duration_s=self.duration_s,
            seed=self.seed,
            connect_s=self.timeouts.connect_s,
            first_token_s=self.timeouts.first_token_s,
            total_s=self.timeouts.total_s,
            workers=workers,
        )


def scheduled_requests(schedule: list[tuple[float, float]]) -> int:
    """The requests a rate schedule offers on average: the integral of its rate, rounded."""
    return round(expected_arrivals([list(k) for k in schedule]))
