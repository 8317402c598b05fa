"""InstanceRegistry against a real redis-server: heartbeats, expiry, leaving."""

from __future__ import annotations

import trio

from trio_batcher.cluster import InstanceRegistry, RedisLink, new_instance_id


async def test_heartbeats_count_the_instances_alive_and_the_silent_one_expires(
    two_links: tuple[RedisLink, RedisLink],
) -> None:
    a, b = two_links
    live = InstanceRegistry(a, "live", ttl_s=0.15)
    silent = InstanceRegistry(b, "silent", ttl_s=0.15)
    assert await live.heartbeat() == 1
    assert await silent.heartbeat() == 2
    assert live.last_seen_alive == 1 and silent.last_seen_alive == 2
    await trio.sleep(0.1)
    assert await live.heartbeat() == 2
    await trio.sleep(0.1)  # silent's last heartbeat is 0.2 s old now
    assert await live.alive() == 1
    assert live.last_seen_alive == 1


async def test_run_heartbeats_and_leaves_when_cancelled(
    two_links: tuple[RedisLink, RedisLink],
) -> None:
    a, b = two_links
    observer = InstanceRegistry(b, "observer", ttl_s=0.3)
    async with trio.open_nursery() as nursery:
        await nursery.start(InstanceRegistry(a, new_instance_id(), ttl_s=0.3).run)
        assert await observer.alive() == 1
        await trio.sleep(0.4)  # longer than the TTL: kept alive by the heartbeats
        assert await observer.alive() == 1
        nursery.cancel_scope.cancel()
    assert await observer.alive() == 0  # left at once, not after the TTL
