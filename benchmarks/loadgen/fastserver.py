"""A minimal, cheap OpenAI-style streaming server for measuring the load generator itself.

Raw asyncio HTTP/1.1 (keep-alive, chunked SSE) so that the server costs little CPU: fixed TTFT and
ITL (or ITL spread by a seeded +-jitter share, so streams drift out of lockstep), `max_tokens`
content chunks, a usage chunk, `[DONE]`. It records, per request, the monotonic stamps of its
arrival (request read) and of every content chunk written (comparable with the client's:
CLOCK_MONOTONIC is system-wide), served at GET /truth. Run it as
`python -m benchmarks.loadgen.fastserver --port P --ttft-ms 30 --itl-ms 20`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random

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

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                arrival = loop.time()
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                body = await reader.readexactly(length) if length else b""
                if head.startswith(b"GET /truth"):
                    truth = {"arrival": self.arrivals, "tokens": self.tokens}
                    data = json.dumps(truth).encode()
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(data), data)
                    )
                    continue
                tokens = json.loads(body).get("max_tokens", 16)
                writer.write(_HEAD)
                await asyncio.sleep(self.ttft_s)
                stamps: list[float] = []
                self.arrivals.append(arrival)
                self.tokens.append(stamps)
                for i in range(tokens):
                    writer.write(_TOKEN_CHUNK)
                    stamps.append(loop.time())
                    if i < tokens - 1:
                        spread = 1.0 + self.jitter * (2.0 * self.rng.random() - 1.0) if self.jitter else 1.0
                        await asyncio.sleep(self.itl_s * spread)
                usage = {"choices": [], "usage": {"completion_tokens": tokens}}
                writer.write(_chunk(json.dumps(usage).encode()) + _DONE)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def serve(port: int, ttft_s: float, itl_s: float, jitter: float) -> None:
    handler = FastServer(ttft_s, itl_s, jitter).handle
    server = await asyncio.start_server(handler, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


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
