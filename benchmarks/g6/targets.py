"""Where a g6 sweep sends load, and how each max-num-seqs value is put in place.

- UrlTarget: a server given by URL; max-num-seqs cannot change (a label only).
- SimTarget: starts `python -m benchmarks.sim` in its own process per value, so the simulator
  and the load generator do not share one interpreter's lock (that would shape the numbers).
- StackTarget: `pulumi config set --path vllm.max_num_seqs N` then `pulumi up`, waits for the
  endpoint to be healthy, and restores the original value when the sweep ends, however it ends.

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

import httpx

from benchmarks.g6.errors import G6Error
from benchmarks.harness import PulumiStack
from benchmarks.harness.server import Server, check_reachable, http_server, wait_healthy

CONFIG_PATH = "vllm.max_num_seqs"  # the project's `gke-ml-labs:vllm` object, field max_num_seqs
_SIM_START_TIMEOUT_S = 30.0
_REPO = Path(__file__).resolve().parents[2]


class UrlTarget:
    def __init__(self, server: Server) -> None:
        self.server = server

    @contextmanager
    def session(self) -> Iterator[None]:
        yield

    @contextmanager
    def serving(self, max_num_seqs: int | None) -> Iterator[Server]:
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
    def __init__(
        self,
        *,
        model: str,
        gpu: str,
        speedup: float,
        seed: int,
        gpu_memory_utilization: float,
        max_model_len: int | None = None,
        quantization: str | None = None,
    ) -> None:
        self.args = [
            "--model", model, "--gpu", gpu, "--speedup", str(speedup), "--seed", str(seed),
            "--gpu-memory-utilization", str(gpu_memory_utilization),
        ]  # fmt: skip
        if max_model_len is not None:
            self.args += ["--max-model-len", str(max_model_len)]
        if quantization is not None:
            self.args += ["--quantization", quantization]

    @contextmanager
    def session(self) -> Iterator[None]:
        yield

    @contextmanager
    def serving(self, max_num_seqs: int | None) -> Iterator[Server]:
        port = _free_port()
        argv = [sys.executable, "-m", "benchmarks.sim", *self.args, "--port", str(port)]
        if max_num_seqs is not None:
            argv += ["--max-num-seqs", str(max_num_seqs)]
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
        self._original: str | None = None
        self._current: str | None = None

    @contextmanager
    def session(self) -> Iterator[None]:
        """Remember the stack's max_num_seqs, and put it back at the end even on error or Ctrl-C."""
        self._original = self._current = self.stack.config_get(CONFIG_PATH)
        try:
            yield
        finally:
            if self._current != self._original:
                if self._original is None:
                    self.stack.config_rm(CONFIG_PATH)
                else:
                    self.stack.config_set(CONFIG_PATH, self._original)
                self.stack.up()
                self._current = self._original

    @contextmanager
    def serving(self, max_num_seqs: int | None) -> Iterator[Server]:
        if max_num_seqs is not None and str(max_num_seqs) != self._current:
            self.stack.config_set(CONFIG_PATH, str(max_num_seqs))
            self._current = str(max_num_seqs)  # set before `up`: a failed up must still be undone
            self.stack.up()
            wait_healthy(self.server, self.health_timeout_s)
        else:
            # No `up` to wait for: still fail fast if the server cannot be reached, rather than record
            # a point where every request failed to connect.
            check_reachable(self.server)
        yield self.server
