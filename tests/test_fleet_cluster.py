"""Many upstreams and many instances: cache affinity shared through a real ``redis-server``.

Two gateways in front of the same two simulated upstreams, sharing one Redis. A
conversation started on one gateway and continued on the other must reach the upstream
that served its first turn -- where its prompt cache is -- although the second gateway's
own weighted choice would have sent it elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from redis_support import RedisServer, running_redis, unique_prefix
from support import SIM_KEY, Sim, running_proxy, running_simulator
from test_fleet_live import upstreams_toml

from trio_batcher.settings import Settings
from trio_batcher.simulator import SimulatorConfig


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    with running_redis() as server:
        yield server


def _turn(text: str, *history: dict[str, Any]) -> dict[str, Any]:
    messages = [*history, {"role": "user", "content": text}]
    return {"model": "claude-sonnet-4-5", "max_tokens": 32, "messages": messages}


async def _send(http: httpx2.AsyncClient, url: str, body: dict[str, Any]) -> dict[str, Any]:
    reply = await http.post(
        f"{url}/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"}
    )
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


def _settings(path: Path, tmp_path: Path, redis_url: str | None, *, cap: int) -> Settings:
    """A gateway on the upstreams of ``path``, with the gateway cap shared through Redis
    when ``redis_url`` is given (the cluster's shared state needs batching on)."""
    return Settings(
        upstreams_file=str(path),
        data_dir=str(tmp_path / "data"),
        batch_enabled=True,
        batch_max_concurrency=cap,
        batch_max_wait_ms=1,
        redis_url=redis_url,
        redis_key_prefix=unique_prefix(),
        redis_timeout_s=2.0,
        metrics_enabled=True,
    )


async def _remembered(http: httpx2.AsyncClient, url: str) -> int:
    cluster = (await http.get(f"{url}/metrics")).json()["cluster"]
    return int(cluster["affinity"]["remembered"])


async def _firsts(sim: Sim) -> list[str]:
    """The first user message of every request ``sim`` received."""
    return [json.loads(e["body"])["messages"][0]["content"] for e in await sim.received()]


@pytest.mark.parametrize("shared", [True, False], ids=["redis", "no-redis"])
async def test_a_conversation_continued_on_another_instance_keeps_its_upstream(
    redis: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared: bool
) -> None:
    for i in range(2):
        monkeypatch.setenv(f"FLEET_KEY_{i}", SIM_KEY)
    async with running_simulator() as up0, running_simulator() as up1:
        path = tmp_path / "upstreams.toml"
        path.write_text(upstreams_toml([up0, up1]))
        settings = _settings(path, tmp_path, redis.url if shared else None, cap=8)
        async with (
            running_proxy(settings) as a,
            running_proxy(settings) as b,
            httpx2.AsyncClient(timeout=30) as http,
        ):
            first = _turn("conversation A")
            answer = await _send(http, a, first)  # a's first pick: up0
            # b's own first pick goes to another conversation, so its next pick is up1.
            await _send(http, b, _turn("conversation B"))
            history = [*first["messages"], {"role": "assistant", "content": answer["content"]}]
            if shared:  # the writer is off the request path: poll (another server) for it
                with trio.fail_after(5):
                    while not await _remembered(http, a):  # noqa: ASYNC110
                        await trio.sleep(0.01)
            await _send(http, b, _turn("and then?", *history))
            metrics = (await http.get(f"{b}/metrics")).json()
        on_up0, on_up1 = await _firsts(up0), await _firsts(up1)
    assert on_up0.count("conversation A") == (2 if shared else 1)
    assert on_up1.count("conversation A") == (0 if shared else 1)
    if shared:
        assert metrics["cluster"]["affinity"]["recalled"] == 1
        assert metrics["routing"]["affinity"]["kept"] == 1


@pytest.mark.parametrize("shared", [True, False], ids=["redis", "no-redis"])
async def test_an_upstream_overloaded_on_one_instance_is_left_alone_by_the_other(
    redis: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared: bool
) -> None:
    """up0 answers 529 with ``retry-after: 30``. Instance a learns it by one failed
    attempt (and fails over); with Redis, instance b adopts that upstream's cooldown and
    sends its requests straight to up1: up0 sees exactly one request. Without Redis, b
    pays a failed attempt of its own."""
    for i in range(2):
        monkeypatch.setenv(f"FLEET_KEY_{i}", SIM_KEY)
    storm = SimulatorConfig(rate_529=1.0, retry_after_s=30)
    async with running_simulator(storm) as up0, running_simulator() as up1:
        path = tmp_path / "upstreams.toml"
        path.write_text(upstreams_toml([up0, up1]))
        settings = _settings(path, tmp_path, redis.url if shared else None, cap=8)
        async with (
            running_proxy(settings) as a,
            running_proxy(settings) as b,
            httpx2.AsyncClient(timeout=30) as http,
        ):
            await _send(http, a, _turn("first, on a"))  # up0 fails, up1 serves
            if shared:
                with trio.fail_after(5):
                    while not await _adopted(http, b):  # noqa: ASYNC110
                        await trio.sleep(0.01)
            for n in range(3):
                await _send(http, b, _turn(f"then on b {n}"))
        tried_up0 = len(await up0.received())
        served_up1 = len(await up1.received())
    assert tried_up0 == (1 if shared else 2)
    assert served_up1 == 4


async def _adopted(http: httpx2.AsyncClient, url: str) -> int:
    cluster = (await http.get(f"{url}/metrics")).json()["cluster"]
    return int(cluster["upstream_cooldowns"]["adopted"])


async def test_each_upstreams_cap_holds_across_instances(
    redis: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Caps 2 and 3, two instances, 20 concurrent slow calls split between them: never
    more than 2 and 3 calls in flight at the two upstreams (each instance alone would
    allow its full cap), and both used."""
    for i in range(2):
        monkeypatch.setenv(f"FLEET_KEY_{i}", SIM_KEY)
    slow = SimulatorConfig(ttft_ms=200)
    async with running_simulator(slow) as up0, running_simulator(slow) as up1:
        path = tmp_path / "upstreams.toml"
        path.write_text(upstreams_toml([up0, up1], max_concurrency=[2, 3]))
        settings = _settings(path, tmp_path, redis.url, cap=64)
        async with (
            running_proxy(settings) as a,
            running_proxy(settings) as b,
            httpx2.AsyncClient(timeout=60) as http,
        ):
            statuses: list[int] = []

            async def one(n: int) -> None:
                url = (a, b)[n % 2]
                reply = await http.post(
                    f"{url}/v1/messages",
                    json=_turn(f"slow call {n}"),
                    headers={"anthropic-version": "2023-06-01"},
                )
                statuses.append(reply.status_code)

            async with trio.open_nursery() as nursery:
                for n in range(20):
                    nursery.start_soon(one, n)
            cluster = (await http.get(f"{a}/metrics")).json()["cluster"]
        stats = [await up0.stats(), await up1.stats()]
    assert statuses == [200] * 20
    assert stats[0]["max_in_flight"] <= 2 and stats[1]["max_in_flight"] <= 3
    assert all(s["by_status"]["200"] > 0 for s in stats)
    assert set(cluster["upstream_slots"]) == {"up0", "up1"}


async def test_an_upstreams_cap_still_holds_across_instances_while_redis_is_away(
    redis: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One upstream, cap 4, two instances that have seen each other: Redis stopped, 40
    concurrent slow calls over both still never put more than 4 in flight at the upstream
    (each instance falls back to its share, 2), and none fails."""
    monkeypatch.setenv("FLEET_KEY_0", SIM_KEY)
    async with running_simulator(SimulatorConfig(ttft_ms=100)) as up0:
        path = tmp_path / "upstreams.toml"
        path.write_text(upstreams_toml([up0], max_concurrency=[4]))
        settings = _settings(path, tmp_path, redis.url, cap=64).replace(redis_timeout_s=0.2)
        async with (
            running_proxy(settings) as a,
            running_proxy(settings) as b,
            httpx2.AsyncClient(timeout=60) as http,
        ):
            with trio.fail_after(10):  # each has counted the other (a heartbeat)
                for url in (a, b):
                    while (await http.get(f"{url}/metrics")).json()["cluster"][  # noqa: ASYNC110
                        "instances_alive"
                    ] != 2:
                        await trio.sleep(0.05)
            await redis.astop()
            statuses: list[int] = []

            async def one(n: int) -> None:
                reply = await http.post(
                    f"{(a, b)[n % 2]}/v1/messages",
                    json=_turn(f"while redis is away {n}"),
                    headers={"anthropic-version": "2023-06-01"},
                )
                statuses.append(reply.status_code)

            async with trio.open_nursery() as nursery:
                for n in range(40):
                    nursery.start_soon(one, n)
            mode = (await http.get(f"{a}/metrics")).json()["cluster"]["mode"]
        stats = await up0.stats()
    assert statuses == [200] * 40
    assert mode == "fallback"
    assert 0 < stats["max_in_flight"] <= 4
