"""The upstream cap shared by every instance: ``admission.SharedSlots`` on a Redis lease
semaphore, with the fallback for when Redis does not answer.

Theory of operation. While Redis answers, each job's slot is a lease of the
``LeaseSemaphore`` named ``upstream``, whose capacity is the cap (``BATCH_MAX_CONCURRENCY``,
or the adaptive limit, which every instance sets the same way). The acquire round trip
also reads the cooldowns that hold the job's model (the shared one and the model's own);
one found is adopted by this process's ``Resilience`` before the job starts, so every
instance waits out a cooldown any of them was told of, with no extra round trip.

When a command fails (down, slow past ``REDIS_TIMEOUT_S``), ``FallbackState`` switches
this instance to its share of the cap -- the cap divided by the instances last seen alive,
at least 1 -- through a local ``CapacityLimiter``, until a probe finds Redis again. With
``REDIS_FAILURE=closed`` it refuses instead (503), so that the cap can never be exceeded.
A job keeps the kind of slot it got: a release goes to where the slot came from. Leases
taken before an outage expire by themselves (``REDIS_LEASE_TTL_S``), so the two modes
never count a call twice for long.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Final, final

import trio

from ..errors import ProxyError
from ..upstream.resilience import Resilience
from .connection import ClusterUnavailable
from .fallback import FallbackState, fallback_share
from .instances import InstanceRegistry
from .leases import LeaseSemaphore

__all__ = ["ClusterSlots"]

_REASONS: Final = {"rate_limited": "rate_limited", "overloaded": "overloaded"}


@final
class ClusterSlots:
    """``SharedSlots`` for the dispatcher (see the module docstring)."""

    def __init__(
        self,
        semaphore: LeaseSemaphore,
        fallback: FallbackState,
        registry: InstanceRegistry,
        resilience: Resilience,
        *,
        fail_closed: bool = False,
    ) -> None:
        self._semaphore = semaphore
        self._fallback = fallback
        self._registry = registry
        self._resilience = resilience
        self._fail_closed = fail_closed
        self._ids = itertools.count()
        self._local = trio.CapacityLimiter(self._fallback_share())
        self._local_holders: set[str] = set()

    def new_holder(self) -> str:
        return f"job{next(self._ids)}"

    async def acquire(self, holder: str, scope: str | None = None) -> None:
        if self._fallback.shared:
            try:
                grant = await self._semaphore.acquire(holder, scope=scope)
            except ClusterUnavailable as exc:
                self._fallback.report_failure(exc)
            else:
                view = grant.cooldown
                reason = _REASONS.get(view.reason or "")
                if view.remaining_s > 0 and reason is not None:
                    self._resilience.adopt_cooldown(scope, view.remaining_s, reason)  # type: ignore[arg-type]
                return
        if self._fail_closed:
            raise ProxyError(
                503,
                "The gateway's shared state (Redis) is unreachable, and REDIS_FAILURE=closed "
                "makes no upstream call without it; retry shortly.",
                code="shared_state_unavailable",
                headers={"Retry-After": "1"},
            )
        self._local.total_tokens = self._fallback_share()
        await self._local.acquire_on_behalf_of(holder)
        self._local_holders.add(holder)

    async def release(self, holder: str) -> None:
        if holder in self._local_holders:
            self._local_holders.discard(holder)
            self._local.release_on_behalf_of(holder)
            return
        with contextlib.suppress(ClusterUnavailable):  # the lease expires by itself
            await self._semaphore.release(holder)

    @property
    def capacity(self) -> int:
        return self._semaphore.capacity

    @capacity.setter
    def capacity(self, value: int) -> None:
        self._semaphore.capacity = value
        self._local.total_tokens = self._fallback_share()

    @property
    def held_locally(self) -> int:
        return len(self._local_holders)

    def _fallback_share(self) -> int:
        return fallback_share(self._semaphore.capacity, self._registry.last_seen_alive)
