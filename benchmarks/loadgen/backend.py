"""OpenAI-compatible streaming backend: request bodies with controlled lengths, and one timed request.

The hot path is kept lean on purpose: bodies are encoded before the run, the SSE stream is split
on blank lines from raw reads, and only `data:` payloads are decoded. The client's CPU cost is a
headline figure of the kit.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field

import aiohttp
from yarl import URL

from benchmarks.loadgen.spec import LoadSpec, Timeouts

# Token ids away from the special-token range of common vocabularies (all are > 32k entries).
_TOKEN_ID_RANGE = (1000, 30000)


@dataclass(slots=True)
class RequestRecord:
    """Client-side timings of one request (time.monotonic seconds) and its outcome.

    `sent` is when the body was handed to the socket (aiohttp's chunk-sent trace), not when the
    coroutine started: on a busy loop the gap between the two is client lag, and must show.
    """

    scheduled: float
    dispatched: float = 0.0
    sent: float = 0.0
    first_token: float | None = None
    end: float = 0.0
    chunk_times: list[float] = field(default_factory=list)
    output_tokens: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def endpoint_path(api: str) -> str:
    return "/v1/chat/completions" if api == "chat" else "/v1/completions"


def build_bodies(spec: LoadSpec, count: int) -> list[bytes]:
    """Encoded request bodies, each with a different seeded prompt so no prefix cache can help.

    Completions send the prompt as token ids, so its length is exactly `input_len` tokens on vLLM
    and on the simulator. Chat needs text: one word per token, exact on the simulator and
    approximate under a real tokenizer.
    """
    rng = random.Random(spec.seed)
    common = {
        "model": spec.model,
        "max_tokens": spec.output_len,
        "min_tokens": spec.output_len,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
    }
    bodies = []
    for _ in range(count):
        ids = [rng.randrange(*_TOKEN_ID_RANGE) for _ in range(spec.input_len)]
        if spec.api == "chat":
            text = " ".join(f"w{i}" for i in ids)
            body = {**common, "messages": [{"role": "user", "content": text}]}
        else:
            body = {**common, "prompt": ids}
        bodies.append(json.dumps(body, separators=(",", ":")).encode())
    return bodies


def _content_and_usage(payload: bytes) -> tuple[bool, int | None, str | None]:
    """(has content, completion_tokens from a usage chunk, error message) of one SSE data payload."""
    obj = json.loads(payload)
    if "error" in obj:
        err = obj["error"]
        return False, None, err.get("message", str(err)) if isinstance(err, dict) else str(err)
    choices = obj.get("choices")
    has_content = False
    if choices:
        choice = choices[0]
        delta = choice.get("delta")
        # Completions carry `text`; chat carries `delta.content`, and its first chunk is role-only.
        has_content = bool(delta.get("content") if delta is not None else choice.get("text"))
    usage = obj.get("usage")
    return has_content, (usage or {}).get("completion_tokens"), None


_HEADERS = {"Content-Type": "application/json"}


async def send_request(
    session: aiohttp.ClientSession, url: URL, body: bytes, rec: RequestRecord, timeouts: Timeouts
) -> RequestRecord:
    """Send one streaming request and fill `rec`; failures set `rec.error` to a short reason."""
    loop = asyncio.get_running_loop()
    rec.dispatched = loop.time()
    phase = "first_token"
    usage_tokens: int | None = None
    content_chunks = 0
    done = False
    try:
        async with asyncio.timeout_at(rec.dispatched + timeouts.first_token_s) as deadline:
            async with session.post(url, data=body, headers=_HEADERS, trace_request_ctx=rec) as resp:
                if resp.status != 200:
                    await resp.read()
                    rec.error = f"http_{resp.status}"
                    return rec
                buf = b""
                async for data in resp.content.iter_any():
                    now = loop.time()
                    if b"\r" in data:
                        data = data.replace(b"\r\n", b"\n")
                    buf += data
                    while (cut := buf.find(b"\n\n")) >= 0:
                        event, buf = buf[:cut], buf[cut + 2 :]
                        for line in event.split(b"\n"):
                            if not line.startswith(b"data:"):
                                continue
                            payload = line[5:].strip()
                            if payload == b"[DONE]":
                                done = True
                                continue
                            has_content, tokens, error = _content_and_usage(payload)
                            if error is not None:
                                rec.error = "server_error_event"
                                return rec
                            if tokens is not None:
                                usage_tokens = tokens
                            if has_content:
                                content_chunks += 1
                                rec.chunk_times.append(now)
                                if rec.first_token is None:
                                    rec.first_token = now
                                    phase = "total"
                                    deadline.reschedule(rec.dispatched + timeouts.total_s)
    except TimeoutError as exc:
        # aiohttp's own connect timeout is a TimeoutError subclass: name that phase apart.
        rec.error = "timeout_connect" if isinstance(exc, aiohttp.ConnectionTimeoutError) else f"timeout_{phase}"
    except aiohttp.ClientConnectorError:
        rec.error = "connect_error"
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
        rec.error = "truncated_stream"
    except json.JSONDecodeError:
        rec.error = "bad_sse_payload"
    except aiohttp.ClientError as exc:
        rec.error = f"client_error_{type(exc).__name__}"
    finally:
        rec.end = loop.time()
        if not rec.sent:
            rec.sent = rec.dispatched  # never reached the socket: its lag is the dispatch lag
    if rec.error is None:
        if not done:
            rec.error = "truncated_stream"
        elif rec.first_token is None:
            rec.error = "no_content"
    # A chunk may carry several tokens; the server's usage count is the truth when it sends one.
    rec.output_tokens = usage_tokens if usage_tokens is not None else content_chunks
    return rec


async def _on_chunk_sent(
    session: aiohttp.ClientSession, ctx: object, params: aiohttp.TraceRequestChunkSentParams
) -> None:
    rec = ctx.trace_request_ctx  # type: ignore[attr-defined]
    if not rec.sent:
        rec.sent = asyncio.get_running_loop().time()


def make_session(spec: LoadSpec) -> aiohttp.ClientSession:
    """A session whose connection pool never caps the load (aiohttp's default limit is 100).

    Cookies, compression and automatic headers are switched off: each costs CPU per request and
    the benchmark needs none of them.
    """
    connector = aiohttp.TCPConnector(limit=spec.concurrency or 0, limit_per_host=0)
    trace = aiohttp.TraceConfig()
    trace.on_request_chunk_sent.append(_on_chunk_sent)
    return aiohttp.ClientSession(
        trace_configs=[trace],
        cookie_jar=aiohttp.DummyCookieJar(),
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"),
        connector=connector,
        timeout=aiohttp.ClientTimeout(
            total=None, connect=spec.timeouts.connect_s, sock_connect=spec.timeouts.connect_s
        ),
        read_bufsize=1 << 20,
    )


def wall_clock_offset() -> float:
    """time.time() - time.monotonic(), to turn client monotonic stamps into wall-clock times."""
    return time.time() - time.monotonic()
