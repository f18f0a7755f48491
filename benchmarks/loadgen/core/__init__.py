"""The load generator: a package of the Python standard library only, one job per module (plan: the plan,
its requests and arrivals; framing: HTTP/1.1; worker: an event loop and its connections; decoding: the
streams after the run; wire: the output format; running: a point across worker processes, and `main`).

One load generator, two places to run it: on a laptop `benchmarks.loadgen.runner` runs it with
`python -I -S -B` as a zip archive of this package (`archive`), and in the cluster a Job runs the same
archive from a ConfigMap in a plain Python image with nothing installed. Input: a JSON plan (`Plan`), from
the file named by the first argument, the environment variable LOADGEN_PLAN, or stdin. Output: lines on
stdout that start with `gml-loadgen:` (`OutputReader` reads them back), so they cannot be confused with
anything else in a pod's log.

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

import io
import zipfile
from pathlib import Path

from .decoding import decode
from .plan import (
    LoadRun,
    Plan,
    PlanError,
    Record,
    arrival_offsets,
    build_bodies,
    build_requests,
    expected_arrivals,
    poisson_offsets,
    schedule_problem,
    scheduled_offsets,
)
from .running import PLAN_ENV, main, run, run_in_process
from .wire import PREFIX, Out, OutputError, OutputReader, encode
from .worker import ANC_SIZE, SO_TIMESTAMPNS, Worker, timestamping_on

__all__ = [
    "ANC_SIZE", "PLAN_ENV", "PREFIX", "SO_TIMESTAMPNS", "LoadRun", "Out", "OutputError", "OutputReader", "Plan",
    "PlanError", "Record", "Worker", "archive", "arrival_offsets", "build_bodies", "build_requests", "decode",
    "encode", "expected_arrivals", "main", "poisson_offsets", "run", "run_in_process", "schedule_problem",
    "scheduled_offsets", "timestamping_on",
]  # fmt: skip

PACKAGE = "loadgen"  # the package's name inside the archive
# The archive's entry point: what `python -I -S -B loadgen.pyz` runs.
ENTRY = f"import sys\n\nfrom {PACKAGE}.running import main\n\nsys.exit(main(sys.argv[1:]))\n"
# One timestamp for every member: the same sources make the same bytes (a ConfigMap, a cache key).
EPOCH = (1980, 1, 1, 0, 0, 0)


def archive() -> bytes:
    """This package as a zip application (zipapp's layout: `__main__.py` at the root), byte for byte the same
    for the same sources."""
    here = Path(__file__).resolve().parent
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(zipfile.ZipInfo("__main__.py", EPOCH), ENTRY)
        for path in sorted(here.glob("*.py")):
            zf.writestr(zipfile.ZipInfo(f"{PACKAGE}/{path.name}", EPOCH), path.read_bytes())
    return buffer.getvalue()
