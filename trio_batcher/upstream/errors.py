"""Anthropic error responses and rate-limit headers, in OpenAI's terms.

An upstream error becomes one ``ProxyError``: the status a client of OpenAI would expect, an
OpenAI-shaped body, and the headers that make the ``openai`` SDK's retry logic do the right
thing (``retry-after``, ``retry-after-ms``, ``x-should-retry``) plus ``x-request-id`` so the
upstream's request id stays visible for support tickets.

Status policy (the table in docs/compatibility.md is generated from the same facts):

- 4xx statuses are kept: they describe the request, which the client sent. Two are
  reworded: a 404 for the model becomes OpenAI's ``model_not_found`` (``param: "model"``),
  which clients' fallback logic keys on; and a 401 becomes a **502**
  ``upstream_authentication_error``, because it is the gateway's own key
  (``ANTHROPIC_API_KEY``) that was refused -- kept as 401, the client would blame its key.
- 500 becomes 502: the upstream failed, not this proxy, and 502 says exactly that.
- 529 (Anthropic's "overloaded") and 503 become 503 with ``Retry-After`` (the upstream's, or
  1 second), because 529 is not a status OpenAI clients know, and 503 + Retry-After makes
  every HTTP client back off and retry.
- 504 stays 504; any other 5xx becomes 502.
- Anything below 400 but a 200 (a redirect, a 204) is no answer at all: 502
  ``upstream_protocol_error``, naming a redirect's target, which usually means a wrong
  ``ANTHROPIC_BASE_URL``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from functools import lru_cache
from typing import Any, Final

from ..errors import ProxyError, error_body

__all__ = [
    "client_status",
    "error_type_for_status",
    "openai_error_body",
    "ratelimit_headers",
    "status_for_error_type",
    "upstream_error",
]

_DEFAULT_RETRY_AFTER: Final = "1"
_RETRY_HEADERS_ON: Final = frozenset({429, 503})
_FORWARDED_RETRY_HEADERS: Final = ("retry-after", "retry-after-ms")

# Anthropic error types whose names we pass through as OpenAI ``type`` values. They are
# readable as they are; OpenAI's own vocabulary has no better words for most of them.
_KNOWN_TYPES: Final = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "billing_error",
        "permission_error",
        "not_found_error",
        "request_too_large",
        "rate_limit_error",
        "timeout_error",
        "api_error",
        "overloaded_error",
        "conflict_error",
    }
)

# The HTTP status Anthropic gives each error type. A stream's ``error`` event carries only
# the type; before any content is sent, it still becomes a real status.
_STATUS_FOR_TYPE: Final[Mapping[str, int]] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "conflict_error": 409,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}

_RESOURCES: Final = ("requests", "tokens", "input-tokens", "output-tokens")

# The error type Anthropic uses for each status; ours follow the same table.
_TYPE_FOR_STATUS: Final[Mapping[int, str]] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    409: "conflict_error",
    413: "request_too_large",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    431: "request_too_large",
    500: "api_error",
    502: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def error_type_for_status(status: int) -> str:
    """The Anthropic error ``type`` for a status, as Anthropic uses them (``api_error`` for
    another 5xx, ``invalid_request_error`` for another 4xx): what an Anthropic-shaped error
    of ours, or a cloud's error restated in Anthropic's terms, says."""
    found = _TYPE_FOR_STATUS.get(status)
    if found is not None:
        return found
    return "api_error" if status >= 500 else "invalid_request_error"


def status_for_error_type(kind: object) -> int:
    """The upstream status an Anthropic error ``type`` stands for; 502 when unknown."""
    return _STATUS_FOR_TYPE.get(kind, 502) if isinstance(kind, str) else 502


def client_status(upstream_status: int) -> int:
    """The status a client gets for an upstream error status (the policy above)."""
    if upstream_status == 401 or upstream_status < 400:
        return 502  # our key was refused, or an answer that is no answer (a redirect...)
    if upstream_status < 500:
        return upstream_status
    if upstream_status in (503, 529):
        return 503
    if upstream_status == 504:
        return 504
    return 502


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in headers.items()}


def _parse_error(
    body: bytes | Mapping[str, Any] | None,
) -> tuple[str | None, str | None, str | None]:
    """(anthropic error type, message, request id) from whatever the upstream sent.

    Each is None when absent; an opaque body gives (None, None, None). The request id is
    also in the body (``"request_id"``), for when a middlebox dropped the header.
    """
    parsed: object = body
    if isinstance(body, bytes | bytearray):
        try:
            parsed = json.loads(body)
        except ValueError:
            return None, None, None
    if not isinstance(parsed, Mapping):
        return None, None, None
    request_id = parsed.get("request_id")
    request_id = request_id if isinstance(request_id, str) and request_id else None
    error = parsed.get("error")
    if not isinstance(error, Mapping):
        return None, None, request_id
    kind = error.get("type")
    message = error.get("message")
    return (
        kind if isinstance(kind, str) and kind else None,
        message if isinstance(message, str) and message else None,
        request_id,
    )


def openai_error_body(error: Mapping[str, Any]) -> dict[str, Any]:
    """The OpenAI error envelope for an Anthropic ``error`` object (``{"type", "message"}``).

    Used for an ``error`` event inside a stream, where no HTTP status can be sent any more.
    """
    kind, message, _ = _parse_error({"error": error})
    return error_body(
        message or "The upstream reported an error.",
        kind if kind in _KNOWN_TYPES else "api_error",
        code=kind,
    )


def upstream_error(
    status: int, body: bytes | Mapping[str, Any] | None, headers: Mapping[str, str]
) -> ProxyError:
    """The error a client sees for an upstream non-2xx response.

    Args:
      status: the upstream HTTP status.
      body: the raw response body (JSON bytes, an already-parsed object, or anything else —
        non-JSON and empty bodies are tolerated).
      headers: the upstream response headers (any case).

    The message is the upstream's own, so the client reads what Anthropic said; ``code`` is
    the Anthropic error type, ``type`` the same name (or a status-derived default).
    """
    upstream = _lower(headers)
    for name in _FORWARDED_RETRY_HEADERS:
        if name in upstream:
            upstream[name] = _first_of_repeated(upstream[name])
    kind, message, body_request_id = _parse_error(body)
    ours = client_status(status)
    out_headers = ratelimit_headers(upstream)
    request_id = upstream.get("request-id") or body_request_id
    if request_id:
        out_headers["x-request-id"] = request_id
    if "x-should-retry" in upstream:
        out_headers["x-should-retry"] = upstream["x-should-retry"]
    if ours in _RETRY_HEADERS_ON:
        for name in _FORWARDED_RETRY_HEADERS:
            if name in upstream:
                out_headers[name] = upstream[name]
        if ours == 503:
            out_headers.setdefault("retry-after", _DEFAULT_RETRY_AFTER)
    if message is None:
        message = f"The upstream returned HTTP {status}."
    error_type = kind if kind in _KNOWN_TYPES else None
    code, param = kind, None
    if status == 401:
        message = f"The upstream refused this gateway's API key (ANTHROPIC_API_KEY): {message}"
        error_type, code = "upstream_error", "upstream_authentication_error"
    elif status == 400 and message.startswith("prompt is too long"):
        # OpenAI's code for it, which clients key on to trim the conversation and retry.
        code, param = "context_length_exceeded", "messages"
    elif status < 400:
        location = upstream.get("location")
        message = f"The upstream answered HTTP {status}, which is not a Messages API answer" + (
            f" (a redirect to {location}: check ANTHROPIC_BASE_URL)." if location else "."
        )
        error_type, code = "upstream_error", "upstream_protocol_error"
    elif status == 404 and kind == "not_found_error" and message.startswith("model:"):
        model = message.partition(":")[2].strip()
        message = f"The model '{model}' does not exist or the upstream key cannot use it."
        error_type, code, param = "invalid_request_error", "model_not_found", "model"
    return ProxyError(
        ours,
        message,
        type=error_type,
        param=param,
        code=code,
        headers=out_headers,
        upstream_status=status,
        retry_after=parse_retry_after(upstream),
        upstream_body=bytes(body) if isinstance(body, bytes | bytearray) else None,
        upstream_headers=upstream,
    )


def _first_of_repeated(value: str) -> str:
    """A number header some middlebox sent twice arrives joined (``"1, 1"``): its first.
    An HTTP date has a comma of its own, so only a leading number is split off."""
    first, comma, _ = value.partition(",")
    if comma:
        try:
            float(first)
        except ValueError:
            return value
        return first.strip()
    return value


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` (preferred) or ``retry-after`` (seconds or an
    HTTP date); ``None`` when absent or unreadable. Header names must be lower case."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        raw_ms = _first_of_repeated(raw_ms)
        try:
            value = float(raw_ms) / 1000.0
        except ValueError:
            value = -1.0
        if 0.0 <= value < float("inf"):
            return value
    raw = headers.get("retry-after")
    if raw is None:
        return None
    raw = _first_of_repeated(raw)
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def ratelimit_headers(headers: Mapping[str, str], *, now: datetime | None = None) -> dict[str, str]:
    """``anthropic-ratelimit-*`` headers as OpenAI's ``x-ratelimit-*``.

    ``anthropic-ratelimit-requests-limit`` becomes ``x-ratelimit-limit-requests`` (and so on
    for ``remaining``, and for ``tokens``, ``input-tokens``, ``output-tokens``). Anthropic's
    reset is an RFC 3339 instant; OpenAI's is a duration from now in Go's notation (``"20ms"``,
    ``"1s"``, ``"6m0s"``), rounded up to the millisecond so a client never retries early; a
    reset in the past is ``"0s"``. Headers that do not parse are left out, never guessed.
    """
    upstream = _lower(headers)
    out: dict[str, str] = {}
    current: datetime | None = None
    for resource in _RESOURCES:
        for field in ("limit", "remaining"):
            value = upstream.get(f"anthropic-ratelimit-{resource}-{field}", "").strip()
            if value.isdigit():
                out[f"x-ratelimit-{field}-{resource}"] = value
        reset = upstream.get(f"anthropic-ratelimit-{resource}-reset")
        at = None if reset is None else _instant(reset)
        if at is None:
            continue
        if current is None:
            current = now or datetime.now(UTC)
            if current.tzinfo is None:
                current = current.replace(tzinfo=UTC)
        out[f"x-ratelimit-reset-{resource}"] = go_duration((at - current).total_seconds())
    return out


@lru_cache(maxsize=64)
def _instant(text: str) -> datetime | None:
    """An RFC 3339 instant (UTC if it names no zone), or None. Cached: every response
    carries the same few reset instants until they pass."""
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def go_duration(seconds: float) -> str:
    """A non-negative duration as Go's ``time.Duration.String`` writes it, in whole ms."""
    ms = max(0, math.ceil(round(seconds * 1000, 6)))
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, millis = divmod(rest, 1000)
    sec_text = f"{secs}.{millis:03d}".rstrip("0") if millis else str(secs)
    if hours:
        return f"{hours}h{minutes}m{sec_text}s"
    if minutes:
        return f"{minutes}m{sec_text}s"
    return f"{sec_text}s"
