"""A load point's plan (`Plan`), the requests it sends and when (open loop: Poisson arrivals), and
what the run returns (`Record`, `LoadRun`)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import socket
from dataclasses import asdict, dataclass, field
from urllib.parse import urlsplit


# Token ids away from the special-token range of common vocabularies (all are > 32k entries).
TOKEN_ID_RANGE = (1000, 30000)


class PlanError(ValueError):
    """A plan the load generator cannot run; the message names the key."""


@dataclass(frozen=True)
class Plan:
    """One load point: closed-loop `concurrency` or open-loop Poisson `rate`, bounded in requests and seconds."""

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
    duration_s: float | None = None
    seed: int = 0
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
        if (plan.concurrency is None) == (plan.rate is None):
            raise PlanError("plan: give exactly one of concurrency and rate")
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
    """An open-loop plan's send times, seconds from t0, one per request (warm-up first)."""
    return poisson_offsets(plan.rate or 1.0, plan.total, plan.seed, plan.warmup)
