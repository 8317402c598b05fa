"""The shared cooldown: a point in ``trio.current_time()`` before which no new upstream call starts.

It only ever moves later: a longer ``retry-after`` extends it, a shorter one is ignored, so
a waiter that slept until the old end just looks again (``wait_until_clear`` loops). Nothing
is woken early and nothing in flight is touched: the cooldown gates *starts* of calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias, final

import trio

__all__ = ["Cooldown", "CooldownReason", "CooldownStatistics"]

CooldownReason: TypeAlias = Literal["rate_limited", "overloaded"]


@final
@dataclass(frozen=True)
class CooldownStatistics:
    """``until`` is ``-inf`` before the first cooldown; ``opened``/``extended`` are counters."""

    until: float
    remaining: float
    reason: CooldownReason | None
    opened: int
    extended: int


@final
class Cooldown:
    """Holds new upstream calls until a shared instant passes.

    Args:
      enabled: when ``False`` every ``open_until`` is ignored, so nothing ever waits (the
        uncoordinated mode the benchmark compares against).
    """

    def __init__(self, *, enabled: bool = True) -> None:
        self._enabled = enabled
        self._until = float("-inf")
        self._reason: CooldownReason | None = None
        self._opened = 0
        self._extended = 0

    @property
    def enabled(self) -> bool:
        return self._enabled

    @property
    def until(self) -> float:
        return self._until

    @property
    def reason(self) -> CooldownReason | None:
        """Why the current (or last) cooldown was opened or last extended."""
        return self._reason

    def open_until(self, until: float, reason: CooldownReason) -> bool:
        """Hold new calls until ``until``; returns whether that moved the end later."""
        if not self._enabled or until <= self._until:
            return False
        if self._until > trio.current_time():
            self._extended += 1
        else:
            self._opened += 1
        self._until = until
        self._reason = reason
        return True

    def remaining(self) -> float:
        """Seconds until new calls may start; 0.0 when clear."""
        return max(0.0, self._until - trio.current_time())

    async def wait_until_clear(self) -> None:
        """Return once no cooldown is in force (at once, after a checkpoint, if none is).

        Cancellable; a cancelled waiter leaves no trace.
        """
        if trio.current_time() >= self._until:
            await trio.lowlevel.checkpoint()
            return
        # Sleeping to a known instant, not an Event: the end only moves later, so nobody
        # ever needs waking early; a waiter whose end was extended just sleeps again.
        while True:
            await trio.sleep_until(self._until)
            if trio.current_time() >= self._until:
                return

    def statistics(self) -> CooldownStatistics:
        return CooldownStatistics(
            until=self._until,
            remaining=self.remaining(),
            reason=self._reason,
            opened=self._opened,
            extended=self._extended,
        )
