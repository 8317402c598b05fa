"""The spend ledger: budgets answered from memory, spend written behind the hot path.

Theory of operation
-------------------
``check_budget`` asks the store on every request; a gateway cannot afford a database
round trip (or a Redis timeout) per request. ``SpendLedger`` keeps, per budgeted tenant,
what it knows of the spend in the current period, and a single task (``run``, in the app's
lifetime nursery) moves amounts between memory and the store:

- ``charge(name, usd)`` (synchronous) adds the amount to ``pending`` for the UTC hour of
  the wall clock, so a budget sees it at once. Every tenant's spend is queued, budgeted or
  not: spend is attribution too, and a budget added later counts the period so far.
- every ``flush_every_s`` the task writes each tenant's pending amount with one ``add``
  per tenant per hour (one per tenant, except across an hour's change, where each part
  keeps its own hour, so a charge at 23:59:59 is never counted in the next month).
- every ``refresh_every_s`` it reads ``spent`` for each budgeted tenant, so what other
  instances (or workers) wrote is seen within about a second; at once for a tenant that
  ``set_tenants`` added or whose period changed, and for one whose window moved on.

The total of a tenant is ``stored + written + pending``: ``stored`` is the store's answer
at the last read, ``written`` what this ledger wrote since (not in ``stored``), ``pending``
what it has not written yet. Reads and writes happen in the one task, one after the other,
so a read never overlaps a write of this ledger: after a read, ``written`` starts empty and
``pending`` is still exactly what the store lacks. A charge during a write adds to the same
pending entry, and a successful write takes away only what it wrote.

Periods. ``stored`` covers the hours from the read's period start to the hour of the read.
When the period's start passes that hour (a new month), none of it counts any more and the
total is what this ledger charged in the new period, until the next read (at the next tick);
when the start moved but not past it (a rolling window's oldest hour left), ``stored`` is
kept as an upper bound until the read corrects it.

Failure (fail open). A write that fails keeps its amount pending and is retried at the next
flush; a read that fails keeps the last total. Either ends that round (the store is down;
waiting for each tenant's timeout would only delay the others). The first failure of an
outage is logged, once, and so is the recovery. Meanwhile ``over_budget`` answers from the
last known total plus what this instance charged since: other instances' spend is not seen,
and a tenant never read (the store was down at start-up) counts only this instance's charges.
Pending amounts are per tenant per hour, so their memory is bounded by the tenants times the
hours an outage lasts. A write that timed out may still have run on the server and is
written again: spend may be counted twice, which stops a tenant early, never late.

Cancellation. Each flush runs shielded, bounded by ``store_deadline_s``, so a shutdown never
interrupts a write half-way; when ``run`` is cancelled it flushes once more (shielded, same
deadline) so what was charged is persisted. What a store that is down cannot take is lost.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, final

import trio

from ..store.responses import StoreUnavailable
from .model import Budget, Tenant, hour_of
from .spend import NANO, OverBudget, SpendStore, nano_usd

__all__ = ["RETENTION_S", "LedgerStatistics", "SpendLedger", "TenantSpend"]

log = logging.getLogger("trio_batcher")

RETENTION_S: Final = 1000 * 86_400
"""How long spend is kept: longer than the longest budget period the tenants file accepts
(999 days, plus the hour more a rolling window reads)."""

STORE_DEADLINE_S: Final = 2.0
PURGE_EVERY_S: Final = 3600.0

_Hours = dict[int, int]  # the start of a UTC hour (Unix seconds) -> nano-dollars


def _in_window(hours: _Hours, start: int) -> int:
    return sum(n for hour, n in hours.items() if hour >= start)


@final
@dataclass(frozen=True)
class TenantSpend:
    """One tenant in ``SpendLedger.statistics()``.

    Attributes:
      spent_usd: the total the ledger answers budgets with, in the current period (None:
        no budget, so no total is kept).
      budget_usd: the budget (None: none).
      period: ``"monthly"`` or ``"30d"`` (None: no budget).
      pending_usd: charged here and not yet written to the store.
      loaded: the store's total has been read at least once (False: ``spent_usd`` counts
        only this instance's charges since start).
      store_failures: writes and reads for this tenant that failed.
    """

    spent_usd: float | None
    budget_usd: float | None
    period: str | None
    pending_usd: float
    loaded: bool
    store_failures: int


@final
@dataclass(frozen=True)
class LedgerStatistics:
    """The ledger as a whole: per tenant, and whether the store answers now."""

    tenants: Mapping[str, TenantSpend]
    store_available: bool
    store_failures: int
    last_error: str | None
    writes: int
    reads: int


@final
class _Account:
    """What a budgeted tenant has spent in its period, as far as this ledger knows."""

    __slots__ = ("budget", "read_hour", "read_start", "stored", "written")

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.stored = 0
        self.read_hour: int | None = None  # the hour of the last read (None: never read)
        self.read_start = 0  # the period's start at the last read
        self.written: _Hours = {}

    def total(self, now: float, pending: _Hours) -> int:
        start = self.budget.period.start(now)
        stored = self.stored if self.read_hour is not None and self.read_hour >= start else 0
        return stored + _in_window(self.written, start) + _in_window(pending, start)

    def stale(self, now: float) -> bool:
        return self.read_hour is None or self.read_start != self.budget.period.start(now)

    def loaded(self, spent_usd: float, now: float) -> None:
        self.stored = round(spent_usd * NANO)
        self.read_hour = hour_of(now)
        self.read_start = self.budget.period.start(now)
        self.written = {}


@final
class SpendLedger:
    """Budgets checked from memory, spend persisted in the background; see the module.

    Args:
      store: where spend is kept (``SQLiteSpendStore``, ``RedisSpendStore``, ...).
      clock: the wall clock (Unix seconds): budgets follow the calendar.
      flush_every_s: how often pending amounts are written.
      refresh_every_s: how often budgeted tenants' totals are read back.
      store_deadline_s: the most the load at start-up, each flush and the final flush on
        shutdown wait for the store.
      purge_every_s: how often spend older than ``RETENTION_S`` is purged (first at start).
    """

    def __init__(
        self,
        store: SpendStore,
        *,
        clock: Callable[[], float] = time.time,
        flush_every_s: float = 0.5,
        refresh_every_s: float = 1.0,
        store_deadline_s: float = STORE_DEADLINE_S,
        purge_every_s: float = PURGE_EVERY_S,
    ) -> None:
        self._store = store
        self._clock = clock
        self._flush_every_s = flush_every_s
        self._refresh_every_s = refresh_every_s
        self._store_deadline_s = store_deadline_s
        self._purge_every_s = purge_every_s
        self._accounts: dict[str, _Account] = {}
        self._pending: dict[str, _Hours] = {}
        self._failures: Counter[str] = Counter()
        self._store_failures = 0
        self._outage: str | None = None
        self._last_error: str | None = None
        self._writes = 0
        self._reads = 0
        self._wake = trio.Event()

    # -- the hot path: synchronous, memory only ---------------------------------------------

    def over_budget(self, tenant: Tenant) -> OverBudget | None:
        """``OverBudget`` when ``tenant`` has spent its budget in the period, else None.

        Answers what ``check_budget`` would, from memory: the last total read plus what
        this ledger charged since. None for a tenant without a budget, and for one
        ``set_tenants`` has not given a budget of that period (not tracked: fail open).
        """
        budget = tenant.budget
        if budget is None:
            return None
        account = self._accounts.get(tenant.name)
        if account is None or account.budget.period != budget.period:
            return None
        now = self._clock()
        spent = account.total(now, self._pending.get(tenant.name, {})) / NANO
        if spent < budget.usd:
            return None
        next_change = budget.period.next_change(now)
        return OverBudget(
            tenant=tenant.name,
            budget_usd=budget.usd,
            spent_usd=spent,
            period=budget.period,
            retry_after_s=max(0.0, next_change - now),
            next_change=next_change,
        )

    def charge(self, tenant_name: str, usd: float) -> None:
        """Count ``usd`` against ``tenant_name`` now, and queue it for the store.

        Raises:
          ValueError: ``usd`` is negative or not finite.
        """
        amount = nano_usd(usd)
        if amount:
            hours = self._pending.setdefault(tenant_name, {})
            hour = hour_of(self._clock())
            hours[hour] = hours.get(hour, 0) + amount

    def set_tenants(self, tenants: Iterable[Tenant]) -> None:
        """The tenants in force (at start, and after each reload of the directory).

        A tenant keeps its total when its period is unchanged (a new amount applies at
        once); a new one, or one whose period changed, is read from the store at the next
        tick of ``run``, counting meanwhile only what this ledger charges. Tenants that lost
        their budget are no longer tracked; their pending spend is still written.
        """
        accounts: dict[str, _Account] = {}
        for tenant in tenants:
            if tenant.budget is None:
                continue
            account = self._accounts.get(tenant.name)
            if account is None or account.budget.period != tenant.budget.period:
                account = _Account(tenant.budget)
            account.budget = tenant.budget
            accounts[tenant.name] = account
        self._accounts = accounts
        if any(account.read_hour is None for account in accounts.values()):
            self._wake.set()

    def statistics(self) -> LedgerStatistics:
        now = self._clock()
        tenants: dict[str, TenantSpend] = {}
        for name in sorted({*self._accounts, *self._pending, *self._failures}):
            account = self._accounts.get(name)
            pending = self._pending.get(name, {})
            tenants[name] = TenantSpend(
                spent_usd=None if account is None else account.total(now, pending) / NANO,
                budget_usd=None if account is None else account.budget.usd,
                period=None if account is None else account.budget.period.spelling(),
                pending_usd=sum(pending.values()) / NANO,
                loaded=account is not None and account.read_hour is not None,
                store_failures=self._failures[name],
            )
        return LedgerStatistics(
            tenants=tenants,
            store_available=self._outage is None,
            store_failures=self._store_failures,
            last_error=self._last_error,
            writes=self._writes,
            reads=self._reads,
        )

    # -- the background task ----------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Load, flush, refresh and purge until cancelled; then flush once more.

        Reports started once the budgeted tenants' totals are loaded, or the load failed
        or took longer than ``store_deadline_s`` (then the tenants are read at each tick
        until the store answers): a store that is down must not stop the gateway starting.
        """
        try:
            with trio.move_on_after(self._store_deadline_s):
                await self._refresh(every=True)
            task_status.started()
            start = trio.current_time()
            next_flush = start + self._flush_every_s
            next_refresh = start + self._refresh_every_s
            next_purge = start
            while True:
                with trio.move_on_at(min(next_flush, next_refresh, next_purge)):
                    await self._wake.wait()
                self._wake = trio.Event()
                now = trio.current_time()
                if now >= next_flush:
                    await self._flush_shielded()
                    next_flush = _next(next_flush, self._flush_every_s, now)
                if now >= next_refresh:
                    await self._refresh(every=True)
                    next_refresh = _next(next_refresh, self._refresh_every_s, now)
                else:
                    await self._refresh(every=False)
                if now >= next_purge:
                    await self._purge()
                    next_purge = now + self._purge_every_s
        finally:
            await self._flush_shielded()

    async def _flush_shielded(self) -> None:
        with trio.CancelScope(shield=True), trio.move_on_after(self._store_deadline_s):
            await self._flush()

    async def _flush(self) -> None:
        for name in list(self._pending):
            hours = self._pending[name]
            for hour, amount in sorted(hours.items()):
                try:
                    await self._store.add(name, amount / NANO, float(hour))
                except StoreUnavailable as exc:
                    self._failed(name, exc)
                    return
                self._answered()
                self._writes += 1
                left = hours[hour] - amount  # charges made during the write stay pending
                if left:
                    hours[hour] = left
                else:
                    del hours[hour]
                account = self._accounts.get(name)
                if account is not None:
                    account.written[hour] = account.written.get(hour, 0) + amount
            if not hours:
                del self._pending[name]

    async def _refresh(self, *, every: bool) -> None:
        for name, account in list(self._accounts.items()):
            now = self._clock()
            if not every and not account.stale(now):
                continue
            try:
                spent = await self._store.spent(name, account.budget.period, now)
            except StoreUnavailable as exc:
                self._failed(name, exc)
                return
            self._answered()
            self._reads += 1
            if self._accounts.get(name) is account:  # not replaced by a reload meanwhile
                account.loaded(spent, now)

    async def _purge(self) -> None:
        try:
            await self._store.purge_before(self._clock() - RETENTION_S)
        except StoreUnavailable as exc:
            self._failed(None, exc)
        else:
            self._answered()

    def _failed(self, tenant: str | None, exc: StoreUnavailable) -> None:
        if tenant is not None:
            self._failures[tenant] += 1
        self._store_failures += 1
        self._last_error = str(exc)
        if self._outage is None:
            self._outage = self._last_error
            log.warning(
                "spend store unavailable (%s): spend stays queued and is retried; budgets "
                "answer from the last known totals",
                exc,
            )

    def _answered(self) -> None:
        if self._outage is not None:
            self._outage = None
            pending = sum(sum(hours.values()) for hours in self._pending.values()) / NANO
            log.info("spend store available again; $%.6f of spend still to write", pending)


def _next(due: float, every: float, now: float) -> float:
    """The next tick on the cadence, skipping the ticks a slow round missed."""
    return due + every * max(1, math.floor((now - due) / every) + 1)
