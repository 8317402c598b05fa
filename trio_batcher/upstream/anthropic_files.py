"""Anthropic's Files API at the upstream, with the gateway's key: one request, streamed.

The edge (``edge.anthropic_files``) decides who may do what; this only talks to the
upstream that holds the files. Bodies are never collected here: an upload is a
``SizedBody`` the pool writes chunk by chunk as the client sends it, and a download is the
``PooledResponse`` itself, which the edge relays chunk by chunk. The client's
``anthropic-version`` and ``anthropic-beta`` go with the request (the version defaults to
``ANTHROPIC_VERSION``); the client's key never does. Failures become ``ProxyError`` as
``UpstreamClient`` maps them: the upstream's own error (relayed as it is to an Anthropic
client), 502 when the upstream cannot be reached, 504 when it does not answer in time.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, final
from urllib.parse import quote

import httpcore2

from ..errors import ProxyError
from ..settings import Settings
from .errors import upstream_error
from .exchange import MAX_ERROR_BYTES
from .exchange import TRANSPORT_ERRORS as _TRANSPORT_ERRORS
from .pool import PooledResponse, SizedBody, UpstreamPool

__all__ = ["FILES_PATH", "MAX_METADATA_BYTES", "AnthropicFilesClient"]

FILES_PATH: Final = "/v1/files"
MAX_METADATA_BYTES: Final = 1024 * 1024  # a file's metadata is a few hundred bytes
_FORWARDED: Final = frozenset({b"anthropic-version", b"anthropic-beta"})


@final
class AnthropicFilesClient:
    """``/v1/files`` on the pool's upstream, with ``settings``' key."""

    def __init__(self, settings: Settings, pool: UpstreamPool) -> None:
        self._pool = pool
        self._secret = settings.anthropic_api_key
        self._version = settings.anthropic_version.encode("ascii")

    async def send(
        self,
        method: bytes,
        file_id: str | None,
        client_headers: Iterable[tuple[bytes, bytes]],
        *,
        content: bytes | SizedBody = b"",
        content_type: bytes | None = None,
        suffix: str = "",
    ) -> PooledResponse:
        """``method`` on ``/v1/files[/{file_id}{suffix}]``; the caller closes the response."""
        path = FILES_PATH if file_id is None else f"{FILES_PATH}/{quote(file_id, safe='')}"
        headers = [(n, v) for n, v in client_headers if n in _FORWARDED]
        if not any(name == b"anthropic-version" for name, _ in headers):
            headers.append((b"anthropic-version", self._version))
        if content_type is not None:
            headers.append((b"content-type", content_type))
        if self._secret:
            headers.append((b"x-api-key", self._secret.encode("ascii")))
        try:
            return await self._pool.request(method, self._pool.url(path + suffix), headers, content)
        except httpcore2.TimeoutException:
            raise ProxyError(
                504, "The upstream did not answer in time.", code="upstream_timeout"
            ) from None
        except _TRANSPORT_ERRORS as exc:
            raise connection_error(exc) from None

    async def error(self, response: PooledResponse) -> ProxyError:
        """The upstream's error answer as the client's error (its body read, the key
        redacted should the upstream echo it)."""
        try:
            raw = (await response.read(MAX_ERROR_BYTES))[:MAX_ERROR_BYTES]
        except _TRANSPORT_ERRORS as exc:
            return connection_error(exc)
        if self._secret:
            raw = raw.replace(self._secret.encode(), b"[redacted]")
        return upstream_error(response.status_code, raw, response.headers)


def connection_error(exc: Exception) -> ProxyError:
    return ProxyError(
        502,
        f"Could not reach the upstream ({type(exc).__name__}).",
        code="upstream_connection_error",
    )
