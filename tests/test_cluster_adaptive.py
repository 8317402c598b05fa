"""The cluster's adaptive limit against a real redis-server: one AIMD limit for every
instance, enforced by the lease acquire script, one decrease per epoch cluster-wide."""

from __future__ import annotations

import trio

from trio_batcher.cluster import RedisLink
from trio_batcher.cluster.adaptive import SharedAdaptiveLimit
from trio_batcher.cluster.fallback import FallbackState
from trio_batcher.cluster.instances import InstanceRegistry
from trio_batcher.cluster.leases import LeaseSemaphore

CAP = 10


def _instance(
    link: RedisLink, name: str, **kwargs: float
) -> tuple[LeaseSemaphore, SharedAdaptiveLimit]:
    semaphore = LeaseSemaphore(link, "upstream", CAP, ttl_s=5.0, instance_id=name, adaptive=True)
    adaptive = SharedAdaptiveLimit(
        link, semaphore, FallbackState(), maximum=CAP, decrease_factor=0.5, **kwargs
    )
    semaphore.on_reply = lambda capacity, epoch, _alive: adaptive.observe(capacity, epoch)
    return semaphore, adaptive


async def test_overloads_on_two_instances_in_one_epoch_cut_the_limit_once(
    two_links: tuple[RedisLink, RedisLink],
) -> None:
    (_, a), (_, b) = (_instance(link, name) for link, name in zip(two_links, "ab", strict=True))
    a.on_overload(a.epoch)
    a.on_overload(a.epoch)  # the same epoch: queued once
    b.on_overload(b.epoch)
    await a.flush()
    await b.flush()
    assert (a.limit, a.epoch) == (5, 1)
    assert (b.limit, b.epoch) == (5, 1)  # b's overload was of epoch 0: ignored
    b.on_overload(b.epoch)  # a new overload, seen under the new limit
    await b.flush()
    assert (b.limit, b.epoch) == (2, 2)
    assert b.statistics().decreases == 2


async def test_clean_calls_of_every_instance_add_up_to_one_increase(
    two_links: tuple[RedisLink, RedisLink],
) -> None:
    (_, a), (_, b) = (_instance(link, name) for link, name in zip(two_links, "ab", strict=True))
    a.on_overload(0)
    await a.flush()  # limit 5, epoch 1
    await b.flush()
    b.observe(5, 1)
    for _ in range(3):
        a.on_clean(1)
    for _ in range(2):
        b.on_clean(1)
    a.on_clean(0)  # a call from the old epoch says nothing about the new limit
    await a.flush()
    assert a.limit == 5  # 3 of 5 clean calls
    await b.flush()
    assert (b.limit, b.statistics().increases) == (6, 1)  # 3 + 2: one window of 5


async def test_a_failure_ends_the_clean_run(two_links: tuple[RedisLink, RedisLink]) -> None:
    (_, a), _ = (_instance(link, name) for link, name in zip(two_links, "ab", strict=True))
    a.on_overload(0)
    await a.flush()  # limit 5, epoch 1
    for _ in range(4):
        a.on_clean(1)
    a.on_failure(1)
    a.on_clean(1)
    await a.flush()
    assert a.limit == 5
    for _ in range(3):
        a.on_clean(1)
    await a.flush()
    assert a.limit == 5  # 1 + 3 after the failure
    a.on_clean(1)
    await a.flush()
    assert a.limit == 6


async def test_the_increase_stops_at_the_cap(two_links: tuple[RedisLink, RedisLink]) -> None:
    (_, a), _ = (_instance(link, name) for link, name in zip(two_links, "ab", strict=True))
    for _ in range(5 * CAP):
        a.on_clean(0)
    await a.flush()
    assert (a.limit, a.statistics().increases) == (CAP, 0)


async def test_the_acquire_script_grants_against_the_shared_limit_and_tells_the_epoch(
    two_links: tuple[RedisLink, RedisLink],
) -> None:
    (sem_a, a), (sem_b, b) = (
        _instance(link, name) for link, name in zip(two_links, "ab", strict=True)
    )
    a.on_overload(0)
    await a.flush()  # limit 5
    assert b.epoch == 0
    async with trio.open_nursery() as nursery:
        await nursery.start(sem_a.run)
        await nursery.start(sem_b.run)
        for i in range(5):
            await sem_b.acquire(f"b{i}")
        assert (b.limit, b.epoch, sem_b.seen_capacity) == (5, 1, 5)  # learnt from the reply
        with trio.move_on_after(0.3) as waited:
            await sem_a.acquire("a0")  # the sixth call, though the cap is 10
        assert waited.cancelled_caught
        await sem_b.release("b0")  # b gives it back: a said it was short
        with trio.fail_after(2):
            await sem_a.acquire("a0")
        nursery.cancel_scope.cancel()


