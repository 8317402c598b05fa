"""The upstream connection pool, over real loopback sockets.

Against the simulator where a real upstream is needed, and against a tiny raw-socket server
where the test needs to control exactly when the server closes a connection.
"""

from __future__ import annotations

import json
import ssl
import struct
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from functools import partial
from typing import Any

import httpcore2
import pytest
import trio
from support import SIM_KEY, running_simulator

from trio_batcher.upstream.pool import Headers, UpstreamPool

HEADERS = [
    (b"content-type", b"application/json"),
    (b"x-api-key", SIM_KEY.encode()),
    (b"anthropic-version", b"2023-06-01"),
]


def _body(text: str = "hello", *, stream: bool = False) -> bytes:
    return json.dumps(
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 64,
            "stream": stream,
            "messages": [{"role": "user", "content": text}],
        }
    ).encode()


async def _call(pool: UpstreamPool, text: str = "hello") -> dict[str, object]:
    response = await pool.request(b"POST", pool.url("/v1/messages"), HEADERS, _body(text))
    try:
        raw = await response.read(1 << 20)
    finally:
        await response.aclose()
    assert response.status_code == 200, raw
    reply: dict[str, object] = json.loads(raw)
    return reply


@asynccontextmanager
async def _pool(url: str, **kwargs: Any) -> AsyncIterator[UpstreamPool]:
    pool = UpstreamPool(url, connect_timeout=5.0, **kwargs)
    try:
        yield pool
    finally:
        await pool.aclose()


async def test_sequential_calls_reuse_one_connection() -> None:
    async with running_simulator() as sim, _pool(sim.url) as pool:
        for _ in range(5):
            reply = await _call(pool)
            assert reply["type"] == "message"
        assert pool.connections_opened == 1
        assert pool.idle_connections == 1


async def test_concurrent_calls_each_get_a_connection_and_all_come_back() -> None:
    async with running_simulator() as sim, _pool(sim.url) as pool:
        replies: list[dict[str, object]] = []

        async def one(i: int) -> None:
            replies.append(await _call(pool, f"caller {i}"))

        async with trio.open_nursery() as nursery:
            for i in range(8):
                nursery.start_soon(one, i)
        assert len(replies) == 8
        assert pool.connections_opened == 8
        assert pool.idle_connections == 8
        await _call(pool)
        assert pool.connections_opened == 8  # reused, not a ninth


async def test_at_most_max_idle_connections_are_kept() -> None:
    async with running_simulator() as sim, _pool(sim.url, max_idle=3) as pool:
        async with trio.open_nursery() as nursery:
            for _ in range(6):
                nursery.start_soon(_call, pool)
        assert pool.connections_opened == 6
        assert pool.idle_connections == 3


async def test_response_closed_before_its_end_closes_the_connection() -> None:
    async with running_simulator() as sim, _pool(sim.url) as pool:
        body = _body("a long stream [[sim:tokens=300,tokens_per_s=50]]", stream=True)
        response = await pool.request(b"POST", pool.url("/v1/messages"), HEADERS, body)
        async with aclosing(response.aiter_raw()) as chunks:
            async for _chunk in chunks:
                break
        await response.aclose()
        assert pool.idle_connections == 0  # never handed to the next request half-read
        stats = await sim.wait_until(lambda s: s["abandoned"] >= 1)
        assert stats["abandoned"] == 1
        await _call(pool)
        assert pool.connections_opened == 2


async def test_cancelled_call_leaves_the_pool_consistent() -> None:
    async with running_simulator() as sim, _pool(sim.url) as pool:
        await _call(pool)
        with trio.move_on_after(0.2) as scope:
            await _call(pool, "wait [[sim:hang=1]]")
        assert scope.cancelled_caught
        assert pool.idle_connections == 0  # the hung connection was closed, not pooled
        await sim.wait_until(lambda s: s["abandoned"] >= 1)
        reply = await _call(pool)
        assert reply["type"] == "message"
        assert pool.connections_opened == 2


async def _read_request(stream: trio.SocketStream, data: bytes) -> bytes:
    """Read one request with a Content-Length body (``data``: bytes already received);
    returns whatever arrived after it."""
    while b"\r\n\r\n" not in data:
        data += await stream.receive_some(65536)
    head, _, data = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    while len(data) < length:
        data += await stream.receive_some(65536)
    return data[length:]


async def _one_shot_server(
    replies: list[bytes], task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
) -> None:
    """Answers one request per connection with keep-alive, then closes the connection."""

    async def handle(stream: trio.SocketStream) -> None:
        async with stream:
            await _read_request(stream, b"")
            reply = replies.pop(0)
            await stream.send_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Set-Cookie: a=1\r\nSet-Cookie: b=2\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(reply), reply)
            )

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(handle, listeners)


