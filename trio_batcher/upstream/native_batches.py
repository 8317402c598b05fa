"""Anthropic's Message Batches API relayed for a native client: its calls, as they come.

Unlike ``upstream.batches.MessageBatchesClient`` (the offline path's own calls, with the
gateway's fixed headers), this relays a client's call: its ``anthropic-version`` and
``anthropic-beta`` go upstream, and the upstream's answer comes back as it is -- a batch
object, or a results body streamed chunk by chunk. The key is always the gateway's (the
first anthropic upstream's, ``runtime.effective_settings``); a client's key never goes
upstream, and the gateway's never comes back in an error.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Final, final
from urllib.parse import quote

import httpcore2

from ..errors import ProxyError
from ..settings import Settings
from .batches import batch_answer, connection_error, error_of
from .exchange import TRANSPORT_ERRORS as _TRANSPORT_ERRORS
from .pool import PooledResponse, UpstreamPool

__all__ = ["BATCHES_PATH", "NativeBatchesClient", "RelayedStream"]

BATCHES_PATH: Final = "/v1/messages/batches"
_MAX_ANSWER_BYTES: Final = 1024 * 1024  # a batch object is a few hundred bytes
# What of the client's headers goes upstream with its call.
_FORWARDED: Final = ("anthropic-beta",)


@final
class RelayedStream:
    """An upstream body being relayed: iterate its chunks, then (or instead) ``aclose``."""

    def __init__(self, response: PooledResponse) -> None:
        self._response = response
        self.content_type = response.headers.get("content-type") or "application/binary"

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.aiter_raw():
                yield chunk
        except _TRANSPORT_ERRORS as exc:
            raise connection_error(exc) from None
        finally:
            await self._response.aclose()

    async def aclose(self) -> None:
        await self._response.aclose()


@final
class NativeBatchesClient:
    """``/v1/messages/batches`` on the gateway's anthropic upstream, for relayed calls."""

    def __init__(self, settings: Settings, pool: UpstreamPool) -> None:
        self._pool = pool
        self._secret = settings.anthropic_api_key
        self._version = settings.anthropic_version
        self._key: list[tuple[bytes, bytes]] = []
        if settings.anthropic_api_key:
            self._key.append((b"x-api-key", settings.anthropic_api_key.encode("ascii")))

    def path(self, batch_id: str | None = None, tail: str = "") -> str:
        if batch_id is None:
            return BATCHES_PATH
        return f"{BATCHES_PATH}/{quote(batch_id, safe='')}{tail}"

    async def call(
        self, method: bytes, path: str, client_headers: Mapping[str, str], body: bytes = b""
    ) -> dict[str, Any]:
        """One call whose answer is a JSON object (a batch, or a deletion's receipt)."""
        response = await self._send(method, path, client_headers, body)
        return await batch_answer(response, self._secret)

    async def stream(self, path: str, client_headers: Mapping[str, str]) -> RelayedStream:
        """A ``GET`` whose body is relayed as it arrives (a batch's results); raises the
        upstream's error before anything is relayed."""
        response = await self._send(b"GET", path, client_headers, b"")
        if response.status_code != 200:
            try:
                raise await self._error(response)
            finally:
                await response.aclose()
        return RelayedStream(response)

    def _headers(self, client_headers: Mapping[str, str], body: bytes) -> list[tuple[bytes, bytes]]:
        version = client_headers.get("anthropic-version") or self._version
        headers = [
            (b"accept", b"application/json"),
            (b"anthropic-version", version.encode("latin-1")),
            *self._key,
        ]
        if body:
            headers.append((b"content-type", b"application/json"))
        for name in _FORWARDED:
            value = client_headers.get(name)
            if value:
                headers.append((name.encode(), value.encode("latin-1")))
        return headers

    async def _error(self, response: PooledResponse) -> ProxyError:
        return await error_of(response, self._secret)

    async def _send(
        self, method: bytes, path: str, client_headers: Mapping[str, str], body: bytes
    ) -> PooledResponse:
        headers = self._headers(client_headers, body)
        try:
            return await self._pool.request(method, self._pool.url(path), headers, body)
        except httpcore2.TimeoutException:
            raise ProxyError(
                504, "The upstream did not answer in time.", code="upstream_timeout"
            ) from None
        except _TRANSPORT_ERRORS as exc:
            raise connection_error(exc) from None