async def test_a_raise_wakes_a_waiting_head_on_another_instance(
    two_links: tuple[RedisLink, RedisLink],
) -> None:
    (sem_a, a), (sem_b, _) = (
        _instance(link, name) for link, name in zip(two_links, "ab", strict=True)
    )
    a.on_overload(0)
    await a.flush()  # limit 5
    for i in range(5):
        await sem_a.acquire(f"a{i}")
    got = trio.Event()

    async def waiter() -> None:
        await sem_b.acquire("b0")
        got.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sem_b.run)
        nursery.start_soon(waiter)
        await trio.sleep(0.1)
        assert not got.is_set()
        for _ in range(5):
            a.on_clean(1)
        await a.flush()  # limit 6: published, so b's head asks again
        with trio.fail_after(2):
            await got.wait()
        nursery.cancel_scope.cancel()


async def test_a_quiet_cluster_starts_again_from_the_cap(
    two_links: tuple[RedisLink, RedisLink],
) -> None:
    (sem_a, a), _ = (
        _instance(link, name, idle_ttl_s=0.05) for link, name in zip(two_links, "ab", strict=True)
    )
    a.on_overload(0)
    await a.flush()
    assert a.limit == 5
    await trio.sleep(0.1)
    await sem_a.acquire("a0")
    assert (a.limit, a.epoch) == (CAP, 0)


async def test_reports_are_dropped_while_in_fallback(
    two_links: tuple[RedisLink, RedisLink],
) -> None:
    link = two_links[0]
    semaphore = LeaseSemaphore(link, "upstream", CAP, ttl_s=5.0, instance_id="a", adaptive=True)
    fallback = FallbackState()
    adaptive = SharedAdaptiveLimit(link, semaphore, fallback, maximum=CAP)
    fallback.report_failure(OSError("down"))
    adaptive.on_overload(0)
    await adaptive.flush()
    assert (adaptive.limit, adaptive.reports_dropped) == (CAP, 1)


async def test_an_acquire_reply_counts_the_instances_alive(
    two_links: tuple[RedisLink, RedisLink],
) -> None:
    a, b = two_links
    registry_a = InstanceRegistry(a, "a", ttl_s=5.0)
    registry_b = InstanceRegistry(b, "b", ttl_s=5.0)
    await registry_a.heartbeat()
    assert registry_a.last_seen_alive == 1
    semaphore = LeaseSemaphore(
        a, "upstream", CAP, ttl_s=5.0, instance_id="a", instances_key=registry_a.key
    )
    semaphore.on_reply = lambda _capacity, _epoch, alive: registry_a.observe(alive)
    await registry_b.heartbeat()  # b joins; a has not heartbeaten since
    await semaphore.acquire("a0")
    assert registry_a.last_seen_alive == 2


async def test_a_cut_reaches_a_busy_instance_at_once_and_binds_its_block(
    two_links: tuple[RedisLink, RedisLink],
) -> None:
    """Slots come from blocks, without a round trip per request, so an instance no longer
    learns the limit from its acquires: a cut is announced, and every instance syncs at
    once, busy or not; its block then grants no more than its new due."""
    (sem_a, a), (sem_b, b) = (
        _instance(link, name) for link, name in zip(two_links, "ab", strict=True)
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(sem_a.run)
        await nursery.start(sem_b.run)
        for i in range(8):
            await sem_b.acquire(f"b{i}")  # b's block: 8 of the 10, all in use
        a.on_overload(0)
        await trio.sleep(0.2)  # the subscriptions' first callbacks (a sync each) are over
        await a.flush()  # limit 5, epoch 1: b asked Redis nothing since
        with trio.fail_after(0.5):  # a renewal would take ttl / 3 (1.7 s)
            while sem_b.seen_capacity != 5:  # noqa: ASYNC110 (another instance's news)
                await trio.sleep(0.005)
        assert b.limit == 5
        for i in range(3):  # down to 5 in use: as many as the limit allows
            await sem_b.release(f"b{i}")
        with trio.move_on_after(0.2) as waited:
            await sem_b.acquire("b-next")
        assert waited.cancelled_caught  # the cut binds: no new slot until below 5
        await sem_b.release("b3")
        with trio.fail_after(1):
            await sem_b.acquire("b-next")
        nursery.cancel_scope.cancel()