async def test_idle_connection_the_server_closed_is_replaced_not_used() -> None:
    replies = [b'{"n":1}', b'{"n":2}']
    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(_one_shot_server, replies))
        async with _pool(f"http://127.0.0.1:{port}") as pool:
            assert await _call_raw(pool) == {"n": 1}
            assert pool.idle_connections == 1
            # Wait until the server's close has reached our idle socket.
            idle = pool._idle[0].wire.socket
            assert idle is not None
            with trio.fail_after(5):
                await trio.lowlevel.wait_readable(idle)
            assert not pool._idle[0].reusable_now()
            assert await _call_raw(pool) == {"n": 2}
            assert pool.connections_opened == 2
            assert pool.resent_unsent == 0  # found dead before use: nothing to send again
        nursery.cancel_scope.cancel()


async def _call_raw(pool: UpstreamPool) -> object:
    response = await pool.request(b"POST", pool.url("/x"), HEADERS, b"{}")
    try:
        raw = await response.read(1 << 20)
    finally:
        await response.aclose()
    assert response.headers["set-cookie"] == "a=1, b=2"
    return json.loads(raw)


async def _scripted_server(
    answer: Any, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
) -> None:
    """Keep-alive HTTP/1.1; ``answer(connection, request)`` (both counted from 0) gives the
    reply body, or None to close the connection without a word, as a server whose idle
    timeout fired just as the request arrived does."""
    connections = 0

    async def handle(stream: trio.SocketStream) -> None:
        nonlocal connections
        connection, connections = connections, connections + 1
        async with stream:
            data = b""
            for request in range(100):
                data = await _read_request(stream, data)
                reply = answer(connection, request)
                if reply is None:
                    return
                await stream.send_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(reply), reply)
                )

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(handle, listeners)


async def _post(pool: UpstreamPool) -> bytes:
    response = await pool.request(b"POST", pool.url("/x"), HEADERS, b"{}")
    try:
        return await response.read(1 << 20)
    finally:
        await response.aclose()


async def test_a_reused_connection_closed_after_the_request_went_out_is_not_resent() -> None:
    """The upstream read the request and closed the connection without a word (a draining
    load balancer, an idle timeout firing as the request arrived): it may have run it, so
    the pool does not send it again; that is the retry policy's decision."""
    seen: list[tuple[int, int]] = []

    def answer(connection: int, request: int) -> bytes | None:
        seen.append((connection, request))
        return None if request == 1 else b'{"connection":%d}' % connection

    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(_scripted_server, answer))
        async with _pool(f"http://127.0.0.1:{port}") as pool:
            assert await _post(pool) == b'{"connection":0}'
            with pytest.raises(httpcore2.RemoteProtocolError):
                await _post(pool)
            assert seen == [(0, 0), (0, 1)]  # received once
            assert (pool.resent_unsent, pool.connections_opened) == (0, 1)
            assert await _post(pool) == b'{"connection":1}'
        nursery.cancel_scope.cancel()


