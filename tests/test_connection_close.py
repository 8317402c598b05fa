"""A request that says ``Connection: close`` (or is HTTP/1.0) gets its answer and then the
socket closed by the gateway, on every route and door (RFC 9112 §9.6); one that does not is
kept alive for the next request.

Raw sockets, because HTTP client libraries close such connections themselves and would hide
a server that does not.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from support import proxy_and_simulator

_CHAT = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]}
_MESSAGES = {**_CHAT, "max_tokens": 50}
_ANTHROPIC = {"anthropic-version": "2023-06-01"}
_RESPONSES = {"model": "claude-sonnet-4-5", "input": "hi"}

ROUTES: list[Any] = [
    pytest.param("GET", "/health", None, {}, 200, id="health"),
    pytest.param("GET", "/v1/models", None, {}, 200, id="models"),
    pytest.param("GET", "/v1/models", None, _ANTHROPIC, 200, id="models-anthropic"),
    pytest.param("GET", "/v1/models/claude-sonnet-4-5", None, {}, 200, id="model"),
    pytest.param("GET", "/metrics", None, {}, 200, id="metrics"),
    pytest.param("GET", "/metrics/prometheus", None, {}, 200, id="prometheus"),
    pytest.param("GET", "/dashboard", None, {}, 200, id="dashboard"),
    pytest.param("GET", "/visuals/index.html", None, {}, 200, id="visuals"),
    pytest.param("GET", "/nowhere", None, {}, 404, id="unknown-route"),
    pytest.param("GET", "/v1/chat/completions", None, {}, 405, id="wrong-method"),
    pytest.param("POST", "/v1/chat/completions", _CHAT, {}, 200, id="chat"),
    pytest.param(
        "POST", "/v1/chat/completions", {**_CHAT, "stream": True}, {}, 200, id="chat-stream"
    ),
    pytest.param("POST", "/v1/chat/completions", {"model": 1}, {}, 400, id="chat-bad"),
    pytest.param("POST", "/v1/messages", _MESSAGES, _ANTHROPIC, 200, id="messages"),
    pytest.param(
        "POST", "/v1/messages", {**_MESSAGES, "stream": True}, _ANTHROPIC, 200, id="messages-stream"
    ),
    pytest.param("POST", "/v1/messages", {"model": "m"}, _ANTHROPIC, 400, id="messages-bad"),
    pytest.param("POST", "/v1/messages/count_tokens", _CHAT, _ANTHROPIC, 200, id="count-tokens"),
    pytest.param(
        "OPTIONS", "/v1/messages", None, {"origin": "http://evil"}, 403, id="cors-refused"
    ),
    pytest.param("POST", "/v1/responses", _RESPONSES, {}, 200, id="responses"),
    pytest.param(
        "POST", "/v1/responses", {**_RESPONSES, "stream": True}, {}, 200, id="responses-stream"
    ),
    pytest.param("POST", "/v1/responses", {"model": 1}, {}, 400, id="responses-bad"),
    pytest.param("GET", "/v1/responses/resp_unknown", None, {}, 404, id="response-get"),
    pytest.param(
        "GET", "/v1/responses/resp_unknown/input_items", None, {}, 404, id="response-items"
    ),
    pytest.param("DELETE", "/v1/responses/resp_unknown", None, {}, 404, id="response-delete"),
]


def _request(
    method: str, path: str, body: Any, headers: dict[str, str], *, close: bool, version: str = "1.1"
) -> bytes:
    content = b"" if body is None else json.dumps(body).encode()
    lines = [f"{method} {path} HTTP/{version}", "Host: localhost"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if close:
        lines.append("Connection: close")
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(content)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + content


async def _until_closed(stream: trio.SocketStream) -> bytes:
    """Everything the server sends until it closes; fails if it keeps the socket open."""
    received = b""
    with trio.fail_after(10):
        while chunk := await stream.receive_some(65536):
            received += chunk
    return received


@pytest.mark.parametrize(("method", "path", "body", "headers", "status"), ROUTES)
@pytest.mark.parametrize("version", ["1.1", "1.0"])
async def test_the_gateway_closes_a_connection_that_asked_to_close(
    method: str, path: str, body: Any, headers: dict[str, str], status: int, version: str
) -> None:
    async with proxy_and_simulator(metrics_enabled=True) as (url, _sim):
        host, port = url.removeprefix("http://").split(":")
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            await stream.send_all(
                _request(method, path, body, headers, close=version == "1.1", version=version)
            )
            received = await _until_closed(stream)
    assert received.startswith(f"HTTP/1.1 {status} ".encode()), received[:200]


async def test_a_kept_alive_connection_serves_the_next_request() -> None:
    async with proxy_and_simulator() as (url, _sim):
        host, port = url.removeprefix("http://").split(":")
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            for close in (False, True):
                await stream.send_all(
                    _request("POST", "/v1/messages", _MESSAGES, _ANTHROPIC, close=close)
                )
                if close:
                    answer = await _until_closed(stream)
                else:
                    answer = b""
                    with trio.fail_after(10):
                        while b'"stop_reason"' not in answer:
                            answer += await stream.receive_some(65536)
                assert answer.startswith(b"HTTP/1.1 200 ")
