"""Errors in Anthropic's shape: ``{"type": "error", "error": {"type", "message"}, "request_id"}``.

The simulator answers every failure -- bad input, auth, injected faults -- with one of these,
because that is what the official ``anthropic`` SDK (and our proxy) parse. Raising
``SimulatorError`` anywhere below the HTTP layer picks the status; the app serialises it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final

ERROR_TYPES: Final[Mapping[int, str]] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}

DEFAULT_MESSAGES: Final[Mapping[str, str]] = {
    "rate_limit_error": "Simulated rate limit: too many requests.",
    "api_error": "Simulated internal server error.",
    "overloaded_error": "Overloaded",
    "timeout_error": "Simulated request timeout.",
}


def error_type_for(status: int) -> str:
    """Anthropic's ``error.type`` for ``status`` (``api_error`` for unlisted 5xx)."""
    found = ERROR_TYPES.get(status)
    if found is not None:
        return found
    return "api_error" if status >= 500 else "invalid_request_error"


class SimulatorError(Exception):
    """An error response: HTTP ``status`` with an Anthropic-shaped body.

    Args:
      status: the HTTP status.
      message: ``error.message``; never contains an API key.
      type: ``error.type``; defaults from the status.
      headers: extra response headers (``retry-after``...).
      details: ``error.details`` (``{"error_code": ...}``), which the SDKs branch on.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str | None = None,
        headers: Mapping[str, str] | None = None,
        details: Mapping[str, object] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type or error_type_for(status)
        self.headers: dict[str, str] = dict(headers or {})
        self.details = dict(details) if details is not None else None


class SimulatorInvalidRequest(SimulatorError):
    """A 400 ``invalid_request_error``; the message starts with the offending field's path."""

    def __init__(self, message: str) -> None:
        super().__init__(400, message, type="invalid_request_error")


def error_json(
    type: str,
    message: str,
    request_id: str | None,
    details: Mapping[str, object] | None = None,
) -> bytes:
    """The serialised error envelope (also the ``data`` of an SSE ``error`` event)."""
    error: dict[str, object] = {"type": type, "message": message}
    if details is not None:
        error["details"] = dict(details)
    body: dict[str, object] = {"type": "error", "error": error}
    if request_id is not None:
        body["request_id"] = request_id
    return json.dumps(body).encode()
