"""Errors in Anthropic's shape, for clients that speak the Messages API themselves.

Two kinds of error reach such a client:

- **The upstream's own** (it answered 4xx/5xx, or a 200 stream whose first event was an
  ``error``): relayed as they are -- status, body and the headers that steer a client's
  retries (``request-id``, ``retry-after``, ``x-should-retry``, ``anthropic-ratelimit-*``).
  One exception: a 401 means the upstream refused *this gateway's* key, which the client
  cannot fix, so it becomes a 502 ``api_error`` that says so.
- **The gateway's own** (bad input, a wrong proxy key, shedding, a deadline, a shutdown):
  ``{"type": "error", "error": {"type", "message"}}`` with Anthropic's status/type pairs, so
  the official SDKs raise the matching exception class. A gateway 503 (shutting down, an
  upstream cooldown longer than the request may wait) is sent as **529
  ``overloaded_error``**, the status Anthropic clients already treat as "back off and try
  again". Where a retry cannot succeed (bad input, a wrong key), ``x-should-retry: false``
  stops the SDKs' and Claude Code's automatic retries.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from ...errors import ProxyError
from ...upstream.errors import error_type_for_status

__all__ = ["error_object", "error_reply", "relayed_headers"]

# Statuses of the gateway's own making that no retry can fix.
_FINAL: Final = frozenset({400, 401, 403, 404, 405, 413, 415, 422, 431})
# Upstream response headers an Anthropic client reads on an error, relayed as they are.
_RELAYED: Final = ("request-id", "retry-after", "retry-after-ms", "x-should-retry")
_RATELIMIT_PREFIX: Final = "anthropic-ratelimit-"
# Our own headers that stay whatever the dialect.
_KEPT: Final = (
    "server-timing",
    "connection",
    "www-authenticate",
    "allow",
    "accept-encoding",
    "x-should-retry",
)


def relayed_headers(upstream: Mapping[str, str]) -> dict[str, str]:
    """The upstream headers an Anthropic client is owed: its request id, retry advice and
    rate-limit state, names lower-case, values as sent."""
    out: dict[str, str] = {}
    for name, value in upstream.items():
        lower = name.lower()
        if lower in _RELAYED or lower.startswith(_RATELIMIT_PREFIX):
            out[lower] = value
    return out


def error_object(exc: ProxyError) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}`` for a gateway-made error."""
    return {
        "type": "error",
        "error": {"type": error_type_for_status(_status(exc)), "message": exc.message},
    }


def error_reply(exc: ProxyError) -> tuple[int, bytes, dict[str, str]]:
    """(status, body, headers) for ``exc`` sent to an Anthropic client."""
    headers = {k: v for k, v in exc.headers.items() if k.lower() in _KEPT}
    upstream = exc.upstream_status
    if upstream is not None and upstream >= 400 and upstream != 401 and exc.upstream_body:
        relayed = _relayable(exc.upstream_body)
        if relayed is not None:
            headers.update(relayed_headers(exc.upstream_headers or {}))
            return upstream, relayed, headers
    status = _status(exc)
    retry_after = exc.headers.get("Retry-After") or exc.headers.get("retry-after")
    if retry_after is not None:
        headers["retry-after"] = retry_after
    if exc.upstream_headers:
        request_id = exc.upstream_headers.get("request-id")
        if request_id:
            headers["request-id"] = request_id
    if status in _FINAL and upstream is None:
        headers["x-should-retry"] = "false"
    body = json.dumps(error_object(exc), separators=(",", ":"), ensure_ascii=False).encode()
    return status, body, headers


def _status(exc: ProxyError) -> int:
    """The status an Anthropic client gets for a gateway-made error."""
    if exc.status == 503:
        return 529  # shutting down, a cooldown, starting up: "overloaded, back off"
    return exc.status


def _relayable(body: bytes) -> bytes | None:
    """The upstream's error body if it is an Anthropic error object, else None."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        return body
    return None
