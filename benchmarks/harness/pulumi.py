"""The pulumi CLI, called through subprocess: stack outputs, config values, `pulumi up`.

Server-side parameters of a real stack change only through its config and `pulumi up`; nothing
here touches live Kubernetes objects.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from benchmarks.harness.errors import HarnessError
from benchmarks.harness.signals import shielded

_NO_CLI = (
    "the pulumi CLI is not on PATH: install it (https://www.pulumi.com/docs/install/), or pass "
    "--outputs FILE saved with `pulumi stack output --json --show-secrets -s STACK > FILE`"
)


class PulumiStack:
    """One stack of the project in `cwd` (the repository root by default: where Pulumi.yaml is)."""

    def __init__(self, stack: str, cwd: str | None = None, up_timeout_s: float = 3600.0) -> None:
        if shutil.which("pulumi") is None:
            raise HarnessError(_NO_CLI)
        self.stack = stack
        self.cwd = cwd
        self.up_timeout_s = up_timeout_s
        # Set once the timer killed an `up`: a killed pulumi leaves the file backend's lock
        # (.pulumi/locks/...) behind, and every later update of the stack fails on it until
        # `pulumi cancel` deletes it (the diy backend's CancelCurrentUpdate removes every lock file).
        self.lock_left = False

    def _run(self, *args: str, timeout_s: float = 120.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = ["pulumi", *args, "-s", self.stack]
        try:
            # Its own session: a Ctrl-C at the terminal reaches this process, which decides what to stop.
            done = subprocess.run(argv, cwd=self.cwd, capture_output=True, text=True, timeout=timeout_s,
                                  start_new_session=True)  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise HarnessError(f"`{' '.join(argv)}` did not finish within {timeout_s:.0f}s") from exc
        if check and done.returncode != 0:
            raise HarnessError(f"`{' '.join(argv)}` failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
        return done

    def outputs(self) -> dict[str, Any]:
        done = self._run("stack", "output", "--json", "--show-secrets")
        try:
            return json.loads(done.stdout)
        except ValueError as exc:
            raise HarnessError(f"`pulumi stack output -s {self.stack}` printed no JSON: {exc}") from exc

    def config_get(self, path: str) -> str | None:
        """The value at a config path, or None when it is not set (pulumi exits non-zero then)."""
        done = self._run("config", "get", "--path", path, check=False)
        return done.stdout.strip() if done.returncode == 0 else None

    def config_set(self, path: str, value: str) -> None:
        self._run("config", "set", "--path", path, value)

    def config_rm(self, path: str) -> None:
        self._run("config", "rm", "--path", path)

    def up(self, log: Callable[[str], None] = lambda line: None) -> None:
        """`pulumi up`, each line it prints passed to `log` as it comes (an update takes minutes).

        Interrupted (Ctrl-C, SIGTERM) while it runs, it is asked to cancel as pulumi's own Ctrl-C does
        (it finishes the steps in flight and leaves its state consistent) and waited for; then the
        interrupt goes on."""
        argv = ["pulumi", "up", "--yes", "--skip-preview", "-s", self.stack]
        try:
            proc = subprocess.Popen(argv, cwd=self.cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    start_new_session=True)  # fmt: skip
        except OSError as exc:
            raise HarnessError(f"`{' '.join(argv)}` could not start: {exc}") from exc
        assert proc.stdout is not None
        tail: deque[str] = deque(maxlen=5)
        timer = threading.Timer(self.up_timeout_s, proc.kill)
        timer.start()

        def follow() -> None:
            for line in proc.stdout:  # type: ignore[union-attr]
                if line.strip():
                    tail.append(line.rstrip())
                    log(f"  pulumi: {line.rstrip()}")
            proc.wait()

        try:
            follow()
        except BaseException:
            proc.send_signal(signal.SIGINT)
            log("  pulumi up: cancelling (pulumi finishes the steps in flight; wait for it)")
            with shielded(lambda name: log(f"  pulumi up: {name} received; still waiting for pulumi to cancel")):
                follow()
            raise
        finally:
            timer.cancel()
        if proc.returncode:
            killed = proc.returncode == -signal.SIGKILL  # by the timer
            self.lock_left = self.lock_left or killed
            why = (f"did not finish within {self.up_timeout_s:.0f}s and was killed, leaving the stack locked "
                   f"(`{self.cancel_command()}` unlocks it)") if killed else f"failed (exit {proc.returncode})"  # fmt: skip
            raise HarnessError(f"`{' '.join(argv)}` {why}: {' / '.join(tail) or 'no output'}")

    def cancel_command(self) -> str:
        return f"pulumi cancel --yes -s {self.stack}"
