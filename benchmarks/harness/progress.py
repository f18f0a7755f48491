"""Progress display while a benchmark runs: rich's bars on a terminal; elsewhere (a log file, CI, `make`
piped) a line as each point starts and ends, since a live display there shows nothing until the run ends."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class RunProgress:
    """One bar per point; `point()` returns the callback the load generator's runner calls with the
    number of counted requests done."""

    def __init__(self, enabled: bool = True) -> None:
        self._enabled = enabled
        console = Console(stderr=True, quiet=not enabled)
        # A low refresh rate: the display costs CPU on the machine the load generator may share.
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            refresh_per_second=2,
        )

    @contextmanager
    def running(self) -> Iterator[RunProgress]:
        with self._progress:
            yield self

    def log(self, message: str) -> None:
        """A line above the bars (on stderr, as the bars; shown even when the bars are not)."""
        if self._enabled:
            self._progress.console.print(message, markup=False, highlight=False)
        else:
            print(message, file=sys.stderr)

    def point(self, label: str, total: int) -> Callable[[int], None]:
        task = self._progress.add_task(label, total=total)
        if not self._enabled or self._progress.console.is_terminal:
            return lambda done: self._progress.update(task, completed=done)
        self.log(f"{label}: started, {total} requests")
        started, said = time.monotonic(), []

        def update(done: int) -> None:
            self._progress.update(task, completed=done)
            if done >= total and not said:
                said.append(done)
                self.log(f"{label}: {done} of {total} in {time.monotonic() - started:.0f} s")

        return update
