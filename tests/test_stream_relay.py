"""The stream relay adds no buffering, measured on the wall clock over loopback.

The simulator stamps, with ``time.monotonic()``, the moment it hands each stream chunk to its
server (``/_sim/stats`` → ``recent[i]["event_times"]``, ``first_token_at``,
``finished_at``); the client stamps, on the same clock, the moment each content chunk
reaches it. Simulator, proxy and client share one trio run, so the difference is the
proxy's relay delay plus two loopback hops. The simulator is slow on purpose (200 ms to the
first token, then one token every 50 ms), so any batching or whole-stream buffering in the
proxy would show as tens of milliseconds. The client is raw httpx2, not the SDK, to keep
client-side overhead out of the measurement; medians over a few runs absorb scheduler noise.
"""

from __future__ import annotations

import gc
import json
import time
import warnings
from typing import Any

import httpx2
import trio
from support import no_collector_pauses, proxy_and_simulator

from trio_batcher.simulator import SimulatorConfig

MODEL = "claude-sonnet-4-5"
TOKENS = 10
SLOW = SimulatorConfig(ttft_ms=200, tokens_per_s=20, reply_tokens=TOKENS)
RUNS = 3
# Async generators that httpx2 itself creates and never closes (``Response.aiter_raw``
# iterates the pool's byte stream without ``aclosing``): the proxy cannot reach them, and
# ``Response.aclose()`` still releases their connection. Anything else left suspended is ours.
LIBRARY_LEFTOVERS = ("'httpcore2._async.connection_pool.PoolByteStream.__aiter__'",)
# A long reply sent in one write: the pump fills its bounded channel and parks in a send.
FAST_LONG = SimulatorConfig(reply_tokens=400)


def _content(line: str) -> str | None:
    """The ``delta.content`` of a chunk line, if it carries non-empty content."""
    if not line.startswith("data: {"):
        return None
    chunk = json.loads(line.removeprefix("data: "))
    choices = chunk.get("choices") or []
    content = choices[0]["delta"].get("content") if choices else None
    return content or None


async def _stream_arrivals(http: httpx2.AsyncClient, url: str, text: str) -> list[float]:
    """Arrival time (``time.monotonic()``) of every content chunk of one streamed reply."""
    body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": text}]}
    arrivals: list[float] = []
    done = False
    async with http.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if _content(line) is not None:
                arrivals.append(time.monotonic())
            done = done or line == "data: [DONE]"
    assert done
    return arrivals


async def test_relay_forwards_each_token_before_the_upstream_sends_the_next() -> None:
    """Nothing is held back: every token reaches the client before the upstream has sent
    the next one (they are 50 ms apart). How fast is the bench's business (TTFT and
    inter-token latency through the proxy against direct), not a timed assertion's."""
    with no_collector_pauses():
        async with proxy_and_simulator(SLOW) as (url, sim), httpx2.AsyncClient() as http:
            for run in range(RUNS):
                arrivals = await _stream_arrivals(http, url, f"Relay timing run {run}")
                trace: dict[str, Any] = (await sim.stats())["recent"][-1]
                assert len(arrivals) == TOKENS
                # The simulator flushes the message prelude, then each token on its own (they
                # are 50 ms apart); the last token leaves together with the closing events.
                sent = trace["event_times"][1:]
                assert len(sent) == TOKENS
                assert sent[0] == trace["first_token_at"]
                # Not buffered as a whole: the first token arrives ~450 ms before the upstream
                # has even sent the last one.
                assert arrivals[0] < trace["finished_at"] - 0.3
                # One clock (the simulator runs in this process): nothing arrives before it was
                # sent, and each token arrives before the next one leaves the upstream.
                assert all(got >= out for got, out in zip(arrivals, sent, strict=True))
                assert all(got < after for got, after in zip(arrivals[:-1], sent[1:], strict=True))


async def _proxy_idle(http: httpx2.AsyncClient, url: str, requests: int) -> dict[str, Any]:
    """The proxy's metrics once ``requests`` have been recorded and nothing is in flight."""
    with trio.fail_after(5):
        while True:
            metrics: dict[str, Any] = (await http.get(f"{url}/metrics")).json()
            concurrency = metrics["concurrency"]
            if (
                metrics["requests"]["total"] == requests
                and concurrency["active"] == 0
                and concurrency["upstream_in_flight"] == 0
            ):
                return metrics
            await trio.sleep(0.01)


async def test_abandoned_stream_leaves_no_unclosed_async_generator_behind() -> None:
    # A client that hangs up mid-stream makes the proxy stop its upstream read while the
    # pump may be parked in a channel send, with the upstream event generator suspended at
    # a yield. Every async generator on that path must be closed explicitly: under trio, one
    # left suspended is reported (ResourceWarning) when it is collected. The client is a
    # bare socket, so it owns no generator of its own.
    body = json.dumps(
        {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "Leave early"}]}
    ).encode()
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: proxy\r\n"
        b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with (
            proxy_and_simulator(FAST_LONG, metrics_enabled=True) as (url, _sim),
            httpx2.AsyncClient() as http,
        ):
            host, port = url.removeprefix("http://").split(":")
            for _ in range(3):
                async with await trio.open_tcp_stream(host, int(port)) as stream:
                    await stream.send_all(request)
                    received = b""
                    while b'"content":"Simulated' not in received:
                        received += await stream.receive_some()
            metrics = await _proxy_idle(http, url, requests=3)
            gc.collect()
    assert metrics["requests"]["by_status"] == {"499": 3}  # really abandoned mid-stream
    leaked = [
        str(w.message)
        for w in caught
        if issubclass(w.category, ResourceWarning)
        and "Async generator" in str(w.message)
        and not any(name in str(w.message) for name in LIBRARY_LEFTOVERS)
    ]
    assert leaked == []


async def _open_stream_then(
    http: httpx2.AsyncClient, url: str, path: str, body: dict[str, Any], check: Any
) -> None:
    """Start a stream, run ``check`` once its first event has arrived, read it to the end."""
    checked = False
    async with http.stream("POST", f"{url}{path}", json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if not checked and line.startswith("data:"):
                check()
                checked = True
    assert checked


def _held_requests() -> list[object]:
    """The request-shaped objects alive now: what an open stream must not hold on to."""
    from trio_batcher.edge.http import Incoming
    from trio_batcher.translation.openai_chat.request import TranslatedRequest
    from trio_batcher.upstream.request import UpstreamRequest

    gc.collect()
    return [
        o
        for o in gc.get_objects()
        if isinstance(o, Incoming | TranslatedRequest)
        or (isinstance(o, UpstreamRequest) and (o.body or o.content))
    ]


async def test_an_open_stream_holds_neither_the_clients_body_nor_the_upstream_request() -> None:
    # A stream can stay open for minutes, and an agent's request body is often the whole
    # conversation (hundreds of kilobytes): once the stream is open, the relay keeps what
    # its bookkeeping needs (model, surface, tenant), the door and the job let go of the rest.
    conversation = [{"role": "user", "content": "Remember all of this. " * 5_000}]
    held: list[list[object]] = []
    async with proxy_and_simulator(SLOW) as (url, _sim), httpx2.AsyncClient() as http:
        for path, body in (
            ("/v1/chat/completions", {"model": MODEL, "stream": True, "messages": conversation}),
            (
                "/v1/messages",
                {"model": MODEL, "max_tokens": 64, "stream": True, "messages": conversation},
            ),
        ):
            await _open_stream_then(http, url, path, body, lambda: held.append(_held_requests()))
    assert held == [[], []]
