"""The load generator: one file, Python standard library only.

One load generator, two places to run it: on a laptop `benchmarks.loadgen.runner` runs this file
with `python -I`, and in the cluster a Job runs the same file from a ConfigMap in a plain Python
image with nothing installed. Input: a JSON plan (`Plan`), from the file named by the first
argument, the environment variable LOADGEN_PLAN, or stdin. Output: lines on stdout that start with `gml-loadgen:` (`OutputReader`
reads them back), so they cannot be confused with anything else in a pod's log.

How it keeps out of the numbers it measures:
- latencies count from each request's scheduled send time (no coordinated omission); the lag
  between the scheduled and the actual send is measured for every request;
- one event loop per worker process, the schedule split between them;
- every read is stamped by the kernel as the data arrives (SO_TIMESTAMPNS on Linux, read with
  recvmsg into one reused buffer), so a read's time does not depend on when this process ran;
  elsewhere, as the read returns;
- nothing is parsed on the hot path beyond HTTP framing: the raw reads and their stamps are kept
  and the server-sent events are decoded after the run;
- HTTP/1.1 keep-alive connections, one per concurrent request, to an address resolved once (so
  `localhost` costs no IPv6 detour per connection).
"""

from __future__ import annotations

import asyncio
import base64
import gc
import hashlib
import json
import multiprocessing
import os
import random
import resource
import socket
import struct
import sys
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import wait as wait_connections
from urllib.parse import urlsplit

PREFIX = "gml-loadgen:"
PLAN_ENV = "LOADGEN_PLAN"
# Token ids away from the special-token range of common vocabularies (all are > 32k entries).
TOKEN_ID_RANGE = (1000, 30000)
# Wake this long before an open-loop send and yield until it is due: the event loop's timer sleeps
# in whole milliseconds, which alone would add up to 1 ms of lag to every open-loop request.
SPIN_S = 0.0015
# A keep-alive connection idle longer than this is closed rather than reused: servers close idle
# connections (uvicorn after 5 s), and a request written as the server closes would fail.
MAX_IDLE_S = 2.0
WATCHDOG_S = 0.05
PROGRESS_S = 0.25
HEARTBEAT_S = 5.0  # a progress line at least this often, so a reader can tell a quiet run from a dead one
DATA_LINE_CHARS = 8192  # container runtimes split log lines above 16 KiB

_now = time.monotonic
# The kernel's receive timestamp of every read (Linux: SO_TIMESTAMPNS, CLOCK_REALTIME as a
# timespec): a read's time then does not depend on when this process got to run after it.
SO_TIMESTAMPNS = 35 if sys.platform == "linux" else None
_TIMESPEC = struct.Struct("@ll")
ANC_SIZE = socket.CMSG_SPACE(_TIMESPEC.size) if SO_TIMESTAMPNS is not None else 0


def timestamping_on() -> socket.socket | None:
    """A socket that asks for receive timestamps, held open for the run. The kernel switches its
    timestamping on a moment after the first socket asks (deferred work) and off after the last one
    closes: held from before t0, it is on for the first request's reads too."""
    if SO_TIMESTAMPNS is None:
        return None
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    return sock


def _clocks() -> tuple[float, float]:
    """(monotonic, wall) read at one instant: read again if the process was descheduled between."""
    while True:
        before, mono, after = time.time(), _now(), time.time()
        if after - before < 2e-5:
            return mono, (before + after) / 2


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


# -- requests ---------------------------------------------------------------------------------------


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


# -- HTTP/1.1 framing, the only parsing on the hot path ---------------------------------------------


class _Chunked:
    """Transfer-Encoding: chunked. Walks chunk sizes only; `out` (after the run) collects the payload."""

    __slots__ = ("left", "line", "trailers")

    def __init__(self) -> None:
        self.left = 0  # bytes of the current chunk's data and its CRLF still to come
        self.line = b""  # a size or trailer line split between reads
        self.trailers = False

    def feed(self, data: bytes, pos: int, out: list[bytes] | None = None) -> bool:
        n = len(data)
        while pos < n:
            if self.left:
                take = min(self.left, n - pos)
                if out is not None and (payload := min(take, self.left - 2)) > 0:
                    out.append(data[pos : pos + payload])
                self.left -= take
                pos += take
                continue
            eol = data.find(b"\n", pos)
            if eol < 0:
                self.line += data[pos:]
                return False
            line = self.line + data[pos:eol] if self.line else data[pos:eol]
            self.line = b""
            pos = eol + 1
            if self.trailers:
                if not line.strip():
                    return True
                continue
            size = int(line.split(b";", 1)[0], 16)  # ValueError: not chunked framing
            if size:
                self.left = size + 2
            else:
                self.trailers = True
        return False


