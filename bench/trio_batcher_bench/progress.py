"""What the bench shows while it runs: a rich live display on a terminal, plain lines otherwise.

``Display.phase`` is an async context manager around one load phase: it shows the phase's
live counters (read from the driver's ``Tally``) and, on a terminal, a progress bar over the
phase's planned seconds. The rich display is refreshed by a task in the phase's own nursery
(``auto_refresh`` is off, so rich starts no thread). Without a terminal, or without rich
installed, the same information comes as one line when a phase starts and one when it ends.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final, TextIO, final

import trio

from .load import Tally

__all__ = ["Display"]

_REFRESH_S: Final = 0.25


def _counters(tally: Tally, elapsed: float) -> str:
    rate = tally.ok / elapsed if elapsed > 0 else 0.0
    text = f"sent {tally.sent}  ok {tally.ok}"
    if tally.shed:
        text += f"  shed {tally.shed}"
    if tally.error:
        text += f"  err {tally.error}"
    if tally.aborted:
        text += f"  left {tally.aborted}"
    if tally.unsent:
        text += f"  unsent {tally.unsent}"
    return text + f"  in flight {tally.in_flight}  {rate:,.0f} ok/s"


@final
class Display:
    """Progress output for one bench run; ``close()`` when done."""

    def __init__(self, *, stream: TextIO | None = None, rich: bool | None = None) -> None:
        self._out = stream if stream is not None else sys.stderr
        use_rich = self._out.isatty() if rich is None else rich
        self._progress: Any = None
        if use_rich:
            try:
                from rich.console import Console
                from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
            except ImportError:
                use_rich = False
            else:
                self._console = Console(file=self._out)
                self._progress = Progress(
                    TextColumn("{task.description}"),
                    BarColumn(bar_width=24),
                    TimeElapsedColumn(),
                    TextColumn("{task.fields[counters]}"),
                    console=self._console,
                    auto_refresh=False,
                    transient=False,
                )
                self._progress.start()
        self._scenario = ""

    def scenario(self, name: str, title: str) -> None:
        self._scenario = name
        self.line(f"[{name}] {title}")

    def line(self, text: str) -> None:
        if self._progress is not None:
            self._progress.console.print(text, markup=False, highlight=False)
            self._progress.refresh()
        else:
            print(text, file=self._out, flush=True)

    @asynccontextmanager
    async def phase(self, label: str, seconds: float | None, tally: Tally) -> AsyncIterator[None]:
        """Show ``label`` with live counters while the block runs."""
        started = trio.current_time()
        if self._progress is None:
            planned = f", ~{seconds:g} s" if seconds else ""
            self.line(f"  {label}{planned} ...")
            yield
            elapsed = trio.current_time() - started
            self.line(f"  {label}: {_counters(tally, elapsed)} ({elapsed:.1f} s)")
            return
        progress = self._progress
        task = progress.add_task(
            f"  {label}", total=seconds if seconds else None, counters=_counters(tally, 0.0)
        )

        def update() -> None:
            elapsed = trio.current_time() - started
            done = min(elapsed, seconds) if seconds else None
            progress.update(task, completed=done, counters=_counters(tally, elapsed))
            progress.refresh()

        async def refresher() -> None:
            while True:
                update()
                await trio.sleep(_REFRESH_S)

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(refresher)
                try:
                    yield
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            update()
            if seconds:
                progress.update(task, completed=seconds)
            progress.stop_task(task)
            progress.refresh()

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
