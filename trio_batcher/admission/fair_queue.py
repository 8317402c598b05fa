"""The gate's queue: one FIFO per tenant, served across tenants in weighted fair order.

Pure data structure, no I/O and no trio: :class:`~trio_batcher.admission.gate.AdmissionGate`
parks waiters in it and asks it, whenever a slot comes free, whose turn it is. The algorithm
(self-clocked fair queuing) and the guarantees it gives are in the gate's theory-of-operation
docstring; this module holds the mechanics:

* A :class:`Tenant` keeps its waiters in insertion-ordered dicts, one per lane (FIFO, O(1)
  removal of a cancelled waiter), its slot count ``active`` and its counters.
* Lanes (``lanes``): each lane -- interactive, deferrable -- has its own heap and virtual
  time, so tenants' fair order holds within each lane; a hand-off asks a
  :class:`~.lanes.LaneChooser` which lane it serves when both have eligible waiters. A
  tenant's share (``max_inflight``) counts its slots of both lanes: at its share it leaves
  both heaps. With every waiter interactive (the default) the deferrable heap stays empty
  and the queue behaves exactly as one fair queue.
* A backlogged tenant that may take a slot (not at its own ``max_inflight`` share) has one
  live entry ``(tag, seq, tenant)`` in the binary heap of each lane it has waiters in:
  ``tag`` is the virtual time at which its head waiter's admission finishes, ``seq`` the
  head's arrival number (the tie-break). ``pop`` takes the smallest of the chosen lane, so a
  hand-off is O(log n) in the tenants with waiters.
* Entries are deleted lazily: a tenant whose head leaves, whose queue empties or who reaches
  its share drops its reference to its entry, and ``pop`` skips entries nobody references.
  The heap is rebuilt once dead entries outnumber live ones, which keeps it within twice the
  number of tenants plus a constant, whatever the churn of cancellations.
* When the gate's queue is full, :meth:`FairQueue.longest` picks whom to shed (longest queue
  drop, explained in the gate's docstring): a scan of the tenants, O(n) in the names seen, on
  the full-queue path only. A queue's weighted length ``waiting / weight`` is compared as the
  integer ``waiting * cost``, so equal shares tie exactly, as in the fair order.

Virtual time is an integer: an admission of a tenant of weight ``w`` costs
``round(VIRTUAL_UNIT / w)`` ticks, and ``VIRTUAL_UNIT = 720720 * 2**32`` (720720 is the least
common multiple of 1..16), so for weights such as 1, 3, 0.5 or 1.5 the costs are exact and two
tenants with equal shares tie exactly instead of drifting apart by rounding.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Generic, Literal, TypeAlias, TypeVar, final

from .lanes import DEFAULT_DEFERRABLE_SHARE, LaneChooser

__all__ = [
    "DEFAULT_TENANT",
    "SHED_REASONS",
    "VIRTUAL_UNIT",
    "FairQueue",
    "ShedReason",
    "Tenant",
    "TenantShare",
]

ShedReason: TypeAlias = Literal["queue_full", "tenant_queue_full", "queue_timeout", "shutdown"]
SHED_REASONS: tuple[ShedReason, ...] = (
    "queue_full",
    "tenant_queue_full",
    "queue_timeout",
    "shutdown",
)

VIRTUAL_UNIT = 720720 << 32
"""Virtual ticks one admission of a weight-1 tenant costs."""

T = TypeVar("T")


@final
@dataclass(frozen=True, slots=True)
class TenantShare:
    """Who is asking, and what share of the gate they may have.

    Tenants are told apart by ``name``; the gate keeps each name's state (queue, counters)
    for its lifetime, so the caller bounds the names (the tenants it has configured, plus one
    bucket for everyone else). The share a tenant's latest acquirer brought is in force.

    Attributes:
      name: the tenant's name, as it appears in ``statistics().by_tenant``.
      weight: relative share of the slots while tenants queue (finite, > 0): with weights
        3 and 1, a backlogged tenant is admitted three times for each admission of the other.
      max_inflight: slots this tenant may hold at once (>= 1), or ``None`` for no own limit.
        At its limit a tenant's waiters wait and freed slots go to other tenants.
      max_queue: waiters this tenant may have at once (>= 0), or ``None`` for no own limit.
        Beyond it the tenant's acquirer is shed with ``"tenant_queue_full"``.
    """

    name: str
    weight: float = 1.0
    max_inflight: int | None = None
    max_queue: int | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.weight) and self.weight > 0):
            raise ValueError(f"tenant {self.name!r}: weight must be finite and > 0")
        if self.max_inflight is not None and self.max_inflight < 1:
            raise ValueError(f"tenant {self.name!r}: max_inflight must be >= 1 or None")
        if self.max_queue is not None and self.max_queue < 0:
            raise ValueError(f"tenant {self.name!r}: max_queue must be >= 0 or None")


DEFAULT_TENANT = TenantShare("(default)")
"""The tenant of every acquirer that names none: with it alone the gate is one FIFO queue."""


def virtual_cost(weight: float) -> int:
    """Ticks of virtual time one admission costs a tenant of ``weight`` (at least one)."""
    return max(1, round(Fraction(VIRTUAL_UNIT) / Fraction(weight)))


@final
class Tenant(Generic[T]):
    """One tenant's waiters and counters. Owned by a :class:`FairQueue`; read by the gate.

    ``active`` is maintained by whoever grants and releases slots (the gate on its fast path,
    :meth:`FairQueue.pop` and :meth:`FairQueue.release` on hand-offs). ``queues`` holds one
    FIFO per lane (index 0 interactive, 1 deferrable: ``lanes``); the tenant's share, slots
    and counters are one, whatever lane its requests are in.
    """

    __slots__ = (
        "_entries",
        "active",
        "admitted",
        "cost",
        "limit",
        "pushed_out",
        "queues",
        "share",
        "shed",
    )

    def __init__(self, share: TenantShare) -> None:
        self.share = share
        self.cost = virtual_cost(share.weight)
        self.limit = share.max_inflight  # copied off the share: read on every fast-path grant
        # FIFO per lane: waiter -> arrival number.
        self.queues: tuple[dict[T, int], dict[T, int]] = ({}, {})
        self.active = 0
        self.admitted = 0
        self.shed: dict[str, int] = dict.fromkeys(SHED_REASONS, 0)
        self.pushed_out = 0  # of shed["queue_full"]: waiters pushed out of a full queue
        # Live heap entry per lane, if eligible there.
        self._entries: list[tuple[int, int, Tenant[T]] | None] = [None, None]

    @property
    def name(self) -> str:
        return self.share.name

    @property
    def waiting(self) -> int:
        """Its waiters, both lanes together."""
        queues = self.queues
        return len(queues[0]) + len(queues[1])

    @property
    def capped(self) -> bool:
        """At its own ``max_inflight`` share: not eligible for a slot."""
        return self.limit is not None and self.active >= self.limit

    @property
    def queue_full(self) -> bool:
        """Its own ``max_queue`` share of waiters (both lanes) is reached."""
        limit = self.share.max_queue
        return limit is not None and self.waiting >= limit


def _lane(deferrable: bool) -> int:
    return 1 if deferrable else 0


@final
class FairQueue(Generic[T]):
    """Per-tenant FIFO queues of ``T`` (waiters), popped in weighted fair order per lane.

    Only tenants with waiters that are not at their ``max_inflight`` share are eligible;
    :meth:`pop` never returns a waiter of any other tenant. Each lane (interactive,
    deferrable: ``lanes``) has its own fair order (heap and virtual time); which lane a
    hand-off serves when both have eligible waiters is the :class:`~.lanes.LaneChooser`'s
    call. With no deferrable waiter it is one fair queue, as before lanes.

    Args:
      deferrable_share: the deferrable lane's least share of contended hand-offs.
    """

    def __init__(self, deferrable_share: float = DEFAULT_DEFERRABLE_SHARE) -> None:
        self._tenants: dict[str, Tenant[T]] = {}
        self._heaps: tuple[list[tuple[int, int, Tenant[T]]], list[tuple[int, int, Tenant[T]]]] = (
            [],
            [],
        )
        self._live = [0, 0]  # entries of each lane's heap some tenant references
        self._vtime = [0, 0]  # tag of the latest admission from each lane
        self._seq = 0  # arrival numbers, for ties
        self._chooser = LaneChooser(deferrable_share)
        self.waiting = 0
        self.lane_waiting = [0, 0]  # waiting, by lane (0 interactive, 1 deferrable)

    @property
    def tenants(self) -> Mapping[str, Tenant[T]]:
        return self._tenants

    @property
    def virtual_time(self) -> int:
        """The interactive lane's (the only one while nothing is deferrable)."""
        return self._vtime[0]

    def tenant(self, share: TenantShare) -> Tenant[T]:
        """The state of ``share.name``, created on first sight, with ``share`` in force.

        Returns:
          The tenant. If the new share makes it eligible again (a raised ``max_inflight``)
          the caller should hand it any free slot: see :meth:`pop`.
        """
        tenant = self._tenants.get(share.name)
        if tenant is None:
            tenant = self._tenants[share.name] = Tenant(share)
        elif tenant.share is not share:
            changed = tenant.share != share
            tenant.share = share  # an equal share too: the gate's fast path compares identity
            if changed:
                tenant.cost = virtual_cost(share.weight)
                tenant.limit = share.max_inflight
                self._reconsider(tenant)
        return tenant

    def push(self, tenant: Tenant[T], item: T, deferrable: bool = False) -> None:
        """Queue ``item`` last in ``tenant``'s FIFO of its lane."""
        lane = _lane(deferrable)
        queue = tenant.queues[lane]
        queue[item] = self._seq
        self._seq += 1
        self.waiting += 1
        self.lane_waiting[lane] += 1
        if len(queue) == 1 and not tenant.capped:
            self._enter(tenant, lane)

    def remove(self, tenant: Tenant[T], item: T) -> bool:
        """Take ``item`` out of the queue wherever it is (a cancelled waiter).

        Returns:
          Whether it was still queued.
        """
        queues = tenant.queues
        lane = 0 if item in queues[0] else 1
        waiters = queues[lane]
        if item not in waiters:
            return False
        head = next(iter(waiters)) is item
        del waiters[item]
        self.waiting -= 1
        self.lane_waiting[lane] -= 1
        entry = tenant._entries[lane]
        if head and entry is not None:
            self._drop(tenant, lane)
            if waiters:  # the new head keeps the tag, with its own arrival number
                self._push_entry(tenant, lane, entry[0])
        return True

    def pop(self) -> tuple[Tenant[T], T] | None:
        """The next waiter in fair order (its lane chosen by the lane rule), counted into its
        tenant's ``active``; or ``None``."""
        live = self._live
        interactive, deferrable = live[0] > 0, live[1] > 0
        choice = self._chooser.take(interactive, deferrable)
        if choice is None:
            return None
        lane = 1 if choice == "deferrable" else 0
        heap = self._heaps[lane]
        while heap:
            entry = heapq.heappop(heap)
            tenant = entry[2]
            if tenant._entries[lane] is not entry:
                continue  # dead: the tenant left, or its head changed
            tenant._entries[lane] = None
            live[lane] -= 1
            waiters = tenant.queues[lane]
            item = next(iter(waiters))
            del waiters[item]
            self.waiting -= 1
            self.lane_waiting[lane] -= 1
            self._vtime[lane] = tag = entry[0]
            tenant.active += 1
            if tenant.capped:
                if tenant._entries[1 - lane] is not None:  # not eligible in either lane now
                    self._drop(tenant, 1 - lane)
            elif waiters:
                self._push_entry(tenant, lane, tag + tenant.cost)
            return tenant, item
        raise AssertionError("a lane with live entries has none in its heap")  # pragma: no cover

    def release(self, tenant: Tenant[T]) -> tuple[Tenant[T], T] | None:
        """``tenant`` gives a slot back: the waiter it passes to (see :meth:`pop`), or ``None``."""
        tenant.active -= 1
        if not tenant.capped:
            for lane in (0, 1):
                if tenant._entries[lane] is None and tenant.queues[lane]:
                    self._enter(tenant, lane)
        return self.pop()

    def longest(
        self, newcomer: Tenant[T], deferrable: bool = False
    ) -> tuple[Tenant[T], int] | None:
        """Whom a full queue sheds to make room for one more waiter of ``newcomer``.

        Deferrable waiters go first: an interactive newcomer, while any deferrable waiter
        waits, sheds the newest waiter of the longest deferrable queue (in weighted terms);
        a deferrable newcomer never sheds an interactive waiter. Within the newcomer's own
        lane, longest queue drop: counting the newcomer into its own queue, the tenant whose
        queue is longest in weighted terms (``waiting / weight``) is to lose its newest
        waiter. Ties go to the newcomer's own tenant, then among the others to the one whose
        newest waiter arrived last.

        Returns:
          That tenant and the lane (0 interactive, 1 deferrable) to shed from, or ``None``
          when it is the newcomer's own: shed the newcomer.
        """
        lane = _lane(deferrable)
        if lane == 0 and self.lane_waiting[1]:
            lane, bar, own = 1, 0, None  # any deferrable waiter goes before the newcomer
        else:
            bar, own = (len(newcomer.queues[lane]) + 1) * newcomer.cost, newcomer
        victim: Tenant[T] | None = None
        newest = -1
        for tenant in self._tenants.values():
            waiters = tenant.queues[lane]
            if tenant is own or not waiters:
                continue
            load = len(waiters) * tenant.cost
            seq = waiters[next(reversed(waiters))]
            if load > bar or (load == bar and victim is not None and seq > newest):
                victim, bar, newest = tenant, load, seq
        return None if victim is None else (victim, lane)

    def pop_newest(self, tenant: Tenant[T], lane: int = 0) -> T:
        """Take ``tenant``'s newest waiter of ``lane`` out of the queue (it has one)."""
        item = next(reversed(tenant.queues[lane]))
        self.remove(tenant, item)
        return item

    def clear(self) -> list[tuple[Tenant[T], T]]:
        """Empty every queue; what was queued, tenant by tenant (for shutdown)."""
        for heap in self._heaps:
            heap.clear()
        self._live = [0, 0]
        self.waiting = 0
        self.lane_waiting = [0, 0]
        cleared: list[tuple[Tenant[T], T]] = []
        for tenant in self._tenants.values():
            tenant._entries = [None, None]
            queues, tenant.queues = tenant.queues, ({}, {})
            for waiters in queues:
                cleared.extend((tenant, item) for item in waiters)
        return cleared

    def _reconsider(self, tenant: Tenant[T]) -> None:
        for lane in (0, 1):
            eligible = bool(tenant.queues[lane]) and not tenant.capped
            if eligible and tenant._entries[lane] is None:
                self._enter(tenant, lane)
            elif not eligible and tenant._entries[lane] is not None:
                self._drop(tenant, lane)

    def _enter(self, tenant: Tenant[T], lane: int) -> None:
        # Becoming eligible (first waiter, or no longer at its share): start from now.
        self._push_entry(tenant, lane, self._vtime[lane] + tenant.cost)

    def _drop(self, tenant: Tenant[T], lane: int) -> None:
        tenant._entries[lane] = None
        self._live[lane] -= 1
        heap = self._heaps[lane]
        if len(heap) > 2 * self._live[lane] + 16:
            heap[:] = [entry for entry in heap if entry[2]._entries[lane] is entry]
            heapq.heapify(heap)

    def _push_entry(self, tenant: Tenant[T], lane: int, tag: int) -> None:
        waiters = tenant.queues[lane]
        entry = (tag, waiters[next(iter(waiters))], tenant)
        tenant._entries[lane] = entry
        self._live[lane] += 1
        heapq.heappush(self._heaps[lane], entry)
