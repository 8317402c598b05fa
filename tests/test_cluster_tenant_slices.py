"""The slice logic of ``cluster.tenant_buckets`` on trio's autojump clock.

``FakeRedis`` answers the two scripts (``RATE_TAKE``, ``BUDGET_TAKE``) with their Lua
semantics in Python, on trio's clock as the server's, so several ``SharedTenantLimits``
("instances") share one store and time is simulated. Every call is counted: how many round
trips the requests cost is part of what is tested. The Lua itself runs against a real
redis-server in ``tests/test_cluster_tenants.py``.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from trio_batcher.cluster import ClusterUnavailable, LuaScript
from trio_batcher.cluster.fallback import FallbackState, Mode
from trio_batcher.cluster.tenant_buckets import (
    IDLE_RETURN_S,
    SharedTenantCharge,
    SharedTenantLimits,
)
from trio_batcher.tenants import Limited, Tenant
from trio_batcher.tenants.model import Budget
from trio_batcher.tenants.spend import NANO, OverBudget


class FakeRedis:
    """The scripts' state: buckets ``key -> (level, stamp ms)``, counters ``key -> nano``."""

    def __init__(self) -> None:
        self.buckets: dict[str, tuple[float, float]] = {}
        self.committed: dict[str, int] = {}
        self.calls = 0
        self.down = False

    def level(self, key: str, capacity: int) -> float:
        now = trio.current_time() * 1000
        if key not in self.buckets:
            return float(capacity)
        level, stamp = self.buckets[key]
        return min(capacity, level + max(0.0, now - stamp) * capacity / 60000)

    def rate_take(self, key: str, args: Sequence[str | int | float]) -> list[str]:
        capacity, settle, want, need = (float(a) for a in args)
        rate = capacity / 60000
        level = min(capacity, self.level(key, int(capacity)) + settle)
        granted, wait_ms = 0.0, 0
        if need > 0:
            floor = min(need, capacity)
            if level >= floor:
                granted = max(need, min(want, level))
                level -= granted
            else:
                wait_ms = math.ceil((floor - level) / rate)
        self.buckets[key] = (level, trio.current_time() * 1000)
        return [repr(granted), str(wait_ms)]

    def budget_take(self, key: str, args: Sequence[str | int | float]) -> list[int]:
        budget, settle, want = (int(float(a)) for a in args[:3])
        committed = max(0, self.committed.get(key, 0) - settle)
        granted = 0
        if want > 0 and committed < budget:
            granted = min(want, budget - committed)
            committed += granted
        self.committed[key] = committed
        return [granted, committed]


class FakeLink:
    """One instance's ``Link`` to a ``FakeRedis``: a round trip takes 1 ms."""

    command_timeout_s = 0.25

    def __init__(self, redis: FakeRedis) -> None:
        self.redis = redis

    def key(self, *parts: str) -> str:
        return ":".join(("{t}", *parts))

    async def run(
        self, script: LuaScript, keys: Sequence[str], args: Sequence[str | int | float]
    ) -> Any:
        await trio.sleep(0.001)
        if self.redis.down:
            raise ClusterUnavailable("Redis is down (fake)")
        self.redis.calls += 1
        if script.name == "tenant_rate_take":
            return self.redis.rate_take(keys[0], args)
        assert script.name == "tenant_budget_take"
        return self.redis.budget_take(keys[0], args)

    async def listen(self, *args: Any, **kwargs: Any) -> None:  # pragma: no cover
        raise NotImplementedError


@asynccontextmanager
async def instances(
    n: int, redis: FakeRedis, alive: Callable[[], int] | None = None
) -> AsyncIterator[list[tuple[SharedTenantLimits, FallbackState]]]:
    """``n`` instances' limits, each with its own fallback state, running on ``redis``."""
    made = []
    async with trio.open_nursery() as nursery:
        for _ in range(n):
            fallback = FallbackState()
            limits = SharedTenantLimits(fallback, clock=lambda: 1_750_000_000.0)
            await nursery.start(limits.run, FakeLink(redis), alive or (lambda: n))
            made.append((limits, fallback))
        yield made
        nursery.cancel_scope.cancel()


def _admitted(taken: list[object]) -> int:
    return sum(isinstance(t, SharedTenantCharge) for t in taken)


async def test_two_instances_admit_the_tenants_rpm_once_not_twice(
    autojump_clock: trio.testing.MockClock,
) -> None:
    redis = FakeRedis()
    tenant = Tenant("t", rpm=20)
    async with instances(2, redis) as [(a, _), (b, _)]:
        taken = [await (a, b)[i % 2].admit(tenant, 0, 0.0) for i in range(60)]
        assert _admitted(taken) == 20
        refused = [t for t in taken if isinstance(t, Limited)]
        assert all(t.limit == "rpm" and 0 < t.retry_after_s <= 3.0 for t in refused)
        # Each refusal's wait is honest: one request has refilled after 3 s (20 a minute).
        await trio.sleep(refused[-1].retry_after_s)
        assert isinstance(await a.admit(tenant, 0, 0.0), SharedTenantCharge)


