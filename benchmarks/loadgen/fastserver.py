"""A minimal, cheap OpenAI-style streaming server for measuring the load generator itself.

Raw asyncio HTTP/1.1 (keep-alive, chunked SSE) so that the server costs little CPU: fixed TTFT and
ITL (or ITL spread by a seeded +-jitter share, so streams drift out of lockstep), `max_tokens`
content chunks, a usage chunk, `[DONE]`. It records, per request, the monotonic stamps of its
arrival and of every content chunk written (comparable with the client's: CLOCK_MONOTONIC is
system-wide), served at GET /truth. Run it as
`python -m benchmarks.loadgen.fastserver --port P --ttft-ms 30 --itl-ms 20`.

A request's arrival is the kernel's receive time of its bytes (SO_TIMESTAMPNS on Linux, as the load
generator stamps its own reads), not the moment this server's loop got to it: at high concurrency
the loop is often busy writing other streams' tokens when a request lands, and a late arrival stamp
would hide that wait from the server's own TTFT and charge it to whichever client sends fastest.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket

from benchmarks.loadgen.core import ANC_SIZE, SO_TIMESTAMPNS, Worker, timestamping_on

_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"
)
_TOKEN = json.dumps(
    {
        "id": "cmpl-fast",
        "object": "text_completion",
        "created": 0,
        "model": "fast",
        "choices": [{"index": 0, "text": " tok", "logprobs": None, "finish_reason": None}],
    },
    separators=(",", ":"),
).encode()


def _chunk(payload: bytes) -> bytes:
    data = b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


_TOKEN_CHUNK = _chunk(_TOKEN)
_DONE = _chunk(b"[DONE]") + b"0\r\n\r\n"


class FastServer:
    """Serves completions with fixed timings; keeps server-side stamps (monotonic seconds) for /truth."""

    def __init__(self, ttft_s: float, itl_s: float, jitter: float = 0.0) -> None:
        self.ttft_s = ttft_s
        self.itl_s = itl_s
        self.jitter = jitter
        self.rng = random.Random(0)
        self.arrivals: list[float] = []
        self.tokens: list[list[float]] = []

    async def handle(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        conn = _Conn(sock)
        try:
            while True:
                head, arrival = await conn.read_until(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                body = (await conn.read_exactly(length))[0] if length else b""
                if head.startswith(b"GET /truth"):
                    truth = {"arrival": self.arrivals, "tokens": self.tokens}
                    data = json.dumps(truth).encode()
                    await conn.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(data), data)
                    )
                    continue
                tokens = json.loads(body).get("max_tokens", 16)
                await conn.write(_HEAD)
                await asyncio.sleep(self.ttft_s)
                stamps: list[float] = []
                self.arrivals.append(arrival)
                self.tokens.append(stamps)
                for i in range(tokens):
                    await conn.write(_TOKEN_CHUNK)
                    stamps.append(loop.time())
                    if i < tokens - 1:
                        spread = 1.0 + self.jitter * (2.0 * self.rng.random() - 1.0) if self.jitter else 1.0
                        await asyncio.sleep(self.itl_s * spread)
                usage = {"choices": [], "usage": {"completion_tokens": tokens}}
                await conn.write(_chunk(json.dumps(usage).encode()) + _DONE)
        except (EOFError, ConnectionError):
            pass
        finally:
            conn.close()


class _Conn:
    """A non-blocking connection read with recvmsg, so every read carries the kernel's receive time."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.loop = asyncio.get_running_loop()
        self.buffer = b""
        self.first_arrival = 0.0  # of the oldest bytes in the buffer
        self.last_arrival = 0.0  # of the latest read

    async def _fill(self) -> None:
        while True:
            try:
                data, ancdata, _, _ = self.sock.recvmsg(65536, ANC_SIZE)
                break
            except (BlockingIOError, InterruptedError):
                ready = self.loop.create_future()
                self.loop.add_reader(self.sock.fileno(), ready.set_result, None)
                try:
                    await ready
                finally:
                    self.loop.remove_reader(self.sock.fileno())
        if not data:
            raise EOFError
        self.last_arrival = Worker.stamp(ancdata)[0]
        if not self.buffer:
            self.first_arrival = self.last_arrival
        self.buffer += data

    async def read_until(self, mark: bytes) -> tuple[bytes, float]:
        """The bytes up to `mark` (dropped) and when the first of them arrived."""
        while (cut := self.buffer.find(mark)) < 0:
            await self._fill()
        return self._take(cut, len(mark))

    async def read_exactly(self, n: int) -> tuple[bytes, float]:
        while len(self.buffer) < n:
            await self._fill()
        return self._take(n, 0)

    def _take(self, n: int, skip: int) -> tuple[bytes, float]:
        data, arrival = self.buffer[:n], self.first_arrival
        self.buffer = self.buffer[n + skip :]
        self.first_arrival = self.last_arrival  # what is left came with the latest read
        return data, arrival

    async def write(self, data: bytes) -> None:
        try:
            sent = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        if sent < len(data):
            await self.loop.sock_sendall(self.sock, data[sent:])

    def close(self) -> None:
        self.sock.close()


async def serve(port: int, ttft_s: float, itl_s: float, jitter: float) -> None:
    server = FastServer(ttft_s, itl_s, jitter)
    loop = asyncio.get_running_loop()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(4096)
    listener.setblocking(False)
    timestamping = timestamping_on()  # held open: on from the first request's read, whatever the client asks
    tasks = set()
    try:
        while True:
            sock, _ = await loop.sock_accept(listener)
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if SO_TIMESTAMPNS is not None:
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            task = loop.create_task(server.handle(sock))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    finally:
        listener.close()
        if timestamping is not None:
            timestamping.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ttft-ms", type=float, default=30.0)
    parser.add_argument("--itl-ms", type=float, default=20.0)
    parser.add_argument("--jitter", type=float, default=0.0, help="spread each ITL by up to +- this share")
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.ttft_ms / 1000.0, args.itl_ms / 1000.0, args.jitter))


if __name__ == "__main__":
    main()
