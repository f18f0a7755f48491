"""A load point's plan (`Plan`), the requests it sends and when (open loop: Poisson arrivals at a
constant rate, or at a rate that follows a schedule), and what the run returns (`Record`, `LoadRun`)."""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import os
import random
import socket
from dataclasses import asdict, dataclass, field
from urllib.parse import urlsplit


CONNECTIONS = ("reuse", "per-request")
# Token ids away from the special-token range of common vocabularies (all are > 32k entries).
TOKEN_ID_RANGE = (1000, 30000)


class PlanError(ValueError):
    """A plan the load generator cannot run; the message names the key."""


@dataclass(frozen=True)
class Plan:
    """One load point: closed-loop `concurrency`, open-loop Poisson `rate`, or open-loop Poisson arrivals
    whose rate follows `schedule`; bounded in requests and seconds."""

    base_url: str
    model: str
    requests: int
    warmup: int
    api: str = "completions"
    # One prompt and one output length per request, warm-up first (drawn by the spec, seeded).
    input_lens: list[int] = field(default_factory=list)
    output_lens: list[int] = field(default_factory=list)
    # Without ignore_eos: output_lens are caps (max_tokens) and the model stops where it stops.
    eos: bool = False
    # Request i's prompt starts with group i % prefix_groups's prefix of prefix_len tokens, then its own
    # input_lens[i] tokens.
    prefix_len: int = 0
    prefix_groups: int = 1
    concurrency: int | None = None
    rate: float | None = None
    # (seconds from the start, requests/s) knots of a piecewise-linear rate (schedule_problem says which).
    schedule: list[list[float]] | None = None
    duration_s: float | None = None
    seed: int = 0
    # Open loop: "reuse" sends each request on the connection freed last (an HTTP client's pool), "per-request"
    # opens one per request and closes it after (users each on a connection of their own): behind a Service,
    # which balances connections, the two spread requests over replicas differently.
    connections: str = "reuse"
    connect_s: float = 5.0
    first_token_s: float = 120.0
    total_s: float = 600.0
    workers: int | None = None

    @classmethod
    def from_json(cls, text: str) -> Plan:
        try:
            data = json.loads(text)
            plan = cls(**data)
        except (ValueError, TypeError) as exc:
            raise PlanError(f"plan: {exc}") from None
        if sum(x is not None for x in (plan.concurrency, plan.rate, plan.schedule)) != 1:
            raise PlanError("plan: give exactly one of concurrency, rate and schedule")
        if plan.connections not in CONNECTIONS:
            raise PlanError(f"plan: connections {plan.connections!r} is not one of {', '.join(CONNECTIONS)}")
        if plan.schedule is not None and (problem := schedule_problem(plan.schedule)):
            raise PlanError(f"plan: schedule: {problem}")
        if not len(plan.input_lens) == len(plan.output_lens) == plan.total:
            raise PlanError(f"plan: input_lens and output_lens need one length per request ({plan.total})")
        if urlsplit(plan.base_url).scheme != "http":
            # vLLM's OpenAI server speaks plain HTTP, in the cluster as on a laptop; TLS would add
            # CPU to every read and hide the kernel's receive timestamps.
            raise PlanError(f"plan: base_url {plan.base_url!r} is not an http:// URL (the load generator speaks plain HTTP)")
        return plan

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @property
    def total(self) -> int:
        return self.warmup + self.requests

    def worker_count(self) -> int:
        """One per CPU this process may use, never more than there is work to split."""
        return max(1, min(self.workers or usable_cpus(), self.concurrency or self.total))


def usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass(slots=True)
class Record:
    """One request as the client saw it (time.monotonic seconds on the client's machine)."""

    i: int
    scheduled: float
    sent: float  # the request handed to the socket; sent - scheduled is the client's lag
    first_token: float | None  # the read carrying the first content token (not a role-only chunk)
    end: float
    chunk_times: list[float] = field(default_factory=list)  # reads carrying content
    output_tokens: int = 0
    error: str | None = None
    input_tokens: int | None = None  # the server's usage.prompt_tokens (None: it sent no usage)

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class LoadRun:
    """Counted requests of one point, the warm-up's apart, how the point ended and where it ran."""

    records: list[Record]
    warmup: list[Record]
    stopped_by: str  # "requests" or "duration"
    wall_offset: float  # add to a monotonic stamp to get time.time() on the client's machine
    client: dict[str, object]  # host, node, cpus, workers, python, cpu_s, address


