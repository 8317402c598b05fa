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

from collections.abc import Mapping
from typing import Any, final

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
from ._body import parse_body
from ._errors import credentials_failed
from .google_credentials import GoogleCredentials
from .vertex import VertexTarget, vertex_body, vertex_error

__all__ = ["VertexClient"]


def _body(request: UpstreamRequest, **changes: Any) -> dict[str, Any]:
    """The Messages body (the client's bytes when the door kept them: ``body`` may then be
    only an outline), parsed, with ``changes`` applied (``None`` drops a field)."""
    source = request.content if request.content is not None else request.body
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

    @classmethod
    def for_target(cls, target: VertexTarget, credentials: GoogleCredentials) -> VertexClient:
        """A client with its own pool to ``target.origin``."""
        return cls(
            target, credentials, UpstreamPool(target.origin, connect_timeout=CONNECT_TIMEOUT_S)
        )

    async def create_message(self, request: UpstreamRequest) -> UpstreamReply:
        """``rawPredict``; raises ``ProxyError`` for anything but a message."""
        started = trio.current_time()
        body = vertex_body(_body(request, stream=None))
        path = self._target.path(request.model, stream=False)
        response = await self._post(path, body, request)
        first_byte = trio.current_time()
        raw = await body_of_200(response, vertex_error)
        return json_reply(raw, response, started, first_byte, is_message, "a Messages API message")

    async def open_stream(self, request: UpstreamRequest) -> UpstreamStream:
        """``streamRawPredict``; returns once Vertex answered 200."""
        started = trio.current_time()
        body = vertex_body(_body(request, stream=True))
        path = self._target.path(request.model, stream=True)
        response = await self._post(path, body, request)
        await stream_start(response, "text/event-stream", vertex_error)
        return UpstreamStream(response, started, trio.current_time(), SSEEvents())

    async def count_tokens(self, request: UpstreamRequest) -> UpstreamReply:
        """``count-tokens:rawPredict``; the reply's ``message`` is ``{"input_tokens": n}``."""
        started = trio.current_time()
        body = vertex_body(_body(request, model=request.model, stream=None), count_tokens=True)
        response = await self._post(self._target.count_tokens_path(), body, request)
        first_byte = trio.current_time()
        raw = await body_of_200(response, vertex_error)
        return json_reply(raw, response, started, first_byte, is_count, "a token count")

    async def list_models(self) -> list[dict[str, Any]]:
        """Nothing: the fleet lists the names it maps onto this upstream's models."""
        return []

    async def aclose(self) -> None:
        """Close its pool's connections."""
        await self._pool.aclose()

    async def _post(self, path: str, content: bytes, request: UpstreamRequest) -> PooledResponse:
        """Send ``content`` to ``path`` as the gateway's identity, with the request's betas."""
        check_size(content)
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
            *((name, value) for name, value in request.headers if name == b"anthropic-beta"),
        ]
        return await send(self._pool, b"POST", self._pool.url(path), headers, content)
