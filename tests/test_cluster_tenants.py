"""A tenant's rpm, tpm and budget are the cluster's: two proxies sharing one Redis admit
what one would, not twice it (issue 30); with Redis stopped each falls back to its share.

Both proxies run in this test's process (each its own app, Redis link and instance id,
``cluster.tenant_buckets`` leasing slices of the tenant's shared buckets), over real
loopback HTTP, against a real redis-server and the simulator.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from redis_support import RedisServer, running_redis, unique_prefix
from support import Sim, proxy_settings, running_proxy, running_simulator

from trio_batcher.simulator import SimulatorConfig
from trio_batcher.tenants import hash_key
from trio_batcher.token_estimate import tokens_for

pytestmark = pytest.mark.filterwarnings("ignore:Unclosed <MemoryObject:ResourceWarning")

KEY = "tb-key-of-the-limited-tenant-0123"
TOKEN = "metrics-token-of-the-operator-0123"


@pytest.fixture
def redis() -> Any:
    with running_redis() as server:
        yield server


def _tenants_file(tmp_path: Path, **fields: Any) -> Path:
    lines = ["[[tenant]]", 'name = "limited"', f'key_sha256 = ["{hash_key(KEY)}"]']
    lines += [f"{name} = {value!r}" for name, value in fields.items()]
    path = tmp_path / "tenants.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@asynccontextmanager
async def _two_proxies(
    redis: RedisServer, tenants: Path, **changes: Any
) -> AsyncIterator[tuple[str, str, Sim]]:
    prefix = unique_prefix()
    async with running_simulator(SimulatorConfig(ttft_ms=5, reply_tokens=4)) as sim:
        settings = proxy_settings(
            sim,
            batch_max_concurrency=8,
            batch_max_wait_ms=1,
            redis_url=redis.url,
            redis_key_prefix=prefix,
            tenants_file=str(tenants),
            metrics_enabled=True,
            metrics_token=TOKEN,
            max_queue=200,
            **{
                "batch_enabled": True,
                "upstream_max_retries": 0,
                "redis_timeout_s": 2.0,
                **changes,
            },
        )
        async with running_proxy(settings) as a, running_proxy(settings) as b:
            yield a, b, sim


def _http() -> httpx2.AsyncClient:
    limits = httpx2.Limits(max_connections=200, max_keepalive_connections=200)
    return httpx2.AsyncClient(timeout=60, limits=limits)


def _body(text: str) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": text}],
    }


async def _post(http: httpx2.AsyncClient, url: str, i: int, text: str = "hello") -> httpx2.Response:
    """Even ``i``: the OpenAI door; odd: the Anthropic one (each answers in its dialect)."""
    if i % 2 == 0:
        return await http.post(
            f"{url}/v1/chat/completions",
            json=_body(f"{text} {i}"),
            headers={"Authorization": f"Bearer {KEY}"},
        )
    return await http.post(
        f"{url}/v1/messages",
        json=_body(f"{text} {i}"),
        headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
    )


async def _burst(
    http: httpx2.AsyncClient, urls: list[str], n: int, text: str = "hello"
) -> list[tuple[int, httpx2.Response]]:
    """``n`` requests at once, spread over ``urls`` (request ``i`` to ``urls[i % len]``,
    alternating doors per proxy)."""
    replies: list[tuple[int, httpx2.Response]] = []

    async def one(i: int) -> None:
        url = urls[i % len(urls)]
        replies.append((i, await _post(http, url, i // len(urls), text)))

    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(one, i)
    return replies


def _check_refusals(replies: list[tuple[int, httpx2.Response]], urls: int, code: str) -> None:
    """Every reply is 200 or a 429 in its client's dialect; never a 5xx."""
    for i, reply in replies:
        assert reply.status_code in (200, 429), (reply.status_code, reply.text)
        if reply.status_code != 429:
            continue
        assert int(reply.headers["retry-after"]) >= 1
        error = reply.json()["error"]
        if (i // urls) % 2 == 0:  # OpenAI
            assert error["code"] == code, error
        else:  # Anthropic
            assert reply.json()["type"] == "error" and error["type"] == "rate_limit_error", error


async def _metrics(http: httpx2.AsyncClient, url: str) -> dict[str, Any]:
    reply = await http.get(f"{url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    metrics: dict[str, Any] = reply.json()
    return metrics


RPM = 20


@pytest.mark.parametrize("batching", [True, False], ids=["with-the-cap", "redis-alone"])
async def test_rpm_is_the_clusters_across_two_instances(
    redis: RedisServer, tmp_path: Path, batching: bool
) -> None:
    """rpm = 20, 60 quick requests split over two proxies: at most 20 (and what refilled
    meanwhile) get through, not 40; the rest are 429 in each client's dialect. Whether or
    not the proxies have an upstream cap to share (``BATCH_ENABLED``): ``REDIS_URL`` alone
    makes tenants' limits global."""
    async with (
        _two_proxies(redis, _tenants_file(tmp_path, rpm=RPM), batch_enabled=batching) as (
            a,
            b,
            sim,
        ),
        _http() as http,
    ):
        started = time.monotonic()
        replies = await _burst(http, [a, b], 60)
        elapsed = time.monotonic() - started
        upstream = (await sim.stats())["requests_total"]
        cluster = (await _metrics(http, a))["cluster"]
    admitted = sum(reply.status_code == 200 for _, reply in replies)
    refill = elapsed * RPM / 60
    assert RPM - 1 <= admitted <= RPM + refill, (admitted, elapsed)
    assert upstream == admitted  # refusals never reach the upstream
    _check_refusals(replies, 2, "rate_limit_exceeded")
    limits = cluster["tenant_limits"]
    assert limits["refills"] >= 1 and limits["redis_failures"] == 0


TPM = 1000
FILLER = "x" * 400  # each request's estimate is its body's length / 4: about 120 tokens


async def test_tpm_is_the_clusters_across_two_instances(redis: RedisServer, tmp_path: Path) -> None:
    """tpm = 1000, requests of about 120 estimated tokens: the two proxies together admit
    about 1000 tokens' worth (8 requests), not each its own 1000."""
    async with (
        _two_proxies(redis, _tenants_file(tmp_path, tpm=TPM)) as (a, b, _sim),
        _http() as http,
    ):
        started = time.monotonic()
        replies = await _burst(http, [a, b], 60, FILLER)
        elapsed = time.monotonic() - started
    admitted = sum(reply.status_code == 200 for _, reply in replies)
    per_request = tokens_for(len(FILLER) + 60)  # the body around it adds about 60 characters
    allowed = (TPM + elapsed * TPM / 60) / per_request
    assert 3 <= admitted <= allowed + 1, (admitted, allowed, elapsed)
    _check_refusals(replies, 2, "rate_limit_exceeded")


BUDGET_USD = 0.001


async def test_a_budget_is_charged_once_across_two_instances(
    redis: RedisServer, tmp_path: Path
) -> None:
    """A budget of $0.001 (about ten requests' worth) used through both proxies in turn:
    the cluster stops at the budget (plus the one request that crosses it), not at twice."""
    async with (
        _two_proxies(redis, _tenants_file(tmp_path, budget_usd=BUDGET_USD)) as (a, b, _sim),
        _http() as http,
    ):
        statuses = []
        for i in range(60):
            reply = await _post(http, (a, b)[i % 2], i // 2)
            statuses.append(reply.status_code)
            if reply.status_code == 429:
                assert reply.headers["x-should-retry"] == "false"
                if (i // 2) % 2 == 0:
                    assert reply.json()["error"]["code"] == "insufficient_quota"
        spent = [
            (await _metrics(http, url))["by_tenant"]["limited"]["estimated_cost_usd"]
            for url in (a, b)
        ]
    admitted = statuses.count(200)
    per_request = sum(spent) / admitted
    assert set(statuses) == {200, 429}
    assert statuses.index(429) == admitted  # once refused, refused on both
    assert sum(spent) <= BUDGET_USD + per_request + 1e-9, (spent, admitted)
    assert sum(spent) >= BUDGET_USD - 2 * per_request, (spent, admitted)


OUTAGE_RPM = 60


async def test_redis_stopped_limits_fall_back_to_shares_and_return_to_global(
    redis: RedisServer, tmp_path: Path
) -> None:
    """rpm = 60 over two proxies. Redis stopped: a burst gets no 5xx, and the two admit at
    most their shares (each 30 a minute, starting from what its slice held), not the 60
    each would alone. Redis restarted on its port: both return to shared, and one proxy
    alone admits more than its share again (the limit is global once more)."""
    async with (
        _two_proxies(redis, _tenants_file(tmp_path, rpm=OUTAGE_RPM), redis_timeout_s=0.3) as (
            a,
            b,
            _sim,
        ),
        _http() as http,
    ):
        with trio.fail_after(10):  # each has counted the other by a heartbeat
            for url in (a, b):
                while (await _metrics(http, url))["cluster"]["instances_alive"] != 2:  # noqa: ASYNC110
                    await trio.sleep(0.05)
        before = await _burst(http, [a, b], 6)
        assert [reply.status_code for _, reply in before] == [200] * 6
        await redis.astop()
        started = time.monotonic()
        during = await _burst(http, [a, b], 60)
        elapsed = time.monotonic() - started
        modes = [(await _metrics(http, url))["cluster"] for url in (a, b)]
        await redis.astart()
        with trio.fail_after(10):
            for url in (a, b):
                while (await _metrics(http, url))["cluster"]["mode"] != "shared":  # noqa: ASYNC110
                    await trio.sleep(0.05)
        started = time.monotonic()
        after = await _burst(http, [a], 50)
        elapsed_after = time.monotonic() - started
        cluster = (await _metrics(http, a))["cluster"]
    _check_refusals(during, 2, "rate_limit_exceeded")
    _check_refusals(after, 1, "rate_limit_exceeded")
    assert all(m["mode"] == "fallback" for m in modes), modes
    admitted = sum(reply.status_code == 200 for _, reply in during)
    # Each instance: what its slice held (at most 20% of the limit per instance: 6), then
    # its share's refill (30 a minute).
    most = 2 * (OUTAGE_RPM * 0.2 / 2 + elapsed * OUTAGE_RPM / 2 / 60) + 2
    assert admitted <= most, (admitted, most, elapsed)
    alone = sum(reply.status_code == 200 for _, reply in after)
    # Shared again: a alone admits more than its share of 30 (the outage's admissions
    # beyond its slice are owed to the shared bucket), never more than the limit.
    assert OUTAGE_RPM // 2 < alone <= OUTAGE_RPM + elapsed_after, (alone, elapsed_after)
    assert cluster["tenant_limits"]["fallback_admitted"] >= 0
