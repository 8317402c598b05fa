"""Enforced rate limits: Anthropic-style token buckets over requests and tokens (pure, no I/O).

Theory of operation
-------------------
Anthropic meters an organisation with token buckets that refill *continuously*: a bucket
of capacity ``C`` gains ``C / period`` units a second (``period`` is a minute there), up to
``C``. So the level at time ``t`` is a pure function of the level after the last change
and the time since: ``min(C, level0 + (t - t0) * C / period)``; nothing ticks, and every
answer below is exact arithmetic on the caller's clock.

A ``/v1/messages`` request needs one unit of the requests bucket and ``cost`` units of the
tokens bucket (its input plus output tokens, capped at the capacity so that no request is
refused forever). It is admitted only when *every* configured bucket has room; then each
is charged. Otherwise nothing is charged and the refusal says how long until all of them
have room -- the ``retry-after``, rounded up to whole seconds as Anthropic sends it, so a
client that waits exactly that long is admitted (when nobody else took the room first).

Headers report each bucket after the request was charged: ``-remaining`` is the whole
units in the bucket (it counts down as requests are admitted and creeps back up as it
refills), ``-reset`` the instant it will be full again -- Anthropic's definition, which
means it is ``period`` away right after the bucket ran dry, not the time until the next
request fits.

Times: every method takes ``now`` from one clock (the simulator uses
``trio.current_time()``); only ``headers`` also takes the wall-clock instant that ``now``
corresponds to, to write the RFC 3339 resets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, final

__all__ = ["RateLimits", "Refusal", "TokenBucket"]

TOKEN_RESOURCES: Final = ("tokens", "input-tokens", "output-tokens")


@final
class TokenBucket:
    """A continuously refilling bucket; full until first used.

    Args:
      capacity: the most it holds (the per-period limit), at least 1.
      period_s: how long it takes to refill from empty, in seconds.
    """

    def __init__(self, capacity: int, period_s: float) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, not {capacity}")
        if not (math.isfinite(period_s) and period_s > 0):
            raise ValueError(f"period_s must be finite and > 0, not {period_s}")
        self.capacity = capacity
        self.rate = capacity / period_s
        self._level = float(capacity)
        self._stamp: float | None = None  # None: untouched, so full whatever the time

    def level(self, now: float) -> float:
        """Units in the bucket at ``now`` (fractional: refill is continuous)."""
        if self._stamp is None:
            return float(self.capacity)
        return min(float(self.capacity), self._level + max(0.0, now - self._stamp) * self.rate)

    def wait_for(self, amount: float, now: float) -> float:
        """Seconds from ``now`` until the bucket holds ``amount`` (0.0 if it does now)."""
        missing = min(amount, float(self.capacity)) - self.level(now)
        # The tolerance absorbs float error: a client that waited exactly the computed
        # time must find the room there.
        return missing / self.rate if missing > 1e-9 else 0.0

    def take(self, amount: float, now: float) -> None:
        """Remove ``amount`` (the caller checked ``wait_for`` is 0)."""
        self._level = self.level(now) - amount
        self._stamp = now

    def until_full(self, now: float) -> float:
        """Seconds from ``now`` until the bucket is full again."""
        return (self.capacity - self.level(now)) / self.rate

    def reset(self) -> None:
        """Full again, as when new."""
        self._level = float(self.capacity)
        self._stamp = None


@final
@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request was refused and when to come back.

    Attributes:
      resource: ``"requests"`` or ``"tokens"``: the bucket that needs the longest wait.
      limit: that bucket's per-period limit.
      retry_after: whole seconds until every bucket has room (at least 1).
    """

    resource: str
    limit: int
    retry_after: int


@final
class RateLimits:
    """The requests and tokens buckets of one simulated organisation.

    Args:
      requests: requests per period, or ``None`` for no request limit.
      tokens: input plus output tokens per period, or ``None`` for no token limit.
      period_s: the period (60 s at Anthropic); an empty bucket is full again after it.
    """

    def __init__(self, requests: int | None, tokens: int | None, period_s: float) -> None:
        self.requests = None if requests is None else TokenBucket(requests, period_s)
        self.tokens = None if tokens is None else TokenBucket(tokens, period_s)

    @property
    def enabled(self) -> bool:
        return self.requests is not None or self.tokens is not None

    def admit(self, cost: int, now: float) -> Refusal | None:
        """Charge one request of ``cost`` tokens, or refuse it and charge nothing.

        Returns:
          ``None`` when admitted (and charged); otherwise the ``Refusal``.
        """
        waits: list[tuple[float, str, TokenBucket]] = []
        if self.requests is not None:
            waits.append((self.requests.wait_for(1, now), "requests", self.requests))
        if self.tokens is not None:
            waits.append((self.tokens.wait_for(cost, now), "tokens", self.tokens))
        wait, resource, bucket = max(waits, key=lambda item: item[0])
        if wait > 0:
            return Refusal(resource, bucket.capacity, max(1, math.ceil(wait - 1e-9)))
        if self.requests is not None:
            self.requests.take(1, now)
        if self.tokens is not None:
            self.tokens.take(min(cost, self.tokens.capacity), now)
        return None

    def headers(self, now: float, wall: float) -> dict[str, tuple[int, int, bytes]]:
        """``resource -> (limit, remaining, reset)`` for every resource a bucket governs.

        The one tokens bucket governs ``tokens``, ``input-tokens`` and ``output-tokens``
        alike (it meters their sum), so all three report it.

        Args:
          now: the buckets' clock.
          wall: the POSIX time corresponding to ``now``, for the RFC 3339 ``reset``.
        """
        out: dict[str, tuple[int, int, bytes]] = {}
        for names, bucket in (
            (("requests",), self.requests),
            (TOKEN_RESOURCES, self.tokens),
        ):
            if bucket is None:
                continue
            entry = (
                bucket.capacity,
                math.floor(bucket.level(now) + 1e-9),
                rfc3339(wall + bucket.until_full(now)),
            )
            for name in names:
                out[name] = entry
        return out

    def reset(self) -> None:
        for bucket in (self.requests, self.tokens):
            if bucket is not None:
                bucket.reset()


def rfc3339(posix: float) -> bytes:
    """``posix`` as RFC 3339 UTC with milliseconds, rounded *up* so it is never early."""
    millis = math.ceil(posix * 1000 - 1e-3)  # the tolerance: float error, far below 1 ms
    at = datetime.fromtimestamp(millis / 1000, UTC)
    return at.strftime("%Y-%m-%dT%H:%M:%S.").encode() + f"{millis % 1000:03d}Z".encode()
