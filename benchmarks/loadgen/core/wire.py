"""The wire format between the load generator and whoever reads its output: lines on stdout that start
with `gml-loadgen:` (`Out` writes them, `OutputReader` reads them back), so they cannot be confused with
anything else in a pod's log."""

from __future__ import annotations

import base64
import hashlib
import json
import sys
import zlib
from collections.abc import Callable, Iterable

from .plan import LoadRun, Record


PREFIX = "gml-loadgen:"
DATA_LINE_CHARS = 8192  # container runtimes split log lines above 16 KiB


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
