"""Adaptive concurrency: AIMD on the upstream limiter's ``total_tokens``.

The rules, TCP congestion avoidance applied to calls instead of packets:

- **decrease**: an overload signal (429 with retry-after, 529, a timeout) sets the limit to
  ``max(minimum, floor(limit * decrease_factor))``.
- **increase**: after ``limit`` clean calls in a row (one full window of the current limit),
  the limit grows by 1, up to ``maximum``; the count then starts again.
- a failure that is not an overload (500, connection error...) breaks the run of clean calls.

Epochs. Every decrease starts a new epoch, and each call is stamped with the epoch it
started in. Outcomes of calls from an earlier epoch are ignored: they were sent under the
old limit and say nothing about the new one. This is TCP's "one decrease per window": when
16 calls in flight all meet the same 529, the limit drops once (16 -> 14), not sixteen times.

The actuator is ``trio.CapacityLimiter.total_tokens``: raising it wakes waiters at once,
lowering it lets current holders finish and simply hands out no new tokens until the
borrowed count is below the new total.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, final

import trio

__all__ = ["AdaptiveController", "AdaptiveLimit", "AdaptiveStatistics"]


@final
@dataclass(frozen=True)
class AdaptiveStatistics:
    limit: int
    minimum: int
    maximum: int
    epoch: int
    clean_run: int
    increases: int
    decreases: int


class AdaptiveController(Protocol):
    """What ``Resilience`` asks of an adaptive limit: this module's, or the cluster's
    (``cluster/adaptive.py``), which applies the same rules to a limit shared in Redis."""

    @property
    def limit(self) -> int: ...

    @property
    def epoch(self) -> int: ...

    def on_overload(self, epoch: int) -> None: ...

    def on_clean(self, epoch: int) -> None: ...

    def on_failure(self, epoch: int) -> None: ...

    def statistics(self) -> AdaptiveStatistics: ...


@final
class AdaptiveLimit:
    """Owns ``limiter.total_tokens`` and moves it within ``[minimum, maximum]``.

    Args:
      limiter: the limiter every upstream call holds a token of.
      maximum: the ceiling; by default the limiter's ``total_tokens`` at construction
        (``BATCH_MAX_CONCURRENCY``), which is also where the limit starts.
      minimum: the floor, at least 1.
      decrease_factor: the multiplicative decrease, in (0, 1).
    """

    def __init__(
        self,
        limiter: trio.CapacityLimiter,
        *,
        maximum: int | None = None,
        minimum: int = 1,
        decrease_factor: float = 0.9,
    ) -> None:
        total = limiter.total_tokens
        if maximum is None:
            if not isinstance(total, int):
                raise ValueError("an adaptive limiter needs a finite total_tokens")
            maximum = total
        if not 1 <= minimum <= maximum:
            raise ValueError(f"need 1 <= minimum <= maximum, got {minimum}, {maximum}")
        if not 0 < decrease_factor < 1:
            raise ValueError(f"decrease_factor must be in (0, 1), not {decrease_factor}")
        self._limiter = limiter
        self._min = minimum
        self._max = maximum
        self._factor = decrease_factor
        start = total if isinstance(total, int) else maximum
        self._limit = min(maximum, max(minimum, start))
        self._limiter.total_tokens = self._limit
        self._epoch = 0
        self._clean_run = 0
        self._increases = 0
        self._decreases = 0

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def epoch(self) -> int:
        """Stamp a call with this when it starts; pass it back with its outcome."""
        return self._epoch

    def on_overload(self, epoch: int) -> None:
        """A call started in ``epoch`` met an overload: decrease, once per epoch."""
        if epoch != self._epoch:
            return
        self._epoch += 1
        self._clean_run = 0
        new = max(self._min, math.floor(self._limit * self._factor + 1e-9))
        if new != self._limit:
            self._decreases += 1
            self._set(new)

    def on_clean(self, epoch: int) -> None:
        """A call started in ``epoch`` succeeded (or was refused for its own fault)."""
        if epoch != self._epoch:
            return
        self._clean_run += 1
        if self._clean_run >= self._limit:
            self._clean_run = 0
            if self._limit < self._max:
                self._increases += 1
                self._set(self._limit + 1)

    def on_failure(self, epoch: int) -> None:
        """A call started in ``epoch`` failed, but not from overload: the clean run ends."""
        if epoch == self._epoch:
            self._clean_run = 0

    def statistics(self) -> AdaptiveStatistics:
        return AdaptiveStatistics(
            limit=self._limit,
            minimum=self._min,
            maximum=self._max,
            epoch=self._epoch,
            clean_run=self._clean_run,
            increases=self._increases,
            decreases=self._decreases,
        )

    def _set(self, limit: int) -> None:
        self._limit = limit
        self._limiter.total_tokens = limit
