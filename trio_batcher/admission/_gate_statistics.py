"""The frozen snapshots :meth:`AdmissionGate.statistics` returns, re-exported by ``gate``.

Kept apart from the gate so that its readers (metrics, tests, the observatory) need not know
how the numbers are kept, as with ``trio.CapacityLimiter.statistics()``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import final

__all__ = ["GateStatistics", "LaneStatistics", "TenantStatistics"]


@final
@dataclass(frozen=True)
class LaneStatistics:
    """One priority lane's part of a snapshot (``lanes``): its waiters now (a gauge), the
    acquirers of the lane admitted and shed so far (counters, every reason together)."""

    waiting: int
    admitted_total: int
    shed_total: int


@final
@dataclass(frozen=True)
class TenantStatistics:
    """One tenant's part of a snapshot: gauges, counters and the share in force.

    ``pushed_out`` counts the tenant's waiters shed to make room for another tenant's newcomer
    (longest queue drop); they are also in ``shed_by_reason["queue_full"]``.
    """

    active: int
    waiting: int
    admitted_total: int
    shed_by_reason: Mapping[str, int]
    weight: float
    max_inflight: int | None
    max_queue: int | None
    pushed_out: int = 0


@final
@dataclass(frozen=True)
class GateStatistics:
    """A snapshot; ``active`` and ``waiting`` are gauges, the rest counters or configuration.

    ``shed_by_reason`` has ``"tenant_queue_full"`` once an acquirer has named a tenant (before
    that it cannot happen). ``by_tenant`` has every tenant seen so far, ``DEFAULT_TENANT``'s
    name for acquirers that named none. ``pushed_out`` is the part of
    ``shed_by_reason["queue_full"]`` that waited in the queue and was pushed out by another
    tenant's newcomer (0 while no acquirer has named a tenant: it takes two tenants).
    ``lanes`` has both priority lanes, ``"interactive"`` and ``"deferrable"``.
    """

    active: int
    waiting: int
    max_inflight: int
    max_queue: int
    shed_by_reason: Mapping[str, int]
    admitted_total: int
    closed: bool
    by_tenant: Mapping[str, TenantStatistics]
    pushed_out: int = 0
    lanes: Mapping[str, LaneStatistics] = dataclasses.field(default_factory=dict)
