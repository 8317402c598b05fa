"""A billable request is sent once unless the retry policy decides otherwise.

The upstream here is a raw socket server that reads each request whole, answers the first
on a connection, and then resets the connection after reading the next one -- what a
draining load balancer does to a kept-alive connection. The upstream may have run (and
billed) that request, so the gateway's pool must not quietly send it again: only the retry
policy may, and then the resend is counted and spends the retry budget.
"""

from __future__ import annotations

import json
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import trio
from support import running_proxy

from trio_batcher import Settings

_MESSAGE = json.dumps(
    {
        "id": "msg_resend",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "once"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }
).encode()


async def _read_request(stream: trio.SocketStream, data: bytes) -> tuple[bytes, bytes, bytes]:
    """(head, body, what arrived after) of one request with a Content-Length body."""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(65536)
        if not chunk:
            raise EOFError
        data += chunk
    head, _, data = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    while len(data) < length:
        data += await stream.receive_some(65536)
    return head, data[:length], data[length:]


@asynccontextmanager
async def _resetting_upstream() -> AsyncIterator[tuple[str, list[bytes]]]:
    """Yields (base URL, the Messages bodies received, in order)."""
    bodies: list[bytes] = []

    async def handle(stream: trio.SocketStream) -> None:
        data = b""
        try:
            for n in range(2):
                head, body, data = await _read_request(stream, data)
                if not head.startswith(b"POST /v1/messages"):
                    await stream.send_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    continue
                bodies.append(body)
                if n == 1:  # read whole, then reset: SO_LINGER 0 and close
                    stream.socket.setsockopt(
                        trio.socket.SOL_SOCKET, trio.socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                    return
                await stream.send_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(_MESSAGE), _MESSAGE)
                )
        except (EOFError, trio.BrokenResourceError):
            pass
        finally:
            await stream.aclose()

    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, handle, listeners)
        yield f"http://127.0.0.1:{port}", bodies
        nursery.cancel_scope.cancel()


def _settings(url: str, **changes: Any) -> Settings:
    return Settings(
        anthropic_base_url=url,
        anthropic_api_key="sk-ant-resend-test",
        metrics_enabled=True,
        upstream_max_retries=2,
    ).replace(**changes)


async def _ask(http: httpx2.AsyncClient, url: str, text: str) -> httpx2.Response:
    return await http.post(
        f"{url}/v1/messages",
        json={
            "model": "claude-sonnet-4-5",
            "max_tokens": 8,
            "messages": [{"role": "user", "content": text}],
        },
    )


async def test_without_retries_a_request_the_upstream_read_is_sent_once() -> None:
    async with (
        _resetting_upstream() as (upstream, bodies),
        running_proxy(_settings(upstream, upstream_max_retries=0)) as url,
        httpx2.AsyncClient(timeout=30) as http,
    ):
        assert (await _ask(http, url, "first")).status_code == 200
        refused = await _ask(http, url, "second")
        assert refused.status_code == 502, refused.text
        metrics = (await http.get(f"{url}/metrics")).json()["upstream"]
        scrape = (await http.get(f"{url}/metrics/prometheus")).text
    assert "trio_batcher_upstream_resent_unsent_total 0.0" in scrape
    assert "trio_batcher_upstream_connections_opened_total 1.0" in scrape
    texts = [json.loads(body)["messages"][0]["content"] for body in bodies]
    assert texts == ["first", "second"]  # the second was received once
    assert metrics["retries"] == 0
    assert metrics["resent_unsent"] == 0
    assert metrics["failures_by_signal"]["connect_error"] == 1


async def test_a_resend_is_a_counted_retry_that_spends_the_budget() -> None:
    # A budget of exactly two retries in its window (no ratio, the minimum of 2).
    settings = dict(upstream_max_retries=3, retry_budget_ratio=0.0)
    async with (
        _resetting_upstream() as (upstream, bodies),
        running_proxy(_settings(upstream, **settings)) as url,
        httpx2.AsyncClient(timeout=30) as http,
    ):
        statuses = [(await _ask(http, url, t)).status_code for t in "ABCD"]
        metrics = (await http.get(f"{url}/metrics")).json()["upstream"]
    # A on a new connection; B, C reset on reuse and resent by the policy on a new one (the
    # two retries the budget allows); D reset too, and its retry denied by the budget.
    assert statuses == [200, 200, 200, 502]
    texts = [json.loads(body)["messages"][0]["content"] for body in bodies]
    assert texts == ["A", "B", "B", "C", "C", "D"]
    assert metrics["retries"] == 2
    assert metrics["retries_denied_by_budget"] == 1
    assert metrics["attempts"] == 6
    assert metrics["failures_by_signal"]["connect_error"] == 3
    assert metrics["resent_unsent"] == 0
