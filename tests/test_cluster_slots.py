"""ClusterSlots' choices, with fakes: leases while shared, the fallback share when Redis
fails, refusing under REDIS_FAILURE=closed, cooldowns adopted from the acquire."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from trio_batcher.cluster.connection import ClusterUnavailable
from trio_batcher.cluster.cooldowns import CooldownView
from trio_batcher.cluster.fallback import FallbackState
from trio_batcher.cluster.leases import Grant
from trio_batcher.cluster.upstream_slots import ClusterSlots
from trio_batcher.errors import ProxyError
from trio_batcher.upstream.resilience import Resilience


class FakeSemaphore:
    def __init__(self, capacity: int = 8) -> None:
        self.capacity = capacity
        self.down = False
        self.cooldown = CooldownView(0.0, None)
        self.held: set[str] = set()
        self.released: list[str] = []
        self.renewed = 0
        self.others_seen = 0

    @property
    def seen_capacity(self) -> int:
        return self.capacity

    @property
    def held_count(self) -> int:
        return len(self.held)

    def adopt(self, holders: set[str]) -> None:
        self.held |= holders

    async def renew(self) -> None:
        await trio.lowlevel.checkpoint()
        self.renewed += 1

    async def acquire(self, holder: str, *, scope: str | None = None) -> Grant:
        await trio.lowlevel.checkpoint()
        if self.down:
            raise ClusterUnavailable("down")
        self.held.add(holder)
        return Grant(len(self.held), self.cooldown)

    async def release(self, holder: str) -> None:
        await trio.lowlevel.checkpoint()
        if self.down:
            raise ClusterUnavailable("down")
        self.held.discard(holder)
        self.released.append(holder)


class FakeRegistry:
    last_seen_alive = 3
    frozen = False

    def freeze(self) -> None:
        self.frozen = True

    def thaw(self) -> None:
        self.frozen = False


def slots(semaphore: FakeSemaphore, **kwargs: Any) -> tuple[ClusterSlots, FallbackState]:
    fallback = FallbackState()
    return (
        ClusterSlots(
            semaphore,  # type: ignore[arg-type]
            fallback,
            FakeRegistry(),  # type: ignore[arg-type]
            Resilience(),
            **kwargs,
        ),
        fallback,
    )


async def test_while_shared_every_slot_is_a_lease(autojump_clock: trio.testing.MockClock) -> None:
    sem = FakeSemaphore()
    s, _ = slots(sem)
    holders = [s.new_holder() for _ in range(3)]
    assert len(set(holders)) == 3
    for h in holders:
        await s.acquire(h)
    assert sem.held == set(holders) and s.held_locally == 0
    for h in holders:
        await s.release(h)
    assert sem.held == set()


async def test_redis_failing_falls_back_to_this_instances_share(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sem = FakeSemaphore(capacity=8)
    sem.down = True
    s, fallback = slots(sem)
    got: list[str] = []

    async def take(h: str) -> None:
        await s.acquire(h)
        got.append(h)

    async with trio.open_nursery() as nursery:
        for i in range(4):
            nursery.start_soon(take, f"h{i}")
        await trio.sleep(1)
        assert not fallback.shared
        assert len(got) == 2  # 8 // 3 instances last seen alive
        await s.release(got[0])
        await trio.sleep(1)
        assert len(got) == 3
        nursery.cancel_scope.cancel()
    assert sem.released == []  # local slots go back locally


async def test_fail_closed_refuses_rather_than_guess(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sem = FakeSemaphore()
    sem.down = True
    s, _ = slots(sem, fail_closed=True)
    with pytest.raises(ProxyError) as refused:
        await s.acquire("h")
    assert refused.value.status == 503 and refused.value.code == "shared_state_unavailable"


async def test_a_cooldown_read_with_the_lease_is_adopted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sem = FakeSemaphore()
    sem.cooldown = CooldownView(2.0, "rate_limited")
    s, _ = slots(sem)
    resilience = s._resilience
    await s.acquire("h", "claude-x")
    assert resilience._holding("claude-x").until == pytest.approx(trio.current_time() + 2.0)
    assert resilience._holding("claude-other").until <= trio.current_time()


async def test_a_release_redis_misses_is_left_to_the_lease_expiry(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sem = FakeSemaphore()
    s, _ = slots(sem)
    await s.acquire("h")
    sem.down = True
    await s.release("h")  # no exception: the lease expires by itself


async def test_calls_that_took_a_lease_before_the_outage_count_against_the_share(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sem = FakeSemaphore(capacity=8)
    s, fallback = slots(sem)  # 3 instances last seen: a share of 2
    await s.acquire("leased")  # a lease, whose call still runs when Redis goes
    sem.down = True
    await s.acquire("local")  # one more makes 2
    assert not fallback.shared
    with trio.move_on_after(5) as waited:
        await s.acquire("third")
    assert waited.cancelled_caught  # the share is full, leases included
    sem.down = False
    await s.release("leased")  # the lease's release goes to Redis, and frees a place
    sem.down = True
    with trio.fail_after(1):
        await s.acquire("third")
    assert sem.released == ["leased"]


async def test_rejoining_makes_the_local_calls_leases_and_keeps_the_share_for_a_while(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sem = FakeSemaphore(capacity=8)
    sem.down = True
    s, fallback = slots(sem, rejoin_s=2.0)  # a share of 2
    await s.acquire("a")
    await s.acquire("b")
    sem.down = False
    fallback.report_success()
    await s.rejoin()
    assert sem.held == {"a", "b"} and s.held_locally == 0 and sem.renewed == 1
    with trio.move_on_after(1.5) as waited:
        await s.acquire("c")  # still bounded by the share: the others may not be back yet
    assert waited.cancelled_caught
    await trio.sleep(0.5)  # past the rejoin period: Redis alone bounds the cluster
    await s.acquire("c")
    assert sem.held == {"a", "b", "c"}
    await s.release("a")
    assert sem.released == ["a"]  # an adopted call's release goes to Redis


async def test_falling_back_leaves_room_for_the_others_calls_until_they_must_be_over(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sem = FakeSemaphore(capacity=8)
    s, fallback = slots(sem, settle_default_s=3.0)  # 3 instances last seen: a share of 2
    await s.acquire("mine")
    await s.release("mine")  # one call of 0 s: no sample long enough, the floor of 0.5 s
    sem.others_seen = 7  # the others held 7 of the 8 at the last round trip
    sem.down = True
    started = trio.current_time()
    await s.acquire("a")  # falls back: 8 - 7 = 1 place
    assert not fallback.shared and s._registry.frozen  # type: ignore[attr-defined]
    await s.acquire("b")  # waits for the others' calls to be over, then its share of 2
    assert trio.current_time() - started == pytest.approx(0.5)


async def test_the_settling_time_is_this_instances_longest_recent_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sem = FakeSemaphore(capacity=8)
    s, _ = slots(sem)
    await s.acquire("long")
    await trio.sleep(2.0)
    await s.release("long")
    sem.others_seen = 8  # the others held the whole cap
    sem.down = True
    started = trio.current_time()
    await s.acquire("a")  # nothing until their calls (as long as ours, 2 s) are over
    assert trio.current_time() - started == pytest.approx(2.0)
