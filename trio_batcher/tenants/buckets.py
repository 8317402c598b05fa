"""Per-tenant rate limits: a token bucket for requests per minute and one for tokens.

Theory of operation
-------------------
A bucket of ``limit`` per minute holds at most ``limit`` and refills at ``limit / 60`` per
second; it starts full, so a tenant may burst its whole minute at once and then runs at
the limit's pace. The level is computed lazily from the last update and the time now
(``trio.current_time()`` by default), so an idle tenant costs nothing and there is no task.

A request is checked, then charged, in one synchronous step (``try_charge``): it needs one
request from the ``rpm`` bucket and its *estimated* tokens from the ``tpm`` bucket, and is
charged only when both have enough, so a refusal takes nothing. A request whose estimate
exceeds the whole bucket needs a full bucket (not more than exists), then leaves it in
debt. When the upstream has said how many tokens it really used, ``Charge.settle(actual)``
moves the charge from the estimate to that total: an over-estimate gives tokens back (up to
the bucket's size), an under-estimate takes more, down to a negative level -- debt that
delays the tenant's next requests until it is refilled, so over time the tenant runs at its
limit whatever its estimates. ``settle`` may be called as usage arrives with the running
total (the last call wins), and ``refund()`` gives everything back (the request and its
tokens) for a request that never reached the upstream (shed by the gate, say).

A refusal is a ``Limited``: the limit that refused (``rpm`` or ``tpm``, the longer wait
when both do) and the seconds until the request would be allowed if nothing else happened
(what ``Retry-After`` says, rounded up by ``retry_after_header``).

Reload. Buckets are kept by tenant name and configured from the ``Tenant`` passed to each
call, so a reload that changes a limit takes effect on the tenant's next request: the
bucket keeps its level (and its debt), capped at the new size. Charges in flight settle
into the same bucket object. ``prune`` forgets tenants that are gone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias, final

import trio

from .model import Tenant

__all__ = [
    "Charge",
    "LimitName",
    "Limited",
    "TenantRateLimits",
    "TokenBucket",
    "limits_needed",
]

LimitName: TypeAlias = Literal["rpm", "tpm"]

_MINUTE: Final = 60.0


def limits_needed(tenant: Tenant, estimate_tokens: int) -> list[tuple[LimitName, int, float]]:
    """What one request takes from ``tenant``'s limits: (limit, per minute, amount) for
    each of ``rpm`` (one request) and ``tpm`` (its estimated tokens) the tenant has."""
    needs: list[tuple[LimitName, int, float]] = []
    if tenant.rpm is not None:
        needs.append(("rpm", tenant.rpm, 1.0))
    if tenant.tpm is not None:
        needs.append(("tpm", tenant.tpm, float(max(0, estimate_tokens))))
    return needs


@final
class TokenBucket:
    """``per_minute`` capacity, refilled continuously; pure arithmetic on explicit times."""

    __slots__ = ("_level", "_stamp", "capacity", "rate")

    def __init__(self, per_minute: int, now: float) -> None:
        self.capacity = float(per_minute)
        self.rate = self.capacity / _MINUTE
        self._level = self.capacity
        self._stamp = now

    def level(self, now: float) -> float:
        """What the bucket holds at ``now`` (negative while in debt)."""
        elapsed = max(0.0, now - self._stamp)
        return min(self.capacity, self._level + elapsed * self.rate)

    def wait_for(self, amount: float, now: float) -> float:
        """Seconds until ``amount`` (at most the capacity) is available; 0 if it is now."""
        missing = min(amount, self.capacity) - self.level(now)
        return max(0.0, missing / self.rate)

    def take(self, amount: float, now: float) -> None:
        """Remove ``amount`` (may be negative: a give-back, capped at the capacity)."""
        self._level = min(self.capacity, self.level(now) - amount)
        self._stamp = max(self._stamp, now)

    def reconfigure(self, per_minute: int, now: float) -> None:
        self._level = self.level(now)
        self._stamp = max(self._stamp, now)
        self.capacity = float(per_minute)
        self.rate = self.capacity / _MINUTE
        self._level = min(self._level, self.capacity)


@final
@dataclass(frozen=True)
class Limited:
    """A request refused by a tenant's rate limit."""

    tenant: str
    limit: LimitName
    per_minute: int
    retry_after_s: float

    @property
    def retry_after_header(self) -> str:
        """``Retry-After`` in whole seconds, rounded up (at least 1)."""
        return str(max(1, math.ceil(self.retry_after_s - 1e-9)))

    @property
    def message(self) -> str:
        what = "requests" if self.limit == "rpm" else "tokens"
        return (
            f"Rate limit of tenant '{self.tenant}' reached: {self.per_minute} {what} per "
            f"minute ({self.limit}); retry in {self.retry_after_header} s."
        )


