"""The one place that talks to the Anthropic Messages API.

An ``UpstreamClient`` wraps the app's shared ``httpx2.AsyncClient`` (one pool for the whole
process, owned by the app lifespan) and turns every way a call can go wrong into a
``ProxyError`` the HTTP layer can send as it is: an upstream error status keeps its meaning
(see ``translation.upstream_error``), a connection failure is a 502, a timeout a 504.

Deadlines are the caller's business (``trio.fail_after`` around the call); the httpx2
timeouts here are only a safety net for a peer that stops talking mid-response. Cancelling
the calling task closes the upstream connection at once: httpx2 runs on trio, so a
cancelled read drops the socket, and a stream's ``aclose`` runs shielded.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Final, final

import httpx2
import trio

from .errors import ProxyError
from .settings import Settings
from .sse import SSEDecoder
from .translation import upstream_error

_CONNECT_TIMEOUT_S: Final = 10.0
_WRITE_TIMEOUT_S: Final = 60.0


def new_http_client(settings: Settings) -> httpx2.AsyncClient:
    """The process-wide outbound pool.

    The pool itself is not our concurrency limit (the gate and the limiter are), so it is
    sized generously and never makes a request wait for a connection.
    """
    return httpx2.AsyncClient(
        timeout=httpx2.Timeout(
            connect=_CONNECT_TIMEOUT_S,
            read=settings.request_timeout_s,
            write=_WRITE_TIMEOUT_S,
            pool=None,
        ),
        limits=httpx2.Limits(max_connections=2048, max_keepalive_connections=256),
        trust_env=False,
        follow_redirects=False,
    )


@final
@dataclass(frozen=True)
class UpstreamReply:
    """A successful non-streaming reply and when its parts arrived (``trio.current_time()``)."""

    message: dict[str, Any]
    headers: Mapping[str, str]
    started_at: float
    first_byte_at: float
    finished_at: float


@final
class UpstreamStream:
    """An open 200 SSE response; iterate ``events()``, always ``aclose()``.

    Closing before the end drops the connection, which is how the upstream learns that the
    client left.
    """

    def __init__(self, response: httpx2.Response, started_at: float, first_byte_at: float) -> None:
        self._response = response
        self.headers: Mapping[str, str] = response.headers
        self.started_at = started_at
        self.first_byte_at = first_byte_at

    async def events(self) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
        decoder = SSEDecoder()
        try:
            async with aclosing(self._response.aiter_raw()) as chunks:
                async for chunk in chunks:
                    for event in decoder.feed(chunk):
                        yield event.event, _decode_event(event.event, event.data)
        except httpx2.TimeoutException:
            raise ProxyError(
                504, "The upstream stopped sending mid-stream.", code="upstream_timeout"
            ) from None
        except httpx2.TransportError as exc:
            raise ProxyError(
                502,
                f"The upstream connection failed mid-stream ({type(exc).__name__}).",
                code="upstream_connection_error",
            ) from None

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await self._response.aclose()


def _decode_event(name: str, data: str) -> dict[str, Any]:
    try:
        decoded = json.loads(data)
    except ValueError:
        raise ProxyError(
            502,
            f"The upstream sent a malformed {name or 'message'} event.",
            code="upstream_protocol_error",
        ) from None
    if not isinstance(decoded, dict):
        raise ProxyError(
            502, "The upstream sent a non-object event.", code="upstream_protocol_error"
        )
    return decoded


@final
class UpstreamClient:
    """Calls ``POST {ANTHROPIC_BASE_URL}/v1/messages`` with the configured key and version."""

    def __init__(self, settings: Settings, http: httpx2.AsyncClient) -> None:
        self._http = http
        self._url = settings.messages_url
        self._headers = {
            "content-type": "application/json",
            "anthropic-version": settings.anthropic_version,
            "accept": "application/json",
        }
        if settings.anthropic_api_key:
            self._headers["x-api-key"] = settings.anthropic_api_key

    def _request(
        self, body: Mapping[str, Any], extra_headers: Mapping[str, str] | None
    ) -> httpx2.Request:
        headers = self._headers if not extra_headers else {**self._headers, **extra_headers}
        content = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        return self._http.build_request("POST", self._url, content=content, headers=headers)

    async def create_message(
        self, body: Mapping[str, Any], *, extra_headers: Mapping[str, str] | None = None
    ) -> UpstreamReply:
        """One non-streaming call; raises ``ProxyError`` for anything but a 200 JSON message."""
        started = trio.current_time()
        response = await self._send(self._request(body, extra_headers))
        try:
            first_byte = trio.current_time()
            raw = await _read(response)
        finally:
            await response.aclose()
        if response.status_code != 200:
            raise upstream_error(response.status_code, raw, response.headers)
        try:
            message = json.loads(raw)
        except ValueError:
            message = None
        if not isinstance(message, dict):
            raise ProxyError(
                502,
                "The upstream answered 200 with a body that is not a JSON object.",
                code="upstream_protocol_error",
            )
        return UpstreamReply(message, response.headers, started, first_byte, trio.current_time())

    async def open_stream(
        self, body: Mapping[str, Any], *, extra_headers: Mapping[str, str] | None = None
    ) -> UpstreamStream:
        """Start a streaming call; returns once the upstream answered 200 with headers."""
        started = trio.current_time()
        response = await self._send(self._request(body, extra_headers))
        if response.status_code != 200:
            try:
                raw = await _read(response)
            finally:
                await response.aclose()
            raise upstream_error(response.status_code, raw, response.headers)
        return UpstreamStream(response, started, trio.current_time())

    async def _send(self, request: httpx2.Request) -> httpx2.Response:
        try:
            return await self._http.send(request, stream=True)
        except httpx2.TimeoutException:
            raise ProxyError(
                504, "The upstream did not answer in time.", code="upstream_timeout"
            ) from None
        except httpx2.TransportError as exc:
            raise ProxyError(
                502,
                f"Could not reach the upstream ({type(exc).__name__}).",
                code="upstream_connection_error",
            ) from None


async def _read(response: httpx2.Response) -> bytes:
    try:
        return await response.aread()
    except httpx2.TimeoutException:
        raise ProxyError(
            504, "The upstream did not finish its answer in time.", code="upstream_timeout"
        ) from None
    except httpx2.TransportError as exc:
        raise ProxyError(
            502,
            f"The upstream connection failed ({type(exc).__name__}).",
            code="upstream_connection_error",
        ) from None
