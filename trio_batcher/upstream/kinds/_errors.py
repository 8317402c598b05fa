"""A cloud's error answer, restated as the Anthropic error it stands for.

Bedrock and Vertex speak their own error dialects (``x-amzn-ErrorType`` and
``{"message"}``; Google's ``{"error": {"code", "message", "status"}}``). Everything behind
the upstream client already understands Anthropic's: ``upstream.errors.upstream_error``
turns an Anthropic status and body into the ``ProxyError`` whose ``upstream_status`` and
``retry_after`` drive the resilience layer (429 with a retry-after: a rate limit that
passes; 429 without: a spend limit, not retried; 529: overloaded), and the native door
relays an Anthropic-shaped ``upstream_body`` to its clients as it is. So each kind only
names the Anthropic status and error type its cloud's error means, builds the Anthropic
error object (``{"type": "error", "error": {"type", "message"}}``, the cloud's message
kept word for word) and hands it to ``upstream_error``: one policy for every kind.

Two things differ from an Anthropic answer and are settled here:

- the credentials a cloud refuses are the gateway's (its AWS role, its Google service
  account), so a refusal is a 502 ``upstream_authentication_error`` that names them, as a
  refused ``ANTHROPIC_API_KEY`` is, never a 401 the client would blame on its own key;
- a cloud's throttling answer carries no ``retry-after``. Bedrock's ``ThrottlingException``
  and Vertex's ``RESOURCE_EXHAUSTED`` are per-minute rate limits that pass (boto3 and
  Google's clients retry them with backoff), so they are given ``retry-after: 1``
  (``THROTTLE_RETRY_AFTER_S``): the resilience layer then treats them as a rate limit that
  passes (retry, cool the model down briefly) rather than as a spend limit it must not retry.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final

from ...errors import ProxyError
from ..errors import error_type_for_status as type_for_status
from ..errors import upstream_error

__all__ = [
    "THROTTLE_RETRY_AFTER_S",
    "cloud_error",
    "credentials_failed",
    "lower_headers",
    "type_for_status",
]

THROTTLE_RETRY_AFTER_S: Final = 1


def lower_headers(headers: Mapping[str, str] | Mapping[bytes, bytes]) -> dict[str, str]:
    """Header names lower-case, values as text (bytes decoded as Latin-1, as HTTP does)."""
    out: dict[str, str] = {}
    for name, value in headers.items():
        key = name.decode("latin-1") if isinstance(name, bytes) else name
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        out[key.lower()] = text
    return out


def cloud_error(
    status: int,
    error_type: str,
    message: str,
    headers: Mapping[str, str],
    *,
    request_id: str | None,
    credentials: str,
    throttled: bool = False,
) -> ProxyError:
    """The ``ProxyError`` for a cloud error that means Anthropic's (``status``, ``error_type``).

    Args:
      status: the Anthropic status it stands for (429, 529, 400...); 401 means the cloud
        refused the gateway's own credentials.
      error_type: the Anthropic error type.
      message: the cloud's message, kept as it is.
      headers: the cloud's response headers, lower-case names.
      request_id: the cloud's request id, relayed as ``request-id``.
      credentials: what the gateway signed with, for a refusal's message
        (``"AWS credentials"``, ``"Google credentials"``).
      throttled: a rate limit that passes, answered without a retry-after.
    """
    upstream = dict(headers)
    if request_id:
        upstream.setdefault("request-id", request_id)
    if throttled and "retry-after" not in upstream and "retry-after-ms" not in upstream:
        upstream["retry-after"] = str(THROTTLE_RETRY_AFTER_S)
    body = json.dumps(
        {"type": "error", "error": {"type": error_type, "message": message}},
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()
    if status != 401:
        return upstream_error(status, body, upstream)
    return ProxyError(
        502,
        f"The upstream refused this gateway's {credentials}: {message}",
        type="upstream_error",
        code="upstream_authentication_error",
        headers={"x-request-id": request_id} if request_id else None,
        upstream_status=401,
        upstream_body=body,
        upstream_headers=upstream,
    )


def credentials_failed(credentials: str, exc: Exception) -> ProxyError:
    """The 502 for a credentials provider that failed (STS refusing a role, Google's token
    endpoint refusing the service account's key...): the gateway's problem, never a 500.
    Only the error's type is named: a provider's message may quote what it was sent."""
    return ProxyError(
        502,
        f"The gateway could not obtain its {credentials} ({type(exc).__name__}).",
        type="upstream_error",
        code="upstream_credentials_error",
    )
