"""Overload windows: spans of time in which every request is answered 529 (pure, no I/O).

The schedule is anchored at its *epoch*: the first time it is consulted (the simulator's
first ``/v1/messages`` request after start or ``/_sim/reset``), so a test knows that its
first request falls at the start of the first window, whatever the server's start-up cost.

- ``every_s > 0``: windows ``[k * every_s, k * every_s + for_s)`` for k = 0, 1, 2...
- ``every_s == 0``: a single window ``[0, for_s)``.
- ``for_s == 0``: never overloaded.

An overloaded request is told to come back when its window ends: ``retry-after`` is the
rest of the window rounded up to whole seconds (at least 1), so a client that waits
exactly that long finds the window over.
"""

from __future__ import annotations

import math
from typing import final

__all__ = ["OverloadSchedule"]


@final
class OverloadSchedule:
    """When the simulated upstream is overloaded.

    Args:
      every_s: period between window starts; 0 for one window only.
      for_s: length of each window; 0 turns overload off.

    Raises:
      ValueError: a negative or non-finite value, or ``for_s >= every_s > 0`` (always
        overloaded).
    """

    def __init__(self, every_s: float, for_s: float) -> None:
        for name, value in (("every_s", every_s), ("for_s", for_s)):
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be finite and >= 0, not {value}")
        if every_s > 0 and for_s >= every_s:
            raise ValueError(f"for_s ({for_s}) must be shorter than every_s ({every_s})")
        self.every_s = every_s
        self.for_s = for_s
        self._epoch: float | None = None

    @property
    def enabled(self) -> bool:
        return self.for_s > 0

    def remaining(self, now: float) -> float | None:
        """Seconds left in the overload window ``now`` falls in; ``None`` outside any.

        The first call fixes the epoch at ``now``.
        """
        if not self.enabled:
            return None
        if self._epoch is None:
            self._epoch = now
        elapsed = now - self._epoch
        if self.every_s > 0:
            elapsed %= self.every_s
        if elapsed >= self.for_s:
            return None
        return self.for_s - elapsed

    def retry_after(self, now: float) -> int | None:
        """Whole seconds (at least 1) until the current window ends; ``None`` outside any."""
        left = self.remaining(now)
        return None if left is None else max(1, math.ceil(left - 1e-9))

    def reset(self) -> None:
        """Forget the epoch: the next request starts the schedule again."""
        self._epoch = None
