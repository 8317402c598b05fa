"""RedisSpendStore against a real redis-server: the SQLite store's semantics, one total for
every instance, bounded keys, and ``StoreUnavailable`` when Redis fails."""

from __future__ import annotations

import calendar
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import trio

from trio_batcher.cluster import ClusterUnavailable, LuaScript, RedisLink, RedisSpendStore
from trio_batcher.cluster.spend import ADD
from trio_batcher.tenants import (
    Budget,
    BudgetPeriod,
    SpendLedger,
    StoreUnavailable,
    Tenant,
)
from trio_batcher.tenants.ledger import RETENTION_S

HOUR = 3600.0
DAY = 86_400.0
MONTHLY = BudgetPeriod()

PTTL = LuaScript("test_spend_pttl", "return redis.call('PTTL', KEYS[1])")
HLEN = LuaScript("test_spend_hlen", "return redis.call('HLEN', KEYS[1])")


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> float:
    return float(calendar.timegm((year, month, day, hour, minute, 0)))


async def test_two_instances_count_one_total(two_links: tuple[RedisLink, RedisLink]) -> None:
    a, b = (RedisSpendStore(link) for link in two_links)
    now = utc(2025, 6, 14, 12)
    async with trio.open_nursery() as nursery:
        for i in range(100):
            nursery.start_soon((a if i % 2 else b).add, "team-a", 0.0000031, now)
    await b.add("team-a", 0.0, now)  # nothing, and no round trip needed
    assert await a.spent("team-a", MONTHLY, now) == 0.00031
    assert await b.spent("team-a", MONTHLY, now) == 0.00031
    assert await a.spent("team-b", MONTHLY, now) == 0.0


async def test_a_monthly_budget_counts_the_calendar_month_in_utc(
    two_links: tuple[RedisLink, RedisLink],
) -> None:
    store = RedisSpendStore(two_links[0])
    await store.add("a", 1.0, utc(2025, 5, 31, 23, 59))
    await store.add("a", 2.0, utc(2025, 6, 1, 0, 0))
    await store.add("a", 4.0, utc(2025, 6, 30, 23, 59))
    assert await store.spent("a", MONTHLY, utc(2025, 5, 31, 23, 59)) == 1.0
    assert await store.spent("a", MONTHLY, utc(2025, 6, 30, 23, 59)) == 6.0
    assert await store.spent("a", MONTHLY, utc(2025, 7, 1)) == 0.0
    assert await store.spent("a", MONTHLY, utc(2025, 6, 15)) == 2.0  # June 30 not yet


async def test_a_rolling_budget_counts_whole_hours_back_to_n_days_ago(
    two_links: tuple[RedisLink, RedisLink],
) -> None:
    store = RedisSpendStore(two_links[0])
    week = BudgetPeriod(days=7)
    now = utc(2025, 6, 14, 12, 30)
    await store.add("a", 1.0, now - 7 * DAY - HOUR)  # the hour before the window
    await store.add("a", 2.0, now - 7 * DAY)  # its hour, 11:00 seven days ago, counts
    await store.add("a", 4.0, now)
    assert await store.spent("a", week, now) == 6.0
    assert await store.spent("a", week, now + 30 * 60) == 4.0


async def test_old_hours_are_purged_across_tenants(
    two_links: tuple[RedisLink, RedisLink],
) -> None:
    a, b = two_links
    store = RedisSpendStore(a)
    await store.add("a", 1.0, utc(2024, 1, 1))
    await store.add("a", 2.0, utc(2025, 6, 1))
    await store.add("b", 8.0, utc(2024, 1, 2))
    assert await RedisSpendStore(b).purge_before(utc(2025, 1, 1)) == 2
    assert await store.spent("a", BudgetPeriod(days=999), utc(2025, 6, 1)) == 2.0
    assert await store.spent("b", BudgetPeriod(days=999), utc(2024, 1, 2)) == 0.0
    assert await store.purge_before(utc(2025, 1, 1)) == 0  # "b" left the tenants set
    assert await a.run(PTTL, [a.key("spend", "tenant", "b")], []) == -2  # its hash is gone


