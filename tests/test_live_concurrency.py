"""Windows, the gate, cancellation and shutdown, live: hypercorn + the simulator on loopback.

The deterministic versions of these properties (exact flush times, exact dispatch order)
are in test_batching.py / test_gate.py under the autojump clock; these prove the same
structure holds with real sockets, real disconnects and the real upstream client.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import httpx2
import pytest
import trio
from support import Sim, proxy_and_simulator, proxy_settings, running_simulator

from trio_batcher import create_app
from trio_batcher.serving import serve_app
from trio_batcher.simulator import SimulatorConfig


def _body(text: str, *, stream: bool = False) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "messages": [{"role": "user", "content": text}],
        "stream": stream,
    }


async def _wait_for(sim: Sim, predicate: Any) -> dict[str, Any]:
    with trio.fail_after(5):
        return await sim.wait_until(predicate)


async def _drain_started(runtime: Any) -> None:
    """The shutdown trigger runs within a scheduling turn or two of ``stop.set()``; the
    runtime has no event for it, so check at each checkpoint (no wall-clock margin)."""
    with trio.fail_after(5):
        while not runtime.draining:
            await trio.lowlevel.checkpoint()


def _http() -> httpx2.AsyncClient:
    limits = httpx2.Limits(max_connections=400, max_keepalive_connections=0)
    return httpx2.AsyncClient(timeout=30, limits=limits)


async def test_200_concurrent_requests_with_cap_8_get_their_own_answers() -> None:
    config = SimulatorConfig(ttft_ms=20)
    async with (
        proxy_and_simulator(
            config, batch_enabled=True, batch_max_concurrency=8, batch_max_size=16
        ) as (url, sim),
        _http() as http,
    ):
        answers: dict[int, str] = {}

        async def one(i: int) -> None:
            response = await http.post(f"{url}/v1/chat/completions", json=_body(f"question-{i}"))
            assert response.status_code == 200, response.text
            answers[i] = response.json()["choices"][0]["message"]["content"]

        async with trio.open_nursery() as nursery:
            for i in range(200):
                nursery.start_soon(one, i)
        assert len(answers) == 200
        for i, answer in answers.items():
            assert f"question-{i}'" in answer  # each caller got its own reply
        stats = await sim.stats()
        assert stats["requests_total"] == 200
        assert 1 < stats["max_in_flight"] <= 8


async def test_40_concurrent_streams_respect_the_cap_until_they_end() -> None:
    config = SimulatorConfig(ttft_ms=10, tokens_per_s=400, reply_tokens=20)
    async with (
        proxy_and_simulator(config, batch_enabled=True, batch_max_concurrency=8) as (url, sim),
        _http() as http,
    ):
        texts: dict[int, str] = {}

        async def one(i: int) -> None:
            parts: list[str] = []
            async with http.stream(
                "POST", f"{url}/v1/chat/completions", json=_body(f"stream-{i}", stream=True)
            ) as response:
                assert response.status_code == 200
                async for line in response.aiter_lines():
                    if line.startswith("data: {"):
                        chunk = json.loads(line[6:])
                        parts.extend(c["delta"].get("content") or "" for c in chunk["choices"])
                    elif line == "data: [DONE]":
                        texts[i] = "".join(parts)

        async with trio.open_nursery() as nursery:
            for i in range(40):
                nursery.start_soon(one, i)
        assert len(texts) == 40
        assert all(f"stream-{i}'" in text for i, text in texts.items())
        stats = await sim.stats()
        assert stats["streams"] == 40
        assert 1 < stats["max_in_flight"] <= 8


async def test_overload_sheds_with_429_and_retry_after_and_no_5xx() -> None:
    config = SimulatorConfig(ttft_ms=200)
    async with (
        proxy_and_simulator(config, max_inflight=4, max_queue=4, retry_after_s=2) as (url, sim),
        _http() as http,
    ):
        statuses: list[int] = []
        retry_after: set[str] = set()

        async def one(i: int) -> None:
            response = await http.post(f"{url}/v1/chat/completions", json=_body(f"load-{i}"))
            statuses.append(response.status_code)
            if response.status_code == 429:
                retry_after.add(response.headers["retry-after"])
                error = response.json()["error"]
                assert error["type"] == "rate_limit_error" and error["code"] == "queue_full"

        async with trio.open_nursery() as nursery:
            for i in range(40):
                nursery.start_soon(one, i)
        assert sorted(set(statuses)) == [200, 429]
        assert statuses.count(200) >= 8  # 4 in flight + 4 queued behind them
        assert retry_after == {"2"}
        assert (await sim.stats())["max_in_flight"] <= 4


async def _disconnect_after(
    http: httpx2.AsyncClient, url: str, body: dict[str, Any], *, first_content: bool, sim: Sim
) -> float:
    """Send ``body`` and drop the connection once the upstream call is in flight (or, with
    ``first_content``, once the client has received content); returns when it dropped."""
    got_content = trio.Event()
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:

            async def send() -> None:
                async with http.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
                    async for line in r.aiter_lines():
                        if '"content":"' in line and '"content":""' not in line:
                            got_content.set()

            nursery.start_soon(send)
            if first_content:
                with trio.fail_after(5):
                    await got_content.wait()
            else:
                await _wait_for(sim, lambda s: s["in_flight"] == 1)
            scope.cancel()
    return time.monotonic()


async def test_client_disconnect_mid_call_aborts_the_upstream_call_at_once() -> None:
    async with proxy_and_simulator() as (url, sim), _http() as http:
        body = _body("wait forever [[sim:hang=1]]")
        left_at = await _disconnect_after(http, url, body, first_content=False, sim=sim)
        stats = await _wait_for(sim, lambda s: s["abandoned"] == 1)
        trace = stats["recent"][-1]
        assert trace["outcome"] == "abandoned"
        assert trace["finished_at"] - left_at < 0.5
        assert stats["in_flight"] == 0


async def test_client_disconnect_mid_stream_closes_the_upstream_stream_at_once() -> None:
    config = SimulatorConfig(ttft_ms=0, tokens_per_s=10, reply_tokens=200)
    async with proxy_and_simulator(config) as (url, sim), _http() as http:
        left_at = await _disconnect_after(
            http, url, _body("long story", stream=True), first_content=True, sim=sim
        )
        stats = await _wait_for(sim, lambda s: s["abandoned"] == 1)
        trace = stats["recent"][-1]
        assert trace["first_token_at"] is not None  # it was streaming when the client left
        assert trace["finished_at"] - left_at < 0.5
        assert stats["in_flight"] == 0


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param(
            {"max_inflight": 1, "max_queue": 4, "metrics_enabled": True}, id="queued-at-the-gate"
        ),
        pytest.param(
            {"batch_enabled": True, "batch_max_wait_ms": 60_000, "metrics_enabled": True},
            id="open-window",
        ),
    ],
)
async def test_request_abandoned_while_queued_never_reaches_the_upstream(
    changes: dict[str, Any],
) -> None:
    async with proxy_and_simulator(**changes) as (url, sim), _http() as http:
        gated = "max_inflight" in changes
        async with trio.open_nursery() as nursery:
            if gated:  # occupy the only slot so the next request queues
                hang = partial(
                    http.post, f"{url}/v1/chat/completions", json=_body("[[sim:hang=1]]")
                )
                nursery.start_soon(hang)
                await _wait_for(sim, lambda s: s["in_flight"] == 1)
            with trio.move_on_after(0.3):  # a stream: still counted as one once it leaves
                abandoned = {**_body("abandon me"), "stream": True}
                await http.post(f"{url}/v1/chat/completions", json=abandoned)
            nursery.cancel_scope.cancel()
        # Once the proxy has counted every caller as gone (499) with nothing left in
        # flight, their tickets are resolved: nothing can be dispatched for them any more.
        closed = 2 if gated else 1
        with trio.fail_after(5):
            while True:
                metrics = (await http.get(f"{url}/metrics")).json()
                gone = metrics["requests"]["by_status"].get("499", 0)
                if gone == closed and metrics["concurrency"]["upstream_in_flight"] == 0:
                    break
                await trio.sleep(0.01)
        assert metrics["requests"]["stream"] == 1
        stats = await sim.stats()
        assert stats["requests_total"] == (1 if gated else 0)
        assert all("abandon me" not in json.dumps(t) for t in stats["recent"])


async def test_shutdown_lets_in_flight_finish_and_refuses_new_requests() -> None:
    from support import proxy_settings, running_simulator

    from trio_batcher import create_app
    from trio_batcher.serving import serve_app

    config = SimulatorConfig(ttft_ms=300)
    async with running_simulator(config) as sim, _http() as http:
        stop = trio.Event()
        app = create_app(proxy_settings(sim, shutdown_grace_s=5))
        async with trio.open_nursery() as nursery:
            host, port = await nursery.start(
                lambda task_status: serve_app(
                    app, "127.0.0.1", 0, shutdown=stop, task_status=task_status
                )
            )
            url = f"http://{host}:{port}"
            results: list[int] = []

            async def in_flight() -> None:
                results.append(
                    (await http.post(f"{url}/v1/chat/completions", json=_body("a"))).status_code
                )

            nursery.start_soon(in_flight)
            await _wait_for(sim, lambda s: s["in_flight"] == 1)
            stop.set()
            assert app.runtime is not None
            await _drain_started(app.runtime)
        assert results == [200]


async def test_shutdown_past_grace_answers_every_request_and_refuses_new_ones() -> None:
    from support import proxy_settings, running_simulator

    from trio_batcher import create_app
    from trio_batcher.serving import serve_app

    config = SimulatorConfig(ttft_ms=0, tokens_per_s=5, reply_tokens=500)
    async with running_simulator(config) as sim, _http() as http:
        keepalive = httpx2.AsyncClient(timeout=3)
        stop = trio.Event()
        app = create_app(proxy_settings(sim, shutdown_grace_s=0.5))
        outcomes: dict[str, Any] = {}
        async with trio.open_nursery() as nursery:
            host, port = await nursery.start(
                lambda task_status: serve_app(
                    app, "127.0.0.1", 0, shutdown=stop, task_status=task_status
                )
            )
            url = f"http://{host}:{port}"
            assert (await keepalive.get(f"{url}/health")).status_code == 200

            async def call() -> None:
                response = await http.post(
                    f"{url}/v1/chat/completions", json=_body("[[sim:hang=1]]")
                )
                outcomes["call"] = (response.status_code, response.json()["error"]["code"])

            async def stream() -> None:
                lines: list[str] = []
                async with http.stream(
                    "POST", f"{url}/v1/chat/completions", json=_body("long", stream=True)
                ) as response:
                    outcomes["stream_status"] = response.status_code
                    lines = [line async for line in response.aiter_lines() if line]
                outcomes["stream_last"] = json.loads(lines[-1].removeprefix("data: "))

            nursery.start_soon(call)
            nursery.start_soon(stream)
            await _wait_for(sim, lambda s: s["in_flight"] == 2)
            await trio.sleep(0.3)  # let the stream deliver some content
            stop.set()
            assert app.runtime is not None
            await _drain_started(app.runtime)
            late = await keepalive.get(f"{url}/health")
            outcomes["health"] = late.status_code
            late = await keepalive.post(f"{url}/v1/chat/completions", json=_body("too late"))
            outcomes["late"] = (late.status_code, late.json()["error"]["code"])
            await keepalive.aclose()
        assert outcomes["health"] == 503
        assert outcomes["late"] == (503, "shutdown")
        assert outcomes["call"] == (503, "shutdown")
        assert outcomes["stream_status"] == 200
        assert outcomes["stream_last"]["error"]["code"] == "shutdown"
        stats = await _wait_for(sim, lambda s: s["in_flight"] == 0)
        assert stats["requests_total"] == 2  # the late request never reached the upstream


async def _assert_idle(http: httpx2.AsyncClient, url: str) -> None:
    """Every gauge back at rest: nothing admitted, waiting, or in flight upstream."""
    with trio.fail_after(5):
        while True:
            concurrency = (await http.get(f"{url}/metrics")).json()["concurrency"]
            if (
                concurrency["active"],
                concurrency["waiting"],
                concurrency["upstream_in_flight"],
            ) == (0, 0, 0):
                return
            await trio.sleep(0.01)


async def _stream_lines(http: httpx2.AsyncClient, url: str, body: dict[str, Any]) -> list[str]:
    async with http.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        return [line async for line in response.aiter_lines() if line]


async def test_window_timeout_fails_a_stuck_call_with_504_and_cuts_a_stream_with_an_error_event() -> (
    None
):
    config = SimulatorConfig(ttft_ms=0, tokens_per_s=10, reply_tokens=100)
    changes = {
        "batch_enabled": True,
        "batch_timeout_s": 0.4,
        "batch_max_wait_ms": 1,
        "metrics_enabled": True,
    }
    async with proxy_and_simulator(config, **changes) as (url, sim), _http() as http:
        response = await http.post(f"{url}/v1/chat/completions", json=_body("[[sim:hang=1]]"))
        assert response.status_code == 504
        assert response.json()["error"]["code"] == "window_timeout"
        lines = await _stream_lines(http, url, _body("long", stream=True))
        assert any('"content":"' in line for line in lines[:-1])
        assert json.loads(lines[-1].removeprefix("data: "))["error"]["code"] == "window_timeout"
        await _assert_idle(http, url)
        stats = await _wait_for(sim, lambda s: s["in_flight"] == 0)
        assert stats["abandoned"] == 2  # both upstream calls were closed, not left running


async def test_request_deadline_mid_stream_ends_it_with_an_error_event() -> None:
    config = SimulatorConfig(ttft_ms=0, tokens_per_s=10, reply_tokens=100)
    async with (
        proxy_and_simulator(config, request_timeout_s=0.4, metrics_enabled=True) as (url, sim),
        _http() as http,
    ):
        lines = await _stream_lines(http, url, _body("long", stream=True))
        assert json.loads(lines[-1].removeprefix("data: "))["error"]["code"] == "request_timeout"
        await _assert_idle(http, url)
        assert (await _wait_for(sim, lambda s: s["in_flight"] == 0))["abandoned"] == 1
        metrics = (await http.get(f"{url}/metrics")).json()
        assert metrics["requests"]["by_status"] == {"504": 1}


async def test_gauges_return_to_idle_after_a_mix_of_outcomes() -> None:
    config = SimulatorConfig(ttft_ms=30, tokens_per_s=200, reply_tokens=10)
    changes = {
        "batch_enabled": True,
        "batch_max_concurrency": 3,
        "max_inflight": 4,
        "max_queue": 2,
        "metrics_enabled": True,
        "request_timeout_s": 2,
    }
    async with proxy_and_simulator(config, **changes) as (url, sim), _http() as http:
        texts = ["ok", "[[sim:status=500]]", "[[sim:hang=1]]", "[[sim:status=529]]", "ok"]

        answered: list[int] = []

        async def one(i: int) -> None:
            body = _body(f"{texts[i % len(texts)]} {i}", stream=i % 2 == 0)
            with trio.move_on_after(0.3 if i % 7 == 0 else 10):  # some clients leave mid-way
                async with http.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
                    answered.append(i)
                    async for _ in r.aiter_raw():
                        pass

        async with trio.open_nursery() as nursery:
            for i in range(30):
                nursery.start_soon(one, i)
        await _assert_idle(http, url)
        await _wait_for(sim, lambda s: s["in_flight"] == 0)
        metrics = (await http.get(f"{url}/metrics")).json()
        # Every answered request is counted once; a client that gave up before its request
        # reached the proxy (a loaded machine) may not be, since nothing arrived.
        counted = metrics["requests"]["total"] + metrics["rejected"]["total"]
        assert len(answered) <= counted <= 30, (
            len(answered),
            metrics["requests"]["by_status"],
            metrics["rejected"],
        )
        assert counted >= 30 - sum(1 for i in range(30) if i % 7 == 0 and i not in answered)


async def test_a_stream_client_that_stops_reading_frees_its_slot_at_the_deadline() -> None:
    # hypercorn's writes to a client are shielded and have no timeout: without the
    # proxy's own expiry, a reader that stalls would hold its gate slot forever.
    changes = {"max_inflight": 1, "max_queue": 0, "request_timeout_s": 1, "metrics_enabled": True}
    async with proxy_and_simulator(**changes) as (url, _sim), _http() as http:
        host, port = url.removeprefix("http://").split(":")
        body = json.dumps(
            {
                "model": "claude-sonnet-4-5",
                "stream": True,
                "max_tokens": 64000,
                "messages": [{"role": "user", "content": "[[sim:tokens=20000]] long"}],
            }
        ).encode()
        stalled = await trio.open_tcp_stream(host, int(port))
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json"
        await stalled.send_all(head + b"\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
        assert (await stalled.receive_some(1024)).startswith(b"HTTP/1.1 200")
        # ...and never reads again, nor closes.
        with trio.fail_after(10):
            while True:
                metrics = (await http.get(f"{url}/metrics")).json()
                if metrics["concurrency"]["active"] == 0:
                    break
                await trio.sleep(0.1)
        assert metrics["requests"]["by_status"] == {"504": 1}
        after = await http.post(f"{url}/v1/chat/completions", json=_body("next"))
        assert after.status_code == 200
        await stalled.aclose()


def _slow_writes(app: Any, delay: Callable[[bytes], float]) -> Any:
    """``app`` behind a network whose write of each chat body chunk takes ``delay(chunk)`` s."""

    async def wrapper(scope: Any, receive: Any, send: Any) -> None:
        async def slow_send(message: Any) -> None:
            chunk = message.get("body", b"")
            if message["type"] == "http.response.body" and chunk:
                await trio.sleep(delay(chunk))
            await send(message)

        chat = scope["type"] == "http" and scope["path"] == "/v1/chat/completions"
        await app(scope, receive, slow_send if chat else send)

    return wrapper


@pytest.mark.parametrize(
    ("case", "tokens", "delay", "status", "ending"),
    [
        # Reads steadily but too slowly: past the deadline the stream ends with the
        # request_timeout error event, never a clean-looking end.
        ("slow-reader", 400, lambda chunk: 1.2, "504", "request_timeout"),
        # Only [DONE] was left when the deadline passed: the answer was whole, a 200.
        ("slow-done", 20, lambda chunk: 2.5 if b"[DONE]" in chunk else 0.0, "200", "[DONE]"),
    ],
)
async def test_a_stream_written_past_its_deadline_ends_honestly(
    case: str, tokens: int, delay: Callable[[bytes], float], status: str, ending: str
) -> None:
    async with running_simulator() as sim, trio.open_nursery() as nursery:
        settings = proxy_settings(sim, request_timeout_s=1, metrics_enabled=True)
        stop = trio.Event()
        app = _slow_writes(create_app(settings), delay)
        host, port = await nursery.start(
            partial(serve_app, app, "127.0.0.1", 0, shutdown=stop, graceful_timeout=5)
        )
        url = f"http://{host}:{port}"
        text = f"hi [[sim:tokens={tokens},tokens_per_s=0,ttft_ms=0]]"
        async with _http() as http:
            async with http.stream(
                "POST", f"{url}/v1/chat/completions", json=_body(text, stream=True)
            ) as r:
                events = [line[6:] for line in (await r.aread()).decode().split("\n\n") if line]
            last = events[-1]
            assert (last if last == "[DONE]" else json.loads(last)["error"]["code"]) == ending
            metrics = (await http.get(f"{url}/metrics")).json()
            assert metrics["requests"]["by_status"] == {status: 1}
        stop.set()
