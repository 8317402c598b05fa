"""Two proxies sharing one Redis and one simulator: the cap and the cooldowns are global.

Both proxies run in this test's process (each its own app, Redis link, instance id and
leases), over real loopback HTTP, against a real redis-server.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
import trio
from redis_support import RedisServer, running_redis, unique_prefix
from support import Sim, proxy_settings, running_proxy, running_simulator

from trio_batcher.simulator import SimulatorConfig

pytestmark = pytest.mark.filterwarnings("ignore:Unclosed <MemoryObject:ResourceWarning")

CAP = 8


@pytest.fixture
def redis() -> Any:
    with running_redis() as server:
        yield server


@asynccontextmanager
async def two_proxies(
    redis: RedisServer, config: SimulatorConfig | None = None, **changes: Any
) -> AsyncIterator[tuple[str, str, Sim]]:
    prefix = unique_prefix()
    async with running_simulator(config or SimulatorConfig(ttft_ms=40, reply_tokens=4)) as sim:
        settings = proxy_settings(
            sim,
            batch_enabled=True,
            batch_max_concurrency=CAP,
            batch_max_wait_ms=1,
            redis_url=redis.url,
            redis_key_prefix=prefix,
            # A loaded CI machine can starve a proxy past the default 0.5 s deadline, which
            # would be a fallback with Redis healthy; the outage test sets its own.
            **{
                "metrics_enabled": True,
                "upstream_max_retries": 0,
                "redis_timeout_s": 2.0,
                **changes,
            },
        )
        async with running_proxy(settings) as a, running_proxy(settings) as b:
            yield a, b, sim


def _body(text: str) -> dict[str, Any]:
    return {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": text}]}


async def _flood(http: httpx2.AsyncClient, urls: list[str], n: int) -> list[int]:
    statuses: list[int] = []

    async def one(i: int) -> None:
        url = urls[i % len(urls)]
        reply = await http.post(f"{url}/v1/chat/completions", json=_body(f"hello {i}"))
        statuses.append(reply.status_code)

    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(one, i)
    return statuses


def _http() -> httpx2.AsyncClient:
    limits = httpx2.Limits(max_connections=500, max_keepalive_connections=500)
    return httpx2.AsyncClient(timeout=60, limits=limits)


async def test_the_cap_holds_across_both_proxies_and_one_alone_can_use_all_of_it(
    redis: RedisServer,
) -> None:
    async with two_proxies(redis) as (a, b, sim), _http() as http:
        statuses = await _flood(http, [a, b], 400)
        assert statuses == [200] * 400
        stats = await sim.stats()
        assert stats["max_in_flight"] <= CAP, stats["max_in_flight"]  # never past the cap
        # ... and using it: more than one instance's share (the cap is not cut in halves).
        assert stats["max_in_flight"] > CAP // 2
        await sim.reset()
        statuses = await _flood(http, [a], 120)  # b idle: a may use the whole cap
        assert statuses == [200] * 120
        alone = (await sim.stats())["max_in_flight"]
        assert CAP // 2 < alone <= CAP
        metrics = (await http.get(f"{a}/metrics")).json()
        text = (await http.get(f"{a}/metrics/prometheus")).text
    cluster = metrics["cluster"]
    assert cluster["mode"] == "shared" and cluster["instances_alive"] == 2
    assert cluster["held_here"] == 0 and cluster["cap"] == CAP
    label = f'{{instance="{cluster["instance"]}"}}'
    assert f"trio_batcher_cluster_shared{label} 1.0" in text
    assert f"trio_batcher_cluster_upstream_cap{label} {float(CAP)}" in text
    assert f"trio_batcher_cluster_instances_alive{label} 2.0" in text
    redis_stats = cluster["redis"]
    # 320 requests through this proxy; slots come from its block, not from a round trip
    # each: what Redis saw is the block's syncs, renewals and the other shared state.
    assert redis_stats["failures"] == 0 and 0 < redis_stats["commands"] < 160
    assert cluster["lease_syncs"] < 100
    assert 0 < redis_stats["p50"] <= redis_stats["p99"]
    p99 = redis_stats["p99"] / 1000
    assert (
        f'trio_batcher_cluster_redis_round_trip_seconds{{instance="{cluster["instance"]}",quantile="0.99"}} {p99}'
        in text
    )


async def test_an_overload_told_to_one_proxy_holds_the_others_calls(redis: RedisServer) -> None:
    async with two_proxies(redis) as (a, b, _sim), _http() as http:
        refused = await http.post(
            f"{a}/v1/chat/completions", json=_body("[[sim:status=529,retry_after=2]] busy")
        )
        assert refused.status_code in (503, 529)
        with trio.fail_after(5):  # the hold reaches b through Redis within moments
            while True:
                metrics = (await http.get(f"{a}/metrics")).json()
                if metrics["cluster"]["cooldowns_published"] >= 1:
                    break
                await trio.sleep(0.01)
        started = time.monotonic()
        held = await http.post(f"{b}/v1/chat/completions", json=_body("after the overload"))
        waited = time.monotonic() - started
    assert held.status_code == 200
    assert 1.0 <= waited <= 4.0, waited  # b waited out (most of) a's two seconds


async def test_an_overload_on_one_proxy_cuts_the_adaptive_limit_of_both(
    redis: RedisServer,
) -> None:
    async with (
        two_proxies(redis, batch_adaptive=True, upstream_coordinated_backoff=False) as (
            a,
            b,
            _sim,
        ),
        _http() as http,
    ):
        assert (await http.post(f"{b}/v1/chat/completions", json=_body("hi"))).status_code == 200
        refused = await http.post(f"{a}/v1/chat/completions", json=_body("[[sim:status=529]] busy"))
        assert refused.status_code in (503, 529)
        with trio.fail_after(5):  # the cut is reported at once, not at the next quarter second
            while (await http.get(f"{a}/metrics")).json()["cluster"]["adaptive_limit"] == CAP:  # noqa: ASYNC110
                await trio.sleep(0.01)
        # b's next acquire reads the cluster's limit: it never saw an overload itself.
        assert (await http.post(f"{b}/v1/chat/completions", json=_body("hi"))).status_code == 200
        cluster = (await http.get(f"{b}/metrics")).json()["cluster"]
        upstream = (await http.get(f"{b}/metrics")).json()["upstream"]
    cut = int(CAP * 0.9)
    assert cluster["adaptive_limit"] == cluster["cap_in_force"] == cut
    assert upstream["adaptive_limit"] == cut


async def test_redis_stopped_mid_run_costs_no_5xx_and_the_cap_still_holds(
    redis: RedisServer,
) -> None:
    async with two_proxies(redis, redis_timeout_s=0.2) as (a, b, sim), _http() as http:
        assert await _flood(http, [a, b], 40) == [200] * 40
        with trio.fail_after(10):  # each has counted the other by a heartbeat (ttl / 3)
            for url in (a, b):
                while (  # noqa: ASYNC110 (another server's state: only polling sees it)
                    (await http.get(f"{url}/metrics")).json()["cluster"]["instances_alive"] < 2
                ):
                    await trio.sleep(0.05)
        await redis.astop()
        await sim.reset()
        statuses = await _flood(http, [a, b], 120)
        assert all(s < 500 for s in statuses), statuses
        assert statuses.count(200) == 120
        assert (await sim.stats())["max_in_flight"] <= CAP  # each fell back to CAP // 2
        metrics = (await http.get(f"{a}/metrics")).json()
        assert metrics["cluster"]["mode"] == "fallback"
        await redis.astart()
        with trio.fail_after(10):
            while (  # noqa: ASYNC110 (another server's state: only polling sees it)
                (await http.get(f"{a}/metrics")).json()["cluster"]["mode"] != "shared"
            ):
                await trio.sleep(0.05)
        assert await _flood(http, [a, b], 40) == [200] * 40


async def test_the_retry_budget_is_the_clusters_not_each_instances(redis: RedisServer) -> None:
    # Ratio 0: the budget is its floor, 2 retries per window, for the whole cluster.
    changes = {"retry_budget_ratio": 0.0, "upstream_max_retries": 2}
    async with two_proxies(redis, **changes) as (a, b, sim), _http() as http:
        for i in range(6):
            url = (a, b)[i % 2]
            reply = await http.post(
                f"{url}/v1/chat/completions", json=_body(f"[[sim:status=500]] fail {i}")
            )
            assert reply.status_code >= 500
        calls = (await sim.stats())["requests_total"]
        retries = [(await http.get(f"{u}/metrics")).json()["upstream"]["retries"] for u in (a, b)]
    assert sum(retries) == 2, retries  # two instances, one budget: not 2 each
    assert calls == 6 + 2
