"""SharedCooldowns against a real redis-server, and the cooldown read inside the acquire."""

from __future__ import annotations

import trio

from trio_batcher.cluster import CooldownView, LeaseSemaphore, RedisLink, SharedCooldowns


async def test_a_hold_seen_by_one_instance_reaches_the_others_acquire(
    two_links: tuple[RedisLink, RedisLink],
) -> None:
    a, b = two_links
    await SharedCooldowns(a).hold("claude-x", 2.0, reason="rate_limited")
    sem_b = LeaseSemaphore(b, "upstream", 4, ttl_s=3, instance_id="b")
    grant = await sem_b.acquire("r1", scope="claude-x")  # one round trip: slot and cooldown
    assert 1.9 < grant.cooldown.remaining_s <= 2.0
    assert grant.cooldown.reason == "rate_limited"
    other_model = await sem_b.acquire("r2", scope="claude-y")
    assert other_model.cooldown == CooldownView(0.0, None)


async def test_the_shared_hold_holds_every_scope_and_the_longer_one_wins(
    two_links: tuple[RedisLink, RedisLink],
) -> None:
    a, b = two_links
    await SharedCooldowns(a).hold(None, 1.0, reason="overloaded")
    await SharedCooldowns(a).hold("claude-x", 3.0, reason="rate_limited")
    mine = SharedCooldowns(b)
    assert (await mine.remaining("claude-y")).reason == "overloaded"
    held_x = await mine.remaining("claude-x")
    assert held_x.reason == "rate_limited" and held_x.remaining_s > 2.9
    assert (await mine.remaining(None)).reason == "overloaded"


async def test_a_hold_only_ever_extends(two_links: tuple[RedisLink, RedisLink]) -> None:
    a, b = two_links
    first = await SharedCooldowns(a).hold("m", 2.0, reason="rate_limited")
    shorter = await SharedCooldowns(b).hold("m", 0.5, reason="overloaded")
    assert shorter.reason == "rate_limited" and shorter.remaining_s > 1.9  # unchanged
    longer = await SharedCooldowns(b).hold("m", 4.0, reason="overloaded")
    assert longer == CooldownView(4.0, "overloaded")
    assert first.remaining_s == 2.0


async def test_a_hold_ends_by_itself(two_links: tuple[RedisLink, RedisLink]) -> None:
    a, b = two_links
    await SharedCooldowns(a).hold(None, 0.03)
    assert (await SharedCooldowns(b).remaining(None)).remaining_s > 0
    await trio.sleep(0.05)
    assert await SharedCooldowns(b).remaining(None) == CooldownView(0.0, None)