class _Length:
    """Content-Length framing."""

    __slots__ = ("left",)

    def __init__(self, length: int) -> None:
        self.left = length

    def feed(self, data: bytes, pos: int, out: list[bytes] | None = None) -> bool:
        take = min(self.left, len(data) - pos)
        if out is not None and take > 0:
            out.append(data[pos : pos + take])
        self.left -= take
        return self.left <= 0


class _UntilClose:
    """No length and not chunked: the body ends when the server closes the connection."""

    __slots__ = ()

    def feed(self, data: bytes, pos: int, out: list[bytes] | None = None) -> bool:
        if out is not None and pos < len(data):
            out.append(data[pos:])
        return False


def _parse_head(head: bytes) -> tuple[int, _Chunked | _Length | _UntilClose, bool]:
    """(status, body framing, keep-alive) of a response head (without the blank line)."""
    status_line, *lines = head.split(b"\r\n")
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
        raise ValueError(f"not an HTTP response: {status_line[:80]!r}")
    status = int(parts[1])
    headers = {}
    for line in lines:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip().lower()
    connection = headers.get(b"connection", b"")
    keep_alive = b"close" not in connection if parts[0] == b"HTTP/1.1" else b"keep-alive" in connection
    if status in (204, 304) or 100 <= status < 200:
        return status, _Length(0), keep_alive
    if b"chunked" in headers.get(b"transfer-encoding", b""):
        return status, _Chunked(), keep_alive
    if b"content-length" in headers:
        return status, _Length(int(headers[b"content-length"])), keep_alive
    return status, _UntilClose(), False


# -- one worker: an event loop, its connections and its share of the schedule -----------------------


class _Raw:
    """A request in flight: raw reads and their stamps, decoded after the run."""

    __slots__ = ("i", "scheduled", "sent", "end", "reads", "stamps", "body_at", "status", "error")

    def __init__(self, i: int, scheduled: float) -> None:
        self.i = i
        self.scheduled = scheduled
        self.sent = 0.0
        self.end = 0.0
        self.reads: list[bytes] = []
        self.stamps: list[float] = []
        self.body_at = 0.0  # first body bytes: the end of the first-token timeout phase
        self.status = 0
        self.error: str | None = None


