"""``POST /v1/chat/completions`` served straight from ASGI, in front of Quart.

Why: this is the one route whose cost is multiplied by the traffic. Quart's request machinery
-- the request and app contexts, werkzeug routing, ``Request`` and ``Response`` objects, the
before/after hooks, a response sent as three ASGI messages -- is general-purpose work the
proxy does not need here. Every other route (models, metrics, visuals, and the 404/405
answers) stays in Quart.

What it keeps from a Quart view, exactly:

- the same answers: ``ProxyError`` becomes its OpenAI-shaped JSON error, anything unexpected
  a logged 500 ``Internal proxy error.``; a body over ``MAX_BODY_BYTES`` is a 413 (checked
  against ``Content-Length`` first, then while reading); ``PROXY_API_KEYS`` is enforced;
- the same cancellation: like quart-trio, the handler runs beside a task waiting for
  ``http.disconnect``, and a disconnect cancels the handler -- the pipeline then records a
  499, closes the upstream call, and (mid-stream) closes the relay;
- streams: ``text/event-stream`` with ``Cache-Control: no-cache`` and ``X-Accel-Buffering:
  no``, one ASGI message per relay write, no response timeout (``REQUEST_TIMEOUT_S`` bounds
  it instead). An unexpected error after the first byte cannot change the status any more:
  it is logged and the response is left unfinished, so the client sees a cut stream rather
  than a clean end.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final, final
from urllib.parse import urlsplit

import trio

from ..errors import ProxyError, error_body
from ..pipeline.core import CLIENT_CLOSED, ChatPipeline, JSONReply
from .auth import client_key, key_matches, proxy_key_error
from .json_depth import deeper_than

log = logging.getLogger("trio_batcher")

PATH: Final = "/v1/chat/completions"
# Deeper than any real request (tool schemas nest a few dozen levels at most), and far
# enough below Python's recursion limit that serialising the body again is safe.
MAX_JSON_DEPTH: Final = 200

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[..., Awaitable[None]]

# How long after a stream's deadline its resources are freed even if a write is stuck.
_EXPIRE_MARGIN_S: Final = 1.0
_SLASHES: Final = re.compile("/{2,}")
_API_ROOTS: Final = frozenset({PATH, "/v1/models", "/chat/completions", "/models"})
_KEY_HEADERS: Final = frozenset({b"authorization", b"api-key", b"x-api-key"})
_JSON_HEADERS: Final = ((b"content-type", b"application/json"),)
_SSE_HEADERS: Final = (
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
)


def normalize_path(path: str) -> str:
    """The route a client meant, for the spellings that base-URL settings produce.

    ``http://host:8000/`` as a base URL gives ``//v1/chat/completions``; one without ``/v1``
    gives ``/chat/completions`` (other gateways answer both); a trailing slash sneaks in
    the same way. A request target in absolute form (``http://host/v1/models``, which
    HTTP/1.1 servers must accept) arrives with its scheme and host: only its path counts.
    Every layer behind this one, auth included, sees the canonical path.
    """
    if not path.startswith("/"):
        path = "/" + urlsplit(path).path.lstrip("/")
    if "//" in path:
        path = _SLASHES.sub("/", path)
    if len(path) > 1 and path.endswith("/") and path.rstrip("/") in _API_ROOTS:
        path = path.rstrip("/")
    if (path in _API_ROOTS and not path.startswith("/v1/")) or path.startswith("/models/"):
        path = "/v1" + path
    return path


def body_too_large(max_body_bytes: int) -> ProxyError:
    return ProxyError(
        413,
        f"The request body is larger than MAX_BODY_BYTES ({max_body_bytes} bytes).",
        code="request_entity_too_large",
    )


def parse_json_body(raw: bytes) -> object:
    """The request's JSON, or a 400 that says what is wrong with it.

    Stricter than ``json.loads(bytes)`` where that would let trouble in: the body must be
    UTF-8 (JSON's only interchange encoding; ``json.loads`` would also take UTF-16 and
    encoded surrogates), may not spell an unpaired UTF-16 surrogate as an escape, and may
    not nest deeper than ``MAX_JSON_DEPTH``. Each of those would otherwise fail later, far
    from the input: in the upstream call's serialisation, or in every metrics export once
    a bad string is a model label.
    """
    if not raw or not raw.strip():
        raise ProxyError(400, "The request body is empty; send a JSON object.", code="invalid_json")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ProxyError(
            400, f"The request body is not UTF-8 text ({exc.reason}).", code="invalid_json"
        ) from None
    try:
        payload = json.loads(text)
    except ValueError as exc:
        raise ProxyError(
            400, f"We could not parse the JSON body of your request ({exc}).", code="invalid_json"
        ) from None
    except RecursionError:
        raise _too_deep() from None
    if deeper_than(text, MAX_JSON_DEPTH):
        raise _too_deep()
    if "\\ud" in text or "\\uD" in text:
        where = _lone_surrogate(payload, "")
        if where is not None:
            raise ProxyError(
                400,
                "The request contains an unpaired UTF-16 surrogate escape (\\ud800-\\udfff), "
                "which is not valid Unicode text.",
                param=where.encode("utf-8", "backslashreplace").decode("utf-8") or None,
                code="invalid_json",
            )
    return payload


def _too_deep() -> ProxyError:
    return ProxyError(
        400,
        f"The JSON body of your request is nested too deeply (more than {MAX_JSON_DEPTH} levels).",
        code="invalid_json",
    )


def _lone_surrogate(value: object, path: str) -> str | None:
    """The path of the first string (or key) that cannot be encoded as UTF-8, or None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if _lone_surrogate(key, where) is not None:
                return where
            found = _lone_surrogate(item, where)
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = _lone_surrogate(item, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def header_value(value: str) -> bytes:
    # Header values we send come from the upstream or name request fields: keep them to
    # printable ASCII so that no input can make the response itself invalid.
    if value.isascii() and value.isprintable():
        return value.encode("ascii")
    return "".join(c if " " <= c <= "~" else "?" for c in value).encode("ascii")


def _encode_headers(
    base: tuple[tuple[bytes, bytes], ...], extra: dict[str, str]
) -> list[tuple[bytes, bytes]]:
    return [*base, *((name.lower().encode("ascii"), header_value(v)) for name, v in extra.items())]


@final
class ChatEndpoint:
    """ASGI middleware: takes ``POST /v1/chat/completions``, passes everything else on.

    Paths are normalized first (``normalize_path``), for this route and all the others.

    Args:
      inner: the Quart app's ASGI callable (lifespan and every other route).
      pipeline: returns the running app's ``ChatPipeline``, or None before startup.
      max_body_bytes: ``MAX_BODY_BYTES``.
      api_keys: ``PROXY_API_KEYS`` (empty: no key needed).
      body_timeout: seconds from arrival by which the whole body must be in
        (``REQUEST_TIMEOUT_S``); a client still sending then gets 408 and the connection is
        closed, so a slow drip cannot hold a connection and a buffer for ever.
    """

    def __init__(
        self,
        inner: ASGIApp,
        pipeline: Callable[[], ChatPipeline | None],
        *,
        max_body_bytes: int,
        api_keys: tuple[str, ...],
        body_timeout: float = math.inf,
    ) -> None:
        self._inner = inner
        self._pipeline = pipeline
        self._max_body_bytes = max_body_bytes
        self._api_keys = api_keys
        self._body_timeout = body_timeout
        # Large bodies are parsed in a worker thread, one at a time: the event loop keeps
        # serving everyone else, and a flood of them queues instead of using every core.
        self._large_bodies = trio.CapacityLimiter(1)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._inner(scope, receive, send)
            return
        framing = _framing_error(scope["headers"])
        if framing is not None:
            await _send_error(send, framing)
            return
        if scope["path"] != PATH:
            path = normalize_path(scope["path"])
            if path != scope["path"]:
                scope = {**scope, "path": path, "raw_path": path.encode()}
        if scope["path"] != PATH or scope["method"] != "POST":
            await _without_a_body(self._inner, scope, receive, send)
            return
        arrived = trio.current_time()
        pipeline = self._pipeline()
        try:
            if pipeline is None:
                raise ProxyError(503, "The proxy is starting up.", code="starting")
            self._authenticate(scope)
            raw = None
            with trio.move_on_at(arrived + self._body_timeout) as reading:
                raw = await self._read_body(scope, receive)
            if reading.cancelled_caught:
                raise ProxyError(
                    408,
                    "The request body did not arrive in time (REQUEST_TIMEOUT_S).",
                    code="request_timeout",
                    headers={"Connection": "close"},
                )
            if raw is None:  # the client left while sending its body: nothing to answer
                pipeline.record_refused(CLIENT_CLOSED, arrived)
                return
            if len(raw) < LARGE_BODY_BYTES:
                payload = parse_json_body(raw)
            else:  # seconds of CPU for a pathological body: off the event loop
                payload = await trio.to_thread.run_sync(
                    parse_json_body, raw, limiter=self._large_bodies
                )
        except Exception as exc:
            if pipeline is not None:
                status = exc.status if isinstance(exc, ProxyError) else 500
                timing = pipeline.record_refused(status, arrived)
                if isinstance(exc, ProxyError):
                    exc.headers["Server-Timing"] = timing.server_timing_header()
            await _send_error(send, exc)
            return
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_on_disconnect, receive, nursery.cancel_scope)
            await _answer(pipeline, payload, arrived, send, large=len(raw) >= LARGE_BODY_BYTES)
            nursery.cancel_scope.cancel()

    def _authenticate(self, scope: Scope) -> None:
        if not self._api_keys:
            return
        found: dict[bytes, str] = {}
        for name, value in scope["headers"]:
            if name in _KEY_HEADERS:
                found.setdefault(name, value.decode("latin-1"))
        key = client_key(
            found.get(b"authorization"), found.get(b"api-key"), found.get(b"x-api-key")
        )
        if not key_matches(key, self._api_keys):
            raise proxy_key_error()

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes | None:
        limit = self._max_body_bytes
        for name, value in scope["headers"]:
            if name == b"content-encoding" and value.strip().lower() not in (b"", b"identity"):
                raise ProxyError(
                    415,
                    f"Content-Encoding {value.decode('latin-1')!a} is not supported for "
                    "request bodies; send the JSON uncompressed.",
                    type="invalid_request_error",
                    code="unsupported_content_encoding",
                    headers={"Accept-Encoding": "identity"},
                )
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    raise ProxyError(
                        400, "The Content-Length header is not a number.", code="bad_request"
                    ) from None
                if declared > limit:
                    raise body_too_large(limit)
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise body_too_large(limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)


