"""One worker: an event loop, its connections and its share of the schedule, with every read stamped by
the kernel as it arrives."""

from __future__ import annotations

import asyncio
import gc
import os
import socket
import struct
import sys
import time
from collections.abc import Callable

from .framing import Chunked, Length, UntilClose, parse_head
from .plan import Plan


# Wake this long before an open-loop send and yield until it is due: the event loop's timer sleeps
# in whole milliseconds, which alone would add up to 1 ms of lag to every open-loop request.
SPIN_S = 0.0015
# A keep-alive connection idle longer than this is closed rather than reused: servers close idle
# connections (uvicorn after 5 s), and a request written as the server closes would fail.
MAX_IDLE_S = 2.0
WATCHDOG_S = 0.05
PROGRESS_S = 0.25
HEARTBEAT_S = 5.0  # a progress line at least this often, so a reader can tell a quiet run from a dead one
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


class Raw:
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

    def __init__(self, worker: Worker, sock: socket.socket) -> None:
        self.worker = worker
        self.sock = sock
        self.fd = sock.fileno()
        self.raw: Raw | None = None
        self.head = b""
        self.frame: Chunked | Length | UntilClose | None = None
        self.keep_alive = True
        self.closed = False
        self.idle_since = 0.0
        worker.loop.add_reader(self.fd, self._readable)

    def send(self, raw: Raw, request: bytes) -> None:
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
                raw.status, frame, self.keep_alive = parse_head(self.head[:cut])
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
        if self.raw is not None and isinstance(self.frame, UntilClose):
            now = _now()
            self.finish(now, now)
            return
        if self.raw is None:
            self.close()
        else:
            self.fail("truncated_stream")

    def usable(self, now: float) -> bool:
        return not self.closed and now - self.idle_since < MAX_IDLE_S


class Worker:
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
        on_done: Callable[[Raw], None] | None = None,
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
        self.done: list[Raw] = []
        self.pending = 0  # requests issued and not yet finished
        self.active = 0  # slots still sending, or 1 while open-loop arrivals remain
        self.all_done: asyncio.Future[None] | None = None

    async def run(self) -> list[Raw]:
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

    async def _run(self) -> list[Raw]:
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
        self._send(Raw(i, scheduled), conn)

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
            self._send(Raw(i, when), self.idle.pop() if self.idle else None)

    def _send(self, raw: Raw, conn: _Connection | None) -> None:
        self.pending += 1
        if conn is not None and conn.usable(_now()):
            conn.send(raw, self.requests[raw.i])
        else:
            if conn is not None:
                conn.close()
            asyncio.get_running_loop().create_task(self._connect_and_send(raw))

    async def _connect_and_send(self, raw: Raw) -> None:
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

    def finished(self, raw: Raw, conn: _Connection | None, seen: float) -> None:
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
                if self.plan.connections == "reuse":
                    self.idle.append(conn)
                else:
                    conn.close()
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