def endpoint_path(api: str) -> str:
    return "/v1/chat/completions" if api == "chat" else "/v1/completions"


def request_key(plan: Plan, i: int) -> str:
    """What seeds request `i`'s own tokens: the plan's seed and its place, the warm-up's apart from the
    counted requests' (so a longer warm-up never changes a counted prompt)."""
    return f"warmup:{plan.seed}:{i}" if i < plan.warmup else f"counted:{plan.seed}:{i - plan.warmup}"


def request_seed(plan: Plan, i: int) -> int:
    """The `seed` request `i` carries: a server that samples (or a simulator's stand-in for EOS) decides
    its output from the request alone, never from how many requests it served before."""
    return int.from_bytes(hashlib.sha256(request_key(plan, i).encode()).digest()[:4], "big") >> 1


def build_bodies(plan: Plan) -> list[bytes]:
    """JSON bodies, each with a prompt of its own drawn from the plan's seed, so no prefix cache can
    help beyond the shared prefixes a plan asks for: a point whose seed names it (and its repeat) shares
    no prompt with any other point, its warm-up none with its counted requests.

    Completions send the prompt as token ids, so its length is exactly its `input_lens` entry on vLLM
    and on the simulator. Chat needs text: one word per token, exact on the simulator and
    approximate under a real tokenizer (the server's usage says what it counted, template included).
    A fixed output length is forced (`ignore_eos`, `min_tokens`); with `eos` it is only the cap.
    Greedy (temperature 0) whatever the `seed`: vLLM samples greedily at temperature 0.
    """
    common = {
        "model": plan.model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
    }
    shared = random.Random(f"prefix:{plan.seed}")
    prefixes = [[shared.randrange(*TOKEN_ID_RANGE) for _ in range(plan.prefix_len)] for _ in range(plan.prefix_groups)]
    bodies = []
    for k, (n_in, n_out) in enumerate(zip(plan.input_lens, plan.output_lens)):
        rng = random.Random(request_key(plan, k))
        ids = prefixes[k % plan.prefix_groups] + [rng.randrange(*TOKEN_ID_RANGE) for _ in range(n_in)]
        shape: dict[str, object] = {"max_tokens": n_out, "seed": request_seed(plan, k)}
        if not plan.eos:
            shape.update(min_tokens=n_out, ignore_eos=True)
        if plan.api == "chat":
            body = {**common, **shape, "messages": [{"role": "user", "content": " ".join(f"w{i}" for i in ids)}]}
        else:
            body = {**common, **shape, "prompt": ids}
        bodies.append(json.dumps(body, separators=(",", ":")).encode())
    return bodies


def build_requests(plan: Plan) -> list[bytes]:
    """Whole HTTP/1.1 requests, encoded before the run so a send is one write."""
    url = urlsplit(plan.base_url)
    path = url.path.rstrip("/") + endpoint_path(plan.api)
    head = f"POST {path} HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Type: application/json\r\n".encode()
    return [head + b"Content-Length: %d\r\n\r\n" % len(body) + body for body in build_bodies(plan)]


def poisson_offsets(rate: float, count: int, seed: int, warmup: int = 0) -> list[float]:
    """Seconds from the start of the run of `count` Poisson arrivals at `rate` per second, the first
    `warmup` of them the warm-up's.

    A Poisson process given how many arrivals fall in an interval places them there uniformly at random:
    drawn so (the warm-up's in [0, warmup / rate], the counted ones after), the arrivals keep Poisson's
    burstiness and the counted ones offer the rate the point is labelled with (free-running exponential
    gaps offered 20.6 req/s in a point of 75 requests labelled 25)."""
    rng = random.Random(seed)
    edge = warmup / rate
    first = sorted(rng.uniform(0.0, edge) for _ in range(warmup))
    return first + sorted(rng.uniform(edge, count / rate) for _ in range(count - warmup))


