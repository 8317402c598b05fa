"""A distributed semaphore of leases: the upstream cap, exactly global across instances.

Theory of operation
-------------------
Redis keys (``{prefix}:sem:<name>:...``):

- ``holders``: a sorted set, member ``<instance_id>/<holder>``, score the lease's expiry in
  the Redis server's milliseconds (``TIME`` inside the script; no host clock is trusted).
- ``tickets`` / ``ticket_expiry``: the instances' waiting heads, scored by arrival and by
  expiry. They make the order across instances first come, first served (see Fairness).
- the channel ``released``: published to by any script that frees a slot or a ticket.

Each operation is one Lua script, atomic on the server: ``ACQUIRE`` (prune expired leases
and tickets, read the caller's cooldowns, the adaptive limit and the instances alive, take a
slot if one is free and the caller's ticket is among the first ``free`` ones, else queue the
ticket), ``RENEW`` (prune, then re-score
every lease this instance holds), ``RELEASE`` (drop the lease and the ticket). They are
idempotent per holder: acquiring a held id renews it, releasing an unknown id does nothing.

Invariant: a lease is granted only while ``ZCARD holders < capacity`` after pruning, so the
number of unexpired leases never exceeds the capacity in force for the acquiring caller:
the capacity it passed, or the shared adaptive limit (``cluster/adaptive.py``) when that is
lower and the semaphore obeys it. With one capacity for every instance, that is the global
cap. Either may change at run time: a raise wakes the heads, a cut lets holders finish.
A lease outlives its process by at most ``ttl_s``: a crashed instance's slots come back
within the TTL.

Within one instance: a FIFO of waiters; only the head talks to Redis. The head tries, and
when refused waits for a wake-up -- a message on ``released`` (``RedisLink.listen``, started
by ``run``), or a local release or capacity raise -- or for a back-off poll doubling from
``POLL_MIN_S`` to ``POLL_MAX_S``: the safety net for lost messages and for expiries, which
publish nothing until some script prunes them. When the head gets its slot, the next waiter
becomes head and tries at once (there may be more free slots).

Fairness across instances: every refused head leaves a ticket scored by its first arrival,
and a free slot goes to a head only if its ticket is among the first ``free`` tickets. So
the heads are served in arrival order, an instance that just released cannot take its own
slot back ahead of an older waiter elsewhere, and nobody starves; with several instances
busy, grants alternate between them (each instance has one ticket at a time). A ticket
expires ``ttl_s`` after its head last asked, so a dead instance's ticket cannot block the
queue for longer than that.

Cancellation and failures. A waiter cancelled while queued leaves no trace locally; if it
had asked Redis (so may hold a ticket or, when cancelled mid-command, a lease), the RELEASE
script runs in a shielded scope, bounded by the per-command deadline. An attempt that fails
with ``ClusterUnavailable`` is not followed by a release (it would only double the time to
fail): what it may have taken expires within ``ttl_s``, since nothing renews it. ``slot()`` releases
in ``finally`` the same way, so a cancelled request never leaks a slot; a release that
fails (Redis down) is covered by the lease expiry, since the renewer stops renewing a
holder before its release is sent. Redis errors surface as ``ClusterUnavailable`` from
``acquire`` and ``release``; the renewer and the listener (``run``) never end on them.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import final

import trio

from ._lease_scripts import ACQUIRE, RELEASE, RENEW
from .connection import ClusterUnavailable, Link
from .cooldowns import CooldownView, cooldown_keys

__all__ = ["Grant", "LeaseSemaphore", "LeaseStatistics"]

logger = logging.getLogger(__name__)

POLL_MIN_S = 0.02
POLL_MAX_S = 0.25


@final
@dataclass(frozen=True)
class Grant:
    """What an ``acquire`` learned in its round trip.

    ``in_flight`` counts the cluster's leases right after the grant (this one included);
    ``cooldown`` is the longest hold on the caller's scope (shared or the scope's own): the
    caller still holds its slot and waits that out before calling upstream.
    """

    in_flight: int
    cooldown: CooldownView


# What every ACQUIRE reply tells, granted or not: the capacity in force, the shared adaptive
# limit's epoch (0 when there is none) and the instances alive (0 without a registry).
ReplyObserver = Callable[[int, int, int], None]


@final
@dataclass(frozen=True)
class LeaseStatistics:
    """``held``/``waiting``: this instance's. ``in_flight_seen``: the cluster's leases at the
    last script reply (-1 before any). ``leases_lost``: leases the renewer found expired
    and added back. ``renew_failures``: renewals Redis did not answer."""

    held: int
    waiting: int
    in_flight_seen: int
    capacity: int
    leases_lost: int
    renew_failures: int


@final
class _Waiter:
    __slots__ = ("turn",)

    def __init__(self) -> None:
        self.turn = trio.Event()


@final
class LeaseSemaphore:
    """A semaphore of ``capacity`` slots shared by every instance that names it the same.

    Args:
      link: the cluster's Redis link.
      name: the semaphore's name in Redis (e.g. ``"upstream"``).
      capacity: slots across all instances; assignable at run time.
      ttl_s: how long a lease outlives its last renewal (and a crashed process).
      instance_id: unique per process; it prefixes every holder id in Redis.
      adaptive: obey the shared adaptive limit stored at ``limit_key`` when it is lower.
      instances_key: the instance registry's key, whose live count every reply carries.
    """

    def __init__(
        self,
        link: Link,
        name: str,
        capacity: int,
        *,
        ttl_s: float,
        instance_id: str,
        adaptive: bool = False,
        instances_key: str | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._link = link
        self._instance = instance_id
        self.limit_key = link.key("sem", name, "limit")
        self.channel = link.key("sem", name, "released")
        self._keys = [link.key("sem", name, part) for part in ("holders", "tickets", "expiry")]
        # Without a registry, ZCOUNT of a key that never exists: the reply says 0 alive.
        self._scan_keys = [*self._keys, self.limit_key, instances_key or self.limit_key + "!"]
        self._channel = self.channel
        self._adaptive = "1" if adaptive else "0"
        self._capacity = capacity
        # The capacity in force at the last reply (the adaptive limit may be lower): what the
        # fallback divides when Redis goes away.
        self.seen_capacity = capacity
        self.on_reply: ReplyObserver | None = None
        # The other instances' leases at the last reply (see ``_saw``).
        self.others_seen = 0
        self._ttl_ms = max(1, round(ttl_s * 1000))
        self.ttl_s = ttl_s
        # A waiting head re-asks (refreshing its ticket) well within the ticket's TTL.
        self._poll_max_s = min(POLL_MAX_S, ttl_s / 4)
        self._held: set[str] = set()
        # Bounded by the callers: one entry per concurrent acquire, which the admission
        # gate bounds (MAX_INFLIGHT).
        self._queue: deque[_Waiter] = deque()
        self._wakeup = trio.Event()
        self._in_flight_seen = -1
        self._leases_lost = 0
        self._renew_failures = 0

    @property
    def capacity(self) -> int:
        return self._capacity

    @capacity.setter
    def capacity(self, value: int) -> None:
        if value < 1:
            raise ValueError("capacity must be at least 1")
        raised = value > self._capacity
        self._capacity = value
        if raised:
            self._wake()

    @property
    def held_count(self) -> int:
        """Leases this instance holds (and renews) now."""
        return len(self._held)

    def adopt(self, holders: set[str]) -> None:
        """Count ``holders`` as leases of this instance from now on: calls that started
        without one (while Redis was down) and still run. Redis learns of them at the next
        ``renew``, which adds missing leases back."""
        self._held |= holders

    def statistics(self) -> LeaseStatistics:
        return LeaseStatistics(
            held=len(self._held),
            waiting=len(self._queue),
            in_flight_seen=self._in_flight_seen,
            capacity=self._capacity,
            leases_lost=self._leases_lost,
            renew_failures=self._renew_failures,
        )

    def _saw(self, in_flight: int, mine: int) -> None:
        """A reply counted ``in_flight`` leases, ``mine`` of them this instance's: the rest
        are the other instances' calls, which the fallback must leave room for."""
        self._in_flight_seen = in_flight
        self.others_seen = max(0, in_flight - mine)

    def _member(self, holder: str) -> str:
        return f"{self._instance}/{holder}"

    def _wake(self) -> None:
        self._wakeup.set()
        self._wakeup = trio.Event()

    async def acquire(self, holder: str, *, scope: str | None = None) -> Grant:
        """Wait for a slot (local FIFO, then Redis), and lease it to ``holder``.

        ``scope`` names the cooldown to read with it (a model; ``None`` reads only the
        shared one). Acquiring an id this instance already holds renews its lease.

        Raises:
          ClusterUnavailable: Redis failed the head's attempt (fast: one deadline at most);
            nothing is held locally, and whatever the failed command may have taken in Redis
            expires within ``ttl_s``.
        """
        waiter = _Waiter()
        self._queue.append(waiter)
        asked = False
        try:
            if self._queue[0] is not waiter:
                await waiter.turn.wait()
            poll = min(POLL_MIN_S, self._poll_max_s)
            while True:
                wakeup = self._wakeup  # set by a message that arrives during the attempt too
                asked = True
                reply = await self._link.run(
                    ACQUIRE,
                    [*self._scan_keys, *cooldown_keys(self._link, scope)],
                    [
                        self._member(holder),
                        self._capacity,
                        self._ttl_ms,
                        self._channel,
                        self._adaptive,
                    ],
                )
                granted, in_flight, cooldown_ms, reason, capacity, epoch, alive = reply
                self.seen_capacity = int(capacity)
                if self.on_reply is not None:
                    self.on_reply(int(capacity), int(epoch), int(alive))
                if int(granted) == 1:
                    self._held.add(holder)
                self._saw(int(in_flight), len(self._held))
                if int(granted) == 1:
                    return Grant(
                        int(in_flight), CooldownView.from_reply(int(cooldown_ms), str(reason))
                    )
                with trio.move_on_after(poll) as timer:
                    await wakeup.wait()
                poll = (
                    min(poll * 2, self._poll_max_s)
                    if timer.cancelled_caught
                    else min(POLL_MIN_S, self._poll_max_s)
                )
        except ClusterUnavailable:
            # Redis is in trouble: a release would only double the time to fail. Whatever the
            # failed command took (a ticket, a lease) expires within ttl_s, never renewed.
            raise
        except BaseException:
            # Cancelled (or a bug) with Redis presumably fine: undo at once what the last
            # attempt may have done, so a client that went away frees its place now.
            if asked and holder not in self._held:
                # A ticket expires after ttl_s, a lease too: a failed release leaks nothing.
                with trio.CancelScope(shield=True), contextlib.suppress(ClusterUnavailable):
                    await self._send_release(holder)
            raise
        finally:
            self._queue.remove(waiter)
            if self._queue:
                self._queue[0].turn.set()

    async def release(self, holder: str) -> None:
        """Give ``holder``'s slot back; a no-op for an id Redis does not hold.

        The renewer stops renewing it first, so if the release fails the lease still ends
        within ``ttl_s``. Callers releasing in a ``finally`` should shield it (``slot``
        does).

        Raises:
          ClusterUnavailable: the release may not have happened; the lease expires.
        """
        self._held.discard(holder)
        self._wake()  # this instance's head may take the slot (if it is its turn)
        await self._send_release(holder)

    async def _send_release(self, holder: str) -> None:
        await self._link.run(RELEASE, self._keys, [self._member(holder), self._channel])

    @asynccontextmanager
    async def slot(self, holder: str, *, scope: str | None = None) -> AsyncIterator[Grant]:
        """``acquire``, then ``release`` in a shielded ``finally``: nothing leaks on
        cancellation. A failed release is logged and left to the lease expiry, so it never
        hides the body's own outcome."""
        grant = await self.acquire(holder, scope=scope)
        try:
            yield grant
        finally:
            with trio.CancelScope(shield=True):
                try:
                    await self.release(holder)
                except ClusterUnavailable as exc:
                    logger.debug("release of %s left to its lease expiry: %s", holder, exc)

    async def renew(self) -> None:
        """Renew every lease this instance holds, in one script call (none when idle).

        Raises:
          ClusterUnavailable
        """
        if not self._held:
            return
        holders = list(self._held)
        members = [self._member(holder) for holder in holders]
        in_flight, *added = await self._link.run(
            RENEW, self._keys, [self._ttl_ms, self._channel, *members]
        )
        self._saw(int(in_flight), len(members))
        if not added:
            return
        by_member = dict(zip(members, holders, strict=True))
        # Added back: either its lease expired while its call still runs (counted again, as
        # it should be), or it was released meanwhile and the release reached Redis first
        # (a command may travel on another connection): that one is released again, or it
        # would hold a slot nobody uses for a whole TTL.
        stale = [by_member[m] for m in added if by_member[m] not in self._held]
        lost = len(added) - len(stale)
        for holder in stale:
            await self._send_release(holder)
        if lost:
            self._leases_lost += lost
            logger.warning("%d lease(s) had expired before renewal; counted again", lost)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The background half, for the owner's nursery: the ``released`` listener and the
        renewer (every ``ttl_s / 3``). Runs until cancelled; Redis failures never end it."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self._link.listen, self._channel, self._wake)
            nursery.start_soon(self._renew_forever)
            task_status.started()

    async def _renew_forever(self) -> None:
        period = self.ttl_s / 3
        next_at = trio.current_time() + period
        while True:
            await trio.sleep_until(next_at)
            next_at += period
            try:
                await self.renew()
            except ClusterUnavailable as exc:
                self._renew_failures += 1
                logger.debug("lease renewal failed: %s", exc)
            # If a renewal overran (a slow Redis), renew next from now, not in a burst.
            next_at = max(next_at, trio.current_time())
