"""ClusterSlots' choices, with fakes: leases while shared, the fallback share when Redis
fails, refusing under REDIS_FAILURE=closed."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from trio_batcher.cluster.connection import ClusterUnavailable
from trio_batcher.cluster.fallback import FallbackState
from trio_batcher.cluster.upstream_slots import ClusterSlots
from trio_batcher.errors import ProxyError
from trio_batcher.upstream.resilience import Resilience


class FakeSemaphore:
    def __init__(self, capacity: int = 8) -> None:
        self.capacity = capacity
        self.down = False
        self.held: set[str] = set()
        self.released: list[str] = []
        self.renewed = 0
        self.others_seen = 0
        self.ttl_s = 0.0

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

    async def acquire(self, holder: str, *, scope: str | None = None) -> None:
        await trio.lowlevel.checkpoint()
        if self.down:
            raise ClusterUnavailable("down")
        self.held.add(holder)

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


# -- an instance that starts while Redis is down ---------------------------------------------


class NeverCounted(FakeRegistry):
    last_seen_alive = 0  # Redis has not answered once: no count of the instances


async def test_an_instance_that_never_saw_redis_calls_nothing_until_it_answers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sem = FakeSemaphore(capacity=4)
    sem.down = True
    fallback = FallbackState()
    s = ClusterSlots(
        sem,  # type: ignore[arg-type]
        fallback,
        NeverCounted(),  # type: ignore[arg-type]
        Resilience(),
        rejoin_s=3.0,
    )
    fallback.report_failure(ClusterUnavailable("no answer from Redis at start"))
    granted: list[float] = []

    async def take(h: str) -> None:
        await s.acquire(h)
        granted.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        for i in range(3):
            nursery.start_soon(take, f"h{i}")
        await trio.sleep(60)  # past any settling time: the share is still 0, and no spin
        assert granted == [] and s.held_locally == 0
        sem.down = False
        fallback.report_success()  # the probe found Redis
    # Leases, once the others have had the rejoin time to put their local calls back.
    assert granted == [63.0, 63.0, 63.0] and len(sem.held) == 3


class SharedRedis:
    """One Redis for several fake instances: a lease semaphore of ``capacity``."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.down = False
        self.holders: dict[str, str] = {}  # member -> instance
        self.expired_while_down: set[str] = set()

    def come_back(self) -> None:
        """Up again; the leases released while it was down have expired meanwhile."""
        for member in self.expired_while_down:
            self.holders.pop(member, None)
        self.expired_while_down.clear()
        self.down = False


class InstanceView:
    """``LeaseSemaphore`` as one instance sees the shared fake."""

    def __init__(self, redis: SharedRedis, instance: str) -> None:
        self.redis = redis
        self.instance = instance
        self.others_seen = 0
        self.ttl_s = 0.0

    @property
    def seen_capacity(self) -> int:
        return self.redis.capacity

    @property
    def held_count(self) -> int:
        return sum(1 for owner in self.redis.holders.values() if owner == self.instance)

    def _member(self, holder: str) -> str:
        return f"{self.instance}/{holder}"

    def adopt(self, holders: set[str]) -> None:
        for holder in holders:
            self.redis.holders[self._member(holder)] = self.instance

    async def renew(self) -> None:
        await trio.lowlevel.checkpoint()
        if self.redis.down:
            raise ClusterUnavailable("down")

    async def acquire(self, holder: str, *, scope: str | None = None) -> None:
        while True:
            await trio.sleep(0.02)  # a round trip
            if self.redis.down:
                raise ClusterUnavailable("down")
            in_flight = len(self.redis.holders)
            self.others_seen = in_flight - self.held_count
            if in_flight < self.redis.capacity:
                self.redis.holders[self._member(holder)] = self.instance
                return

    async def release(self, holder: str) -> None:
        await trio.lowlevel.checkpoint()
        if self.redis.down:
            self.redis.expired_while_down.add(self._member(holder))
            raise ClusterUnavailable("down")
        self.redis.holders.pop(self._member(holder), None)


async def test_two_instances_one_started_during_the_outage_never_pass_the_cap(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A runs alone with Redis (it counts 1 instance, so its share is the whole cap of 4);
    Redis goes down, and B starts during the outage; Redis comes back and both rejoin.
    Both are asked for 6 concurrent calls throughout; the calls in flight, sampled at every
    change, never exceed 4."""
    redis = SharedRedis(capacity=4)
    in_flight = peak = 0
    served = {"a": 0, "b": 0}

    def instance(name: str, registry: FakeRegistry) -> tuple[ClusterSlots, FallbackState]:
        fallback = FallbackState()
        slots = ClusterSlots(
            InstanceView(redis, name),  # type: ignore[arg-type]
            fallback,
            registry,  # type: ignore[arg-type]
            Resilience(),
            rejoin_s=2.5,
            settle_default_s=5.0,
            settle_max_s=30.0,
        )
        return slots, fallback

    class Alone(FakeRegistry):
        last_seen_alive = 1

    async def caller(name: str, slots: ClusterSlots) -> None:
        nonlocal in_flight, peak
        while True:
            holder = slots.new_holder()
            await slots.acquire(holder)
            in_flight += 1
            peak = max(peak, in_flight)
            served[name] += 1
            try:
                await trio.sleep(0.7)  # the upstream call
            finally:
                in_flight -= 1
                await slots.release(holder)

    a, a_mode = instance("a", Alone())
    b, b_mode = instance("b", NeverCounted())
    async with trio.open_nursery() as nursery:
        for _ in range(6):
            nursery.start_soon(caller, "a", a)
        await trio.sleep(3)
        assert in_flight == 4 and a_mode.shared
        redis.down = True  # A's next round trip fails: it falls back, to its whole cap
        await trio.sleep(1)
        assert not a_mode.shared
        b_mode.report_failure(ClusterUnavailable("no answer from Redis at start"))
        for _ in range(6):
            nursery.start_soon(caller, "b", b)
        await trio.sleep(14)  # the outage
        assert served["b"] == 0
        redis.come_back()
        a_mode.report_success()  # each probe finds Redis, a moment apart
        await a.rejoin()
        await trio.sleep(0.5)
        b_mode.report_success()
        await b.rejoin()
        await trio.sleep(10)
        nursery.cancel_scope.cancel()
    assert peak == 4
    assert served["b"] > 0  # B serves once Redis has answered
