"""Progress display while a benchmark runs (rich; silent when stderr is not a terminal)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class RunProgress:
    """One bar per point; `point()` returns the callback the load generator calls per request."""

    def __init__(self, enabled: bool = True) -> None:
        console = Console(stderr=True, quiet=not enabled)
        # A low refresh rate: the display thread competes with the load generator for the GIL.
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

    def note(self, message: str) -> None:
        """A line above the bars: what the run is doing between points (a `pulumi up`, a phase)."""
        self._progress.console.print(message)

    def point(self, label: str, total: int) -> Callable[[object], None]:
        task = self._progress.add_task(label, total=total)
        return lambda _record: self._progress.advance(task)