class _Connection:
    """One keep-alive connection carrying one request at a time: a non-blocking socket read on the
    loop's selector with recvmsg, so each read comes with the kernel's receive timestamp."""

    def __init__(self, worker: _Worker, sock: socket.socket) -> None:
        self.worker = worker
        self.sock = sock
        self.fd = sock.fileno()
        self.raw: _Raw | None = None
        self.head = b""
        self.frame: _Chunked | _Length | _UntilClose | None = None
        self.keep_alive = True
        self.closed = False
        self.idle_since = 0.0
        worker.loop.add_reader(self.fd, self._readable)

    def send(self, raw: _Raw, request: bytes) -> None:
        self.raw, self.head, self.frame = raw, b"", None
        self.worker.in_flight.add(self)
        # Stamped before the send: it hands the whole request to the kernel at once, and a process
        # descheduled right after it must not seem to have sent late.
        raw.sent = _now()
        try:
            sent = self.sock.send(request)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:  # the server closed this keep-alive connection as we reused it
            self.fail("truncated_stream")
            return
        if sent < len(request):  # a full socket buffer: rare for a request of a few KiB
            self.worker.loop.create_task(self._send_rest(request[sent:]))

    async def _send_rest(self, rest: bytes) -> None:
        try:
            await self.worker.loop.sock_sendall(self.sock, rest)
        except OSError:
            self.fail("truncated_stream")

    def _readable(self) -> None:
        worker = self.worker
        try:
            nbytes, ancdata, _, _ = self.sock.recvmsg_into(worker.buffers, ANC_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._lost()
            return
        if not nbytes:
            self._lost()
            return
        now, seen = worker.stamp(ancdata)
        data = worker.buffer[:nbytes].tobytes()
        raw = self.raw
        if raw is None:  # bytes nobody asked for: this connection can no longer be trusted
            self.close()
            return
        raw.reads.append(data)
        raw.stamps.append(now)
        frame = self.frame
        try:
            if frame is None:
                self.head += data
                cut = self.head.find(b"\r\n\r\n")
                if cut < 0:
                    return
                raw.status, frame, self.keep_alive = _parse_head(self.head[:cut])
                self.frame = frame
                pos = cut + 4 - (len(self.head) - len(data))
                self.head = b""
            else:
                pos = 0
            if pos < len(data) and not raw.body_at:
                raw.body_at = now
            done = frame.feed(data, pos)
        except ValueError:
            self.fail("bad_http_framing")
            return
        if done:
            self.finish(now, seen)

    def finish(self, end: float, seen: float) -> None:
        """The response ended at `end` (its last bytes' arrival); this process saw it at `seen`."""
        raw = self.raw
        assert raw is not None
        raw.end = end
        if raw.status != 200:
            raw.error = f"http_{raw.status}"
        self.raw = None
        self.worker.in_flight.discard(self)
        if not self.keep_alive:
            self.close()
        self.idle_since = seen
        self.worker.finished(raw, self, seen)

    def fail(self, error: str) -> None:
        """End the request in flight with `error` and drop the connection."""
        raw = self.raw
        self.close()
        if raw is None:
            return
        raw.end = _now()
        raw.error = error
        self.raw = None
        self.worker.in_flight.discard(self)
        self.worker.finished(raw, None, raw.end)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.worker.loop.remove_reader(self.fd)
            self.sock.close()

    def _lost(self) -> None:
        """The server closed the connection (or reset it)."""
        if self.raw is not None and isinstance(self.frame, _UntilClose):
            now = _now()
            self.finish(now, now)
            return
        if self.raw is None:
            self.close()
        else:
            self.fail("truncated_stream")

    def usable(self, now: float) -> bool:
        return not self.closed and now - self.idle_since < MAX_IDLE_S


class _Worker:
    """Runs its share of one point on the running event loop.

    Closed loop: `slots` request slots, each sending its next request from the read that ended the
    previous one (scheduled when this process made that read); `claim` hands out request indices. Open loop:
    `arrivals` lists (index, offset from t0) and each is sent at t0 + offset on a free connection.
    """

    def __init__(
        self,
        plan: Plan,
        requests: list[bytes],
        address: tuple[int, tuple],
        t0: float,
        *,
        slots: int = 0,
        claim: Callable[[], int | None] | None = None,
        arrivals: list[tuple[int, float]] | None = None,
        on_done: Callable[[_Raw], None] | None = None,
    ) -> None:
        self.plan = plan
        self.requests = requests
        self.address = address
        self.t0 = t0
        self.deadline = t0 + plan.duration_s if plan.duration_s is not None else float("inf")
        self.slots = slots
        self.claim = claim
        self.arrivals = arrivals
        self.on_done = on_done
        self.in_flight: set[_Connection] = set()
        self.idle: list[_Connection] = []
        # Every connection reads into this one buffer: the loop runs one read at a time, and each
        # read is copied out (as bytes of its own length) before the next.
        self.buffer = memoryview(bytearray(1 << 18))
        self.buffers = [self.buffer]
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]  # set by run()
        self.done: list[_Raw] = []
        self.pending = 0  # requests issued and not yet finished
        self.active = 0  # slots still sending, or 1 while open-loop arrivals remain
        self.all_done: asyncio.Future[None] | None = None

    async def run(self) -> list[_Raw]:
        """Run the share; the cyclic garbage collector is off meanwhile (a full collection over the
        growing lists of reads would stall the loop for milliseconds, and the run makes no cycles)."""
        gc.disable()
        keeper = timestamping_on()
        try:
            return await self._run()
        finally:
            gc.enable()
            if keeper is not None:
                keeper.close()

    async def _run(self) -> list[_Raw]:
        loop = self.loop = asyncio.get_running_loop()
        self.all_done = loop.create_future()
        watchdog = loop.create_task(self._watchdog())
        await _sleep_until(self.t0)
        if self.arrivals is None:
            self.active = self.slots
            for _ in range(self.slots):
                self._next(None, self.t0)
        else:
            self.active = 1
            await self._open_loop()
            self.active = 0
        self._check_done()
        await self.all_done
        watchdog.cancel()
        for conn in self.idle:
            conn.close()
        return self.done

    def _next(self, conn: _Connection | None, scheduled: float) -> None:
        """Closed loop: the slot that owned `conn` sends its next request, or retires."""
        i = self.claim() if scheduled < self.deadline and self.claim is not None else None
        if i is None:
            if conn is not None:
                conn.close()
            self.active -= 1
            self._check_done()
            return
        self._send(_Raw(i, scheduled), conn)

    async def _open_loop(self) -> None:
        assert self.arrivals is not None
        for i, offset in self.arrivals:
            when = self.t0 + offset
            if when >= self.deadline:
                break
            await _sleep_until(when)
            now = _now()
            while self.idle and not self.idle[-1].usable(now):
                self.idle.pop().close()
            self._send(_Raw(i, when), self.idle.pop() if self.idle else None)

    def _send(self, raw: _Raw, conn: _Connection | None) -> None:
        self.pending += 1
        if conn is not None and conn.usable(_now()):
            conn.send(raw, self.requests[raw.i])
        else:
            if conn is not None:
                conn.close()
            asyncio.get_running_loop().create_task(self._connect_and_send(raw))

    async def _connect_and_send(self, raw: _Raw) -> None:
        family, sockaddr = self.address
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if SO_TIMESTAMPNS is not None:
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        error = None
        try:
            async with asyncio.timeout(self.plan.connect_s):
                await self.loop.sock_connect(sock, sockaddr)
        except TimeoutError:
            error = "timeout_connect"
        except OSError:
            error = "connect_error"
        if error is not None:
            sock.close()
            raw.sent = raw.end = _now()  # never reached the socket: its lag is the time spent trying
            raw.error = error
            self.finished(raw, None, raw.end)
            return
        _Connection(self, sock).send(raw, self.requests[raw.i])

    @staticmethod
    def stamp(ancdata: list[tuple[int, int, bytes]]) -> tuple[float, float]:
        """(when the data arrived, when this process read it) on the monotonic clock. The arrival is
        the kernel's receive time (of the last segment the read consumed) where it says so."""
        seen, wall = _clocks()
        for _, kind, data in ancdata:
            if kind == SO_TIMESTAMPNS and len(data) == _TIMESPEC.size:
                sec, nsec = _TIMESPEC.unpack(data)
                # The data's age on the wall clock (the kernel's clock), taken now: a wall clock
                # stepped during the run cannot skew it, unless it stepped in this very instant.
                age = wall - (sec + nsec * 1e-9)
                if 0.0 <= age < 1.0:
                    return seen - age, seen
        return seen, seen

    def finished(self, raw: _Raw, conn: _Connection | None, seen: float) -> None:
        """A request ended (`conn` is its connection if still usable) and this process saw it at
        `seen`: the closed loop's next request is scheduled then, and sent at once."""
        self.pending -= 1
        self.done.append(raw)
        if self.on_done is not None:
            self.on_done(raw)
        if self.arrivals is None:
            self._next(conn, seen)
        else:
            if conn is not None and not conn.closed:
                self.idle.append(conn)
            self._check_done()

    def _check_done(self) -> None:
        if not self.active and not self.pending and self.all_done is not None and not self.all_done.done():
            self.all_done.set_result(None)

    async def _watchdog(self) -> None:
        """Per-phase timeouts of the requests in flight, checked every WATCHDOG_S (no timer per request)."""
        parent = os.getppid()
        plan = self.plan
        while True:
            await asyncio.sleep(WATCHDOG_S)
            if os.getppid() != parent:  # the coordinator died: do not run on as an orphan
                os._exit(3)
            now = _now()
            for conn in list(self.in_flight):
                raw = conn.raw
                if raw is None:
                    continue
                if not raw.body_at and now - raw.sent > plan.first_token_s:
                    conn.fail("timeout_first_token")
                elif now - raw.sent > plan.total_s:
                    conn.fail("timeout_total")


