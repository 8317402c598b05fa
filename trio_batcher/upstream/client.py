"""The one place that talks to the Anthropic Messages API.

An ``UpstreamClient`` sends through the app's shared ``UpstreamPool`` (keep-alive httpcore2
connections to the one upstream origin, owned by the app lifespan; why not
``httpx2.AsyncClient``: ``upstream.pool``) and turns every way a call can go wrong into a
``ProxyError`` the HTTP layer can send as it is: an upstream error status keeps its meaning
(see ``translation.upstream_error``), a connection failure is a 502, a timeout a 504
(``exchange``, shared with the cloud kinds).

Deadlines are the caller's business (a cancel scope around the call, which every call in
the proxy has: ``REQUEST_TIMEOUT_S``); the only transport timeout is for opening a
connection. Cancelling the calling task closes the upstream connection at once: httpcore2
runs on trio, so a cancelled read drops the socket, and a response's ``aclose`` runs
shielded.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final, final
from urllib.parse import quote

import httpcore2
import trio

from ..errors import ProxyError
from ..settings import Settings
from .errors import upstream_error
from .exchange import (
    REDACTED,
    SSEEvents,
    body_of_200,
    check_size,
    is_count,
    is_message,
    json_reply,
    send,
    stream_start,
)
from .exchange import UpstreamReply as UpstreamReply
from .exchange import UpstreamStream as UpstreamStream
from .pool import PooledResponse, UpstreamPool
from .request import UpstreamRequest, encode_body

CONNECT_TIMEOUT_S: Final = 10.0
# Anthropic pages its model list (at most 1000 a page); this many pages is plenty.
_MAX_MODEL_PAGES: Final = 10


def new_upstream_pool(settings: Settings) -> UpstreamPool:
    """The process-wide outbound pool.

    The pool itself is not our concurrency limit (the gate and the limiter are), so it never
    makes a request wait for a connection. Reads and writes have no transport timeout: every
    call runs under its request's deadline (``REQUEST_TIMEOUT_S``), which cancels them.
    """
    return UpstreamPool(settings.anthropic_base_url, connect_timeout=CONNECT_TIMEOUT_S)


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

    async def create_message(self, request: UpstreamRequest) -> UpstreamReply:
        """One non-streaming call; raises ``ProxyError`` for anything but a 200 JSON message."""
        return await self._json_call(self._url, request, is_message, "a Messages API message")

    async def count_tokens(self, request: UpstreamRequest) -> UpstreamReply:
        """``POST /v1/messages/count_tokens``; the reply's ``message`` is its JSON object."""
        return await self._json_call(self._count_url, request, is_count, "a token count")

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
        raw = await body_of_200(response, self._error)
        return json_reply(raw, response, started, first_byte, valid, what)

    async def open_stream(self, request: UpstreamRequest) -> UpstreamStream:
        """Start a streaming call; returns once the upstream answered 200 with headers."""
        started = trio.current_time()
        response = await self._send(self._url, request)
        await stream_start(response, "text/event-stream", self._error)
        return UpstreamStream(response, started, trio.current_time(), SSEEvents(self._secret))

    async def list_models(self) -> list[dict[str, Any]]:
        """Every model ``GET /v1/models`` lists for this key, following its pages."""
        models: list[dict[str, Any]] = []
        after: str | None = None
        for _ in range(_MAX_MODEL_PAGES):
            target = "/v1/models?limit=1000" + (f"&after_id={quote(after)}" if after else "")
            response = await send(self._pool, b"GET", self._pool.url(target), self._headers, b"")
            raw = await body_of_200(response, self._error)
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

    async def aclose(self) -> None:
        """Close the pool's connections (the app lifespan's end)."""
        await self._pool.aclose()

    def _error(self, status: int, headers: Mapping[str, str], raw: bytes) -> ProxyError:
        """The upstream's error -- minus our key should the upstream have echoed it (some
        proxies and misconfigured upstreams do), since the error's message goes to the
        client as it is."""
        if self._secret:
            raw = raw.replace(self._secret.encode(), REDACTED.encode())
        return upstream_error(status, raw, headers)

    async def _send(self, url: httpcore2.URL, request: UpstreamRequest) -> PooledResponse:
        content = request.content
        if content is None:
            content = encode_body(request.body)
        check_size(content)
        headers = self._headers
        if request.headers:
            # The client's anthropic-version replaces ours; its betas go along as they are.
            headers = [*self._base, *request.headers]
            if not any(name == b"anthropic-version" for name, _ in request.headers):
                headers.append(self._version)
        return await send(self._pool, b"POST", url, headers, content)
