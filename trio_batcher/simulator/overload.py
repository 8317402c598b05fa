"""Overload windows: spans of time in which every request is answered 529 (pure, no I/O);
and overload on demand, started now for a given time (``POST /_sim/overload``).

The schedule is anchored at its *epoch*: the first time it is consulted (the simulator's
first ``/v1/messages`` request after start or ``/_sim/reset``), so a test knows that its
first request falls at the start of the first window, whatever the server's start-up cost.

- ``every_s > 0``: windows ``[k * every_s, k * every_s + for_s)`` for k = 0, 1, 2...
- ``every_s == 0``: a single window ``[0, for_s)``.
- ``for_s == 0``: never overloaded.

An overloaded request is told to come back when its window ends: ``retry-after`` is the
rest of the window rounded up to whole seconds (at least 1), so a client that waits
exactly that long finds the window over.

``OverloadOnDemand`` is the other kind: a test or an operator overloads one simulated
upstream *now* (``overload_route.py``), for ``for_s`` seconds, with a status of its choice
(529 Anthropic's overload, 429, 503, 500), to watch a gateway route around it; it can be
ended early. Its refusals say when to come back (``retry-after``, as the windows' do) unless
started with ``retry_after=False``: real 529s from Anthropic usually carry none, and a gateway
then has only its own back-off to go by -- the case a bench must be able to reproduce. Both take the time as an argument (trio's clock in the app), so they are tested
as data, and under ``autojump_clock`` without waiting.
"""

from __future__ import annotations

import math
from typing import Any, Final, final

ON_DEMAND_STATUSES: Final = (529, 429, 503, 500)
"""The statuses an on-demand overload may answer with: Anthropic's overload (the default),
a rate limit, an unavailable service, an internal error."""

__all__ = ["ON_DEMAND_STATUSES", "OverloadOnDemand", "OverloadSchedule"]


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
        return None if left is None else _retry_after(left)

    def reset(self) -> None:
        """Forget the epoch: the next request starts the schedule again."""
        self._epoch = None


def _retry_after(left: float) -> int:
    """Whole seconds (at least 1) until ``left`` seconds have passed."""
    return max(1, math.ceil(left - 1e-9))


@final
class OverloadOnDemand:
    """An overload started now, for a set time: every Messages request is answered with
    ``status`` until it ends (``remaining`` returns None from then on) or ``stop`` ends it.

    Starting one while another runs replaces it: the new length counts from now.
    ``send_retry_after`` says whether its refusals carry ``retry-after`` (see ``start``).
    """

    def __init__(self) -> None:
        self._until: float | None = None
        self.status = 529
        self.send_retry_after = True

    def start(
        self, now: float, for_s: float, status: int = 529, *, retry_after: bool = True
    ) -> None:
        """Overload from ``now`` for ``for_s`` seconds, answering ``status``, with a
        ``retry-after`` of the seconds left unless ``retry_after`` is false.

        Raises:
          ValueError: ``for_s`` not finite and > 0, or a status not in
            ``ON_DEMAND_STATUSES``.
        """
        if not (math.isfinite(for_s) and for_s > 0):
            raise ValueError(f"for_s must be a number of seconds > 0, not {for_s}")
        if status not in ON_DEMAND_STATUSES:
            allowed = ", ".join(map(str, ON_DEMAND_STATUSES))
            raise ValueError(f"status must be one of {allowed}, not {status}")
        self._until = now + for_s
        self.status = status
        self.send_retry_after = retry_after

    def stop(self) -> None:
        """End the overload now (nothing happens if none is running)."""
        self._until = None

    def remaining(self, now: float) -> float | None:
        """Seconds the overload still lasts; ``None`` when none is running."""
        if self._until is None:
            return None
        left = self._until - now
        if left <= 0:
            self._until = None
            return None
        return left

    def retry_after(self, now: float) -> int | None:
        """Whole seconds (at least 1) until the overload ends; ``None`` when none runs."""
        left = self.remaining(now)
        return None if left is None else _retry_after(left)

    def snapshot(self, now: float) -> dict[str, Any]:
        """``GET /_sim/overload``'s answer: whether it runs, for how long yet, which status
        (the last one asked for once it has ended; 529 before any), and whether its refusals
        carry ``retry-after`` (likewise)."""
        left = self.remaining(now)
        return {
            "active": left is not None,
            "remaining_s": 0.0 if left is None else left,
            "status": self.status,
            "retry_after": self.send_retry_after,
        }