async def _sleep_until(when: float) -> None:
    """Return as close after monotonic time `when` as the loop allows, without blocking other tasks."""
    delay = when - _now() - SPIN_S
    if delay > 0:
        await asyncio.sleep(delay)
    while _now() < when:
        await asyncio.sleep(0)


# -- decoding after the run ------------------------------------------------------------------------


def _event(payload: bytes) -> tuple[bool, dict | None, bool]:
    """(has content, the usage of a usage chunk, is an error event) of one SSE data payload."""
    obj = json.loads(payload)
    if "error" in obj:
        return False, None, True
    has_content = False
    choices = obj.get("choices")
    if choices:
        choice = choices[0]
        delta = choice.get("delta")
        # Completions carry `text`; chat carries `delta.content`, and its first chunk is role-only.
        has_content = bool(delta.get("content") if delta is not None else choice.get("text"))
    return has_content, obj.get("usage") or None, False


def decode(raw: _Raw) -> Record:
    """The record of one finished request: HTTP framing undone, the event stream read, content timed."""
    rec = Record(raw.i, raw.scheduled, raw.sent, None, raw.end, [], 0, raw.error)
    if rec.error is not None:
        return rec
    head, frame = b"", None
    buf = b""
    done = False
    usage: dict | None = None
    for data, stamp in zip(raw.reads, raw.stamps):
        pieces: list[bytes] = []
        if frame is None:
            head += data
            cut = head.find(b"\r\n\r\n")
            if cut < 0:
                continue
            _, frame, _ = _parse_head(head[:cut])
            frame.feed(data, cut + 4 - (len(head) - len(data)), pieces)
        else:
            frame.feed(data, 0, pieces)
        for piece in pieces:
            buf += piece
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        while (cut := buf.find(b"\n\n")) >= 0:
            event, buf = buf[:cut], buf[cut + 2 :]
            for line in event.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    done = True
                    continue
                try:
                    has_content, seen, failed = _event(payload)
                except ValueError:
                    rec.error = "bad_sse_payload"
                    return rec
                if failed:
                    rec.error = "server_error_event"
                    return rec
                if seen is not None:
                    usage = seen
                if has_content:
                    rec.chunk_times.append(stamp)
                    if rec.first_token is None:
                        rec.first_token = stamp
    if not done:
        rec.error = "truncated_stream"
    elif rec.first_token is None:
        rec.error = "no_content"
    # A chunk may carry several tokens; the server's usage count is the truth when it sends one.
    completion = (usage or {}).get("completion_tokens")
    rec.output_tokens = completion if completion is not None else len(rec.chunk_times)
    rec.input_tokens = (usage or {}).get("prompt_tokens")
    return rec