async def test_a_reused_connection_reset_before_the_first_write_is_resent_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A request that provably never left (the reused connection was reset before its head
    was written) goes again at once on a new connection, counted in ``resent_unsent``."""
    seen: list[tuple[int, int]] = []
    reset = trio.Event()

    async def handle(stream: trio.SocketStream) -> None:
        connection = len({c for c, _ in seen})
        await _read_request(stream, b"")
        seen.append((connection, 0))
        reply = b'{"connection":%d}' % connection
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(reply), reply)
        )
        if connection == 0:  # reset the idle connection: SO_LINGER 0, then close
            stream.socket.setsockopt(
                trio.socket.SOL_SOCKET, trio.socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
            await stream.aclose()
            reset.set()
            return
        async with stream:
            await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, handle, listeners)
        async with _pool(f"http://127.0.0.1:{port}") as pool:
            assert await _post(pool) == b'{"connection":0}'
            with trio.fail_after(5):
                await reset.wait()
                idle = pool._idle[0].wire.socket
                assert idle is not None
                await trio.lowlevel.wait_readable(idle)
            # The race ``_acquire`` cannot see: the reset lands after the check.
            monkeypatch.setattr(type(pool._idle[0]), "reusable_now", lambda self: True)
            assert await _post(pool) == b'{"connection":1}'
            assert seen == [(0, 0), (1, 0)]
            assert (pool.resent_unsent, pool.connections_opened) == (1, 2)
        nursery.cancel_scope.cancel()


async def test_a_new_connection_that_fails_is_not_retried_by_the_pool() -> None:
    seen: list[tuple[int, int]] = []

    def answer(connection: int, request: int) -> bytes | None:
        seen.append((connection, request))
        return b"{}" if connection == 0 and request == 0 else None

    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(_scripted_server, answer))
        async with _pool(f"http://127.0.0.1:{port}") as pool:
            assert await _post(pool) == b"{}"
            # Reused, and closed after the request went out: the caller's error.
            with pytest.raises(httpcore2.RemoteProtocolError):
                await _post(pool)
            assert seen == [(0, 0), (0, 1)]
            # A new connection that fails is the retry policy's business, not the pool's.
            with pytest.raises(httpcore2.RemoteProtocolError):
                await _post(pool)
            assert seen[2:] == [(1, 0)]
            assert pool.resent_unsent == 0
        nursery.cancel_scope.cancel()


async def test_connection_refused_is_connect_error() -> None:
    with trio.socket.socket() as sock:  # a port nothing listens on
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with _pool(f"http://127.0.0.1:{port}") as pool:
        with pytest.raises(httpcore2.ConnectError):
            await pool.request(b"POST", pool.url("/v1/messages"), HEADERS, b"{}")
        assert pool.idle_connections == 0


async def test_closed_pool_refuses_new_requests_and_closes_returning_connections() -> None:
    async with running_simulator() as sim:
        pool = UpstreamPool(sim.url, connect_timeout=5.0)
        response = await pool.request(b"POST", pool.url("/v1/messages"), HEADERS, _body())
        await pool.aclose()
        await response.read(1 << 20)
        await response.aclose()
        assert pool.idle_connections == 0
        with pytest.raises(httpcore2.ConnectError):
            await _call(pool)


@pytest.mark.parametrize(
    ("base", "path", "target", "host"),
    [
        ("http://127.0.0.1:8080", "/v1/messages", b"/v1/messages", b"127.0.0.1:8080"),
        (
            "http://example.com/anthropic/",
            "/v1/messages",
            b"/anthropic/v1/messages",
            b"example.com",
        ),
        ("https://example.com", "/v1/messages", b"/v1/messages", b"example.com"),
        ("https://example.com:8443/a", "/v1/messages", b"/a/v1/messages", b"example.com:8443"),
    ],
)
def test_urls_and_host_header_follow_the_base_url(
    base: str, path: str, target: bytes, host: bytes
) -> None:
    pool = UpstreamPool(base, connect_timeout=1.0)
    assert pool.url(path).target == target
    assert pool._host_header == host


def test_base_url_must_be_http_or_https() -> None:
    with pytest.raises(ValueError, match="scheme"):
        UpstreamPool("ftp://example.com", connect_timeout=1.0)


def test_headers_are_case_insensitive_and_join_repeats() -> None:
    headers = Headers([(b"Retry-After", b"3"), (b"X-A", b"1"), (b"x-a", b"2")])
    assert headers["retry-after"] == headers["RETRY-AFTER"] == "3"
    assert headers.get("Retry-After") == "3"
    assert headers.get("missing") is None
    assert headers["x-a"] == "1, 2"
    assert "X-A" in headers
    assert 3 not in headers
    assert sorted(headers) == ["retry-after", "x-a"]
    assert len(headers) == 2


async def test_https_upstream_handshakes_verifies_and_reuses_the_connection() -> None:
    """The real upstream is HTTPS: the pool's own trio stream does the TLS handshake."""
    trustme = pytest.importorskip("trustme")
    from hypercorn.config import Config
    from hypercorn.trio import serve

    from trio_batcher.simulator import SimulatorConfig, create_simulator_app

    ca = trustme.CA()
    cert = ca.issue_cert("localhost")
    config = Config()
    config.bind = ["127.0.0.1:0"]
    with cert.private_key_pem.tempfile() as key, cert.cert_chain_pems[0].tempfile() as chain:
        config.certfile, config.keyfile = chain, key
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(
                partial(
                    serve,
                    create_simulator_app(SimulatorConfig()),
                    config,
                    shutdown_trigger=stop.wait,
                )
            )
            port = int(binds[0].rsplit(":", 1)[1])
            trusting = ssl.create_default_context()
            ca.configure_trust(trusting)
            async with _pool(f"https://localhost:{port}", ssl_context=trusting) as pool:
                for _ in range(3):
                    reply = await _call(pool)
                    assert reply["type"] == "message"
                assert pool.connections_opened == 1
            # Without the test CA the certificate is refused, not silently accepted.
            async with _pool(f"https://localhost:{port}") as strict:
                with pytest.raises(httpcore2.ConnectError):
                    await _call(strict)
            stop.set()