def schedule_problem(knots: list[list[float]]) -> str | None:
    """What makes `knots` no rate schedule (None: it is one): at least two (seconds, requests/s) pairs, the
    first at 0 s, times never decreasing (two at one time make a step) and the last after 0 s, rates never
    negative, some arrivals in all."""
    if len(knots) < 2 or any(len(k) != 2 for k in knots):
        return "give at least two (seconds, requests/s) pairs"
    if not all(math.isfinite(x) for k in knots for x in k):
        return "every time and rate must be a finite number"
    if knots[0][0] != 0:
        return f"the first pair is at {knots[0][0]:g} s: it must be at 0 s"
    if any(b[0] < a[0] for a, b in zip(knots, knots[1:])):
        return "the times must never decrease (two pairs at one time make a step)"
    if knots[-1][0] <= 0:
        return "the last pair is at 0 s: a schedule needs a length"
    if any(k[1] < 0 for k in knots):
        return "a rate is negative"
    if expected_arrivals(knots) <= 0:
        return "every rate is 0: nothing would be sent"
    return None


def _cumulative(knots: list[list[float]]) -> list[float]:
    """The expected arrivals from 0 to each knot: the integral of a piecewise-linear rate (trapezoids)."""
    out = [0.0]
    for (t0, r0), (t1, r1) in zip(knots, knots[1:]):
        out.append(out[-1] + (t1 - t0) * (r0 + r1) / 2)
    return out


def expected_arrivals(knots: list[list[float]]) -> float:
    """The arrivals a rate schedule offers on average over its whole length."""
    return _cumulative(knots)[-1]


def scheduled_offsets(knots: list[list[float]], count: int, seed: int) -> list[float]:
    """Seconds from the start of `count` arrivals of a Poisson process whose rate follows `knots`.

    Given how many arrivals fall in the schedule, a Poisson process places each independently with the
    density rate(t) / (expected arrivals), as `poisson_offsets` does at a constant rate. Drawn so: uniform
    in the expected-arrivals axis, mapped back to time through its inverse (the time-rescaling theorem).
    On a segment from (t0, r0) to (t1, r1) the expected arrivals m after t0 reach m at the x solving
    r0 x + (r1 - r0) x^2 / (2 (t1 - t0)) = m, written so that a constant rate (and r0 = 0) needs no case."""
    rng = random.Random(seed)
    cum = _cumulative(knots)
    out = []
    for y in sorted(rng.uniform(0.0, cum[-1]) for _ in range(count)):
        # The segment holding y; one that holds no arrivals (a step's, or a rate of 0 throughout) is skipped.
        k = min(max(bisect.bisect_right(cum, y) - 1, 0), len(knots) - 2)
        while k > 0 and cum[k + 1] == cum[k]:
            k -= 1
        (t0, r0), (t1, r1) = knots[k], knots[k + 1]
        m, a = y - cum[k], (r1 - r0) / (2 * (t1 - t0)) if t1 > t0 else 0.0
        root = math.sqrt(max(r0 * r0 + 4 * a * m, 0.0))
        x = 2 * m / (r0 + root) if r0 + root > 0 else 0.0
        out.append(min(t0 + x, t1))
    return out


def resolve(plan: Plan) -> tuple[int, tuple]:
    """The address to connect to: the first of the host's addresses that accepts a connection.

    Resolving once and probing in order keeps a `localhost` that resolves to ::1 first (while the
    server listens on 127.0.0.1) from costing a failed connect on every new connection.
    """
    url = urlsplit(plan.base_url)
    try:
        infos = socket.getaddrinfo(url.hostname, url.port or 80, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise PlanError(f"cannot resolve {url.hostname}: {exc}") from None
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.settimeout(plan.connect_s)
            try:
                probe.connect(sockaddr)
                return family, sockaddr
            except OSError:
                continue
    return infos[0][0], infos[0][4]  # nothing listens: every request will count as a connect error


def arrival_offsets(plan: Plan) -> list[float]:
    """An open-loop plan's send times, seconds from t0, one per request (warm-up first: a schedule's first
    arrivals)."""
    if plan.schedule is not None:
        return scheduled_offsets(plan.schedule, plan.total, plan.seed)
    return poisson_offsets(plan.rate or 1.0, plan.total, plan.seed, plan.warmup)