# -- the wire format between the load generator and whoever reads its output ------------------------


def _us(t: float, t0: float) -> int:
    return round((t - t0) * 1e6)


def encode(rec: Record, t0: float) -> list[object]:
    """A record as a compact JSON array, times in integer microseconds from t0, chunk times as gaps."""
    ct = rec.chunk_times
    gaps = [_us(b, a) for a, b in zip([rec.first_token or 0.0, *ct], ct)]
    first = None if rec.first_token is None else _us(rec.first_token, t0)
    return [rec.i, _us(rec.scheduled, t0), _us(rec.sent, t0), first, _us(rec.end, t0), gaps, rec.output_tokens, rec.error,
            rec.input_tokens]


def unpack(item: list, t0: float) -> Record:
    """The inverse of `encode`."""
    i, scheduled, sent, first, end, gaps, tokens, error, input_tokens = item
    chunk_times, t = [], (first or 0) / 1e6 + t0
    for gap in gaps:
        t += gap / 1e6
        chunk_times.append(t)
    first_token = None if first is None else first / 1e6 + t0
    return Record(i, scheduled / 1e6 + t0, sent / 1e6 + t0, first_token, end / 1e6 + t0, chunk_times, tokens, error,
                  input_tokens)


class Out:
    """Writes the output lines (stdout, flushed: in a pod they are the log the laptop follows)."""

    def __init__(self, write: Callable[[str], object] | None = None, flush: Callable[[], object] | None = None):
        self._write, self._flush = write, flush

    def line(self, kind: str, text: str) -> None:
        (self._write or sys.stdout.write)(f"{PREFIX}{kind} {text}\n")
        (self._flush or sys.stdout.flush)()

    def start(self, info: dict[str, object]) -> None:
        self.line("start", json.dumps(info))

    def progress(self, done: int, total: int) -> None:
        self.line("progress", f"{done} {total}")

    def error(self, message: str) -> None:
        self.line("error", message)

    def records(self, items: list[list[object]], end: dict[str, object]) -> None:
        """The records as zlib-compressed JSON lines in base64 pieces, then an `end` line to check them by."""
        payload = "\n".join(json.dumps(item, separators=(",", ":")) for item in items).encode()
        text = base64.b64encode(zlib.compress(payload, 6)).decode()
        for k in range(0, len(text), DATA_LINE_CHARS):
            self.line("data", text[k : k + DATA_LINE_CHARS])
        end = {**end, "records": len(items), "sha256": hashlib.sha256(payload).hexdigest()}
        self.line("end", json.dumps(end))


