"""Cancellation on the native Messages and the Responses doors, live: a client that leaves
stops its work in every phase, exactly as on the Chat door (the same pipeline serves all).

Each test drops the client's connection at one phase and checks, from the simulator's own
trace, that the upstream call was never made (queued) or was closed at once (in flight,
mid-stream), and that every gauge is back at rest.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import Any

import httpx2
import pytest
import trio
from fleet_support import KINDS, gateway_and_simulator
from support import Sim

from trio_batcher.simulator import SimulatorConfig

# How soon the upstream must see the connection close after the client's; the proxy
# itself does it within a scheduling turn, the rest is loopback and a loaded machine.
_CLOSE_BOUND_S = 0.5


@dataclass(frozen=True)
class Door:
    path: str
    surface: str
    content_event: str  # the SSE event line of a content delta
    headers: dict[str, str]
    messages: bool  # Anthropic Messages body, else Responses

    def body(self, text: str, *, stream: bool = False) -> dict[str, Any]:
        if self.messages:
            return {
                "model": "claude-sonnet-4-5",
                "max_tokens": 4096,
                "messages": [{"role": "user", "content": text}],
                "stream": stream,
            }
        return {"model": "claude-sonnet-4-5", "input": text, "stream": stream}


MESSAGES = Door(
    "/v1/messages",
    "anthropic.messages",
    "event: content_block_delta",
    {"anthropic-version": "2023-06-01"},
    messages=True,
)
RESPONSES = Door(
    "/v1/responses", "openai.responses", "event: response.output_text.delta", {}, messages=False
)
DOORS = [pytest.param(MESSAGES, id="messages"), pytest.param(RESPONSES, id="responses")]


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    """Every test runs against each kind of upstream: Anthropic's API, Bedrock, Vertex AI
    (``fleet_support``): cancellation must not depend on which one serves."""
    return str(request.param)


def _http() -> httpx2.AsyncClient:
    limits = httpx2.Limits(max_connections=100, max_keepalive_connections=0)
    return httpx2.AsyncClient(timeout=30, limits=limits)


async def _wait_for(sim: Sim, predicate: Any) -> dict[str, Any]:
    with trio.fail_after(5):
        return await sim.wait_until(predicate)


async def _assert_idle(http: httpx2.AsyncClient, url: str) -> dict[str, Any]:
    """Every gauge back at rest; returns the metrics that showed it."""
    with trio.fail_after(5):
        while True:
            metrics: dict[str, Any] = (await http.get(f"{url}/metrics")).json()
            concurrency = metrics["concurrency"]
            busy = (
                concurrency["active"],
                concurrency["waiting"],
                concurrency["upstream_in_flight"],
            )
            if busy == (0, 0, 0):
                return metrics
            await trio.sleep(0.01)


async def _tasks(http: httpx2.AsyncClient, url: str) -> int:
    """The trio task count ``/metrics`` reports (the test's process: the proxy, the
    simulator and the test itself share one trio run)."""
    count: int = (await http.get(f"{url}/metrics")).json()["concurrency"]["trio_tasks"]
    return count


async def _leave(
    http: httpx2.AsyncClient, url: str, door: Door, body: dict[str, Any], when: Any
) -> float:
    """Send ``body``; drop the connection once ``await when(events_seen)`` returns."""
    seen = trio.Event()
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:

            async def send() -> None:
                async with http.stream(
                    "POST", f"{url}{door.path}", json=body, headers=door.headers
                ) as response:
                    async for line in response.aiter_lines():
                        if line.startswith(door.content_event):
                            seen.set()

            nursery.start_soon(send)
            await when(seen)
            scope.cancel()
    return time.monotonic()


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("stream", [False, True])
async def test_a_client_leaving_while_in_flight_closes_the_upstream_call(
    door: Door, stream: bool, kind: str
) -> None:
    async with (
        gateway_and_simulator(kind, None, metrics_enabled=True) as (url, sim),
        _http() as http,
    ):

        async def in_flight(_: trio.Event) -> None:
            await _wait_for(sim, lambda s: s["in_flight"] == 1)

        body = door.body("[[sim:hang=1]]", stream=stream)
        left = await _leave(http, url, door, body, in_flight)
        stats = await _wait_for(sim, lambda s: s["abandoned"] == 1)
        assert stats["recent"][-1]["finished_at"] - left < _CLOSE_BOUND_S
        metrics = await _assert_idle(http, url)
    surface = metrics["by_surface"][door.surface]
    assert surface["requests"]["by_status"] == {"499": 1}


@pytest.mark.parametrize("door", DOORS)
async def test_a_client_leaving_mid_stream_closes_the_upstream_stream(
    door: Door, kind: str
) -> None:
    config = SimulatorConfig(ttft_ms=0, tokens_per_s=20, reply_tokens=400)
    async with (
        gateway_and_simulator(kind, config, metrics_enabled=True) as (url, sim),
        _http() as http,
    ):

        async def content(seen: trio.Event) -> None:
            with trio.fail_after(5):
                await seen.wait()

        left = await _leave(http, url, door, door.body("a long story", stream=True), content)
        stats = await _wait_for(sim, lambda s: s["abandoned"] == 1)
        trace = stats["recent"][-1]
        assert trace["first_token_at"] is not None
        assert trace["finished_at"] - left < _CLOSE_BOUND_S
        metrics = await _assert_idle(http, url)
    surface = metrics["by_surface"][door.surface]
    assert surface["requests"]["by_status"] == {"499": 1}
    assert surface["tokens"]["output"] >= 1  # the deltas it did relay were spent


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"max_inflight": 1, "max_queue": 4}, id="queued-at-the-gate"),
        pytest.param({"batch_enabled": True, "batch_max_wait_ms": 60_000}, id="open-window"),
    ],
)
@pytest.mark.parametrize("door", DOORS)
async def test_a_client_leaving_while_queued_never_reaches_the_upstream(
    door: Door, changes: dict[str, Any], kind: str
) -> None:
    async with (
        gateway_and_simulator(kind, None, metrics_enabled=True, **changes) as (url, sim),
        _http() as http,
    ):
        gated = "max_inflight" in changes
        async with trio.open_nursery() as nursery:
            if gated:  # the only slot is taken, so the next request queues
                nursery.start_soon(
                    partial(
                        http.post,
                        f"{url}{door.path}",
                        json=door.body("[[sim:hang=1]]"),
                        headers=door.headers,
                    )
                )
                await _wait_for(sim, lambda s: s["in_flight"] == 1)

            async def queued(_: trio.Event) -> None:
                with trio.fail_after(5):
                    while True:
                        concurrency = (await http.get(f"{url}/metrics")).json()["concurrency"]
                        if concurrency["waiting"] == 1 or (
                            not gated and concurrency["active"] == 1
                        ):
                            return
                        await trio.sleep(0.005)

            await _leave(http, url, door, door.body("abandon me", stream=True), queued)
            nursery.cancel_scope.cancel()
        metrics = await _assert_idle(http, url)
        stats = await sim.stats()
    assert stats["requests_total"] == (1 if gated else 0)
    assert all("abandon me" not in str(trace) for trace in stats["recent"])
    by_status = metrics["by_surface"][door.surface]["requests"]["by_status"]
    assert by_status == {"499": 2 if gated else 1}


@pytest.mark.parametrize("door", DOORS)
async def test_gauges_return_to_idle_after_a_mix_on_the_door(door: Door, kind: str) -> None:
    config = SimulatorConfig(ttft_ms=30, tokens_per_s=200, reply_tokens=10)
    changes = {
        "batch_enabled": True,
        "batch_max_concurrency": 3,
        "max_inflight": 4,
        "max_queue": 2,
        "metrics_enabled": True,
        "request_timeout_s": 2,
    }
    texts = ["ok", "[[sim:status=500]]", "[[sim:hang=1]]", "[[sim:status=529]]", "ok", "{bad"]
    async with gateway_and_simulator(kind, config, **changes) as (url, sim), _http() as http:
        # The upstream pool keeps up to BATCH_MAX_CONCURRENCY connections, each a task on
        # the simulator's side of this process: open them before taking the baseline.
        async with trio.open_nursery() as nursery:
            for i in range(3):
                warm = partial(http.post, f"{url}{door.path}", json=door.body(f"warm {i}"))
                nursery.start_soon(partial(warm, headers=door.headers))
        baseline = await _tasks(http, url)
        answered: list[int] = []

        async def one(i: int) -> None:
            text = texts[i % len(texts)]
            body: Any = door.body(f"{text} {i}", stream=i % 2 == 0)
            content = b"{bad" if text == "{bad" else None
            with trio.move_on_after(0.3 if i % 7 == 0 else 10):  # some clients leave
                async with http.stream(
                    "POST",
                    f"{url}{door.path}",
                    json=None if content else body,
                    content=content,
                    headers=door.headers,
                ) as response:
                    answered.append(response.status_code)
                    async for _ in response.aiter_raw():
                        pass

        async with trio.open_nursery() as nursery:
            for i in range(30):
                nursery.start_soon(one, i)
        metrics = await _assert_idle(http, url)
        await _wait_for(sim, lambda s: s["in_flight"] == 0)
        # Every task the mix started has ended (hypercorn's per-connection ones included,
        # once their connections closed): the count is back to the idle baseline (or below
        # it: the baseline read's own connection may not have wound down yet).
        with trio.fail_after(10):
            while await _tasks(http, url) > baseline:  # noqa: ASYNC110 (another process state)
                await trio.sleep(0.05)
    surface = metrics["by_surface"][door.surface]["requests"]
    counted = surface["total"] - 3 + metrics["rejected"]["total"]  # less the warm-up
    assert len(answered) <= counted <= 30, (answered, surface, metrics["rejected"])
    assert 400 in answered  # the bad bodies, refused before admission whatever the load
