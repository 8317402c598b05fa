"""What the gateway does not serve, refused clearly: WebSocket handshakes, conversation
compaction, and malformed batch bodies -- a 4xx in the client's dialect, never a 500.

Live over loopback, since what matters is what the client reads on the wire and what the
log gets.
"""

from __future__ import annotations

import logging

import httpx2
import pytest
import trio
from support import proxy_and_simulator

HANDSHAKE = (
    b"GET %s HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
    b"%s\r\n"
)


async def _exchange(url: str, request: bytes) -> bytes:
    """Send ``request`` raw and read until the server closes or goes quiet."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    answer = b""
    async with stream:
        await stream.send_all(request)
        with trio.move_on_after(1):
            while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
                chunk = await stream.receive_some()
                if not chunk:
                    break
                answer += chunk
    return answer


async def test_a_websocket_handshake_on_any_path_is_426_with_a_json_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with proxy_and_simulator(metrics_enabled=True) as (url, sim):
        for path, extra in [
            (b"/v1/responses", b""),
            (b"/anything/else", b""),
            (b"/v1/messages", b"anthropic-version: 2023-06-01\r\n"),
        ]:
            answer = await _exchange(url, HANDSHAKE % (path, extra))
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 426"), answer
            assert b"content-type: application/json" in head.lower()
            if b"messages" in path:  # Anthropic's shape for its clients
                assert b'"type":"error"' in body
            assert b"websockets_not_supported" in body or b"WebSockets" in body
            assert b"POST /v1/responses" in body
        assert (await sim.stats())["requests_total"] == 0
        async with httpx2.AsyncClient() as http:
            rejected = (await http.get(f"{url}/metrics")).json()["rejected"]["by_reason"]
        assert rejected["websocket_not_supported"] == 3
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_compaction_is_a_404_naming_what_is_served() -> None:
    conversation = {"model": "gpt-5", "input": [{"role": "user", "content": "x" * 200_000}]}
    async with proxy_and_simulator() as (url, _sim), httpx2.AsyncClient() as http:
        for path in ("/v1/responses/compact", "/responses/compact"):
            response = await http.post(f"{url}{path}", json=conversation)
            assert response.status_code == 404, response.text
            message = response.json()["error"]["message"]
            assert "POST /v1/responses/compact" in message
            assert "not served" in message
            assert "GET and DELETE /v1/responses/{id}" in message


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"\xff\xfe{}", "not UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"input_file_id": NaN}', "could not parse"),
        (b'{"input_file_id": "\\ud800"}', "surrogate"),
        (b"", "empty"),
    ],
)
async def test_a_malformed_batch_body_is_400_like_at_the_doors(body: bytes, says: str) -> None:
    async with proxy_and_simulator() as (url, _sim), httpx2.AsyncClient() as http:
        response = await http.post(f"{url}/v1/batches", content=body)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert error["code"] == "invalid_json"
        assert says in error["message"]