@final
class Charge:
    """What one request took from its tenant's buckets; settle it once usage is known."""

    __slots__ = ("_charged", "_clock", "_done", "_request", "_tokens")

    def __init__(
        self,
        request: TokenBucket | None,
        tokens: TokenBucket | None,
        estimate: int,
        clock: Callable[[], float],
    ) -> None:
        self._request = request
        self._tokens = tokens
        self._charged = estimate
        self._clock = clock
        self._done = False

    @property
    def tokens_charged(self) -> int:
        return self._charged

    def settle(self, actual_tokens: int) -> None:
        """Move the token charge to ``actual_tokens`` (the running total so far)."""
        if self._done:
            return
        delta = actual_tokens - self._charged
        self._charged = actual_tokens
        if self._tokens is not None and delta:
            self._tokens.take(delta, self._clock())

    def refund(self) -> None:
        """Give back the request and every token: it never reached the upstream."""
        if self._done:
            return
        now = self._clock()
        if self._request is not None:
            self._request.take(-1, now)
        if self._tokens is not None:
            self._tokens.take(-self._charged, now)
        self._charged = 0
        self._done = True


@final
class TenantRateLimits:
    """Every tenant's buckets. One per process, shared by all requests (no locking is
    needed: every method is synchronous, and trio runs one task at a time).

    Args:
      clock: the time source, ``trio.current_time`` by default (seconds, monotonic).
    """

    def __init__(self, clock: Callable[[], float] = trio.current_time) -> None:
        self._clock = clock
        self._buckets: dict[tuple[str, LimitName], TokenBucket] = {}

    def check(self, tenant: Tenant, estimate_tokens: int = 0) -> Limited | None:
        """None if the request may go now, else why not and for how long. Takes nothing."""
        now = self._clock()
        worst: Limited | None = None
        for limit, per_minute, amount in self._needs(tenant, estimate_tokens):
            wait = self._bucket(tenant.name, limit, per_minute, now).wait_for(amount, now)
            if wait > 0 and (worst is None or wait > worst.retry_after_s):
                worst = Limited(tenant.name, limit, per_minute, wait)
        return worst

    def try_charge(self, tenant: Tenant, estimate_tokens: int = 0) -> Charge | Limited:
        """``check``, then (only if allowed) take one request and ``estimate_tokens``."""
        limited = self.check(tenant, estimate_tokens)
        if limited is not None:
            return limited
        return self.charge(tenant, estimate_tokens)

    def charge(self, tenant: Tenant, estimate_tokens: int = 0) -> Charge:
        """Take one request and ``estimate_tokens`` without checking (a request admitted
        anyway still counts). A tenant without limits gets a charge that does nothing."""
        now = self._clock()
        request = tokens = None
        for limit, per_minute, amount in self._needs(tenant, estimate_tokens):
            bucket = self._bucket(tenant.name, limit, per_minute, now)
            bucket.take(amount, now)
            if limit == "rpm":
                request = bucket
            else:
                tokens = bucket
        return Charge(request, tokens, max(0, estimate_tokens), self._clock)

    def level(self, tenant: str, limit: LimitName) -> float | None:
        """What the tenant's bucket holds now (None: no such limit used yet)."""
        bucket = self._buckets.get((tenant, limit))
        return None if bucket is None else bucket.level(self._clock())

    def prune(self, names: Iterable[str]) -> None:
        """Forget the buckets of tenants not in ``names`` (after a reload)."""
        keep = set(names)
        for key in [key for key in self._buckets if key[0] not in keep]:
            del self._buckets[key]

    @staticmethod
    def _needs(tenant: Tenant, estimate_tokens: int) -> list[tuple[LimitName, int, float]]:
        return limits_needed(tenant, estimate_tokens)

    def _bucket(self, name: str, limit: LimitName, per_minute: int, now: float) -> TokenBucket:
        bucket = self._buckets.get((name, limit))
        if bucket is None:
            bucket = self._buckets[name, limit] = TokenBucket(per_minute, now)
        elif bucket.capacity != per_minute:
            bucket.reconfigure(per_minute, now)
        return bucket
