"""Decoding a request's raw reads after the run: its server-sent events into a `Record`."""

from __future__ import annotations

import json

from .framing import parse_head
from .plan import Record
from .worker import Raw


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


def decode(raw: Raw) -> Record:
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
            _, frame, _ = parse_head(head[:cut])
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
