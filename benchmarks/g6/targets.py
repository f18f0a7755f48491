"""Where a g6 run sends load, and how each server setting (max-num-seqs, model, quantization, ...)
is put in place.

- UrlTarget: a server given by URL; its settings cannot change (they only label the points).
- SimTarget: starts `python -m benchmarks.sim` in its own process per setting, so the simulator
  and the load generator do not share one interpreter's lock (that would shape the numbers).
- StackTarget: `pulumi config set --path vllm.<field> VALUE` (or `config rm` for an unset field)
  then `pulumi up`, waits for the endpoint to be healthy, and restores every changed field when the
  run ends, however it ends (success, failure, Ctrl-C).

Each yields the `Server` in place: the URL the load generator sends to and how this process reads
the server (for a stack whose client runs in the cluster, through the API server's service proxy).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field

from benchmarks.g6.errors import G6Error
from benchmarks.harness import PulumiStack
from benchmarks.harness.server import Server, check_reachable, http_server, wait_healthy

CONFIG_OBJECT = "vllm"  # the project's `gke-ml-labs:vllm` stack config object
_SIM_START_TIMEOUT_S = 30.0
_REPO = Path(__file__).resolve().parents[2]


class ServerSettings(BaseModel):
    """Server settings a run puts in place before a point. Only the fields given are changed; a field
    given as None is unset (the server's default: for `quantization`, the checkpoint's own method).
    Each field is the `vllm` stack config field and the `vllm serve` flag of the same name."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str | None = None
    quantization: Literal["fp8", "awq", "gptq"] | None = None
    max_num_seqs: int | None = Field(None, ge=1)
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    max_model_len: int | None = Field(None, ge=1)

    def changes(self) -> dict[str, str | None]:
        """Field name -> value as the CLI takes it (None: unset), for the fields this setting gives."""
        return {name: None if getattr(self, name) is None else str(getattr(self, name))
                for name in sorted(self.model_fields_set)}  # fmt: skip

    def over(self, base: ServerSettings) -> ServerSettings:
        """These settings on top of `base`: fields given here win."""
        return ServerSettings(**{**base.model_dump(include=base.model_fields_set),
                                 **self.model_dump(include=self.model_fields_set)})  # fmt: skip


class UrlTarget:
    def __init__(self, server: Server) -> None:
        self.server = server

    @contextmanager
    def session(self) -> Iterator[None]:
        yield

    @contextmanager
    def serving(self, settings: ServerSettings) -> Iterator[Server]:
        check_reachable(self.server)
        yield self.server


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _started(proc: subprocess.Popen[str], base_url: str) -> bool:
    """Whether the simulator answers /health before it exits or the start-up time runs out."""
    deadline = time.monotonic() + _SIM_START_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(base_url + "/health", timeout=1.0).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    return False


class SimTarget:
    """The simulated backend; `base` holds the settings every point starts from (model, memory, ...)."""

    def __init__(self, *, gpu: str, speedup: float, seed: int, base: ServerSettings) -> None:
        self.args = ["--gpu", gpu, "--speedup", str(speedup), "--seed", str(seed)]
        self.base = base

    @contextmanager
    def session(self) -> Iterator[None]:
        yield

    @contextmanager
    def serving(self, settings: ServerSettings) -> Iterator[Server]:
        port = _free_port()
        argv = [sys.executable, "-m", "benchmarks.sim", *self.args, "--port", str(port)]
        for name, value in settings.over(self.base).changes().items():
            if value is not None:
                argv += ["--" + name.replace("_", "-"), value]
        # stderr to a file, not a pipe: a pipe nobody reads would stall a chatty server.
        log = tempfile.TemporaryFile("w+")
        proc = subprocess.Popen(argv, cwd=_REPO, stdout=subprocess.DEVNULL, stderr=log, text=True)
        base_url = f"http://127.0.0.1:{port}"
        try:
            if not _started(proc, base_url):
                proc.kill()
                proc.wait()
                log.seek(0)
                raise G6Error(f"the simulator did not start ({' '.join(argv[2:])}): {log.read()[-800:]}")
            yield http_server(base_url)
        finally:
            log.close()
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


class StackTarget:
    def __init__(self, stack: PulumiStack, server: Server, health_timeout_s: float) -> None:
        self.stack = stack
        self.server = server
        self.health_timeout_s = health_timeout_s
        self._original: dict[str, str | None] = {}  # config path -> value before the run (None: unset)
        self._current: dict[str, str | None] = {}

    def _put(self, path: str, value: str | None) -> None:
        if value is None:
            self.stack.config_rm(path)
        else:
            self.stack.config_set(path, value)
        self._current[path] = value

    @contextmanager
    def session(self) -> Iterator[None]:
        """Put back every config value the run changed, even on error or Ctrl-C, with one `pulumi up`."""
        try:
            yield
        finally:
            changed = [path for path, value in self._original.items() if self._current[path] != value]
            for path in changed:
                self._put(path, self._original[path])
            if changed:
                self.stack.up()

    @contextmanager
    def serving(self, settings: ServerSettings) -> Iterator[Server]:
        changed = False
        for name, value in settings.changes().items():
            path = f"{CONFIG_OBJECT}.{name}"
            if path not in self._original:
                self._original[path] = self._current[path] = self.stack.config_get(path)
            if self._current[path] != value:
                # Recorded before `up`: a failed up must still be undone.
                self._put(path, value)
                changed = True
        if changed:
            self.stack.up()
            wait_healthy(self.server, self.health_timeout_s)
        else:
            # No `up` to wait for: still fail fast if the server cannot be reached, rather than record
            # a point where every request failed to connect.
            check_reachable(self.server)
        yield self.server
