"""A semaphore whose capacity is leased in blocks: the upstream cap, exact across instances,
with no Redis round trip per request.

Why blocks. Leasing one slot per request cost three scripts and some thirty commands per
request, which made two instances spend about twice the CPU per request of one. Google's
Doorman showed the way out: instances lease *capacity* from a coordinator and refresh it.
Here each instance holds a block of the cap, grants slots from it locally (a counter and a
FIFO), and talks to Redis only to renew the block, to grow it, or to give part of it back:
a few commands per second per instance, whatever the traffic.

Theory of operation
-------------------
Redis keys (``{prefix}:sem:<name>:...``), one field per instance:

- ``blocks``: the slots the instance holds. The invariant: the blocks add up to at most the
  capacity in force. A block only grows from what no instance holds (``SYNC`` computes that
  atomically); it only shrinks by its holder's own decision; so no slot is ever held twice.
- ``wants`` (slots in use plus waiters) and ``used``: what the targets are computed from,
  and what ``/metrics`` reports as the cluster's calls.
- ``expiry``: a sorted set, the lease's end in the Redis server's milliseconds. A lease
  outlives its last renewal by ``ttl_s``; the next script after that prunes it, so a crashed
  instance's block comes back within the TTL.
- the channel ``released``: published to (with the publisher's id, which it ignores
  itself) when looking again can change something.

Every exchange is one script, ``SYNC`` (``_lease_scripts.py``): the instance sends what it
*keeps* of its block (never fewer slots than it uses), its use and its want; the script
prunes, computes every instance's fair *target* and grows the caller's block toward its
target from the free capacity. Targets: when all the wants fit, each gets its want plus an
even part of the rest (headroom, so a burst needs no round trip); when they do not,
max-min fair shares (equal parts, what one instance does not want shared by the others),
with a remainder going by turns, every second to the next instance, so nobody starves.
Max-min rather than in proportion to the queues: busy instances then keep steady, equal
blocks however their queues move, instead of passing a slot back and forth whenever the
queues' ratio crosses a rounding boundary. Each instance's own queue is FIFO.

Giving back is the holder's decision, so it is safe against the replies in flight: the
instance lowers its block to ``keep`` *before* sending, grants nothing beyond it while the
reply travels, and the script never sets a block below ``keep``. An instance gives back:

- at every sync, down to its target (the last one it was told), or to its use if that is
  higher: a block above the target is other instances' due;
- everything it does not use when the channel spoke since its last sync, or another
  instance was short of its target at the last reply: the same script grows the block
  back to the target at once if nobody needs the slots;
- so it syncs after a release that leaves a slot above its target unused, or leaves idle
  slots while another instance was short at the last reply or the channel spoke. (Not
  merely because another wants more than it holds: with the cap binding, every busy
  instance always does, and syncing at each release would be a round trip per request.)

It grants locally only up to its target, even when its block is larger: the excess is
given back as its calls end, instead of going to its own next waiter (which would starve
the other instances).

When it syncs: every ``ttl_s / 3`` while it holds anything (the renewal; one that finds
nothing asked of the instance since the last gives the whole block back and leaves the
split, so an idle instance costs nothing and holds nothing); when its head
waiter could gain from it (never synced, the block below the target, free capacity seen, or
news on the channel), the head syncing itself, and polling back off from ``POLL_MIN_S`` to
``POLL_MAX_S`` while it stays short; after the releases above; after a message; when the
capacity changes. Background syncs are at least ``MIN_GAP_S`` apart. At a steady load with
the cap binding, each instance holds its target and nobody syncs but the renewals.

Within an instance: a FIFO of waiters, served from the block as slots free, by hand-off (a
release grants the next waiter directly). Only the head talks to Redis.

Failures. A sync that fails raises ``ClusterUnavailable`` to the head that sent it; one
that fails in the background wakes the head, which tries once itself and raises, so the
caller (``ClusterSlots``) falls back within one command deadline. A block is used only while it is
certainly leased: until ``ttl_s`` after the last successful sync was *sent* (the lease in
Redis ends no earlier). After that the instance grants nothing from it; its running calls
still count (``held_count``), against the fallback share. A lease that expired while its
calls still ran is counted again at the next sync (``leases_lost``): those calls are real.
Nothing is released by message, so there is nothing a renewal could resurrect: a slot freed
locally is simply part of the next ``keep``.

Cancellation: a waiter cancelled while queued leaves no trace (a slot handed to it in the
same moment goes back); a cancelled sync is assumed executed, and the next one corrects the
block either way.
"""

