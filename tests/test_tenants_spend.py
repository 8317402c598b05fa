"""Spend per tenant: counted exactly, per calendar month (UTC) or rolling window, kept in
SQLite across a restart, and the budget check that names the budget."""

from __future__ import annotations

import calendar
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from trio_batcher.tenants import (
    Budget,
    BudgetPeriod,
    MemorySpendStore,
    OverBudget,
    SpendStore,
    SQLiteSpendStore,
    StoreUnavailable,
    Tenant,
    check_budget,
)

HOUR = 3600.0
DAY = 86_400.0
MONTHLY = BudgetPeriod()


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> float:
    return float(calendar.timegm((year, month, day, hour, minute, 0)))


@pytest.fixture(params=["sqlite", "memory"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SpendStore]:
    spend: SpendStore = (
        SQLiteSpendStore(tmp_path / "data") if request.param == "sqlite" else MemorySpendStore()
    )
    yield spend
    await spend.aclose()


async def test_spend_adds_up_exactly(store: SpendStore) -> None:
    now = utc(2025, 6, 14, 12)
    for _ in range(1000):
        await store.add("a", 0.0000031, now)  # a fraction of a cent, a thousand times
    await store.add("a", 0.0, now)
    assert await store.spent("a", MONTHLY, now) == 0.0031
    assert await store.spent("b", MONTHLY, now) == 0.0


async def test_a_monthly_budget_counts_the_calendar_month_in_utc(store: SpendStore) -> None:
    await store.add("a", 1.0, utc(2025, 5, 31, 23, 59))
    await store.add("a", 2.0, utc(2025, 6, 1, 0, 0))
    await store.add("a", 4.0, utc(2025, 6, 30, 23, 59))
    assert await store.spent("a", MONTHLY, utc(2025, 5, 31, 23, 59)) == 1.0
    assert await store.spent("a", MONTHLY, utc(2025, 6, 30, 23, 59)) == 6.0
    assert await store.spent("a", MONTHLY, utc(2025, 7, 1)) == 0.0


async def test_a_rolling_budget_counts_whole_hours_back_to_n_days_ago(store: SpendStore) -> None:
    week = BudgetPeriod(days=7)
    now = utc(2025, 6, 14, 12, 30)
    await store.add("a", 1.0, now - 7 * DAY - HOUR)  # the hour before the window
    await store.add("a", 2.0, now - 7 * DAY)  # 11:30 seven days ago: its hour, 11:00, counts
    await store.add("a", 4.0, now)
    assert week.start(now) == utc(2025, 6, 7, 12)
    assert await store.spent("a", week, now) == 6.0
    assert await store.spent("a", week, now + 30 * 60) == 4.0  # 13:00: 12:00 of the 7th left


async def test_old_hours_are_purged(store: SpendStore) -> None:
    await store.add("a", 1.0, utc(2024, 1, 1))
    await store.add("a", 2.0, utc(2025, 6, 1))
    assert await store.purge_before(utc(2025, 1, 1)) == 1
    assert await store.spent("a", BudgetPeriod(days=999), utc(2025, 6, 1)) == 2.0


async def test_a_negative_or_endless_spend_is_refused(store: SpendStore) -> None:
    with pytest.raises(ValueError, match="finite amount >= 0"):
        await store.add("a", -0.01, 0.0)
    with pytest.raises(ValueError, match="finite amount >= 0"):
        await store.add("a", float("nan"), 0.0)


async def test_spend_survives_a_restart(tmp_path: Path) -> None:
    now = utc(2025, 6, 14)
    first = SQLiteSpendStore(tmp_path / "data")
    await first.add("team-a", 12.5, now)
    await first.aclose()
    again = SQLiteSpendStore(tmp_path / "data")
    await again.add("team-a", 0.25, now + HOUR)
    assert await again.spent("team-a", MONTHLY, now + HOUR) == 12.75
    await again.aclose()
    assert (tmp_path / "data" / "spend.sqlite3").is_file()


async def test_reading_before_any_spend_does_not_create_the_file(tmp_path: Path) -> None:
    store = SQLiteSpendStore(tmp_path / "data")
    assert await store.spent("a", MONTHLY, utc(2025, 6, 1)) == 0.0
    assert await store.purge_before(utc(2025, 6, 1)) == 0
    assert not (tmp_path / "data").exists()


async def test_a_store_that_fails_raises_store_unavailable(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("a file where the directory should be")
    store = SQLiteSpendStore(tmp_path / "data")
    with pytest.raises(StoreUnavailable):
        await store.add("a", 1.0, 0.0)
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "spend.sqlite3").write_bytes(b"not a database" * 100)
    with pytest.raises(StoreUnavailable, match="DatabaseError"):
        await SQLiteSpendStore(corrupt).spent("a", MONTHLY, 0.0)


async def test_two_stores_on_one_file_see_each_others_spend(tmp_path: Path) -> None:
    now = utc(2025, 6, 14)
    a, b = SQLiteSpendStore(tmp_path), SQLiteSpendStore(tmp_path)  # two workers
    await a.add("t", 1.0, now)
    await b.add("t", 2.0, now)
    assert await a.spent("t", MONTHLY, now) == 3.0
    await a.aclose()
    await b.aclose()
    with sqlite3.connect(tmp_path / "spend.sqlite3") as db:
        assert db.execute("SELECT tenant, hour, nano_usd FROM spend").fetchall() == [
            ("t", int(now), 3_000_000_000)
        ]


# -- the budget check --------------------------------------------------------------------


async def test_a_tenant_under_its_budget_or_without_one_may_spend() -> None:
    store = MemorySpendStore()
    now = utc(2025, 6, 14, 12)
    await store.add("a", 9.99, now)
    assert await check_budget(store, Tenant(name="a", budget=Budget(10.0)), now) is None
    assert await check_budget(store, Tenant(name="a"), now) is None


async def test_reaching_a_monthly_budget_names_it_and_when_it_resets() -> None:
    store = MemorySpendStore()
    now = utc(2025, 6, 14, 12)
    await store.add("team-a", 500.12, now)
    over = await check_budget(store, Tenant(name="team-a", budget=Budget(500.0)), now)
    assert over == OverBudget(
        tenant="team-a",
        budget_usd=500.0,
        spent_usd=500.12,
        period=MONTHLY,
        retry_after_s=utc(2025, 7, 1) - now,
        next_change=int(utc(2025, 7, 1)),
    )
    assert over.message == (
        "Tenant 'team-a' has reached its monthly budget of $500.00: $500.12 spent this month "
        "(UTC); it resets at 2025-07-01T00:00:00Z."
    )
    assert over.retry_after_header == str(int(utc(2025, 7, 1) - now))


async def test_december_resets_in_january() -> None:
    assert MONTHLY.next_change(utc(2025, 12, 31, 23)) == utc(2026, 1, 1)
    assert MONTHLY.start(utc(2025, 12, 31, 23)) == utc(2025, 12, 1)


async def test_reaching_a_rolling_budget_waits_for_the_next_hour() -> None:
    store = MemorySpendStore()
    now = utc(2025, 6, 14, 12, 45)
    await store.add("b", 50.0, now)
    tenant = Tenant(name="b", budget=Budget(50.0, BudgetPeriod(days=30)))
    over = await check_budget(store, tenant, now)
    assert over is not None and over.retry_after_s == 15 * 60
    assert over.message == (
        "Tenant 'b' has reached its 30-day rolling budget of $50.00: $50.00 spent in the last "
        "30 days."
    )


async def test_a_zero_budget_stops_every_request() -> None:
    tenant = Tenant(name="frozen", budget=Budget(0.0))
    assert await check_budget(MemorySpendStore(), tenant, utc(2025, 6, 1)) is not None
