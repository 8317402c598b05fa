"""The one place that talks to the Anthropic Messages API.

An ``UpstreamClient`` sends through the app's shared ``UpstreamPool`` (keep-alive httpcore2
connections to the one upstream origin, owned by the app lifespan; why not
``httpx2.AsyncClient``: ``upstream.pool``) and turns every way a call can go wrong into a
``ProxyError`` the HTTP layer can send as it is: an upstream error status keeps its meaning
(see ``translation.upstream_error``), a connection failure is a 502, a timeout a 504.

Deadlines are the caller's business (a cancel scope around the call, which every call in
the proxy has: ``REQUEST_TIMEOUT_S``); the only transport timeout is for opening a
connection. Cancelling the calling task closes the upstream connection at once: httpcore2
runs on trio, so a cancelled read drops the socket, and a response's ``aclose`` runs
shielded.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Final, final
from urllib.parse import quote

import httpcore2
import trio

from ..errors import ProxyError
from ..settings import Settings
from .errors import upstream_error
from .pool import PooledResponse, UpstreamPool
from .request import UpstreamRequest, encode_body
from .resilience import StreamEvent
from .sse import SSEDecoder, SSEError

_CONNECT_TIMEOUT_S: Final = 10.0
# How much of an upstream body is read. A Messages reply is at most a few MB (128K output
# tokens); an error needs only its JSON message, so an HTML page or a runaway error body
# is cut short instead of filling memory.
MAX_REPLY_BYTES: Final = 32 * 1024 * 1024
MAX_ERROR_BYTES: Final = 64 * 1024
# Anthropic's own limit on a Messages request; a larger one is refused here, unsent.
MAX_REQUEST_BYTES: Final = 32 * 1024 * 1024
_REDACTED: Final = "[redacted]"
# Anthropic pages its model list (at most 1000 a page); this many pages is plenty.
_MAX_MODEL_PAGES: Final = 10


def new_upstream_pool(settings: Settings) -> UpstreamPool:
    """The process-wide outbound pool.

    The pool itself is not our concurrency limit (the gate and the limiter are), so it never
    makes a request wait for a connection. Reads and writes have no transport timeout: every
    call runs under its request's deadline (``REQUEST_TIMEOUT_S``), which cancels them.
    """
    return UpstreamPool(settings.anthropic_base_url, connect_timeout=_CONNECT_TIMEOUT_S)


@final
@dataclass(frozen=True)
class UpstreamReply:
    """A successful non-streaming reply and when its parts arrived (``trio.current_time()``).

    ``raw`` is the body as the upstream sent it (our key redacted, should it appear), for
    doors that relay it unchanged; ``message`` is the same body parsed.
    """

    message: dict[str, Any]
    headers: Mapping[str, str]
    started_at: float
    first_byte_at: float
    finished_at: float
    raw: bytes = b""


@final
class UpstreamStream:
    """An open 200 SSE response; iterate ``events()``, always ``aclose()``.

    Closing before the end drops the connection, which is how the upstream learns that the
    client left.
    """

    def __init__(
        self,
        response: PooledResponse,
        started_at: float,
        first_byte_at: float,
        secret: str | None = None,
    ) -> None:
        self._response = response
        self._secret = secret
        self.headers: Mapping[str, str] = response.headers
        self.started_at = started_at
        self.first_byte_at = first_byte_at

    async def events(self) -> AsyncGenerator[StreamEvent, None]:
        """``(name, data, raw)`` for each event: its name, its JSON data parsed, and that
        data's text as it arrived (for doors that relay events unchanged)."""
        decoder = SSEDecoder()
        try:
            async with aclosing(self._response.aiter_raw()) as chunks:
                async for chunk in chunks:
                    for event in decoder.feed(chunk):
                        data = event.data
                        if self._secret and self._secret in data:
                            data = data.replace(self._secret, _REDACTED)
                        decoded = _decode_event(event.event, data)
                        if decoded is not None:
                            yield event.event, decoded, data
        except SSEError as exc:
            raise ProxyError(
                502,
                f"The upstream sent an unusable event stream: {exc}.",
                code="upstream_protocol_error",
            ) from None
        except httpcore2.TimeoutException:
            raise ProxyError(
                504, "The upstream stopped sending mid-stream.", code="upstream_timeout"
            ) from None
        except _TRANSPORT_ERRORS as exc:
            raise ProxyError(
                502,
                f"The upstream connection failed mid-stream ({type(exc).__name__}).",
                code="upstream_connection_error",
            ) from None

    async def aclose(self) -> None:
        await self._response.aclose()


