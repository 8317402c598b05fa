"""The gate's queue: one FIFO per tenant, served across tenants in weighted fair order.

Pure data structure, no I/O and no trio: :class:`~trio_batcher.admission.gate.AdmissionGate`
parks waiters in it and asks it, whenever a slot comes free, whose turn it is. The algorithm
(self-clocked fair queuing) and the guarantees it gives are in the gate's theory-of-operation
docstring; this module holds the mechanics:

* A :class:`Tenant` keeps its waiters in an insertion-ordered dict (FIFO, O(1) removal of a
  cancelled waiter), its slot count ``active`` and its counters.
* A backlogged tenant that may take a slot (not at its own ``max_inflight`` share) has one
  live entry ``(tag, seq, tenant)`` in a binary heap: ``tag`` is the virtual time at which its
  head waiter's admission finishes, ``seq`` the head's arrival number (the tie-break). ``pop``
  takes the smallest, so a hand-off is O(log n) in the tenants with waiters.
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
    :meth:`FairQueue.pop` and :meth:`FairQueue.release` on hand-offs).
    """

    __slots__ = (
        "_entry",
        "active",
        "admitted",
        "cost",
        "limit",
        "pushed_out",
        "share",
        "shed",
        "waiters",
    )

    def __init__(self, share: TenantShare) -> None:
        self.share = share
        self.cost = virtual_cost(share.weight)
        self.limit = share.max_inflight  # copied off the share: read on every fast-path grant
        self.waiters: dict[T, int] = {}  # FIFO: waiter -> arrival number
        self.active = 0
        self.admitted = 0
        self.shed: dict[str, int] = dict.fromkeys(SHED_REASONS, 0)
        self.pushed_out = 0  # of shed["queue_full"]: waiters pushed out of a full queue
        self._entry: tuple[int, int, Tenant[T]] | None = None  # live heap entry, if eligible

    @property
    def name(self) -> str:
        return self.share.name

    @property
    def capped(self) -> bool:
        """At its own ``max_inflight`` share: not eligible for a slot."""
        return self.limit is not None and self.active >= self.limit

    @property
    def queue_full(self) -> bool:
        """Its own ``max_queue`` share of waiters is reached."""
        limit = self.share.max_queue
        return limit is not None and len(self.waiters) >= limit


@final
class FairQueue(Generic[T]):
    """Per-tenant FIFO queues of ``T`` (waiters), popped in weighted fair order.

    Only tenants with waiters that are not at their ``max_inflight`` share are eligible;
    :meth:`pop` never returns a waiter of any other tenant.
    """

    def __init__(self) -> None:
        self._tenants: dict[str, Tenant[T]] = {}
        self._heap: list[tuple[int, int, Tenant[T]]] = []
        self._live = 0  # entries of _heap some tenant references
        self._vtime = 0  # tag of the latest admission from the queue
        self._seq = 0  # arrival numbers, for ties
        self.waiting = 0

    @property
    def tenants(self) -> Mapping[str, Tenant[T]]:
        return self._tenants

    @property
    def virtual_time(self) -> int:
        return self._vtime

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

    def push(self, tenant: Tenant[T], item: T) -> None:
        """Queue ``item`` last in ``tenant``'s FIFO."""
        tenant.waiters[item] = self._seq
        self._seq += 1
        self.waiting += 1
        if len(tenant.waiters) == 1 and not tenant.capped:
            self._enter(tenant)

    def remove(self, tenant: Tenant[T], item: T) -> bool:
        """Take ``item`` out of the queue wherever it is (a cancelled waiter).

        Returns:
          Whether it was still queued.
        """
        waiters = tenant.waiters
        if item not in waiters:
            return False
        head = next(iter(waiters)) is item
        del waiters[item]
        self.waiting -= 1
        entry = tenant._entry
        if head and entry is not None:
            self._drop(tenant)
            if waiters:  # the new head keeps the tag, with its own arrival number
                self._push_entry(tenant, entry[0])
        return True

    def pop(self) -> tuple[Tenant[T], T] | None:
        """The next waiter in fair order, counted into its tenant's ``active``; or ``None``."""
        heap = self._heap
        while heap:
            entry = heapq.heappop(heap)
            tenant = entry[2]
            if tenant._entry is not entry:
                continue  # dead: the tenant left, or its head changed
            tenant._entry = None
            self._live -= 1
            waiters = tenant.waiters
            item = next(iter(waiters))
            del waiters[item]
            self.waiting -= 1
            self._vtime = tag = entry[0]
            tenant.active += 1
            if waiters and not tenant.capped:
                self._push_entry(tenant, tag + tenant.cost)
            return tenant, item
        return None

    def release(self, tenant: Tenant[T]) -> tuple[Tenant[T], T] | None:
        """``tenant`` gives a slot back: the waiter it passes to (see :meth:`pop`), or ``None``."""
        tenant.active -= 1
        if tenant._entry is None and tenant.waiters and not tenant.capped:
            self._enter(tenant)
        return self.pop()

    def longest(self, newcomer: Tenant[T]) -> Tenant[T] | None:
        """Whom a full queue sheds to make room for one more waiter of ``newcomer``.

        Longest queue drop: counting the newcomer into its own queue, the tenant whose queue is
        longest in weighted terms (``waiting / weight``) is to lose its newest waiter. Ties go
        to the newcomer's own tenant, then among the others to the one whose newest waiter
        arrived last.

        Returns:
          That tenant, or ``None`` when it is the newcomer's own: shed the newcomer.
        """
        bar = (len(newcomer.waiters) + 1) * newcomer.cost
        victim: Tenant[T] | None = None
        newest = -1
        for tenant in self._tenants.values():
            waiters = tenant.waiters
            if tenant is newcomer or not waiters:
                continue
            load = len(waiters) * tenant.cost
            seq = waiters[next(reversed(waiters))]
            if load > bar or (load == bar and victim is not None and seq > newest):
                victim, bar, newest = tenant, load, seq
        return victim

    def pop_newest(self, tenant: Tenant[T]) -> T:
        """Take ``tenant``'s newest waiter out of the queue (it has waiters)."""
        item = next(reversed(tenant.waiters))
        self.remove(tenant, item)
        return item

    def clear(self) -> list[tuple[Tenant[T], T]]:
        """Empty every queue; what was queued, tenant by tenant (for shutdown)."""
        self._heap.clear()
        self._live = 0
        self.waiting = 0
        cleared: list[tuple[Tenant[T], T]] = []
        for tenant in self._tenants.values():
            tenant._entry = None
            waiters, tenant.waiters = tenant.waiters, {}
            cleared.extend((tenant, item) for item in waiters)
        return cleared

    def _reconsider(self, tenant: Tenant[T]) -> None:
        eligible = bool(tenant.waiters) and not tenant.capped
        if eligible and tenant._entry is None:
            self._enter(tenant)
        elif not eligible and tenant._entry is not None:
            self._drop(tenant)

    def _enter(self, tenant: Tenant[T]) -> None:
        # Becoming eligible (first waiter, or no longer at its share): start from now.
        self._push_entry(tenant, self._vtime + tenant.cost)

    def _drop(self, tenant: Tenant[T]) -> None:
        tenant._entry = None
        self._live -= 1
        if len(self._heap) > 2 * self._live + 16:
            self._heap = [entry for entry in self._heap if entry[2]._entry is entry]
            heapq.heapify(self._heap)

    def _push_entry(self, tenant: Tenant[T], tag: int) -> None:
        entry = (tag, tenant.waiters[next(iter(tenant.waiters))], tenant)
        tenant._entry = entry
        self._live += 1
        heapq.heappush(self._heap, entry)
