"""Signals during a run: SIGTERM raised like Ctrl-C (so `finally` blocks and cleanups run, as a CI
runner's stop or `kill` would otherwise skip them), and a shield around work that must finish once it
has started: deleting what a run created, putting a stack's config back."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class Interrupted(BaseException):
    """SIGTERM during a run: raised like KeyboardInterrupt so cleanup in `finally` still runs."""


def _install(signum: signal.Signals, handler: Any) -> Any:
    """The handler `signum` had, after installing `handler`; None off the main thread (where Python
    cannot install handlers and Ctrl-C reaches the main thread anyway)."""
    try:
        return signal.signal(signum, handler)
    except ValueError:
        return None


def _reinstall(signum: signal.Signals, old: Any) -> None:
    if old is not None:
        signal.signal(signum, old)


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """SIGTERM raises Interrupted inside the block."""

    def on_term(signum: int, frame: Any) -> None:
        raise Interrupted(f"signal {signum}")

    old = _install(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        _reinstall(signal.SIGTERM, old)


@contextmanager
def shielded(notice: Callable[[str], None] | None = None) -> Iterator[None]:
    """Ctrl-C and SIGTERM do not stop the block; `notice(name)` is told of each one that arrives
    (e.g. to say the work goes on and why)."""

    def on_signal(signum: int, frame: Any) -> None:
        if notice is not None:
            notice(signal.Signals(signum).name)

    old_int, old_term = _install(signal.SIGINT, on_signal), _install(signal.SIGTERM, on_signal)
    try:
        yield
    finally:
        _reinstall(signal.SIGINT, old_int)
        _reinstall(signal.SIGTERM, old_term)
