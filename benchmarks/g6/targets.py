"""Where a g6 run sends load, and how each server setting (max-num-seqs, model, quantization, ...)
is put in place.

- UrlTarget: a server given by URL; its settings cannot change (they only label the points).
- SimTarget: starts `python -m benchmarks.sim` in its own process per setting, so the simulator
  and the load generator do not share one interpreter's lock (that would shape the numbers).
- StackTarget: `pulumi config set --path vllm.<field> VALUE` (or `config rm` for an unset field)
  then `pulumi up`, waits for the endpoint to be healthy, and restores every changed field when the
  run ends, however it ends (success, failure, Ctrl-C, SIGTERM): a restore, once started, is not
  stopped by a second Ctrl-C, and one that cannot finish says the command that finishes it.

Each yields the `Server` in place: the URL the load generator sends to and how this process reads
the server (for a stack whose client runs in the cluster, through the API server's service proxy),
once it serves the run's model and takes requests as long as the run's (`Demand`).
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal, NamedTuple

import httpx
from pydantic import BaseModel, ConfigDict, Field

from benchmarks.g6.errors import G6Error
from benchmarks.harness import HarnessError, PulumiStack
from benchmarks.harness.server import Server, check_serves, http_server, wait_healthy
from benchmarks.harness.signals import shielded
from benchmarks.sim import SimConfig
from benchmarks.sim.cli import config_from_flags

CONFIG_OBJECT = "vllm"  # the project's `gke-ml-labs:vllm` stack config object
_SIM_START_TIMEOUT_S = 30.0
_REPO = Path(__file__).resolve().parents[2]


class ServerSettings(BaseModel):
    """Server settings a run puts in place before a point. Only the fields given are changed; a field
    given as None is unset (the server's default: for `quantization`, the checkpoint's own method).
    Each server field (model .. max_model_len, enable_prefix_caching) is the `vllm` stack config field and
    the `vllm serve` flag of the same name."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str | None = None
    quantization: Literal["fp8", "awq", "gptq"] | None = None
    max_num_seqs: int | None = Field(None, ge=1)
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    max_model_len: int | None = Field(None, ge=1)
    enable_prefix_caching: bool | None = None
    # The cold-start experiment's settings: where the image and the weights come from, and the GPU
    # pool's minimum (a top-level stack key, not a server flag; a stack target only).
    image_streaming: bool | None = None
    weights: Literal["huggingface", "gcs"] | None = None
    gpu_min_nodes: int | None = Field(None, ge=0)

    def changes(self) -> dict[str, str | None]:
        """Stack config key -> value as the CLI takes it (None: unset), for the fields this setting gives."""
        return {_key(name): _text(getattr(self, name)) for name in sorted(self.model_fields_set)}

    def over(self, base: ServerSettings) -> ServerSettings:
        """These settings on top of `base`: fields given here win."""
        return ServerSettings(**{**base.model_dump(include=base.model_fields_set),
                                 **self.model_dump(include=self.model_fields_set)})  # fmt: skip


TOP_LEVEL = {"gpu_min_nodes"}  # ServerSettings fields that are top-level stack keys, not under `vllm`


def _key(name: str) -> str:
    return name if name in TOP_LEVEL else f"{CONFIG_OBJECT}.{name}"


def _text(value: object) -> str | None:
    """As `pulumi config set --path` takes it (which stores true/false as YAML booleans)."""
    return None if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def sim_flags(key: str, value: str) -> list[str]:
    """A setting as the simulator's flags, which are vLLM's: a boolean is the flag or its --disable- form."""
    flag = key.removeprefix(f"{CONFIG_OBJECT}.").replace("_", "-")
    if value in ("true", "false"):
        return [f"--{flag}" if value == "true" else f"--{flag.replace('enable-', 'disable-', 1)}"]
    return [f"--{flag}", value]


class Demand(NamedTuple):
    """What every server a run puts in place must take: its model (a setting's own model wins), and
    requests of `tokens` tokens, asked for by the flags `asked` names."""

    model: str
    tokens: int
    asked: str

    def check(self, server: Server, settings: ServerSettings) -> Server:
        check_serves(server, settings.model or self.model, self.tokens, self.asked)
        return server


class UrlTarget:
    def __init__(self, server: Server, demand: Demand) -> None:
        self.server = server
        self.demand = demand

    @contextmanager
    def session(self) -> Iterator[None]:
        yield

    @contextmanager
    def serving(self, settings: ServerSettings) -> Iterator[Server]:
        yield self.demand.check(self.server, settings)


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


def _stop(proc: subprocess.Popen[str]) -> None:
    """Stop a simulator started by SimTarget: its stdin closed (it exits at once), then its whole process
    group terminated, killed if it lingers."""
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=10)
            break
        except subprocess.TimeoutExpired:
            continue
    proc.wait()


