"""WebSocket handshakes: refused at once with 426 and a JSON error, on every path.

Why: the gateway serves no WebSocket, but clients try one. Codex with
``supports_websockets = true`` opens ``GET /v1/responses`` with ``Upgrade: websocket`` first;
left to Quart, the handshake found no route, the 404 handler ran outside a request context
and the client got an empty 500 (and the log two tracebacks), which Codex retries seven
times before it falls back to HTTP. A 426 Upgrade Required is the answer it falls back on
after one try, and the JSON body tells a person what to do instead.

The answer uses the ASGI "websocket.http.response" extension (hypercorn has it) to send a
real HTTP response in place of the handshake; without it the only refusal ASGI offers is a
``websocket.close`` before accepting, which servers turn into a bare 403.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, final

from ..errors import ProxyError
from .http import JSON_HEADERS, ASGIApp, Receive, Scope, Send, dialect_error, encode_headers

__all__ = ["NoWebSockets", "websockets_not_served"]

_EXTENSION: Final = "websocket.http.response"


def websockets_not_served(path: str) -> ProxyError:
    shown = path if path.isascii() and path.isprintable() else ascii(path)
    return ProxyError(
        426,
        f"This gateway does not serve WebSockets (asked for on {shown}). Send each request "
        "as a plain HTTP POST instead: POST /v1/responses, POST /v1/chat/completions or "
        "POST /v1/messages, with stream=true for server-sent events.",
        type="invalid_request_error",
        code="websockets_not_supported",
    )


@final
class NoWebSockets:
    """ASGI middleware: answers every ``websocket`` scope with 426; passes the rest on.
    ``on_refused`` counts each refusal (``rejected.by_reason.websocket_not_supported``), so
    a client configured for WebSockets shows in the metrics, not only in its own retries."""

    def __init__(self, inner: ASGIApp, on_refused: Callable[[], None] | None = None) -> None:
        self._inner = inner
        self._on_refused = on_refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket":
            await self._inner(scope, receive, send)
            return
        message = await receive()  # websocket.connect (or a disconnect: nothing to answer)
        if message["type"] != "websocket.connect":
            return
        if self._on_refused is not None:
            self._on_refused()
        if _EXTENSION not in scope.get("extensions", {}):
            await send({"type": "websocket.close", "code": 1003})
            return
        status, data, headers = dialect_error(scope, websockets_not_served(str(scope["path"])))
        await send(
            {
                "type": "websocket.http.response.start",
                "status": status,
                "headers": [
                    *encode_headers(JSON_HEADERS, headers),
                    (b"content-length", b"%d" % len(data)),
                ],
            }
        )
        await send({"type": "websocket.http.response.body", "body": data, "more_body": False})
