"""Run one load point: the load generator core in its own process, here or in the cluster.

`PointRunner` is the whole interface: a LoadSpec in, a LoadRun (per-request records) out, with
progress reported as counted requests complete; used inside `with runner:` (a runner that creates
things, the in-cluster one, deletes them on the way out). `LocalRunner` runs the core on this
machine with `python -I -S` (the standard library only: what a pod runs); benchmarks.g6.incluster
runs it as a Job.
Both read the core's output with the same `OutputReader`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Protocol

from benchmarks.loadgen import core
from benchmarks.loadgen.core import LoadRun, OutputError, OutputReader
from benchmarks.loadgen.errors import LoadgenError
from benchmarks.loadgen.spec import LoadSpec

# Isolated (-I: no PYTHON* variables, no user site), no site-packages at all (-S: a virtualenv's
# interpreter would keep its own under -I alone), no bytecode written (-B: a pod's root filesystem is
# read-only). The core needs the standard library only, here and in a pod.
CORE_FLAGS = ("-I", "-S", "-B")

Progress = Callable[[int], None]


@cache
def core_archive() -> Path:
    """The core as a zip application (benchmarks.loadgen.core.archive) in the temporary directory, named by
    its content: built once per process, and the same sources give the same file."""
    data = core.archive()
    path = Path(tempfile.gettempdir()) / f"gml-loadgen-{hashlib.sha256(data).hexdigest()[:16]}.pyz"
    if not path.exists():
        partial = path.with_name(f"{path.name}.{os.getpid()}")
        partial.write_bytes(data)
        partial.replace(path)  # whole or not at all, for another process running the same
    return path


class PointRunner(Protocol):
    def run(self, spec: LoadSpec, on_progress: Progress | None = None) -> LoadRun:
        """Run one point; `on_progress(done)` as counted requests complete."""

    def __enter__(self) -> PointRunner: ...

    def __exit__(self, *exc: object) -> None: ...


def read_output(reader: OutputReader, spec: LoadSpec, what: str) -> LoadRun:
    """The LoadRun in what `reader` has read; a LoadgenError naming `what` when it is incomplete."""
    try:
        return reader.result(spec.warmup_requests, spec.requests)
    except OutputError as exc:
        raise LoadgenError(f"{what}: {exc}") from None


def placed(run: LoadRun, **where: object) -> LoadRun:
    """`run` with what the runner knows of where the core ran added to the core's own report."""
    return replace(run, client={**run.client, **where})


class LocalRunner:
    """The core as a child process of this one, its output read from a pipe as it comes."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers

    def __enter__(self) -> LocalRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        pass  # each point's processes end with the point

    def run(self, spec: LoadSpec, on_progress: Progress | None = None) -> LoadRun:
        # stderr joins stdout, as in a pod's log: the reader keeps what is not output for error messages.
        # Its own session (the core and its worker processes): a terminal's Ctrl-C reaches this process,
        # which stops the whole group on its way out; were this process killed outright, the core's next
        # progress line meets a closed pipe and it ends, its workers with it.
        proc = subprocess.Popen(
            [sys.executable, *CORE_FLAGS, str(core_archive())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(spec.plan(self.workers).to_json())
            proc.stdin.close()
            reader = OutputReader(on_progress).feed_all(proc.stdout)
            return placed(read_output(reader, spec, f"load generator against {spec.base_url}"), where="local")
        finally:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


def run_load(spec: LoadSpec, on_progress: Progress | None = None, workers: int | None = None) -> LoadRun:
    """One point on this machine."""
    return LocalRunner(workers).run(spec, on_progress)
