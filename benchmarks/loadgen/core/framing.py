"""HTTP/1.1 response framing, the only parsing on the hot path."""

from __future__ import annotations


class Chunked:
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


class Length:
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


class UntilClose:
    """No length and not chunked: the body ends when the server closes the connection."""

    __slots__ = ()

    def feed(self, data: bytes, pos: int, out: list[bytes] | None = None) -> bool:
        if out is not None and pos < len(data):
            out.append(data[pos:])
        return False


def parse_head(head: bytes) -> tuple[int, Chunked | Length | UntilClose, bool]:
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
        return status, Length(0), keep_alive
    if b"chunked" in headers.get(b"transfer-encoding", b""):
        return status, Chunked(), keep_alive
    if b"content-length" in headers:
        return status, Length(int(headers[b"content-length"])), keep_alive
    return status, UntilClose(), False
