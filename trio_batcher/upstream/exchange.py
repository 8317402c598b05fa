"""One upstream call's bytes, whatever the kind: send, read the answer, read the stream.

Every kind of upstream (Anthropic's API in ``client``, Bedrock and Vertex in ``kinds``)
sends through an ``UpstreamPool`` and must turn every way a call can go wrong into the
same ``ProxyError``: a connection failure is a 502, a timeout a 504, an oversized request
a 413 unsent, a 200 that is not what was asked for a 502 ``upstream_protocol_error``. The
kinds differ only in what their error answers mean (``upstream_error``, ``bedrock_error``,
``vertex_error``: the ``ErrorOf`` each passes in) and in how their streams are framed (SSE
for Anthropic and Vertex, AWS event-stream for Bedrock: the ``EventDecoder`` each passes
to ``UpstreamStream``). Everything else is written once, here.

Deadlines are the caller's business (a cancel scope around the call); cancelling closes
the connection at once (``pool``'s ``aclose`` runs shielded).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Final, Protocol, final

import httpcore2
import trio

from ..errors import ProxyError
from .pool import PooledResponse, UpstreamPool
from .resilience import StreamEvent
from .sse import SSEDecoder, SSEError

__all__ = [
    "MAX_ERROR_BYTES",
    "MAX_REPLY_BYTES",
    "MAX_REQUEST_BYTES",
    "REDACTED",
    "TRANSPORT_ERRORS",
    "ErrorOf",
    "EventDecoder",
    "SSEEvents",
    "UpstreamReply",
    "UpstreamStream",
    "body_of_200",
    "check_size",
    "is_count",
    "is_message",
    "json_reply",
    "send",
    "stream_start",
]

# How much of an upstream body is read. A Messages reply is at most a few MB (128K output
# tokens); an error needs only its JSON message, so an HTML page or a runaway error body
# is cut short instead of filling memory.
MAX_REPLY_BYTES: Final = 32 * 1024 * 1024
MAX_ERROR_BYTES: Final = 64 * 1024
# Anthropic's own limit on a Messages request; a larger one is refused here, unsent.
MAX_REQUEST_BYTES: Final = 32 * 1024 * 1024
REDACTED: Final = "[redacted]"

# Everything httpcore2 raises for a connection that failed, short of a timeout.
TRANSPORT_ERRORS: Final = (
    httpcore2.NetworkError,
    httpcore2.ProtocolError,
    httpcore2.UnsupportedProtocol,
    httpcore2.ProxyError,
)

ErrorOf = Callable[[int, Mapping[str, str], bytes], ProxyError]
"""What a kind's error answer means: ``(status, headers, body) -> ProxyError``."""


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


def check_size(content: bytes) -> bytes:
    """``content`` if the upstream can take it; else a 413, so it is never sent.

    The translation can outgrow the client's body (each OpenAI message becomes a block
    list, a cloud body is re-serialised); the upstream would only refuse it after reading
    it all.
    """
    if len(content) > MAX_REQUEST_BYTES:
        raise ProxyError(
            413,
            f"The request is {len(content)} bytes once translated, more than the "
            f"upstream's limit of {MAX_REQUEST_BYTES}.",
            type="invalid_request_error",
            code="request_too_large",
        )
    return content


async def send(
    pool: UpstreamPool,
    method: bytes,
    url: httpcore2.URL,
    headers: list[tuple[bytes, bytes]],
    content: bytes,
) -> PooledResponse:
    """``pool.request``, its transport failures as a 504 (timeout) or 502 (connection)."""
    try:
        return await pool.request(method, url, headers, content)
    except httpcore2.TimeoutException:
        raise ProxyError(
            504, "The upstream did not answer in time.", code="upstream_timeout"
        ) from None
    except TRANSPORT_ERRORS as exc:
        raise ProxyError(
            502,
            f"Could not reach the upstream ({type(exc).__name__}).",
            code="upstream_connection_error",
        ) from None


async def _read(response: PooledResponse, limit: int) -> bytes:
    try:
        return await response.read(limit)
    except httpcore2.TimeoutException:
        raise ProxyError(
            504, "The upstream did not finish its answer in time.", code="upstream_timeout"
        ) from None
    except TRANSPORT_ERRORS as exc:
        raise ProxyError(
            502,
            f"The upstream connection failed ({type(exc).__name__}).",
            code="upstream_connection_error",
        ) from None


async def body_of_200(response: PooledResponse, error_of: ErrorOf) -> bytes:
    """Read and close ``response``; its body if it is a 200, else raise ``error_of`` its
    status, headers and (first ``MAX_ERROR_BYTES`` of) body."""
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
    raise error_of(response.status_code, response.headers, raw[:MAX_ERROR_BYTES])


