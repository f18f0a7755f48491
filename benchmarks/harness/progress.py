"""Progress display while a benchmark runs (rich; silent when stderr is not a terminal)."""

from __future__ import annotations

import sys
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
        return lambda done: self._progress.update(task, completed=done)