# A body this large is parsed and translated in a worker thread (a normal request is a few
# KB and takes well under a millisecond; a 30 MB one with a million messages takes seconds).
LARGE_BODY_BYTES: Final = 256 * 1024

# More header fields than any client sends; a request with more is refused (431).
MAX_HEADER_FIELDS: Final = 100


def _framing_error(headers: list[tuple[bytes, bytes]]) -> ProxyError | None:
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


# No route but the chat POST takes a body; more than this on another one is refused.
_MAX_OTHER_BODY: Final = 64 * 1024


async def _without_a_body(inner: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Hand a request for another route to ``inner`` with its body already read.

    Those routes never read a body, and hypercorn 0.18 sometimes leaves a connection
    whose request body was not read stuck for good (no keep-alive timer, no read timeout),
    a free way to pile up connections. So the body is read here, and one too large for any
    route is answered 413 at once, closing the connection.
    """
    if not any(
        (name == b"content-length" and value.strip() not in (b"", b"0"))
        or name == b"transfer-encoding"
        for name, value in scope["headers"]
    ):
        await inner(scope, receive, send)
        return
    size = 0
    while True:
        message = await receive()
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
            await _send_error(send, error)
            return
        if not message.get("more_body", False):
            break
    read: list[Message] = [{"type": "http.request", "body": b"", "more_body": False}]

    async def replay() -> Message:
        return read.pop() if read else await receive()

    await inner(scope, replay, send)


async def _cancel_on_disconnect(receive: Receive, scope: trio.CancelScope) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            scope.cancel()
            return


async def _answer(
    pipeline: ChatPipeline, payload: object, arrived: float, send: Send, *, large: bool
) -> None:
    """Run the pipeline and send its answer; raises only ``trio.Cancelled``."""
    try:
        reply = await pipeline.handle(payload, arrived, large=large)
    except Exception as exc:
        await _send_error(send, exc)
        return
    if isinstance(reply, JSONReply):
        await send_json(send, reply.body, reply.status, reply.headers)
        return
    try:
        async with trio.open_nursery() as nursery:
            # hypercorn writes to the client shielded and without a timeout, so a client
            # that stops reading blocks a write beyond any cancel scope of ours. This frees
            # the stream's gate slot and upstream call regardless, just after the deadline.
            nursery.start_soon(_expire_at, reply.deadline + _EXPIRE_MARGIN_S, reply.expire)
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": _encode_headers(_SSE_HEADERS, reply.headers),
                }
            )
            async for chunk in reply.body:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            nursery.cancel_scope.cancel()
    except Exception:
        log.exception("unhandled error while streaming POST %s", PATH)
    finally:
        aclose = getattr(reply.body, "aclose", None)
        if aclose is not None:
            with trio.CancelScope(shield=True):
                await aclose()
        reply.close()


async def _expire_at(deadline: float, expire: Callable[[], None]) -> None:
    await trio.sleep_until(deadline)
    expire()


async def _send_error(send: Send, exc: Exception) -> None:
    """A ``ProxyError`` as its OpenAI-shaped answer; anything else as a logged 500."""
    if isinstance(exc, ProxyError):
        await send_json(send, exc.body(), exc.status, exc.headers)
        return
    log.error("unhandled error on POST %s", PATH, exc_info=exc)
    await send_json(send, error_body("Internal proxy error.", "server_error"), 500)


async def send_json(
    send: Send, body: Any, status: int, headers: dict[str, str] | None = None
) -> None:
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                *_encode_headers(_JSON_HEADERS, headers or {}),
                (b"content-length", b"%d" % len(data)),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data, "more_body": False})
