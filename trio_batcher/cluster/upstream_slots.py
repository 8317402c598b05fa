"""The upstream cap shared by every instance: ``admission.SharedSlots`` on a Redis lease
semaphore, with the fallback for when Redis does not answer.

Theory of operation. While Redis answers, each job's slot comes from this instance's block
of the ``LeaseSemaphore`` named ``upstream``, whose capacity is the cap
(``BATCH_MAX_CONCURRENCY``), or the cluster's adaptive limit when that is on and lower
(``adaptive.py``; the sync script reads it). Granting is local; Redis sees the block's
renewals and rebalancing, not the requests. The cooldowns other instances were told of
reach this process's ``Resilience`` through ``cooldowns.CooldownWatch``.

When a command fails (down, slow past ``REDIS_TIMEOUT_S``), ``FallbackState`` switches
this instance to its share of the cap -- the cap in force divided by the instances last seen
alive, at least 1 -- until a probe finds Redis again. With ``REDIS_FAILURE=closed`` it
refuses instead (503), so that the cap can never be exceeded.

Counting across the two modes. The share bounds *every* upstream call this instance has
running, not only those admitted in fallback: the calls granted from its block before the
outage are still running, so they count against the share until they end. The other
instances' calls count too: while shared, one instance may hold a block larger than its
share, and it goes on granting from it until its lease would have ended (an instance
notices an outage only when it needs Redis), and those calls then run their course. So at
the moment of falling back (a synchronous listener of ``FallbackState``) this instance
notes the others' blocks (at most the cap less its own), and allows itself only
``cap - others`` (never more than its share) until those calls must have ended: a lease
TTL, plus the longest of its own recent calls (the same upstream, the same kind of
traffic), at least 0.5 s and at most ``settle_max_s``; ``settle_default_s`` when it has
made none. The count of
instances is frozen at the same moment (``InstanceRegistry.freeze``): a Redis that comes
back empty must not make an instance believe it is alone. The other way round, when Redis answers again, the calls admitted locally
are still running and Redis knows nothing of them: ``rejoin()`` (run by the owner on every
return to shared) hands them to the semaphore as leases and renews at once, which puts
them back into the global count. For ``rejoin_s`` after a return, the share still bounds
this instance: the other instances' probes find Redis within about a probe interval of
each other, and until they have rejoined too, their local calls are invisible in Redis.
So at every moment the cluster's calls are at most the cap, up to the rounding of each
share to at least 1. An instance that started during the outage has a share of 0 (it has
never counted the instances; ``fallback``): its jobs wait, woken by the return to shared,
and for its rejoin time they wait on, since the others' local calls are not in Redis yet.
A wait never spins: it sleeps until a release, a change of mode, or the next moment its
allowance can widen (the settling time, the end of the rejoin). A job keeps the kind of slot it got: a release goes to where the slot
came from.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections import deque
from typing import final

import trio

from ..errors import ProxyError
from ..upstream.resilience import Resilience
from .connection import ClusterUnavailable
from .fallback import FallbackState, Mode, fallback_share
from .instances import InstanceRegistry
from .leases import LeaseSemaphore

__all__ = ["ClusterSlots"]


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
        rejoin_s: float = 0.0,
        settle_default_s: float = 5.0,
        settle_max_s: float = 600.0,
    ) -> None:
        self._semaphore = semaphore
        self._fallback = fallback
        self._registry = registry
        self._resilience = resilience
        self._fail_closed = fail_closed
        self._rejoin_s = rejoin_s
        self._rejoin_until = float("-inf")
        self._ids = itertools.count()
        self._local_holders: set[str] = set()
        self._reserved = 0  # callers between the share check and their lease
        self._released = trio.Event()
        self._settle_default_s = settle_default_s
        self._settle_max_s = settle_max_s
        self._granted_at: dict[str, float] = {}
        self._holds: deque[float] = deque(maxlen=256)  # recent calls' durations
        self._others_at_outage = 0
        self._settled_at = float("-inf")  # when the others' calls of before must be over
        fallback.listeners.append(self._on_mode)

    def _on_mode(self, mode: Mode) -> None:
        self._wake()  # waiters look again: the other path may be theirs now
        if mode is Mode.FALLBACK:
            self._registry.freeze()
            self._others_at_outage = self._semaphore.others_seen
            # The others may go on granting from their blocks until their leases end (at
            # most a TTL from now: nobody can renew), and those calls then run their course.
            longest = max(self._holds, default=self._settle_default_s)
            settle = min(self._settle_max_s, max(0.5, longest) + self._semaphore.ttl_s)
            self._settled_at = trio.current_time() + settle
        else:
            # From this very moment, not from when ``rejoin`` runs: a job may ask first.
            self._rejoin_until = trio.current_time() + self._rejoin_s
            self._registry.thaw()

    def new_holder(self) -> str:
        return f"job{next(self._ids)}"

    async def acquire(self, holder: str, scope: str | None = None) -> None:
        while True:
            if self._fallback.shared:
                try:
                    await self._lease(holder, scope)
                except ClusterUnavailable as exc:
                    self._fallback.report_failure(exc)
                else:
                    return
            if self._fail_closed:
                raise ProxyError(
                    503,
                    "The gateway's shared state (Redis) is unreachable, and REDIS_FAILURE=closed "
                    "makes no upstream call without it; retry shortly.",
                    code="shared_state_unavailable",
                    headers={"Retry-After": "1"},
                )
            await self._within_share()
            if self._fallback.shared:
                continue  # Redis came back while this job waited: a lease, which it counts
            self._local_holders.add(holder)
            self._granted_at[holder] = trio.current_time()
            return

    async def _lease(self, holder: str, scope: str | None) -> None:
        rejoining = trio.current_time() < self._rejoin_until
        if rejoining:
            await self._within_share(until=self._rejoin_until)
            self._reserved += 1
        try:
            await self._semaphore.acquire(holder, scope=scope)
        finally:
            if rejoining:
                self._reserved -= 1
        self._granted_at[holder] = trio.current_time()

    async def _within_share(self, *, until: float | None = None) -> None:
        """Wait until this instance runs fewer calls than it may, leases included; or, in
        fallback (``until`` None), until Redis answers again (the caller takes a lease);
        or, while rejoining, until ``until``, when the share stops bounding it. A share of 0
        (no count seen yet) is waited out that way, never spun on."""
        while (
            self._semaphore.held_count + len(self._local_holders) + self._reserved
            >= self._allowance()
        ):
            now = trio.current_time()
            if until is None and self._fallback.shared:
                return
            if until is not None and now >= until:
                return
            # A release frees a place, a change of mode wakes it too; the settling time
            # passing may widen the allowance, and the end of the rejoin lifts it.
            deadlines = [t for t in (self._settled_at, until) if t is not None and t > now]
            with trio.move_on_at(min(deadlines, default=math.inf)):
                await self._released.wait()

    def _allowance(self) -> int:
        """The share, or less while the others' calls of before the outage may still run."""
        share = self._fallback_share()
        if trio.current_time() >= self._settled_at:
            return share
        return max(0, min(share, self._semaphore.seen_capacity - self._others_at_outage))

    def _wake(self) -> None:
        self._released.set()
        self._released = trio.Event()

    async def release(self, holder: str) -> None:
        self._wake()
        granted_at = self._granted_at.pop(holder, None)
        if granted_at is not None:
            self._holds.append(trio.current_time() - granted_at)
        if holder in self._local_holders:
            self._local_holders.discard(holder)
            return
        with contextlib.suppress(ClusterUnavailable):  # the lease expires by itself
            await self._semaphore.release(holder)

    async def rejoin(self) -> None:
        """Redis answers again: the calls admitted locally become leases (renewed now, so
        the cluster counts them), and the share keeps bounding this instance for
        ``rejoin_s`` while the others rejoin (see the module docstring).

        Raises:
          ClusterUnavailable: the renewal failed; the next one adds them back.
        """
        adopted, self._local_holders = self._local_holders, set()
        self._semaphore.adopt(adopted)
        await self._semaphore.renew()

    @property
    def held_locally(self) -> int:
        return len(self._local_holders)

    def _fallback_share(self) -> int:
        # The capacity in force at the last reply: the shared adaptive limit when it is lower.
        return fallback_share(self._semaphore.seen_capacity, self._registry.last_seen_alive)
