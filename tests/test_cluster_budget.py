"""SharedRetryBudget against a real redis-server: one budget for every instance, atomic."""

from __future__ import annotations

import trio

from trio_batcher.cluster import RedisLink, SharedRetryBudget


async def test_concurrent_retries_on_two_instances_never_overspend(
    two_links: tuple[RedisLink, RedisLink],
) -> None:
    budgets = [SharedRetryBudget(link, ratio=0.2, window_s=10, min_retries=3) for link in two_links]
    async with trio.open_nursery() as nursery:
        for i in range(50):
            nursery.start_soon(budgets[i % 2].record_request)
    spent: list[bool] = []

    async def retry(i: int) -> None:
        spent.append(await budgets[i % 2].try_spend())

    async with trio.open_nursery() as nursery:
        for i in range(60):
            nursery.start_soon(retry, i)
    assert spent.count(True) == 3 + 10  # min_retries + floor(0.2 * 50), counted once


async def test_the_budget_refills_as_requests_leave_the_window(
    two_links: tuple[RedisLink, RedisLink],
) -> None:
    a, b = two_links
    window = 0.2
    mine = SharedRetryBudget(a, ratio=1.0, window_s=window, min_retries=0, buckets=4)
    theirs = SharedRetryBudget(b, ratio=1.0, window_s=window, min_retries=0, buckets=4)
    assert not await mine.try_spend()  # nothing earned yet
    await theirs.record_request()
    assert await mine.try_spend()  # the other instance's request earned it
    assert not await theirs.try_spend()
    await trio.sleep(window + 0.06)  # the request (and the retry) left the window
    await mine.record_request()
    assert await theirs.try_spend()
