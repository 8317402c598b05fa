"""SharedCooldowns against a real redis-server, and the watch that brings the others' holds
to each instance."""

from __future__ import annotations

import trio

from trio_batcher.cluster import CooldownView, RedisLink, SharedCooldowns
from trio_batcher.cluster.cooldowns import CooldownWatch
from trio_batcher.upstream.resilience import Resilience, ResilienceConfig


async def test_a_hold_seen_by_one_instance_reaches_the_others_resilience(
    two_links: tuple[RedisLink, RedisLink],
) -> None:
    a, b = two_links
    resilience = Resilience(ResilienceConfig())
    watch = CooldownWatch(b, resilience)
    async with trio.open_nursery() as nursery:
        await nursery.start(watch.run)
        await SharedCooldowns(a).hold("claude-x", 2.0, reason="rate_limited")
        with trio.fail_after(0.5):  # announced: well before the watch's own poll (1 s)
            while not watch.adopted:  # noqa: ASYNC110 (a counter, not an event)
                await trio.sleep(0.005)
        nursery.cancel_scope.cancel()
    now = trio.current_time()
    assert 1.5 < resilience.cooling_until("claude-x") - now <= 2.0
    assert resilience.cooling_until("claude-y") <= now  # a model's hold holds only that model


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