class OutputError(Exception):
    """The load generator failed, or its output is incomplete or corrupt; the message says which."""


class OutputReader:
    """Reads the load generator's output line by line (a pipe on a laptop, a pod's log in the cluster).

    Progress lines go to `on_progress(done)`; lines without the prefix (warnings, tracebacks) are
    kept for error messages; `result()` checks the records against the `end` line.
    """

    def __init__(self, on_progress: Callable[[int], None] | None = None) -> None:
        self.on_progress = on_progress
        self.start: dict[str, object] = {}
        self.end: dict[str, object] | None = None
        self.errors: list[str] = []
        self.other: list[str] = []
        self._data: list[str] = []

    def feed(self, line: str) -> None:
        line = line.rstrip("\r\n")
        if not line.startswith(PREFIX):
            if line.strip():
                self.other = [*self.other[-19:], line]
            return
        kind, _, text = line[len(PREFIX) :].partition(" ")
        if kind == "progress" and self.on_progress is not None:
            self.on_progress(int(text.split()[0]))
        elif kind == "data":
            self._data.append(text)
        elif kind == "start":
            self.start = json.loads(text)
        elif kind == "end":
            self.end = json.loads(text)
        elif kind == "error":
            self.errors.append(text)

    def feed_all(self, lines: Iterable[str]) -> OutputReader:
        for line in lines:
            self.feed(line)
        return self

    def failure(self) -> str:
        """What went wrong, from the error lines or else the last lines that were not output."""
        if self.errors:
            return "; ".join(self.errors)
        tail = " | ".join(self.other[-5:])
        return f"no result lines ({tail})" if tail else "no output at all"

    def result(self, warmup: int, requests: int) -> LoadRun:
        if self.end is None:
            raise OutputError(f"the load generator ended without its records: {self.failure()}")
        try:
            payload = zlib.decompress(base64.b64decode("".join(self._data)))
        except (ValueError, zlib.error) as exc:
            raise OutputError(f"the load generator's records are corrupt ({exc}): were log lines lost?") from None
        if hashlib.sha256(payload).hexdigest() != self.end["sha256"]:
            raise OutputError("the load generator's records do not match their checksum: were log lines lost?")
        t0 = float(self.end["t0"])  # type: ignore[arg-type]
        records = [unpack(json.loads(line), t0) for line in payload.decode().splitlines() if line]
        if len(records) != self.end["records"]:
            raise OutputError(f"expected {self.end['records']} records, read {len(records)}")
        records.sort(key=lambda r: r.i)
        counted = [r for r in records if r.i >= warmup]
        return LoadRun(
            records=counted,
            warmup=[r for r in records if r.i < warmup],
            stopped_by="requests" if len(counted) == requests else "duration",
            wall_offset=float(self.end["wall_offset"]),  # type: ignore[arg-type]
            client={**self.start, **{k: v for k, v in self.end.items() if k not in ("sha256", "records", "t0")}},
        )


# -- running a point: in this process (one loop) or across worker processes -------------------------


def run_in_process(plan: Plan, on_done: Callable[[Record], None] | None = None) -> LoadRun:
    """One worker on an event loop in this process: for tests that reach into the loop (`on_done`
    runs on it, after each request). Runs use `run` (worker processes) via `main`."""
    requests, address = build_requests(plan), resolve(plan)
    t0 = _now() + 0.01
    issued = iter(range(plan.total))

    def hook(raw: _Raw) -> None:
        if on_done is not None and raw.i >= plan.warmup:
            on_done(decode(raw))

    kw = _share(plan, 0, 1, lambda: next(issued, None))
    raws = asyncio.run(_Worker(plan, requests, address, t0, on_done=hook, **kw).run())
    items = [encode(decode(r), t0) for r in raws]
    reader = OutputReader()
    Out(reader.feed, lambda: None).records(items, {"t0": t0, "wall_offset": time.time() - time.monotonic()})
    return reader.result(plan.warmup, plan.requests)


