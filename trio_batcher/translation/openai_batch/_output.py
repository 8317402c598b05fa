"""One line of Anthropic's batch results → one line of the OpenAI output or error file.

The reply inside is built by the realtime path's own codecs (``OpenAIChatCodec`` /
``ResponsesCodec``), and an upstream error is mapped as the realtime path maps it
(``upstream.errors.upstream_error``: Anthropic's type → its HTTP status → the status and
OpenAI error body a client would have got), so a request's answer reads the same whether it
was sent now or in a batch. What goes where, as OpenAI does it:

- ``succeeded`` → output file: ``response: {status_code: 200, request_id, body}``,
  ``error: null``; ``body`` is the ``chat.completion`` or ``response`` object;
- ``errored`` → error file: ``response: {status_code: <the realtime status>, request_id,
  body: {"error": {message, type, param, code}}}``, ``error: null`` (OpenAI writes a
  request the model refused the same way);
- ``canceled`` → error file: ``response: null, error: {code: "batch_cancelled", message}``;
- ``expired`` → error file: ``response: null, error: {code: "batch_expired", message}``
  (both codes are OpenAI's ``BatchRequestOutput.error.code`` values);
- anything else (a result Anthropic's API does not define) → error file with a 502
  ``upstream_protocol_error`` body, so no request vanishes without a line.

Pure: every id comes from ``ids`` (a factory given the prefix -- ``batch_req_``, ``req_``,
``chatcmpl-``, ``resp_`` -- returning a fresh id), the time from ``created``.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

from ...errors import ProxyError
from ...upstream.errors import status_for_error_type, upstream_error
from ..openai_chat import OpenAIChatCodec, TranslatedRequest
from ..openai_responses import ResponsesCodec, ResponsesRequest
from ._lines import CHAT_ENDPOINT, RESPONSES_ENDPOINT

__all__ = ["BATCH_CANCELLED", "BATCH_EXPIRED", "IdFactory", "OutputKind", "new_id", "output_line"]

BATCH_CANCELLED: Final = "batch_cancelled"
BATCH_EXPIRED: Final = "batch_expired"

IdFactory = Callable[[str], str]
OutputKind = Literal["output", "error"]

_NOT_RUN: Final[Mapping[str, tuple[str, str]]] = {
    "canceled": (BATCH_CANCELLED, "The batch was cancelled before this request was executed."),
    "expired": (
        BATCH_EXPIRED,
        "This request could not be executed before the completion window expired.",
    ),
}


def new_id(prefix: str) -> str:
    """The default ``ids``: ``prefix`` + 96 random bits in hex."""
    return prefix + secrets.token_hex(12)


def output_line(
    result: Mapping[str, Any],
    original_custom_id: str,
    endpoint: str,
    *,
    request: TranslatedRequest | ResponsesRequest,
    created: int,
    ids: IdFactory = new_id,
) -> tuple[OutputKind, dict[str, Any]]:
    """Translate one results line ``{"custom_id", "result": {"type", ...}}``.

    Args:
      result: the parsed results line (its ``custom_id`` is Anthropic's and is not read).
      original_custom_id: the client's ``custom_id`` (``IdMap.openai``).
      endpoint: the batch's endpoint.
      request: the line's translation (``BatchLine.request``).
      created: the Unix time the reply objects carry (``created`` / ``created_at``).
      ids: the id factory (see the module docstring).

    Returns:
      ``("output", line)`` for the output file or ``("error", line)`` for the error file.

    Raises:
      ValueError: ``endpoint`` and ``request`` are not of the same dialect.
    """
    codec = _codec(endpoint, request, ids, created)
    outcome = result.get("result")
    outcome = outcome if isinstance(outcome, Mapping) else {}
    kind = outcome.get("type")
    line_id = ids("batch_req_")
    if kind in _NOT_RUN:
        code, text = _NOT_RUN[str(kind)]
        error = {"code": code, "message": text}
        return "error", _line(line_id, original_custom_id, None, error)
    message = outcome.get("message")
    if kind == "succeeded" and isinstance(message, dict):
        body = codec.reply(message, b"")
        return "output", _line(line_id, original_custom_id, _response(200, ids("req_"), body))
    if kind == "errored":
        exc, request_id = _upstream_failure(outcome.get("error"))
    else:
        exc, request_id = _protocol_error(kind), None
    exc = codec.error(exc)
    response = _response(exc.status, request_id or ids("req_"), exc.body())
    return "error", _line(line_id, original_custom_id, response)


def _codec(
    endpoint: str, request: TranslatedRequest | ResponsesRequest, ids: IdFactory, created: int
) -> OpenAIChatCodec | ResponsesCodec:
    if endpoint == CHAT_ENDPOINT and isinstance(request, TranslatedRequest):
        return OpenAIChatCodec(request, completion_id=ids("chatcmpl-"), created=created)
    if endpoint == RESPONSES_ENDPOINT and isinstance(request, ResponsesRequest):
        return ResponsesCodec(request, response_id=ids("resp_"), created_at=created)
    raise ValueError(f"a {type(request).__name__} is not a request for {endpoint!r}")


def _upstream_failure(error: object) -> tuple[ProxyError, str | None]:
    """The realtime path's error for an ``errored`` result's ``error``, and its request id.

    Anthropic writes the error response there (``{"type": "error", "error": {"type",
    "message"}, "request_id"}``); a bare error object (``{"type", "message"}``) is taken too.
    """
    envelope: Mapping[str, Any] = error if isinstance(error, Mapping) else {}
    inner = envelope.get("error")
    if not isinstance(inner, Mapping):
        inner, envelope = envelope, {"error": envelope}
    exc = upstream_error(status_for_error_type(inner.get("type")), envelope, {})
    request_id = envelope.get("request_id")
    return exc, request_id if isinstance(request_id, str) and request_id else None


def _protocol_error(kind: object) -> ProxyError:
    return ProxyError(
        502,
        f"The upstream's batch results hold a result of unknown type {kind!r} for this request.",
        type="upstream_error",
        code="upstream_protocol_error",
    )


def _response(status: int, request_id: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"status_code": status, "request_id": request_id, "body": body}


def _line(
    line_id: str,
    custom_id: str,
    response: dict[str, Any] | None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {"id": line_id, "custom_id": custom_id, "response": response, "error": error}
