"""ASGI plumbing the doors share: framing checks, route spellings, and sending answers.

Kept apart from the doors so that each door is only its dialect: how a request is decoded
and how its answers and errors are spelled.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, Final, cast, final
from urllib.parse import urlsplit

import trio

from ..errors import ProxyError
from ..pipeline.contract import StreamReply
from ..tenants import Tenant
from ..tracing import NOOP_TRACE, RequestTrace
from ..translation.anthropic_messages import error_reply as anthropic_error_reply

log = logging.getLogger("trio_batcher")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[..., Awaitable[None]]


@final
@dataclass(slots=True)
class Incoming:
    """A request as the edge read it, handed to its door.

    The door lets go of the body (``release``) once it has what it sends upstream: a call
    can last minutes, and a body can be tens of megabytes, so neither the client's bytes
    nor their parsed tree should live beside the upstream request for that long.

    Attributes:
      payload: the body, parsed (``body.parse_json_body``).
      raw: the body as it arrived, for doors that relay it (``Door.relays_body``); empty
        for the others, which need only ``payload``.
      scope: the ASGI scope (headers, path, query string).
      arrived: ``trio.current_time()`` when the request arrived; its deadline counts from here.
      large: the body is large enough to translate off the event loop.
      tenant: who sent it (its key's tenant), or None where tenants are not checked.
      trace: its trace (``tracing``; the no-op one while traces are off).
    """

    payload: object
    raw: bytes
    scope: Scope
    arrived: float
    large: bool
    tenant: Tenant | None = None
    trace: RequestTrace = NOOP_TRACE

    def release(self) -> None:
        """Forget the body (both forms); what the door built from it is all that remains."""
        self.payload = None
        self.raw = b""


# How long after a stream's deadline its resources are freed even if a write is stuck.
_EXPIRE_MARGIN_S: Final = 1.0
_SLASHES: Final = re.compile("/{2,}")
_API_ROUTES: Final = (
    "/chat/completions",
    "/models",
    "/messages",
    "/messages/count_tokens",
    "/responses",
)
# Routes with an id after them, reached without the /v1 as well.
_API_PREFIXES: Final = ("/models/", "/responses/")
_API_ROOTS: Final = frozenset({*_API_ROUTES, *(f"/v1{route}" for route in _API_ROUTES)})
JSON_HEADERS: Final = ((b"content-type", b"application/json"),)
_SSE_HEADERS: Final = (
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
)


def openai_list(data: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    """One page of an OpenAI list endpoint (files, batches, a response's input items): the
    cursor ids are the first and last item's, the way the SDKs' auto-paging reads them."""
    return {
        "object": "list",
        "data": data,
        "first_id": data[0].get("id") if data else None,
        "last_id": data[-1].get("id") if data else None,
        "has_more": has_more,
    }


def normalize_path(path: str) -> str:
    """The route a client meant, for the spellings that base-URL settings produce.

    ``http://host:8000/`` as a base URL gives ``//v1/chat/completions``; one without ``/v1``
    gives ``/chat/completions`` (other gateways answer both); a trailing slash sneaks in
    the same way. ``ANTHROPIC_BASE_URL=http://host:8000/v1`` makes the Anthropic SDKs ask
    for ``/v1/v1/messages``. A request target in absolute form (``http://host/v1/models``, which
    HTTP/1.1 servers must accept) arrives with its scheme and host: only its path counts.
    Every layer behind this one, auth included, sees the canonical path.
    """
    if not path.startswith("/"):
        try:
            path = "/" + urlsplit(path).path.lstrip("/")
        except ValueError:  # "http://[/v1/models": no URL at all, so no route either
            return "/" + path
    if "//" in path:
        path = _SLASHES.sub("/", path)
    if path.startswith("/v1/v1/"):
        path = path[3:]
    if len(path) > 1 and path.endswith("/") and path.rstrip("/") in _API_ROOTS:
        path = path.rstrip("/")
    if (path in _API_ROOTS and not path.startswith("/v1/")) or path.startswith(_API_PREFIXES):
        path = "/v1" + path
    return path


def header_value(value: str) -> bytes:
    # Header values we send come from the upstream or name request fields: keep them to
    # printable ASCII so that no input can make the response itself invalid.
    if value.isascii() and value.isprintable():
        return value.encode("ascii")
    return "".join(c if " " <= c <= "~" else "?" for c in value).encode("ascii")


def encode_headers(
    base: tuple[tuple[bytes, bytes], ...], extra: dict[str, str]
) -> list[tuple[bytes, bytes]]:
    return [*base, *((name.lower().encode("ascii"), header_value(v)) for name, v in extra.items())]


# More header fields than any client sends; a request with more is refused (431).
MAX_HEADER_FIELDS: Final = 100


def framing_error(headers: list[tuple[bytes, bytes]]) -> ProxyError | None:
    """Requests no client sends and a front proxy may read differently from hypercorn.

    ``Content-Length`` with ``Transfer-Encoding`` is the request-smuggling shape: h11 goes by
    the chunked encoding and keeps the connection, where RFC 9112 says to close it, so a
    proxy in front that trusted the length would see a different next request. Such a
    request, or one with a flood of header fields, is answered 400/431 and the connection
    closed.
    """
    if len(headers) > MAX_HEADER_FIELDS:
        return ProxyError(
            431,
            f"The request has more than {MAX_HEADER_FIELDS} header fields.",
            code="request_header_fields_too_large",
            headers={"Connection": "close"},
        )
    names = {name for name, _ in headers}
    if b"content-length" in names and b"transfer-encoding" in names:
        return ProxyError(
            400,
            "The request has both Content-Length and Transfer-Encoding.",
            code="bad_request",
            headers={"Connection": "close"},
        )
    return None


def speaks_anthropic(scope: Mapping[str, object]) -> bool:
    """Whether a request is in Anthropic's dialect, for answers made outside any door (the
    origin policy, Quart's routes): its SDKs and Claude Code always send
    ``anthropic-version``, and the Messages routes are Anthropic's whatever the client sent."""
    path = scope["path"]
    if isinstance(path, str) and "/messages" in path:
        return True
    headers = cast(Iterable[tuple[bytes, bytes]], scope["headers"])
    return any(name == b"anthropic-version" for name, _ in headers)


def dialect_error(
    scope: Mapping[str, object], exc: ProxyError, headers: Mapping[str, str] | None = None
) -> tuple[int, bytes, dict[str, str]]:
    """``(status, body, headers)`` for ``exc`` in the client's dialect, for answers made
    outside any door: Anthropic's shape when ``speaks_anthropic``, OpenAI's otherwise;
    ``headers`` are added to the error's own."""
    if speaks_anthropic(scope):
        status, body, extra = anthropic_error_reply(exc)
    else:
        status = exc.status
        body = json.dumps(exc.body(), separators=(",", ":"), ensure_ascii=False).encode()
        extra = dict(exc.headers)
    return status, body, {**extra, **(headers or {})}


def asks_to_close(scope: Scope) -> bool:
    """Whether the connection ends with this request: ``Connection: close`` (Python's
    ``urllib``, health checkers, scripts) or HTTP/1.0, which h11 never keeps alive."""
    if scope.get("http_version") == "1.0":
        return True
    return any(
        name == b"connection" and b"close" in value.lower() for name, value in scope["headers"]
    )


def closing_send(send: Send) -> Send:
    """``send``, with the last body message shielded from cancellation.

    hypercorn closes a connection that must close from inside the send of the response's
    last message, and hands the app ``http.disconnect`` just before. An app that cancels
    its handler on that disconnect -- quart-trio does, and so does ``ApiEndpoint`` -- then
    cancels hypercorn's own close halfway, and the socket stays open until the client
    closes it (measured: for good, with a client that waits for the server). Shielding the
    last send lets the close finish; it cannot block longer than the write itself would.
    """

    async def send_then_close(message: Message) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            with trio.CancelScope(shield=True):
                await send(message)
        else:
            await send(message)

    return send_then_close


def has_body(scope: Scope) -> bool:
    """Whether the request says a body follows (a non-zero length, or chunked)."""
    return any(
        (name == b"content-length" and value.strip() not in (b"", b"0"))
        or name == b"transfer-encoding"
        for name, value in scope["headers"]
    )


# No route but the chat POST takes a body; more than this on another one is refused.
_MAX_OTHER_BODY: Final = 64 * 1024


async def without_a_body(inner: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Hand a request for another route to ``inner`` with its body already read.

    Those routes never read a body, and hypercorn 0.18 sometimes leaves a connection
    whose request body was not read stuck for good (no keep-alive timer, no read timeout),
    a free way to pile up connections. So the body is read here, and one too large for any
    route is answered 413 at once, closing the connection.
    """
    if not has_body(scope):
        await inner(scope, receive, send)
        return
    size = 0
    while True:
        try:
            message = await receive()
        except ProxyError as exc:  # a body too slow (``body.PacedReceive``)
            status, body, headers = dialect_error(scope, exc)
            await send_json(send, body, status, headers)
            return
        if message["type"] == "http.disconnect":
            return
        size += len(message.get("body", b""))
        if size > _MAX_OTHER_BODY:
            error = ProxyError(
                413,
                f"{scope['method']} {scope['path']} takes no request body.",
                code="body_not_allowed",
                headers={"Connection": "close"},
            )
            await send_json(send, error.body(), error.status, error.headers)
            return
        if not message.get("more_body", False):
            break
    read: list[Message] = [{"type": "http.request", "body": b"", "more_body": False}]

    async def replay() -> Message:
        return read.pop() if read else await receive()

    await inner(scope, replay, send)


async def cancel_on_disconnect(receive: Receive, scope: trio.CancelScope) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            scope.cancel()
            return


async def send_stream(send: Send, reply: StreamReply, where: str) -> None:
    """Send an SSE answer, then close it; raises only ``trio.Cancelled``.

    An unexpected error after the first byte cannot change the status any more: it is
    logged and the response is left unfinished, so the client sees a cut stream rather
    than a clean end.
    """
    try:
        async with trio.open_nursery() as nursery:
            # hypercorn writes to the client shielded and without a timeout, so a client
            # that stops reading blocks a write beyond any cancel scope of ours. This frees
            # the stream's gate slot and upstream call regardless, just after the deadline.
            nursery.start_soon(expire_at, reply.deadline + _EXPIRE_MARGIN_S, reply.expire)
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": encode_headers(_SSE_HEADERS, reply.headers),
                }
            )
            async for chunk in reply.body:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            nursery.cancel_scope.cancel()
    except Exception:
        log.exception("unhandled error while streaming %s", where)
    finally:
        aclose = getattr(reply.body, "aclose", None)
        if aclose is not None:
            with trio.CancelScope(shield=True):
                await aclose()
        reply.close()


async def expire_at(deadline: float, expire: Callable[[], None]) -> None:
    await trio.sleep_until(deadline)
    expire()


async def send_json(
    send: Send, body: Any, status: int, headers: dict[str, str] | None = None
) -> None:
    """A JSON answer: ``body`` serialised, or sent as it is when it is already bytes."""
    if isinstance(body, bytes):
        data = body
    else:
        data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                *encode_headers(JSON_HEADERS, headers or {}),
                (b"content-length", b"%d" % len(data)),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data, "more_body": False})
