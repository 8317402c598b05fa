"""Refusals and faults in each cloud's own error dialect.

The Messages core (``messages_route.answer_messages``) raises ``SimulatorError`` in
Anthropic's terms; a cloud route renders it as that cloud would.

Bedrock (REST-JSON): body ``{"message": ...}``, the error's name in ``x-amzn-ErrorType``,
no ``retry-after`` (Bedrock sends none; clients back off on their own). Invalid input is
400 ``ValidationException`` with the model's own message; a rate limit 429
``ThrottlingException``; Anthropic's 529 overload is Bedrock's 503
``ServiceUnavailableException``; a timeout 408 ``ModelTimeoutException``; other server errors
500 ``InternalServerException``.

Vertex AI: its own front door answers in Google's shape ``{"error": {"code", "message",
"status"}}`` -- auth (401 ``UNAUTHENTICATED``), permission (403 ``PERMISSION_DENIED``), an
unknown model (404 ``NOT_FOUND``), quota (429 ``RESOURCE_EXHAUSTED``, Vertex's
per-base-model quota; no ``retry-after``) and an unavailable service (503 ``UNAVAILABLE``,
which is what Google's front end answers when the backend is down, and what
``POST /_sim/overload`` with ``status: 503`` simulates). What the model server itself refuses passes
through in Anthropic's shape, as Claude on Vertex does: validation (400
``invalid_request_error``), overload (529 ``overloaded_error``, with its ``retry-after``)
and internal errors.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final

from quart import Response

from .errors import SimulatorError

_JSON: Final = "application/json"

BEDROCK_MESSAGES: Final[Mapping[str, str]] = {
    "ThrottlingException": "Too many requests, please wait before trying again.",
    "ServiceUnavailableException": "Bedrock is unable to process your request.",
    "ModelTimeoutException": "Model has timed out in processing the request. Try your "
    "request again.",
    "InternalServerException": "The system encountered an unexpected error during "
    "processing. Try your request again.",
    "AccessDeniedException": "You don't have access to the model with the specified model ID.",
}

_GOOGLE_STATUS: Final[Mapping[int, str]] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


def bedrock_error(status: int, error_type: str, message: str | None = None) -> Response:
    """A Bedrock error response."""
    text = message if message is not None else BEDROCK_MESSAGES.get(error_type, error_type)
    response = Response(json.dumps({"message": text}).encode(), status=status, content_type=_JSON)
    response.headers["x-amzn-ErrorType"] = error_type
    return response


def bedrock_status(error: SimulatorError) -> tuple[int, str]:
    """Bedrock's status and error name for an error raised in Anthropic's terms."""
    status = error.status
    if status in (400, 405, 413):
        return 400, "ValidationException"
    if status in (401, 402, 403):
        return 403, "AccessDeniedException"
    if status == 404:
        return 404, "ResourceNotFoundException"
    if status == 429:
        return 429, "ThrottlingException"
    if status in (503, 529):
        return 503, "ServiceUnavailableException"
    if status in (408, 504):
        return 408, "ModelTimeoutException"
    return 500, "InternalServerException"


def bedrock_error_for(error: SimulatorError) -> Response:
    """``error`` as Bedrock answers it: invalid input keeps the model's message."""
    status, name = bedrock_status(error)
    return bedrock_error(status, name, error.message if status == 400 else None)


def google_error(status: int, message: str) -> Response:
    """An error in Google's shape, from Vertex AI's own front door."""
    body = {"error": {"code": status, "message": message, "status": _GOOGLE_STATUS[status]}}
    return Response(json.dumps(body).encode(), status=status, content_type=_JSON)


def vertex_is_google(error: SimulatorError) -> bool:
    """Whether Vertex's front door (not the model server) answers ``error``."""
    return error.status in (401, 403, 404, 429, 503)
