"""How long the process stops for its garbage collector, collection by collection.

The gateway runs a full collection every ``HEAP_TRIM_INTERVAL_S`` (``serving``) on top
of CPython's own, and a collection pauses every request the event loop is serving. That
pause is the price of flat memory, so it is measured rather than assumed: ``gc.callbacks``
brackets every collection, automatic or explicit, and ``/metrics`` reports the count, the
total and the longest pause per generation.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from typing import Any, final

__all__ = ["GcPauses", "GcStatistics"]

_GENERATIONS = 3


@final
@dataclass(frozen=True, slots=True)
class GcStatistics:
    collections: tuple[int, ...]
    pause_s_total: tuple[float, ...]
    pause_s_max: tuple[float, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            str(g): {
                "collections": self.collections[g],
                "pause_seconds_total": round(self.pause_s_total[g], 6),
                "pause_seconds_max": round(self.pause_s_max[g], 6),
            }
            for g in range(_GENERATIONS)
        }


@final
class GcPauses:
    """A ``gc.callbacks`` entry timing each collection; ``install`` / ``uninstall`` it for
    as long as the app serves (process-wide, like the collector itself)."""

    def __init__(self) -> None:
        self._collections = [0] * _GENERATIONS
        self._total = [0.0] * _GENERATIONS
        self._max = [0.0] * _GENERATIONS
        self._started: float | None = None

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        # A collection can start anywhere, also a few frames short of the recursion limit
        # (a deeply nested body being parsed): then even a comparison here raises, and an
        # exception out of a gc callback is an unraisable error printed to stderr. That one
        # collection goes unmeasured instead.
        try:
            self._observe(phase, info)
        except RecursionError:
            self._started = None

    def _observe(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        if self._started is None:  # installed mid-collection
            return
        pause = time.perf_counter() - self._started
        self._started = None
        generation = min(max(info.get("generation", 0), 0), _GENERATIONS - 1)
        self._collections[generation] += 1
        self._total[generation] += pause
        self._max[generation] = max(self._max[generation], pause)

    def install(self) -> None:
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def uninstall(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)

    def statistics(self) -> GcStatistics:
        return GcStatistics(tuple(self._collections), tuple(self._total), tuple(self._max))
