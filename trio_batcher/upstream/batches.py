"""Anthropic's Message Batches API, for the offline path: create, retrieve, cancel, results.

Sent through the app's one ``UpstreamPool`` with the gateway's key, like every other
upstream call. Failures become ``ProxyError`` exactly as ``UpstreamClient`` maps them
(``upstream_error`` for an error status, 502 for a connection failure, 504 for a
timeout), so the poller can tell a retryable failure (``status >= 500`` or 429) from a
refusal. Results are read as a stream, line by line, in bounded memory.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any, Final, final
from urllib.parse import quote

import httpcore2

from ..errors import ProxyError
from ..settings import Settings
from .errors import upstream_error
from .exchange import MAX_ERROR_BYTES, MAX_REQUEST_BYTES
from .exchange import TRANSPORT_ERRORS as _TRANSPORT_ERRORS
from .pool import PooledResponse, SizedBody, UpstreamPool

__all__ = ["MessageBatchesClient", "batch_answer", "connection_error", "error_of"]

_BATCHES: Final = "/v1/messages/batches"
_MAX_ANSWER_BYTES: Final = 1024 * 1024  # a batch object is a few hundred bytes
_MAX_RESULT_LINE_BYTES: Final = 2 * MAX_REQUEST_BYTES


@final
class MessageBatchesClient:
    """``/v1/messages/batches`` under ``ANTHROPIC_BASE_URL``, with the configured key."""

    def __init__(self, settings: Settings, pool: UpstreamPool) -> None:
        self._pool = pool
        self._secret = settings.anthropic_api_key
        self._headers: list[tuple[bytes, bytes]] = [
            (b"content-type", b"application/json"),
            (b"accept", b"application/json"),
            (b"anthropic-version", settings.anthropic_version.encode("ascii")),
        ]
        if settings.anthropic_api_key:
            self._headers.append((b"x-api-key", settings.anthropic_api_key.encode("ascii")))

    async def create(self, body: bytes | SizedBody) -> dict[str, Any]:
        """``POST /v1/messages/batches`` with ``body``: at most Anthropic's 256 MB, which
        ``split_batches`` guarantees; a ``FileBody`` streams it from disk."""
        return await self._json(b"POST", _BATCHES, body)

    async def retrieve(self, batch_id: str) -> dict[str, Any]:
        return await self._json(b"GET", f"{_BATCHES}/{quote(batch_id, safe='')}", b"")

    async def cancel(self, batch_id: str) -> dict[str, Any]:
        return await self._json(b"POST", f"{_BATCHES}/{quote(batch_id, safe='')}/cancel", b"")

    async def results(self, batch_id: str) -> AsyncGenerator[bytes, None]:
        """The ended batch's results, one JSONL line at a time (without its newline).

        Read from ``/v1/messages/batches/{id}/results`` on the configured upstream (the
        path Anthropic's ``results_url`` names), so the key never goes to another origin.
        """
        path = f"{_BATCHES}/{quote(batch_id, safe='')}/results"
        response = await self._send(b"GET", path, b"")
        try:
            if response.status_code != 200:
                raise await self._error(response)
            pending = bytearray()
            try:
                # Closed here, not by the collector, when the reader stops early (a
                # delivery cancelled at shutdown).
                async with aclosing(response.aiter_raw()) as chunks:
                    async for chunk in chunks:
                        pending += chunk
                        while (end := pending.find(b"\n")) >= 0:
                            line = bytes(pending[:end]).rstrip(b"\r")
                            del pending[: end + 1]
                            if line.strip():
                                yield line
                        if len(pending) > _MAX_RESULT_LINE_BYTES:
                            raise ProxyError(
                                502,
                                "A line of the upstream's batch results is too long.",
                                code="upstream_protocol_error",
                            )
            except _TRANSPORT_ERRORS as exc:
                raise connection_error(exc) from None
            if pending.strip():
                yield bytes(pending)
        finally:
            await response.aclose()

    async def _json(self, method: bytes, path: str, body: bytes | SizedBody) -> dict[str, Any]:
        response = await self._send(method, path, body)
        return await batch_answer(response, self._secret)

    async def _error(self, response: PooledResponse) -> ProxyError:
        return await error_of(response, self._secret)

    async def _send(self, method: bytes, path: str, body: bytes | SizedBody) -> PooledResponse:
        try:
            return await self._pool.request(method, self._pool.url(path), self._headers, body)
        except httpcore2.TimeoutException:
            raise ProxyError(
                504, "The upstream did not answer in time.", code="upstream_timeout"
            ) from None
        except _TRANSPORT_ERRORS as exc:
            raise connection_error(exc) from None


async def batch_answer(response: PooledResponse, secret: str | None) -> dict[str, Any]:
    """Read and close an answer that must be a batch (or a deletion's receipt): a JSON
    object with an ``id``. The upstream's own error for anything but a 200 (``error_of``);
    a 502 ``upstream_protocol_error`` for a 200 that is not one."""
    try:
        if response.status_code != 200:
            raise await error_of(response, secret)
        try:
            raw = await response.read(_MAX_ANSWER_BYTES)
        except _TRANSPORT_ERRORS as exc:
            raise connection_error(exc) from None
    finally:
        await response.aclose()
    try:
        answer = json.loads(raw)
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or not isinstance(answer.get("id"), str):
        raise ProxyError(
            502,
            "The upstream answered 200 with a body that is not a Message Batch.",
            code="upstream_protocol_error",
        )
    return answer


async def error_of(response: PooledResponse, secret: str | None) -> ProxyError:
    """The ``ProxyError`` for an upstream's error answer, with the gateway's key
    (``secret``) blanked out of its body should the upstream echo it."""
    try:
        raw = (await response.read(MAX_ERROR_BYTES))[:MAX_ERROR_BYTES]
    except _TRANSPORT_ERRORS as exc:
        return connection_error(exc)
    if secret:
        raw = raw.replace(secret.encode(), b"[redacted]")
    return upstream_error(response.status_code, raw, response.headers)


def connection_error(exc: Exception) -> ProxyError:
    return ProxyError(
        502,
        f"Could not reach the upstream ({type(exc).__name__}).",
        code="upstream_connection_error",
    )