def arrival_offsets(plan: Plan) -> list[float]:
    """An open-loop plan's send times, seconds from t0, one per request (warm-up first)."""
    return poisson_offsets(plan.rate or 1.0, plan.total, plan.seed, plan.warmup)


def _share(plan: Plan, k: int, workers: int, claim: Callable[[], int | None]) -> dict[str, object]:
    """Worker k's part of the schedule: its request slots (closed loop) or its arrivals (open loop)."""
    if plan.concurrency is not None:
        return {"slots": plan.concurrency // workers + (k < plan.concurrency % workers), "claim": claim}
    offsets = arrival_offsets(plan)
    return {"arrivals": [(i, offsets[i]) for i in range(k, plan.total, workers)]}


def _worker_process(plan, requests, address, k, workers, shared, results) -> None:  # noqa: ANN001 (a process target)
    issued, completed, t0, ready = shared

    def claim() -> int | None:
        with issued.get_lock():
            i = issued.value
            if i >= plan.total:
                return None
            issued.value = i + 1
            return i

    def counted(raw: _Raw) -> None:
        if raw.i >= plan.warmup:
            with completed.get_lock():
                completed.value += 1

    ready.wait()
    worker = _Worker(plan, requests, address, t0.value, on_done=counted, **_share(plan, k, workers, claim))
    raws = asyncio.run(worker.run())
    # Decoded here, after the run: each worker decodes its own share, in parallel with the others.
    results.send([encode(decode(r), t0.value) for r in raws])
    results.close()


def run(plan: Plan, out: Out) -> int:
    """Run the point across worker processes and write its output; the exit status."""
    address = resolve(plan)
    requests = build_requests(plan)
    workers = plan.worker_count()
    out.start({
        "host": socket.gethostname(), "node": os.environ.get("NODE_NAME"), "cpus": usable_cpus(), "workers": workers,
        "python": sys.version.split()[0], "address": f"{address[1][0]}:{address[1][1]}", "total": plan.total,
        "kernel_stamps": SO_TIMESTAMPNS is not None,
    })  # fmt: skip
    # fork where it is safe and cheap (Linux; this process has no threads); spawn elsewhere (macOS).
    ctx = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    shared = (ctx.Value("q", 0), ctx.Value("q", 0), ctx.Value("d", 0.0), ctx.Event())
    issued, completed, t0, ready = shared
    pipes, procs = [], []
    for k in range(workers):
        receiver, sender = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_worker_process, args=(plan, requests, address, k, workers, shared, sender), daemon=True)
        proc.start()
        sender.close()
        pipes.append(receiver)
        procs.append(proc)
    # Start every worker on the same monotonic instant (CLOCK_MONOTONIC is system-wide), once all exist.
    t0.value = _now() + 0.05 + 0.01 * workers
    ready.set()
    items: list[list[object]] = []
    waiting, shown, shown_at = list(pipes), -1, 0.0
    try:
        while waiting:
            for conn in wait_connections(waiting, timeout=PROGRESS_S):
                try:
                    items += conn.recv()
                except EOFError:
                    out.error("a worker process died before sending its records")
                    return 1
                waiting.remove(conn)
            if completed.value != shown or _now() - shown_at >= HEARTBEAT_S:
                shown, shown_at = completed.value, _now()
                out.progress(shown, plan.requests)
    finally:
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    cpu_s = sum(u.ru_utime + u.ru_stime for u in usage)
    items.sort(key=lambda item: item[0])  # type: ignore[arg-type, return-value]
    # The machine's load while the point ran (1-minute average, runnable processes): a client sharing its
    # CPUs with other work (or with a simulator) says so.
    load = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
    out.records(items, {"t0": t0.value, "wall_offset": time.time() - time.monotonic(), "cpu_s": round(cpu_s, 3),
                        "load_avg": load})
    return 0


def main(argv: list[str]) -> int:
    """The plan comes from the file named by the first argument, else from the environment variable
    LOADGEN_PLAN (a Job's), else from stdin."""
    out = Out()
    try:
        if argv:
            with open(argv[0]) as f:
                text = f.read()
        else:
            text = os.environ.get(PLAN_ENV) or sys.stdin.read()
        return run(Plan.from_json(text), out)
    except (OSError, PlanError) as exc:
        out.error(str(exc))
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
