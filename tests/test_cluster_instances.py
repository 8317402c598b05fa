"""InstanceRegistry against a real redis-server: heartbeats, expiry, leaving."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Iterator

import pytest
import trio
from redis_support import RedisServer, open_test_link, running_redis, unique_prefix

from trio_batcher.cluster import InstanceRegistry, RedisLink, new_instance_id


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    with running_redis() as server:
        yield server


@pytest.fixture
async def two_links(redis_server: RedisServer) -> AsyncIterator[tuple[RedisLink, RedisLink]]:
    prefix = unique_prefix()
    async with (
        open_test_link(redis_server.url, prefix) as a,
        open_test_link(redis_server.url, prefix) as b,
    ):
        yield a, b
    gc.collect()


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