# The events a Messages stream is made of; any other name is a vendor's or a future
# addition, which the SSE rules (and WIRE.md) say to ignore.
_MESSAGE_EVENTS: Final = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "error",
        "message",  # unnamed: the type is in the data
    }
)


def _decode_event(name: str, data: str) -> dict[str, Any] | None:
    """The event's JSON object; None for an event to skip (``ping``, keep-alives, vendor
    extensions), which must not break a stream however its data looks."""
    try:
        decoded = json.loads(data)
    except ValueError:
        if name not in _MESSAGE_EVENTS:
            return None
        raise ProxyError(
            502,
            f"The upstream sent a malformed {name or 'message'} event.",
            code="upstream_protocol_error",
        ) from None
    if not isinstance(decoded, dict):
        if name not in _MESSAGE_EVENTS:
            return None
        raise ProxyError(
            502, "The upstream sent a non-object event.", code="upstream_protocol_error"
        )
    return decoded


@final
class UpstreamClient:
    """Calls ``POST {ANTHROPIC_BASE_URL}/v1/messages`` with the configured key and version."""

    def __init__(self, settings: Settings, pool: UpstreamPool) -> None:
        self._pool = pool
        self._url = pool.url("/v1/messages")
        self._count_url = pool.url("/v1/messages/count_tokens")
        self._secret = settings.anthropic_api_key
        self._version = (b"anthropic-version", settings.anthropic_version.encode("ascii"))
        self._base: list[tuple[bytes, bytes]] = [
            (b"content-type", b"application/json"),
            (b"accept", b"application/json"),
        ]
        if settings.anthropic_api_key:
            self._base.append((b"x-api-key", settings.anthropic_api_key.encode("ascii")))
        self._headers = [*self._base, self._version]

    async def aclose(self) -> None:
        """Close its pool's connections."""
        await self._pool.aclose()

    async def create_message(self, request: UpstreamRequest) -> UpstreamReply:
        """One non-streaming call; raises ``ProxyError`` for anything but a 200 JSON message."""
        # Not a Messages API reply (a captive portal, a misrouted base URL): passing it on
        # would be an empty completion that looks like a success.
        return await self._json_call(self._url, request, _is_message, "a Messages API message")

    async def count_tokens(self, request: UpstreamRequest) -> UpstreamReply:
        """``POST /v1/messages/count_tokens``; the reply's ``message`` is its JSON object."""
        return await self._json_call(self._count_url, request, _is_count, "a token count")

    async def _json_call(
        self,
        url: httpcore2.URL,
        request: UpstreamRequest,
        valid: Callable[[object], bool],
        what: str,
    ) -> UpstreamReply:
        started = trio.current_time()
        response = await self._send(url, request)
        first_byte = trio.current_time()
        raw = await self._body_of_200(response)
        try:
            answer = json.loads(raw)
        except ValueError:
            answer = None
        if not valid(answer):
            raise ProxyError(
                502,
                f"The upstream answered 200 with a body that is not {what}.",
                code="upstream_protocol_error",
            )
        return UpstreamReply(
            answer, response.headers, started, first_byte, trio.current_time(), raw
        )

    async def open_stream(self, request: UpstreamRequest) -> UpstreamStream:
        """Start a streaming call; returns once the upstream answered 200 with headers."""
        started = trio.current_time()
        response = await self._send(self._url, request)
        if response.status_code != 200:
            await self._body_of_200(response)  # raises the upstream's error
        content_type = response.headers.get("content-type") or ""
        encoding = (response.headers.get("content-encoding") or "identity").strip().lower()
        if not content_type.lower().startswith("text/event-stream") or encoding != "identity":
            # A gateway that ignored "stream", a login page, a compressed stream: the answer
            # was generated (and billed) but cannot be relayed, and a retry would only be
            # billed again, so this is a protocol error, not a connection error.
            await response.aclose()
            what = content_type or "no Content-Type"
            if encoding != "identity":
                what += f", Content-Encoding {encoding}"
            raise ProxyError(
                502,
                f"The upstream answered a streaming request with {what}, not an event stream.",
                code="upstream_protocol_error",
            )
        return UpstreamStream(response, started, trio.current_time(), self._secret)

    async def list_models(self) -> list[dict[str, Any]]:
        """Every model ``GET /v1/models`` lists for this key, following its pages."""
        models: list[dict[str, Any]] = []
        after: str | None = None
        for _ in range(_MAX_MODEL_PAGES):
            target = "/v1/models?limit=1000" + (f"&after_id={quote(after)}" if after else "")
            response = await self._request(b"GET", self._pool.url(target), self._headers, b"")
            raw = await self._body_of_200(response)
            try:
                page = json.loads(raw)
            except ValueError:
                page = None
            data = page.get("data") if isinstance(page, dict) else None
            if not isinstance(data, list):
                raise ProxyError(
                    502,
                    "The upstream's model list is not a JSON object with a data list.",
                    code="upstream_protocol_error",
                )
            models += [item for item in data if isinstance(item, dict)]
            after = page.get("last_id")
            if not page.get("has_more") or not isinstance(after, str):
                break
        return models

    async def _body_of_200(self, response: PooledResponse) -> bytes:
        """Read and close ``response``; its body if it is a 200, else raise its error --
        minus our key should the upstream have echoed it (some proxies and misconfigured
        upstreams do), since the error's message goes to the client as it is."""
        ok = response.status_code == 200
        try:
            raw = await _read(response, MAX_REPLY_BYTES if ok else MAX_ERROR_BYTES)
        finally:
            await response.aclose()
        if ok:
            if len(raw) > MAX_REPLY_BYTES:
                raise ProxyError(
                    502,
                    f"The upstream's answer is larger than {MAX_REPLY_BYTES} bytes.",
                    code="upstream_protocol_error",
                )
            return raw
        raw = raw[:MAX_ERROR_BYTES]
        if self._secret:
            raw = raw.replace(self._secret.encode(), _REDACTED.encode())
        raise upstream_error(response.status_code, raw, response.headers)

    async def _send(self, url: httpcore2.URL, request: UpstreamRequest) -> PooledResponse:
        content = request.content
        if content is None:
            content = encode_body(request.body)
        if len(content) > MAX_REQUEST_BYTES:
            # The translation can outgrow the client's body (each OpenAI message becomes a
            # block list); the upstream would only refuse it after reading it all.
            raise ProxyError(
                413,
                f"The request is {len(content)} bytes once translated, more than the "
                f"upstream's limit of {MAX_REQUEST_BYTES}.",
                type="invalid_request_error",
                code="request_too_large",
            )
        headers = self._headers
        if request.headers:
            # The client's anthropic-version replaces ours; its betas go along as they are.
            headers = [*self._base, *request.headers]
            if not any(name == b"anthropic-version" for name, _ in request.headers):
                headers.append(self._version)
        return await self._request(b"POST", url, headers, content)

    async def _request(
        self, method: bytes, url: httpcore2.URL, headers: list[tuple[bytes, bytes]], content: bytes
    ) -> PooledResponse:
        try:
            return await self._pool.request(method, url, headers, content)
        except httpcore2.TimeoutException:
            raise ProxyError(
                504, "The upstream did not answer in time.", code="upstream_timeout"
            ) from None
        except _TRANSPORT_ERRORS as exc:
            raise ProxyError(
                502,
                f"Could not reach the upstream ({type(exc).__name__}).",
                code="upstream_connection_error",
            ) from None


def _is_message(answer: object) -> bool:
    return isinstance(answer, dict) and isinstance(answer.get("content"), list)


def _is_count(answer: object) -> bool:
    return isinstance(answer, dict) and isinstance(answer.get("input_tokens"), int)


# Everything httpcore2 raises for a connection that failed, short of a timeout.
_TRANSPORT_ERRORS: Final = (
    httpcore2.NetworkError,
    httpcore2.ProtocolError,
    httpcore2.UnsupportedProtocol,
    httpcore2.ProxyError,
)


async def _read(response: PooledResponse, limit: int) -> bytes:
    try:
        return await response.read(limit)
    except httpcore2.TimeoutException:
        raise ProxyError(
            504, "The upstream did not finish its answer in time.", code="upstream_timeout"
        ) from None
    except _TRANSPORT_ERRORS as exc:
        raise ProxyError(
            502,
            f"The upstream connection failed ({type(exc).__name__}).",
            code="upstream_connection_error",
        ) from None