from __future__ import annotations

import functools
import logging
import math
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final, final

import trio

from ._lease_scripts import SYNC
from .connection import ClusterUnavailable, Link

__all__ = ["LeaseSemaphore", "LeaseStatistics"]

logger = logging.getLogger(__name__)

POLL_MIN_S: Final = 0.02
POLL_MAX_S: Final = 0.25
MIN_GAP_S: Final = 0.01

# What every SYNC reply tells: the capacity in force, the shared adaptive limit's epoch (0
# when there is none) and the instances alive (0 without a registry).
ReplyObserver = Callable[[int, int, int], None]


@final
@dataclass(frozen=True)
class LeaseStatistics:
    """``held``/``waiting``: this instance's slots in use and waiters. ``block``/``target``:
    the slots it holds and its fair part, at the last reply. ``in_flight_seen``: the
    cluster's calls in use as the instances last reported them (-1 before any reply).
    ``leases_lost``: times its lease had expired while it still held slots. ``syncs`` and
    ``renew_failures``: scripts sent, and those Redis did not answer."""

    held: int
    waiting: int
    block: int
    target: int
    in_flight_seen: int
    capacity: int
    leases_lost: int
    syncs: int
    renew_failures: int


@final
class _Waiter:
    __slots__ = ("granted", "holder", "turn")

    def __init__(self, holder: str) -> None:
        self.holder = holder
        self.granted = False
        self.turn = trio.Event()  # set when granted, or when there is news for the head


