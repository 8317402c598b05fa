"""The Vertex kind's ``MessagesCaller``: Claude on Google Vertex AI, answering as Anthropic.

Vertex's ``rawPredict`` is the Messages API behind a Google front door, so this is the
Anthropic client with three changes: the URL names the project, region and model
(``VertexTarget``), the body carries ``anthropic_version`` (Vertex's ``vertex-2023-10-16``;
a client's ``anthropic-version`` header is Anthropic's API's business and is not sent) and
no ``model`` (``vertex_body``), and the caller is the gateway's Google identity
(``authorization: Bearer``, from ``GoogleCredentials``: cached, refreshed off the loop). Betas
travel as the ``anthropic-beta`` header, as on Anthropic's API. A stream
(``streamRawPredict``) is Anthropic's SSE unchanged; errors, Google's or the model
server's own, go through ``vertex_error``. ``count-tokens:rawPredict`` names no model in
its path, so its body keeps one: this upstream's id for it (``request.model``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, final

import trio

from ...errors import ProxyError
from ..client import CONNECT_TIMEOUT_S
from ..exchange import (
    SSEEvents,
    UpstreamReply,
    UpstreamStream,
    body_of_200,
    check_size,
    is_count,
    is_message,
    json_reply,
    send,
    stream_start,
)
from ..pool import PooledResponse, UpstreamPool
from ..request import UpstreamRequest
from ._body import parse_body, prepared, source_of
from ._errors import credentials_failed
from .google_credentials import GoogleCredentials
from .vertex import VertexTarget, vertex_body, vertex_error

__all__ = ["VertexClient"]

# The request's headers a Vertex call carries: its betas, and (for a traced request) the
# trace context of the attempt (``tracing``; the gateway adds these only when traces are on).
_FORWARDED: Final = frozenset({b"anthropic-beta", b"traceparent", b"tracestate"})


def _changed(source: Mapping[str, Any] | bytes, **changes: Any) -> dict[str, Any]:
    """The Messages body parsed, with ``changes`` applied (``None`` drops a field)."""
    body = dict(parse_body(source))
    for name, value in changes.items():
        if value is None:
            body.pop(name, None)
        else:
            body[name] = value
    return body


@final
class VertexClient:
    """Claude on Vertex AI for one project and region, as one Google identity.

    Args:
      target: the project, region and endpoint.
      credentials: the identity's bearer token.
      pool: connections to ``target.origin`` (``for_target`` makes one); ``aclose`` closes it.
    """

    def __init__(
        self, target: VertexTarget, credentials: GoogleCredentials, pool: UpstreamPool
    ) -> None:
        self._target = target
        self._credentials = credentials
        self._pool = pool
        self._large_bodies = trio.CapacityLimiter(1)

    @classmethod
    def for_target(cls, target: VertexTarget, credentials: GoogleCredentials) -> VertexClient:
        """A client with its own pool to ``target.origin``."""
        return cls(
            target, credentials, UpstreamPool(target.origin, connect_timeout=CONNECT_TIMEOUT_S)
        )

    async def create_message(self, request: UpstreamRequest) -> UpstreamReply:
        """``rawPredict``; raises ``ProxyError`` for anything but a message."""
        started = trio.current_time()
        source = source_of(request.content, request.body)
        path = self._target.path(request.model, stream=False)
        response = await self._post(
            path, request, lambda: vertex_body(_changed(source, stream=None))
        )
        first_byte = trio.current_time()
        raw = await body_of_200(response, vertex_error)
        return json_reply(raw, response, started, first_byte, is_message, "a Messages API message")

    async def open_stream(self, request: UpstreamRequest) -> UpstreamStream:
        """``streamRawPredict``; returns once Vertex answered 200."""
        started = trio.current_time()
        source = source_of(request.content, request.body)
        path = self._target.path(request.model, stream=True)
        response = await self._post(
            path, request, lambda: vertex_body(_changed(source, stream=True))
        )
        await stream_start(response, "text/event-stream", vertex_error)
        return UpstreamStream(response, started, trio.current_time(), SSEEvents())

    async def count_tokens(self, request: UpstreamRequest) -> UpstreamReply:
        """``count-tokens:rawPredict``; the reply's ``message`` is ``{"input_tokens": n}``."""
        started = trio.current_time()
        source = source_of(request.content, request.body)

        def body() -> bytes:
            counted = _changed(source, model=request.model, stream=None)
            return vertex_body(counted, count_tokens=True)

        response = await self._post(self._target.count_tokens_path(), request, body)
        first_byte = trio.current_time()
        raw = await body_of_200(response, vertex_error)
        return json_reply(raw, response, started, first_byte, is_count, "a token count")

    async def list_models(self) -> list[dict[str, Any]]:
        """Nothing: the fleet lists the names it maps onto this upstream's models."""
        return []

    async def aclose(self) -> None:
        """Close its pool's connections."""
        await self._pool.aclose()

    async def _post(
        self, path: str, request: UpstreamRequest, build: Callable[[], bytes]
    ) -> PooledResponse:
        """Send the body ``build`` makes (off the loop for a large one) to ``path`` as the
        gateway's identity, with the request's betas."""
        source = source_of(request.content, request.body)
        content = await prepared(source, lambda: check_size(build()), self._large_bodies)
        try:
            auth: Mapping[str, str] = await self._credentials.headers()
        except ProxyError:
            raise
        except Exception as exc:
            raise credentials_failed("Google credentials", exc) from None
        headers = [
            (b"content-type", b"application/json"),
            (b"accept", b"application/json"),
            *((name.encode("ascii"), value.encode("latin-1")) for name, value in auth.items()),
            *((name, value) for name, value in request.headers if name in _FORWARDED),
        ]
        return await send(self._pool, b"POST", self._pool.url(path), headers, content)
