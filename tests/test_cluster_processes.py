"""Two proxy processes sharing one Redis and one simulator: a crashed instance's slots come
back to the others within the lease TTL.

Real processes (``bench.processes.running_stack``), so ``kill -9`` is a real crash: no
release is sent, and only the lease expiry can free what the dead instance held.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from redis_support import RedisServer, unique_prefix

from trio_batcher.bench.processes import running_stack

pytestmark = pytest.mark.filterwarnings("ignore:Unclosed <MemoryObject:ResourceWarning")

CAP = 8
TTL_S = 1.5


def _body(text: str) -> dict[str, Any]:
    return {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": text}]}


async def _until(predicate: Any) -> float:
    """Seconds until ``predicate()`` holds; put a deadline around the call."""
    started = time.monotonic()
    while not await predicate():  # noqa: ASYNC110 (another process's state)
        await trio.sleep(0.02)
    return time.monotonic() - started


async def test_a_killed_instance_frees_its_slots_within_the_lease_ttl(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    env = {
        "BATCH_ENABLED": "1",
        "BATCH_MAX_CONCURRENCY": str(CAP),
        "BATCH_MAX_WAIT_MS": "1",
        "REDIS_URL": redis_server.url,
        "REDIS_KEY_PREFIX": unique_prefix(),
        "REDIS_LEASE_TTL_S": str(TTL_S),
        "UPSTREAM_MAX_RETRIES": "0",
    }
    async with (
        running_stack(["--ttft-ms", "50"], {"a": env, "b": env}, tmp_path / "logs") as stack,
        httpx2.AsyncClient(timeout=30, limits=httpx2.Limits(max_connections=100)) as http,
    ):
        a, b = stack.proxies["a"], stack.proxies["b"]

        async def post(url: str, text: str) -> None:
            with contextlib.suppress(httpx2.HTTPError):  # a's clients lose their proxy
                await http.post(f"{url}/v1/chat/completions", json=_body(text))

        async with trio.open_nursery() as nursery:
            for i in range(CAP):  # a takes the whole cap with calls that never end
                nursery.start_soon(post, a.url, f"[[sim:hang=1]] held {i}")

            async def a_holds_all() -> bool:
                return (await a.metrics())["cluster"]["held_here"] == CAP

            with trio.fail_after(10):
                await _until(a_holds_all)
            # b's calls queue for the cap: none can start while a holds it
            for i in range(CAP):
                nursery.start_soon(post, b.url, f"[[sim:ttft_ms=3000]] waiting {i}")

            async def b_waits() -> bool:
                return (await b.metrics())["cluster"]["waiting_here"] >= 1

            with trio.fail_after(10):
                await _until(b_waits)
            assert (await b.metrics())["cluster"]["held_here"] == 0
            os.kill(a.child.pid, signal.SIGKILL)

            async def b_holds_all() -> bool:
                return (await b.metrics())["cluster"]["held_here"] == CAP

            with trio.fail_after(TTL_S + 8):
                took = await _until(b_holds_all)
            assert took <= TTL_S + 1.5, took  # the dead instance's leases expired
            nursery.cancel_scope.cancel()