@final
class LeaseSemaphore:
    """A semaphore of ``capacity`` slots shared by every instance that names it the same.

    Args:
      link: the cluster's Redis link.
      name: the semaphore's name in Redis (e.g. ``"upstream"``).
      capacity: slots across all instances; assignable at run time.
      ttl_s: how long a lease outlives its last renewal (and a crashed process).
      instance_id: unique per process; it names this instance's fields in Redis.
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
        # Where the shared adaptive limit announces a move (``adaptive``): always a sync.
        self.limit_channel = link.key("sem", name, "limit-moved")
        # Without a registry, ZCOUNT of a key that never exists: the reply says 0 alive.
        self._keys = [
            *(link.key("sem", name, part) for part in ("blocks", "wants", "used", "expiry")),
            self.limit_key,
            instances_key or self.limit_key + "!",
        ]
        self._adaptive = "1" if adaptive else "0"
        self._capacity = capacity
        self._seen_capacity = capacity
        self.on_reply: ReplyObserver | None = None
        self._others_at_reply = 0
        self._ttl_ms = max(1, round(ttl_s * 1000))
        self.ttl_s = ttl_s
        self._renew_every_s = ttl_s / 3
        self._poll_max_s = min(POLL_MAX_S, ttl_s / 4)
        self._held: set[str] = set()
        # Bounded by the callers: one entry per concurrent acquire, which the admission
        # gate bounds (MAX_INFLIGHT).
        self._queue: deque[_Waiter] = deque()
        self._block = 0
        self._target = 0
        self._free_seen = 0
        self._short_seen = 0  # other instances short of their target, at the last reply
        self._valid_until = -math.inf
        self._registered = False  # Redis holds a block of ours, as far as we know
        self._synced = False
        self._news = False  # the channel spoke since the last sync
        self._failed: ClusterUnavailable | None = None
        self._sync_lock = trio.Lock()
        self._asked = False  # an acquire came since the last sync
        self._unsure = False
        self._sync_wanted = trio.Event()
        self._last_sync_at = -math.inf
        self._in_flight_seen = -1
        self._leases_lost = 0
        self._syncs = 0
        self._renew_failures = 0

    # -- the capacity ----------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        return self._capacity

    @capacity.setter
    def capacity(self, value: int) -> None:
        if value < 1:
            raise ValueError("capacity must be at least 1")
        self._capacity = value
        self._target = min(self._target, value)  # a cut binds here at once
        self._news = True
        self._want_sync()
        self._poke_head()

    @property
    def seen_capacity(self) -> int:
        """The capacity in force at the last reply (the adaptive limit may be lower): what
        the fallback divides when Redis goes away."""
        return self._seen_capacity

    @seen_capacity.setter
    def seen_capacity(self, value: int) -> None:
        # The shared adaptive limit learned of a new limit: the targets move with it.
        if value != self._seen_capacity:
            self._seen_capacity = value
            self._target = min(self._target, value)  # a cut binds here at once
            self._news = True
            self._want_sync()

    @property
    def others_seen(self) -> int:
        """An upper bound on the other instances' calls, for the fallback to leave room
        for: their blocks add up to at most the capacity less this instance's block (and
        were as many at the last reply, should blocks be over-committed after a loss)."""
        return max(self._others_at_reply, self._seen_capacity - self._block)

    @property
    def held_count(self) -> int:
        """Slots this instance uses now (each counted in its block, or adopted)."""
        return len(self._held)

    def adopt(self, holders: Iterable[str]) -> None:
        """Count ``holders`` as this instance's from now on: calls that started without a
        slot (while Redis was down) and still run. The next sync keeps a block of at least
        this many (``renew``), which puts them back into the cluster's count."""
        self._held.update(holders)

    def statistics(self) -> LeaseStatistics:
        return LeaseStatistics(
            held=len(self._held),
            waiting=len(self._queue),
            block=self._block,
            target=self._target,
            in_flight_seen=self._in_flight_seen,
            capacity=self._capacity,
            leases_lost=self._leases_lost,
            syncs=self._syncs,
            renew_failures=self._renew_failures,
        )

    # -- slots -----------------------------------------------------------------------------

    def _usable(self) -> int:
        """The block, up to this instance's target (a block above it is the others' due),
        while it is certainly leased; nothing once it may have expired."""
        if trio.current_time() >= self._valid_until:
            return 0
        return min(self._block, self._target)

    def _pump(self) -> None:
        """Hand free slots of the block to the waiters, in order; tell the new head."""
        usable = self._usable()
        while self._queue and len(self._held) < usable:
            waiter = self._queue.popleft()
            waiter.granted = True
            self._held.add(waiter.holder)
            waiter.turn.set()
        self._poke_head()

    def _poke_head(self) -> None:
        if self._queue:
            self._queue[0].turn.set()

    def _head_should_sync(self) -> bool:
        return (
            not self._synced
            or self._failed is not None
            or self._news
            or self._free_seen > 0
            or self._block < self._target
            or trio.current_time() >= self._valid_until
        )

    async def acquire(self, holder: str, *, scope: str | None = None) -> None:
        """Wait for a slot (the local FIFO, served from this instance's block) and give it
        to ``holder``. Acquiring an id this instance already holds takes nothing more.
        ``scope`` is accepted for the callers' symmetry; cooldowns are read elsewhere
        (``cooldowns.CooldownWatch``).

        Raises:
          ClusterUnavailable: this instance's block is spent or no longer certainly
            leased, and Redis failed the sync that would renew or grow it (fast: one
            deadline at most). Nothing is held.
        """
        del scope
        self._asked = True
        if holder in self._held:
            await trio.lowlevel.checkpoint()
            return
        waiter = _Waiter(holder)
        self._queue.append(waiter)
        self._pump()
        poll = min(POLL_MIN_S, self._poll_max_s)
        try:
            while not waiter.granted:
                timeout = math.inf
                if self._queue[0] is waiter and self._head_should_sync():
                    await self._sync_now()
                    self._pump()
                    if waiter.granted:
                        break
                    timeout, poll = poll, min(poll * 2, self._poll_max_s)
                waiter.turn = trio.Event()
                with trio.move_on_after(timeout):
                    await waiter.turn.wait()
            await trio.lowlevel.checkpoint_if_cancelled()
        except BaseException:
            if waiter.granted:  # handed a slot in the same moment: it goes on
                self._held.discard(holder)
            else:
                self._queue.remove(waiter)
            self._pump()
            raise

    async def release(self, holder: str) -> None:
        """Give ``holder``'s slot back to the block: the next waiter gets it at once; a
        no-op for an id this instance does not hold. No Redis round trip; the block
        itself goes back at the next sync if others are owed it."""
        if holder in self._held:  # before the checkpoint: a cancelled release still frees
            self._held.discard(holder)
            self._pump()
            used = len(self._held)
            if self._block > max(used, min(self._block, self._target)):
                self._want_sync()  # above its target with a slot to spare: give it back
            elif (self._news or self._short_seen > 0) and self._block > used + len(self._queue):
                self._want_sync()  # someone may want it: offer what is idle
        await trio.lowlevel.checkpoint()

    @asynccontextmanager
    async def slot(self, holder: str) -> AsyncIterator[None]:
        """``acquire``, then ``release`` in a shielded ``finally``: nothing leaks on
        cancellation."""
        await self.acquire(holder)
        try:
            yield
        finally:
            with trio.CancelScope(shield=True):
                await self.release(holder)

    # -- the exchange with Redis -----------------------------------------------------------

    async def renew(self) -> None:
        """Sync now: renew the lease, and grow or give back the block.

        Raises:
          ClusterUnavailable
        """
        await self._sync_now()

    async def _sync_now(self, *, renewal: bool = False) -> None:
        async with self._sync_lock:
            # Until a reply, Redis may hold a block this instance does not know of (a sync
            # that was cancelled or timed out may have run): the renewer syncs again even
            # with nothing held, to set it right rather than leave it to the TTL.
            try:
                await self._sync(renewal)
            except ClusterUnavailable as exc:
                self._renew_failures += 1
                self._failed = exc
                self._unsure = True
                raise
            except BaseException:
                self._unsure = True
                self._want_sync()
                raise
            self._unsure = False

    async def _sync(self, renewal: bool) -> None:
        used = len(self._held)
        want = used + len(self._queue)
        # Nothing asked of it since the last renewal: the whole block goes back.
        idle = renewal and want == 0 and not self._asked
        self._asked = False
        if idle:
            keep = 0
        elif self._news or self._short_seen > 0 or trio.current_time() >= self._valid_until:
            keep = used  # offer everything idle; the script grows it back if nobody needs it
        else:
            keep = max(used, min(self._block, self._target))
        # Given back from now on, whatever the reply: the script never sets less than keep.
        self._block = min(self._block, keep)
        expected = self._registered
        sent_at = trio.current_time()
        self._last_sync_at = sent_at
        self._syncs += 1
        reply = await self._link.run(
            SYNC,
            self._keys,
            [
                self._instance,
                self._capacity,
                self._ttl_ms,
                self.channel,
                self._adaptive,
                keep,
                used,
                want,
                "1" if expected else "0",
                "1" if idle else "0",
            ],
        )
        block, target, capacity, epoch, alive, total, others, lost, in_use, short, wanting = map(
            int, reply
        )
        # A cut of the capacity while the reply travelled binds at once all the same.
        self._block, self._target = block, min(target, self._capacity)
        self._short_seen = short
        del wanting  # (the script's own business: whom to tell)
        self._free_seen = capacity - total
        self._others_at_reply = others
        self._in_flight_seen = in_use
        self._seen_capacity = capacity
        self._valid_until = sent_at + self.ttl_s
        # After an idle return Redis holds nothing of it, and its next waiter asks anew.
        self._registered = self._synced = not idle
        self._news = False
        self._failed = None
        if lost:
            self._leases_lost += 1
            logger.warning(
                "this instance's capacity lease had expired while %d call(s) ran; counted again",
                used,
            )
        if self.on_reply is not None:
            self.on_reply(capacity, epoch, alive)
        self._pump()
        if block > max(len(self._held), target):
            self._want_sync()  # more than its due, with slots to spare: give them back

    def _want_sync(self) -> None:
        self._sync_wanted.set()

    def _on_message(self) -> None:
        """The channel spoke: an instance is short, or gave back, or one expired."""
        self._news = True
        if self._block > len(self._held) + len(self._queue):
            self._want_sync()  # someone may be short: offer what is idle
        self._poke_head()

    def _on_limit_moved(self) -> None:
        """The cluster's adaptive limit moved: sync now, busy or not, so a cut binds here
        within a round trip (and a raise lets a waiting head grow)."""
        self._news = True
        self._want_sync()
        self._poke_head()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The background half, for the owner's nursery: the channels' listeners and the
        renewer. Runs until cancelled; Redis failures never end it."""
        async with trio.open_nursery() as nursery:
            await nursery.start(
                functools.partial(
                    self._link.listen, self.channel, self._on_message, ignore=self._instance
                )
            )
            await nursery.start(self._link.listen, self.limit_channel, self._on_limit_moved)
            nursery.start_soon(self._maintain)
            task_status.started()

    async def _maintain(self) -> None:
        self._last_sync_at = max(self._last_sync_at, trio.current_time())
        while True:
            with trio.move_on_at(self._last_sync_at + self._renew_every_s) as timer:
                await self._sync_wanted.wait()
            self._sync_wanted = trio.Event()
            await trio.sleep_until(self._last_sync_at + MIN_GAP_S)
            if not (self._block or self._held or self._queue or self._unsure):
                self._last_sync_at = trio.current_time()  # nothing to renew
                continue
            try:
                await self._sync_now(renewal=timer.cancelled_caught)
            except ClusterUnavailable as exc:
                # The next renewal keeps the schedule (from when this one was sent); a
                # waiting head tries at once, and raises the failure to its caller.
                logger.debug("capacity lease sync failed: %s", exc)
                self._poke_head()
