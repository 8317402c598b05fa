"""SpendLedger: budgets answered from memory at once, spend written behind the hot path,
read back from a shared store, persisted across a restart, rolled over with the month, and
kept (then written) while the store is down."""

from __future__ import annotations

import calendar
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
import trio.testing

from trio_batcher.tenants import (
    Budget,
    BudgetPeriod,
    MemorySpendStore,
    OverBudget,
    SpendLedger,
    SQLiteSpendStore,
    StoreUnavailable,
    Tenant,
    TenantSpend,
)

MONTHLY = BudgetPeriod()


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> float:
    return float(calendar.timegm((year, month, day, hour, minute, second)))


JUNE_14 = utc(2025, 6, 14, 12)


def wall_clock(base: float) -> Callable[[], float]:
    """Wall time that moves with trio's (virtual) clock, from ``base`` at trio time 0."""
    return lambda: base + trio.current_time()


class CountingStore:
    """A ``MemorySpendStore`` that records every ``add`` and fails while ``down``."""

    def __init__(self, inner: MemorySpendStore | None = None) -> None:
        self.inner = inner or MemorySpendStore()
        self.adds: list[tuple[str, float, float]] = []
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise StoreUnavailable("the store is down (test)")

    async def add(self, tenant: str, usd: float, now: float) -> None:
        self._check()
        self.adds.append((tenant, usd, now))
        await self.inner.add(tenant, usd, now)

    async def spent(self, tenant: str, period: BudgetPeriod, now: float) -> float:
        self._check()
        return await self.inner.spent(tenant, period, now)

    async def purge_before(self, before: float) -> int:
        self._check()
        return await self.inner.purge_before(before)

    async def aclose(self) -> None:
        pass


def team(budget_usd: float, period: BudgetPeriod = MONTHLY, name: str = "team-a") -> Tenant:
    return Tenant(name=name, budget=Budget(budget_usd, period))


