"""Priority lanes, live (issue 31's acceptance): hypercorn + the simulator on loopback.

A saturated gate (``MAX_INFLIGHT=2``) with 20 deferrable requests queued: an interactive
request's latency stays near its unloaded latency, and every deferrable request completes.
The deferrable requests go through the app's own pipeline as ``UpstreamRequest``s marked
``deferrable`` (what a background response or a flex fallback becomes); their upstream calls
cross real loopback HTTP to the simulator like every other. The interactive ones are plain
HTTP requests to the gateway.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import httpx2
import trio
from support import openai_client, proxy_settings, running_proxy, running_simulator

from trio_batcher import create_app
from trio_batcher.serving import serve_app
from trio_batcher.simulator import SimulatorConfig
from trio_batcher.translation.anthropic_messages.codec import AnthropicMessagesCodec
from trio_batcher.upstream.request import UpstreamRequest

REPLY_S = 0.25  # the simulator's time to answer each request
MODEL = "claude-sonnet-4-5"


def _body(text: str) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": text}]}


async def _timed(http: httpx2.AsyncClient, url: str, text: str) -> float:
    started = time.perf_counter()
    response = await http.post(f"{url}/v1/messages", json=_body(text))
    assert response.status_code == 200, response.text
    return time.perf_counter() - started


async def _interactive_under_deferrable_load(lanes: bool) -> tuple[float, float, dict[str, Any]]:
    """(unloaded latency, loaded latency, the /metrics lanes block) with 20 deferrable
    requests queued behind a gate of 2."""
    config = SimulatorConfig(ttft_ms=REPLY_S * 1000)
    async with running_simulator(config) as sim:
        settings = proxy_settings(
            sim,
            max_inflight=2,
            max_queue=64,
            acquire_timeout_s=60.0,
            metrics_enabled=True,
            lanes_enabled=lanes,
        )
        app = create_app(settings)
        stop = trio.Event()
        async with (
            trio.open_nursery() as nursery,
            httpx2.AsyncClient(timeout=60) as http,
        ):
            host, port = await nursery.start(
                lambda task_status: serve_app(
                    app, "127.0.0.1", 0, shutdown=stop, task_status=task_status
                )
            )
            url = f"http://{host}:{port}"
            unloaded = statistics.median([await _timed(http, url, f"warm {i}") for i in range(3)])

            runtime = app.runtime
            assert runtime is not None
            codec = AnthropicMessagesCodec()
            # The interactive callers' own tenant (no keys: everyone is anonymous), so the
            # gate's fair order between tenants plays no part: only the lanes do.
            anonymous = runtime.tenants.directory.lookup(None)
            assert anonymous is not None
            finished: list[int] = []
            all_finished = trio.Event()

            async def deferrable(i: int) -> None:
                body = _body(f"background {i}")
                request = UpstreamRequest(body, MODEL, False, "anthropic.messages", deferrable=True)
                reply = await runtime.pipeline.handle(
                    request, codec, trio.current_time(), anonymous
                )
                assert b"background" in bytes(reply.body)  # type: ignore[arg-type]
                finished.append(i)
                if len(finished) == 20:
                    all_finished.set()

            with trio.fail_after(30):
                for i in range(20):
                    nursery.start_soon(deferrable, i)
                # The gate has no event for "n waiting": poll it.
                while runtime.gate.statistics().waiting < 18:  # noqa: ASYNC110
                    await trio.sleep(0.005)
                loaded = await _timed(http, url, "interactive")
                await all_finished.wait()  # every deferrable request completes
                metrics = (await http.get(f"{url}/metrics")).json()
                prometheus = (await http.get(f"{url}/metrics/prometheus")).text
            assert 'trio_batcher_lane_admitted_total{lane="deferrable"}' in prometheus
            nursery.cancel_scope.deadline = trio.current_time() + 10
            await http.aclose()  # no idle connection for the graceful shutdown to wait out
            stop.set()
    return unloaded, loaded, metrics["lanes"]


async def test_an_interactive_request_overtakes_20_queued_deferrable_ones() -> None:
    unloaded, loaded, lanes = await _interactive_under_deferrable_load(lanes=True)
    print(f"\nunloaded {unloaded * 1000:.0f} ms, behind 20 deferrable: {loaded * 1000:.0f} ms")
    print(f"lanes: {lanes}")
    # It waits for one of the two slots to free (at most one reply), then runs its own:
    # near its unloaded latency, far below the ten rounds of replies ahead of it in a FIFO.
    assert loaded < 2 * unloaded + REPLY_S
    assert lanes["deferrable"]["admitted"] == 20
    assert lanes["interactive"]["admitted"] == 4
    assert lanes["deferrable"]["shed"] == lanes["interactive"]["shed"] == 0
    assert lanes["deferrable"]["waiting"] == lanes["interactive"]["waiting"] == 0
    assert lanes["deferrable"]["queue_wait_ms"]["sample_count"] == 20
    # The lanes' waits tell the story: the deferrable p95 is rounds of replies long.
    assert lanes["deferrable"]["queue_wait_ms"]["p95"] > 1000 * 4 * REPLY_S
    assert lanes["interactive"]["queue_wait_ms"]["p95"] <= 1000 * (REPLY_S + unloaded)


async def test_with_lanes_off_the_interactive_request_waits_its_turn_behind_them() -> None:
    # The comparison: LANES_ENABLED=0 is one FIFO, the behaviour before lanes.
    unloaded, loaded, lanes = await _interactive_under_deferrable_load(lanes=False)
    print(f"\nlanes off: unloaded {unloaded * 1000:.0f} ms, behind 20: {loaded * 1000:.0f} ms")
    print(f"lanes: {lanes}")
    assert loaded > 8 * REPLY_S  # ten rounds of two replies were ahead of it
    assert lanes["interactive"]["admitted"] == 24 and lanes["deferrable"]["admitted"] == 0


async def test_twenty_background_responses_queued_leave_an_interactive_call_near_unloaded() -> None:
    """Issue 31's acceptance with real background responses: 20 ``background: true``
    Responses created through the official SDK behind a gate of 2; an interactive Chat call
    made while they queue is answered near its unloaded latency, and every background
    response still completes."""
    config = SimulatorConfig(ttft_ms=REPLY_S * 1000)
    async with running_simulator(config) as sim:
        settings = proxy_settings(
            sim, max_inflight=2, max_queue=64, acquire_timeout_s=60.0, metrics_enabled=True
        )
        async with running_proxy(settings) as url, httpx2.AsyncClient(timeout=60) as http:
            client = openai_client(url)
            unloaded = statistics.median([await _timed(http, url, f"warm {i}") for i in range(3)])
            created = [
                await client.responses.create(model=MODEL, input=f"later {i}", background=True)
                for i in range(20)
            ]
            assert all(r.status in ("queued", "in_progress") for r in created)
            await trio.sleep(2 * REPLY_S)  # the first ones hold the gate, the rest queue
            loaded = await _timed(http, url, "interactive")
            with trio.fail_after(60):
                for response in created:
                    while (await client.responses.retrieve(response.id)).status != "completed":  # noqa: ASYNC110
                        await trio.sleep(0.05)
            lanes = (await http.get(f"{url}/metrics")).json()["lanes"]
    print(
        f"interactive: unloaded {unloaded * 1000:.0f} ms, behind 20 background {loaded * 1000:.0f} ms"
    )
    assert loaded < 2 * unloaded + REPLY_S  # one reply to wait for a slot, then its own
    assert lanes["deferrable"]["admitted"] == 20 and lanes["deferrable"]["shed"] == 0