async def test_a_burst_shares_round_trips_and_later_requests_need_none(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A steady flow is charged from slices: far fewer round trips than requests."""
    redis = FakeRedis()
    tenant = Tenant("t", rpm=6000)
    async with instances(2, redis) as [(a, _), (b, _)]:
        for i in range(600):  # 10 a second per instance, for 30 s
            assert isinstance(await (a, b)[i % 2].admit(tenant, 0, 0.0), SharedTenantCharge)
            await trio.sleep(0.05)
    assert redis.calls <= 600 * 0.2, redis.calls


async def test_an_idle_slice_goes_back_so_the_other_instance_can_use_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    redis = FakeRedis()
    tenant = Tenant("t", rpm=100)
    key = "{t}:tenant-rate:rpm:t"
    async with instances(2, redis) as [(a, _), (b, _)]:
        for _ in range(20):  # a steady flow: a leases ahead of it
            assert isinstance(await a.admit(tenant, 0, 0.0), SharedTenantCharge)
            await trio.sleep(0.01)
        held = a.statistics()["slices_held"]
        leased = 100 - redis.level(key, 100)
        assert held == 1 and leased > 20  # a holds some of the bucket unused
        await trio.sleep(IDLE_RETURN_S + 0.3)
        # Returned: the bucket lacks only the 20 used (less what refilled meanwhile).
        assert 80 <= redis.level(key, 100) <= 84
        assert a.statistics()["returns"] == 1 and a.statistics()["slices_held"] == 0
        taken = [await b.admit(tenant, 0, 0.0) for _ in range(95)]
        assert _admitted(taken) >= 80


async def test_settled_tokens_reach_the_shared_bucket(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An under-estimate is a debt, an over-estimate a refund; both reach Redis with the
    slice's next call (here, its idle return)."""
    redis = FakeRedis()
    tenant = Tenant("t", tpm=6000)
    key = "{t}:tenant-rate:tpm:t"
    async with instances(1, redis) as [(a, _)]:
        first = await a.admit(tenant, 100, 0.0)
        second = await a.admit(tenant, 100, 0.0)
        assert isinstance(first, SharedTenantCharge) and isinstance(second, SharedTenantCharge)
        first.settle(1000)  # used 900 more than estimated
        second.refund()  # never reached the upstream
        await trio.sleep(IDLE_RETURN_S + 0.2)
        elapsed = trio.current_time()
        assert redis.level(key, 6000) == pytest.approx(
            min(6000, 6000 - 1000 + elapsed * 100), abs=1
        )


async def test_with_redis_down_each_instance_keeps_to_its_share_then_pays_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    redis = FakeRedis()
    tenant = Tenant("t", rpm=60)
    key = "{t}:tenant-rate:rpm:t"
    async with instances(2, redis) as [(a, fa), (b, fb)]:
        for i in range(4):
            assert isinstance(await (a, b)[i % 2].admit(tenant, 0, 0.0), SharedTenantCharge)
        await trio.sleep(IDLE_RETURN_S + 0.2)  # slices returned
        redis.down = True
        taken = [await (a, b)[i % 2].admit(tenant, 0, 0.0) for i in range(60)]
        assert fa.mode is Mode.FALLBACK and fb.mode is Mode.FALLBACK
        assert _admitted(taken) == 0  # the slices were empty: nothing burst at the outage
        await trio.sleep(10)  # each share (30 a minute) refills 5 in 10 s
        taken = [await (a, b)[i % 2].admit(tenant, 0, 0.0) for i in range(60)]
        assert _admitted(taken) == 10  # 2 x 5, not the 60 either would admit alone
        assert all(isinstance(t, Limited) for t in taken if not isinstance(t, SharedTenantCharge))
        redis.down = False
        for fallback in (fa, fb):
            fallback.report_success()
        before = redis.level(key, 60)
        taken = [await a.admit(tenant, 0, 0.0) for _ in range(60)]
        # Shared again: a alone takes what the bucket holds, less the 10 admitted in the
        # outage (a debt paid with a's first call; b's with its next).
        assert _admitted(taken) == pytest.approx(before - 5, abs=1)


async def test_an_instance_that_never_saw_the_count_refuses_during_an_outage(
    autojump_clock: trio.testing.MockClock,
) -> None:
    redis = FakeRedis()
    redis.down = True
    async with instances(1, redis, alive=lambda: 0) as [(a, _)]:
        taken = await a.admit(Tenant("t", rpm=60), 0, 0.0)
    assert isinstance(taken, Limited) and taken.retry_after_s >= 1


BUDGET = Budget(usd=0.001)


async def test_a_budget_is_reserved_once_across_instances(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Each request reserves its estimate ($0.00005) and settles to its cost ($0.0001):
    the two instances stop once the budget is committed (give or take the one request
    whose cost the other instance has not settled into Redis yet), not each at its own."""
    redis = FakeRedis()
    tenant = Tenant("t", budget=BUDGET)
    async with instances(2, redis) as [(a, _), (b, _)]:
        taken = []
        for i in range(40):
            charge = await (a, b)[i % 2].admit(tenant, 0, 0.00005)
            taken.append(charge)
            if isinstance(charge, SharedTenantCharge):
                charge.settle_cost(0.0001)
        admitted = _admitted(taken)
        assert 10 <= admitted <= 11
        over = [t for t in taken if isinstance(t, OverBudget)]
        assert over and all(o.retry_after_s > 0 for o in over)
        await trio.sleep(IDLE_RETURN_S + 0.2)
        assert sum(redis.committed.values()) == pytest.approx(admitted * 0.0001 * NANO)