async def test_over_budget_flips_exactly_at_the_budget_before_any_write(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = CountingStore()
    ledger = SpendLedger(store, clock=wall_clock(JUNE_14))
    tenant = team(1.0)
    ledger.set_tenants([tenant, Tenant(name="free")])
    async with trio.open_nursery() as nursery:
        await nursery.start(ledger.run)
        for _ in range(3):
            ledger.charge("team-a", 0.25)
            assert ledger.over_budget(tenant) is None
        ledger.charge("team-a", 0.25)  # $1.00: reached, synchronously, nothing written yet
        over = ledger.over_budget(tenant)
        assert store.adds == []
        assert over == OverBudget(
            tenant="team-a",
            budget_usd=1.0,
            spent_usd=1.0,
            period=MONTHLY,
            retry_after_s=utc(2025, 7, 1) - JUNE_14,
            next_change=int(utc(2025, 7, 1)),
        )
        assert "monthly budget of $1.00" in over.message
        ledger.charge("free", 5.0)
        assert ledger.over_budget(Tenant(name="free")) is None  # no budget: never over
        await trio.sleep_until(0.6)  # the first flush: one add per tenant, summed
        assert sorted(store.adds) == [("free", 5.0, JUNE_14), ("team-a", 1.0, JUNE_14)]
        assert ledger.statistics().tenants["team-a"] == TenantSpend(
            spent_usd=1.0,
            budget_usd=1.0,
            period="monthly",
            pending_usd=0.0,
            loaded=True,
            store_failures=0,
        )
        assert ledger.over_budget(tenant) is not None  # written, still counted once
        await trio.sleep_until(1.1)  # and after the store's total is read back
        assert ledger.statistics().tenants["team-a"].spent_usd == 1.0
        nursery.cancel_scope.cancel()
    assert await store.inner.spent("team-a", MONTHLY, JUNE_14) == 1.0


async def test_the_spent_amount_survives_a_proxy_restart(tmp_path: Path) -> None:
    # Real time (the SQLite store runs in a worker thread: no autojump here).
    tenant = team(5.0)
    first_store = SQLiteSpendStore(tmp_path)
    first = SpendLedger(first_store)
    first.set_tenants([tenant])
    async with trio.open_nursery() as nursery:
        await nursery.start(first.run)
        first.charge("team-a", 3.0)
        first.charge("team-a", 2.0)
        assert first.over_budget(tenant) is not None
        nursery.cancel_scope.cancel()  # shutdown: the final flush writes the $5.00
    await first_store.aclose()

    again_store = SQLiteSpendStore(tmp_path)
    again = SpendLedger(again_store)
    again.set_tenants([tenant])
    async with trio.open_nursery() as nursery:
        await nursery.start(again.run)  # started: the totals are loaded
        over = again.over_budget(tenant)
        assert over is not None and over.spent_usd == 5.0
        assert again.statistics().tenants["team-a"].loaded
        nursery.cancel_scope.cancel()
    await again_store.aclose()


async def test_a_refresh_sees_another_instances_spend_through_the_shared_store(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shared = MemorySpendStore()
    tenant = team(10.0)
    mine = SpendLedger(shared, clock=wall_clock(JUNE_14))
    theirs = SpendLedger(shared, clock=wall_clock(JUNE_14))
    for ledger in (mine, theirs):
        ledger.set_tenants([tenant])
    async with trio.open_nursery() as nursery:
        await nursery.start(mine.run)
        await nursery.start(theirs.run)
        mine.charge("team-a", 4.0)
        theirs.charge("team-a", 6.0)  # written at 0.5 s, read by mine at 1.0 s
        assert mine.over_budget(tenant) is None
        await trio.sleep_until(0.99)
        assert mine.over_budget(tenant) is None
        assert mine.statistics().tenants["team-a"].spent_usd == 4.0
        await trio.sleep_until(1.01)
        over = mine.over_budget(tenant)
        assert over is not None and over.spent_usd == 10.0
        assert theirs.over_budget(tenant) is not None
        nursery.cancel_scope.cancel()
    assert await shared.spent("team-a", MONTHLY, JUNE_14) == 10.0


async def test_a_monthly_budget_rolls_over_at_the_start_of_the_next_month(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = CountingStore()
    await store.inner.add("team-a", 1.5, utc(2025, 6, 30, 12))  # spent before the start
    end_of_june = utc(2025, 6, 30, 23, 59, 59)
    # No tick between the start and 10 s: the roll-over is answered from memory alone.
    ledger = SpendLedger(store, clock=wall_clock(end_of_june), flush_every_s=10, refresh_every_s=10)
    tenant = team(2.0)
    ledger.set_tenants([tenant])
    async with trio.open_nursery() as nursery:
        await nursery.start(ledger.run)
        await trio.sleep_until(0.25)
        ledger.charge("team-a", 0.5)  # 23:59:59.25 on June 30: $1.50 read + $0.50
        over = ledger.over_budget(tenant)
        assert over is not None and over.spent_usd == 2.0 and over.retry_after_s == 0.75
        await trio.sleep_until(1.01)  # July: June's total and June's pending no longer count
        assert ledger.over_budget(tenant) is None
        ledger.charge("team-a", 1.5)
        assert ledger.statistics().tenants["team-a"].spent_usd == 1.5
        await trio.sleep_until(10.01)  # both written, each in its month; July read back
        assert ledger.statistics().tenants["team-a"].spent_usd == 1.5
        ledger.charge("team-a", 0.5)
        over = ledger.over_budget(tenant)
        assert over is not None and over.next_change == utc(2025, 8, 1)
        nursery.cancel_scope.cancel()
    assert store.adds == [
        ("team-a", 0.5, utc(2025, 6, 30, 23)),
        ("team-a", 1.5, utc(2025, 7, 1)),
        ("team-a", 0.5, utc(2025, 7, 1)),
    ]
    assert await store.inner.spent("team-a", MONTHLY, end_of_june) == 2.0
    assert await store.inner.spent("team-a", MONTHLY, utc(2025, 7, 1, 1)) == 2.0


async def test_a_charge_made_before_midnight_keeps_its_month_when_written_after(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = CountingStore()
    ledger = SpendLedger(store, clock=wall_clock(utc(2025, 6, 30, 23, 59, 59)), flush_every_s=2.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(ledger.run)
        await trio.sleep_until(0.5)
        ledger.charge("t", 1.0)  # June
        await trio.sleep_until(1.5)
        ledger.charge("t", 2.0)  # July; both written by the flush at 2 s, each in its hour
        await trio.sleep_until(2.1)
        assert store.adds == [("t", 1.0, utc(2025, 6, 30, 23)), ("t", 2.0, utc(2025, 7, 1))]
        nursery.cancel_scope.cancel()


async def test_a_store_failure_keeps_the_spend_pending_and_recovers(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    store = CountingStore()
    ledger = SpendLedger(store, clock=wall_clock(JUNE_14))
    tenant = team(10.0)
    ledger.set_tenants([tenant])
    with caplog.at_level(logging.INFO, logger="trio_batcher"):
        async with trio.open_nursery() as nursery:
            await nursery.start(ledger.run)
            ledger.charge("team-a", 4.0)
            await trio.sleep_until(0.6)  # written while the store answered
            store.down = True
            ledger.charge("team-a", 3.0)
            await trio.sleep_until(2.6)  # four flushes and two refreshes fail
            stats = ledger.statistics()
            assert not stats.store_available
            assert stats.last_error == "the store is down (test)"
            assert stats.tenants["team-a"].pending_usd == 3.0
            assert stats.tenants["team-a"].store_failures >= 4
            ledger.charge("team-a", 3.0)  # fail open on the last known total: $4 + $6 here
            over = ledger.over_budget(tenant)
            assert over is not None and over.spent_usd == 10.0
            store.down = False
            await trio.sleep_until(3.1)  # the next flush writes the queued $6 in one add
            stats = ledger.statistics()
            assert stats.store_available
            assert stats.tenants["team-a"].pending_usd == 0.0
            assert store.adds == [("team-a", 4.0, JUNE_14), ("team-a", 6.0, JUNE_14)]
            nursery.cancel_scope.cancel()
    assert await store.inner.spent("team-a", MONTHLY, JUNE_14) == 10.0
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "spend store unavailable" in warnings[0].getMessage()
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.INFO] == [
        "spend store available again; $6.000000 of spend still to write"
    ]


async def test_a_store_down_at_start_up_does_not_stop_the_start_and_is_read_later(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shared = MemorySpendStore()
    await shared.add("team-a", 9.0, JUNE_14)
    store = CountingStore(shared)
    store.down = True
    ledger = SpendLedger(store, clock=wall_clock(JUNE_14))
    tenant = team(10.0)
    ledger.set_tenants([tenant])
    async with trio.open_nursery() as nursery:
        await nursery.start(ledger.run)
        assert trio.current_time() == 0
        ledger.charge("team-a", 2.0)
        assert ledger.over_budget(tenant) is None  # never read: only this instance's $2
        assert not ledger.statistics().tenants["team-a"].loaded
        store.down = False
        await trio.sleep_until(0.6)  # the tick at 0.5 s writes the $2 and reads the tenant
        over = ledger.over_budget(tenant)
        assert over is not None and over.spent_usd == 11.0
        nursery.cancel_scope.cancel()


async def test_a_reload_adds_changes_and_removes_budgets(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shared = MemorySpendStore()
    await shared.add("team-b", 3.0, JUNE_14)
    ledger = SpendLedger(shared, clock=wall_clock(JUNE_14))
    ledger.set_tenants([team(5.0)])
    async with trio.open_nursery() as nursery:
        await nursery.start(ledger.run)
        ledger.charge("team-a", 4.0)
        ledger.set_tenants([team(4.0), team(3.0, name="team-b")])  # lowered, and a new one
        assert ledger.over_budget(team(4.0)) is not None  # the total kept, the new amount
        assert ledger.over_budget(team(3.0, name="team-b")) is None  # not read yet
        await trio.testing.wait_all_tasks_blocked()  # read at once, not at the next tick
        assert trio.current_time() == 0
        assert ledger.over_budget(team(3.0, name="team-b")) is not None
        week = BudgetPeriod(days=7)
        ledger.set_tenants([team(4.0, week), Tenant(name="team-b")])  # a new period; removed
        over = ledger.over_budget(team(4.0, week))  # not read yet: the $4 still pending counts
        assert over is not None and over.retry_after_s == 3600
        assert ledger.over_budget(team(3.0, name="team-b")) is None  # no longer tracked
        assert ledger.over_budget(team(4.0)) is None  # a request still holding the old period
        await trio.sleep_until(0.6)  # written, then read back over the week: counted once
        assert ledger.statistics().tenants["team-a"].spent_usd == 4.0
        assert set(ledger.statistics().tenants) == {"team-a"}
        nursery.cancel_scope.cancel()


async def test_shutdown_flushes_what_was_charged_even_mid_tick(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = CountingStore()
    ledger = SpendLedger(store, clock=wall_clock(JUNE_14))
    async with trio.open_nursery() as nursery:
        await nursery.start(ledger.run)
        ledger.charge("t", 0.125)
        await trio.sleep(0.1)
        nursery.cancel_scope.cancel()
    assert store.adds == [("t", 0.125, JUNE_14)]
    assert ledger.statistics().tenants == {}  # nothing pending, no budget, no failure


def test_a_negative_charge_is_refused() -> None:
    ledger = SpendLedger(MemorySpendStore())
    with pytest.raises(ValueError, match="finite amount >= 0"):
        ledger.charge("t", -1.0)
    ledger.charge("t", 0.0)
    assert ledger.statistics().tenants == {}