def json_reply(
    raw: bytes,
    response: PooledResponse,
    started: float,
    first_byte: float,
    valid: Callable[[object], bool],
    what: str,
) -> UpstreamReply:
    """The ``UpstreamReply`` for a 200 body ``raw``; a 502 if it is not ``what`` (a captive
    portal, a misrouted base URL: passed on, it would look like a success)."""
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
    return UpstreamReply(answer, response.headers, started, first_byte, trio.current_time(), raw)


def is_message(answer: object) -> bool:
    return isinstance(answer, dict) and isinstance(answer.get("content"), list)


def is_count(answer: object) -> bool:
    return isinstance(answer, dict) and isinstance(answer.get("input_tokens"), int)


async def stream_start(response: PooledResponse, content_type: str, error_of: ErrorOf) -> None:
    """Check that ``response`` opens a stream framed as ``content_type``; else raise (and
    close it): the upstream's error for a non-200, a 502 for anything else.

    A gateway that ignored "stream", a login page, a compressed stream: the answer was
    generated (and billed) but cannot be relayed, and a retry would only be billed again,
    so this is a protocol error, not a connection error.
    """
    if response.status_code != 200:
        await body_of_200(response, error_of)  # raises the upstream's error
    sent = response.headers.get("content-type") or ""
    encoding = (response.headers.get("content-encoding") or "identity").strip().lower()
    if sent.lower().startswith(content_type) and encoding == "identity":
        return
    await response.aclose()
    what = sent or "no Content-Type"
    if encoding != "identity":
        what += f", Content-Encoding {encoding}"
    raise ProxyError(
        502,
        f"The upstream answered a streaming request with {what}, not an event stream.",
        code="upstream_protocol_error",
    )


class EventDecoder(Protocol):
    """Bytes in, Anthropic stream events out: one per response, no I/O.

    ``feed`` and ``finish`` raise ``ProxyError`` (502 ``upstream_protocol_error``) for
    framing they cannot read; ``finish`` is called once the body ended, for a decoder that
    can tell a stream cut short.
    """

    def feed(self, chunk: bytes) -> Iterable[StreamEvent]: ...

    def finish(self) -> None: ...


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
class SSEEvents:
    """The ``EventDecoder`` for an Anthropic SSE stream (Anthropic's API, Vertex).

    ``secret`` (our API key), should the upstream echo it in an event, is redacted. A
    stream cut mid-event is not an error here: the relay sees it end without
    ``message_stop``.
    """

    def __init__(self, secret: str | None = None) -> None:
        self._decoder = SSEDecoder()
        self._secret = secret

    def feed(self, chunk: bytes) -> list[StreamEvent]:
        try:
            events = self._decoder.feed(chunk)
        except SSEError as exc:
            raise ProxyError(
                502,
                f"The upstream sent an unusable event stream: {exc}.",
                code="upstream_protocol_error",
            ) from None
        out: list[StreamEvent] = []
        for event in events:
            data = event.data
            if self._secret and self._secret in data:
                data = data.replace(self._secret, REDACTED)
            decoded = _decode_event(event.event, data)
            if decoded is not None:
                out.append((event.event, decoded, data))
        return out

    def finish(self) -> None:
        return None


@final
class UpstreamStream:
    """An open 200 stream; iterate ``events()``, always ``aclose()``.

    Closing before the end drops the connection, which is how the upstream learns that the
    client left.
    """

    def __init__(
        self,
        response: PooledResponse,
        started_at: float,
        first_byte_at: float,
        decoder: EventDecoder,
    ) -> None:
        self._response = response
        self._decoder = decoder
        self.headers: Mapping[str, str] = response.headers
        self.started_at = started_at
        self.first_byte_at = first_byte_at

    async def events(self) -> AsyncGenerator[StreamEvent, None]:
        """``(name, data, raw)`` for each event: its name, its JSON data parsed, and that
        data's text as it arrived (for doors that relay events unchanged)."""
        decoder = self._decoder
        try:
            async with aclosing(self._response.aiter_raw()) as chunks:
                async for chunk in chunks:
                    for event in decoder.feed(chunk):
                        yield event
            decoder.finish()
        except httpcore2.TimeoutException:
            raise ProxyError(
                504, "The upstream stopped sending mid-stream.", code="upstream_timeout"
            ) from None
        except TRANSPORT_ERRORS as exc:
            raise ProxyError(
                502,
                f"The upstream connection failed mid-stream ({type(exc).__name__}).",
                code="upstream_connection_error",
            ) from None

    async def aclose(self) -> None:
        await self._response.aclose()