class SimTarget:
    """The simulated backend; `base` holds the settings every point starts from (model, memory, ...)."""

    def __init__(self, *, gpu: str, speedup: float, seed: int, base: ServerSettings, demand: Demand | None = None) -> None:
        self.args = ["--gpu", gpu, "--speedup", str(speedup), "--seed", str(seed)]
        self.base = base
        self.demand = demand

    @contextmanager
    def session(self) -> Iterator[None]:
        yield

    def flags(self, settings: ServerSettings) -> list[str]:
        """The simulator's server flags for `settings` over the base: what `serving` starts it with."""
        flags = list(self.args)
        for key, value in settings.over(self.base).changes().items():
            if value is not None:
                flags += sim_flags(key, value)
        return flags

    def config(self, settings: ServerSettings) -> SimConfig:
        """The simulator `serving(settings)` runs, as the virtual-clock oracle (benchmarks.sim.virtual) takes it."""
        return config_from_flags(self.flags(settings))

    @contextmanager
    def serving(self, settings: ServerSettings) -> Iterator[Server]:
        port = _free_port()
        # --watch-stdin: the simulator exits when the pipe this process holds open closes, as it does
        # however this process ends (SIGKILL included); its own session keeps a terminal's Ctrl-C for
        # this process, which stops it in order.
        argv = [sys.executable, "-m", "benchmarks.sim", *self.flags(settings), "--port", str(port), "--watch-stdin"]
        # stderr to a file, not a pipe: a pipe nobody reads would stall a chatty server.
        log = tempfile.TemporaryFile("w+")
        proc = subprocess.Popen(argv, cwd=_REPO, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=log,
                                text=True, start_new_session=True)  # fmt: skip
        base_url = f"http://127.0.0.1:{port}"
        try:
            if not _started(proc, base_url):
                _stop(proc)
                log.seek(0)
                raise G6Error(f"the simulator did not start ({' '.join(argv[2:])}): {_said(log.read())}")
            server = http_server(base_url)
            yield server if self.demand is None else self.demand.check(server, settings)
        finally:
            log.close()
            _stop(proc)


def _said(stderr: str) -> str:
    """The simulator's own error line, whole; else the end of what it printed."""
    errors = [line.removeprefix("error: ") for line in stderr.splitlines() if line.startswith("error: ")]
    return errors[-1] if errors else stderr.strip()[-800:]


def _values(values: dict[str, str | None]) -> str:
    return ", ".join(f"{path} {value if value is not None else '(unset)'}" for path, value in values.items())


class RestoreError(HarnessError):
    """A stack's config could not be put back; the message says the command that finishes it."""


class StackTarget:
    def __init__(
        self, stack: PulumiStack, server: Server, demand: Demand, health_timeout_s: float,
        log: Callable[[str], None] = print,
    ) -> None:  # fmt: skip
        self.stack = stack
        self.server = server
        self.demand = demand
        self.health_timeout_s = health_timeout_s
        self.log = log
        self._original: dict[str, str | None] = {}  # config path -> value before the run (None: unset)
        self._current: dict[str, str | None] = {}

    def _put(self, path: str, value: str | None) -> None:
        if value is None:
            self.stack.config_rm(path)
        else:
            self.stack.config_set(path, value)
        self._current[path] = value

    def _command(self, paths: list[str]) -> str:
        """The shell command that puts `paths` back as they were and applies them; after an `up` the
        timer killed, it first deletes the lock that up left (`pulumi cancel`) and lets `pulumi refresh`
        offer to import or clear the creates the kill left pending."""
        name = self.stack.stack
        unlock = [self.stack.cancel_command(), f"pulumi refresh -s {name}"] if self.stack.lock_left else []
        steps = [
            f"pulumi config rm --path {path} -s {name}" if self._original[path] is None
            else f"pulumi config set --path {path} {shlex.quote(self._original[path] or '')} -s {name}"
            for path in paths
        ]  # fmt: skip
        return " && ".join([*unlock, *steps, f"pulumi up -s {name} --yes"])

    @contextmanager
    def session(self) -> Iterator[None]:
        """Put back every config value the run changed, even on error, Ctrl-C or SIGTERM, with one `pulumi up`."""
        try:
            yield
        finally:
            changed = [path for path, value in self._original.items() if self._current[path] != value]
            if changed:
                self._restore(changed)

    def _restore(self, changed: list[str]) -> None:
        name = self.stack.stack
        self.log(f"g6: restoring stack {name}'s {_values({p: self._original[p] for p in changed})}: config and "
                 "`pulumi up`, which takes minutes; Ctrl-C and SIGTERM wait for it")  # fmt: skip

        def notice(signal_name: str) -> None:
            self.log(f"g6: {signal_name} received; the restore goes on (stopping it now would leave the "
                     "stack's config and its deployed server out of step)")  # fmt: skip

        with shielded(notice):
            try:
                for path in changed:
                    self._put(path, self._original[path])
                self.stack.up(self.log)
            except HarnessError as exc:
                raise RestoreError(
                    f"stack {name}'s config was not restored ({exc}); finish it with: {self._command(changed)}"
                ) from None
        self.log(f"g6: stack {name} restored")

    @contextmanager
    def serving(self, settings: ServerSettings) -> Iterator[Server]:
        changed: dict[str, str | None] = {}
        for path, value in settings.changes().items():
            if path not in self._original:
                self._original[path] = self._current[path] = self.stack.config_get(path)
            if self._current[path] != value:
                # Recorded before `up`: a failed up must still be undone.
                self._put(path, value)
                changed[path] = value
        if changed:
            self.log(f"g6: setting stack {self.stack.stack}'s {_values(changed)}: config and `pulumi up`, which takes minutes")
            self.stack.up(self.log)
            wait_healthy(self.server, self.health_timeout_s)
        # Before any load: a server that cannot be reached, serves another model or shorter requests
        # fails here, rather than as a point where every request failed.
        yield self.demand.check(self.server, settings)