async def test_keys_expire_after_the_longest_period_and_old_hours_are_dropped(
    two_links: tuple[RedisLink, RedisLink],
) -> None:
    link = two_links[0]
    store = RedisSpendStore(link)
    then = utc(2022, 1, 1)
    await store.add("a", 1.0, then)
    await store.add("a", 1.0, then + HOUR)
    key = link.key("spend", "tenant", "a")
    for k in (key, link.key("spend", "tenants")):
        ttl_ms = await link.run(PTTL, [k], [])
        assert RETENTION_S * 1000 - 5000 < ttl_ms <= RETENTION_S * 1000
    assert RETENTION_S > 999 * DAY + HOUR  # the longest rolling window the file accepts
    assert await link.run(HLEN, [key], []) == 2
    later = then + RETENTION_S + 2 * HOUR
    await store.add("a", 4.0, later)  # a new hour: the ones no budget can read are dropped
    assert await link.run(HLEN, [key], []) == 1
    assert await store.spent("a", BudgetPeriod(days=999), later) == 4.0


async def test_a_negative_or_endless_spend_is_refused(
    two_links: tuple[RedisLink, RedisLink],
) -> None:
    store = RedisSpendStore(two_links[0])
    with pytest.raises(ValueError, match="finite amount >= 0"):
        await store.add("a", -0.01, 0.0)
    with pytest.raises(ValueError, match="finite amount >= 0"):
        await store.add("a", float("inf"), 0.0)


class DownLink:
    """A ``Link`` whose every command fails, as ``RedisLink`` does when Redis is down."""

    command_timeout_s = 0.25

    def __init__(self) -> None:
        self.scripts: list[str] = []

    def key(self, *parts: str) -> str:
        return ":".join(("{down}", *parts))

    async def run(
        self, script: LuaScript, keys: Sequence[str], args: Sequence[str | int | float]
    ) -> Any:
        self.scripts.append(script.name)
        raise ClusterUnavailable(f"Redis failed {script.name}: ConnectionRefusedError()")

    async def listen(
        self,
        channel: str,
        on_message: Callable[[], None],
        *,
        max_backoff_s: float = 2.0,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        raise NotImplementedError


async def test_redis_failures_raise_store_unavailable() -> None:
    link = DownLink()
    store = RedisSpendStore(link)
    with pytest.raises(StoreUnavailable, match="spend_add") as caught:
        await store.add("a", 1.0, 0.0)
    assert isinstance(caught.value.__cause__, ClusterUnavailable)
    with pytest.raises(StoreUnavailable, match="spend_spent"):
        await store.spent("a", MONTHLY, 0.0)
    with pytest.raises(StoreUnavailable, match="spend_tenants"):
        await store.purge_before(0.0)
    await store.aclose()
    assert link.scripts == [ADD.name, "spend_spent", "spend_tenants"]


async def test_ledgers_on_two_instances_see_each_others_spend_within_a_refresh(
    two_links: tuple[RedisLink, RedisLink],
) -> None:
    # Real time and real Redis: a budget of $1 spent half on each instance.
    tenant = Tenant(name="team-a", budget=Budget(1.0))
    ledgers = [
        SpendLedger(RedisSpendStore(link), flush_every_s=0.05, refresh_every_s=0.1)
        for link in two_links
    ]
    async with trio.open_nursery() as nursery:
        for ledger in ledgers:
            ledger.set_tenants([tenant])
            await nursery.start(ledger.run)
        ledgers[0].charge("team-a", 0.5)
        ledgers[1].charge("team-a", 0.5)
        assert all(ledger.over_budget(tenant) is None for ledger in ledgers)
        await trio.sleep(0.5)  # a flush (50 ms) and a refresh (100 ms) each, with margin
        assert all(ledger.over_budget(tenant) for ledger in ledgers)
        nursery.cancel_scope.cancel()
    total = await RedisSpendStore(two_links[0]).spent("team-a", MONTHLY, time.time())
    assert total == 1.0


async def test_a_tenant_named_tenants_has_its_own_hash(
    two_links: tuple[RedisLink, RedisLink],
) -> None:
    store, now = RedisSpendStore(two_links[0]), utc(2025, 6, 14, 12)
    await store.add("tenants", 1.0, now)  # the name of the index, as a tenant's
    await store.add("other", 2.0, now)
    assert await store.spent("tenants", MONTHLY, now) == 1.0
    assert await store.spent("other", MONTHLY, now) == 2.0
    assert await store.purge_before(now + 2 * DAY) == 2
