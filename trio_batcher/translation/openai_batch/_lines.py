"""One line of an OpenAI batch input file → a translated Anthropic request, or the reason not.

Theory of operation: a batch is validated whole before anything goes upstream (OpenAI does
the same: one bad line fails the batch, and ``errors.data[]`` names every bad line). So
``validate_line`` never raises for bad input: it returns a ``LineError`` with OpenAI's
``{code, message, param, line}`` (``line`` 1-based), or a ``BatchLine`` whose ``params`` are
what the realtime endpoint would send -- the *same* ``translate_request`` (Chat Completions
or Responses), so a request behaves alike whether it is sent now or in a batch.

What only a whole file can know -- a ``custom_id`` seen before, more lines or bytes than
allowed -- is ``LineChecker``'s: it takes the lines in order and keeps the ids seen (a set,
so memory grows with the number of lines). The batch poller passes ``track_ids=False`` and
finds repeats in its on-disk table instead (``duplicate_id``), so a file of any length is
checked in constant memory.

Codes: ``invalid_json``, ``missing_required_parameter``, ``invalid_custom_id``,
``duplicate_custom_id``, ``invalid_method``, ``invalid_url``, ``mismatched_url`` and
``unsupported_parameter`` are the names OpenAI uses; ``max_requests_exceeded`` and
``max_file_size_exceeded`` are ours (OpenAI documents the limits, not the codes). A body the
translation refuses keeps the translation's own message, with its ``param`` prefixed by
``body.`` (``body.messages[0].content``) and its ``code`` or ``invalid_request``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, final

from ...errors import ProxyError
from .. import openai_chat, openai_responses
from ..openai_chat import TranslatedRequest, TranslationOptions
from ..openai_responses import ResponsesRequest

__all__ = [
    "CHAT_ENDPOINT",
    "ENDPOINTS",
    "MAX_CUSTOM_ID_CHARS",
    "MAX_FILE_BYTES",
    "MAX_FILE_LINES",
    "RESPONSES_ENDPOINT",
    "BatchLine",
    "LineChecker",
    "LineError",
    "duplicate_id",
    "validate_line",
]

CHAT_ENDPOINT: Final = "/v1/chat/completions"
RESPONSES_ENDPOINT: Final = "/v1/responses"
ENDPOINTS: Final = (CHAT_ENDPOINT, RESPONSES_ENDPOINT)
# OpenAI's limits for one batch input file.
MAX_FILE_LINES: Final = 50_000
MAX_FILE_BYTES: Final = 200 * 1024 * 1024
# Ours: bounds what is kept and sent per line. OpenAI states no limit.
MAX_CUSTOM_ID_CHARS: Final = 512


@final
@dataclass(frozen=True)
class LineError:
    """Why line ``line`` (1-based) cannot be sent: one entry of the batch's ``errors.data``."""

    line: int
    code: str
    message: str
    param: str | None = None
    # The line's custom_id when it had a valid one (so a later line reusing it is a duplicate).
    custom_id: str | None = field(default=None, compare=False)

    def as_batch_error(self) -> dict[str, Any]:
        """``{code, message, param, line}``, the ``openai`` SDK's ``BatchError``."""
        return {"code": self.code, "message": self.message, "param": self.param, "line": self.line}


@final
@dataclass(frozen=True)
class BatchLine:
    """A valid line: its client id, the Anthropic ``params`` and the translation behind them.

    ``request`` is what ``output_line`` needs to answer in the client's terms (the model to
    echo, the Responses tool names...). It is cheap to rebuild: a caller that cannot keep
    every line in memory calls ``validate_line`` again on the stored line when its result
    arrives (translation is deterministic but for the ids of Responses input items, which
    no output shows).
    """

    line: int
    custom_id: str
    params: dict[str, Any]
    request: TranslatedRequest | ResponsesRequest


def validate_line(
    raw: bytes, line_no: int, endpoint: str, options: TranslationOptions
) -> BatchLine | LineError:
    """Parse, check and translate one JSONL line (its terminator may be included).

    Args:
      raw: the line's bytes.
      line_no: its 1-based number in the file, echoed in a ``LineError``.
      endpoint: the batch's ``endpoint``, one of ``ENDPOINTS``.
      options: the realtime translation's settings.

    Raises:
      ValueError: ``endpoint`` is not one of ``ENDPOINTS`` (the caller's to check first).
    """
    if endpoint not in ENDPOINTS:
        raise ValueError(f"unsupported batch endpoint {endpoint!r}")
    try:
        parsed: object = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        return LineError(line_no, "invalid_json", f"This line is not valid JSON: {exc}.")
    if not isinstance(parsed, Mapping):
        return LineError(line_no, "invalid_json", "Each line must be a JSON object.")
    result = _check(parsed, line_no, endpoint, options)
    if isinstance(result, LineError) and _valid_id(parsed.get("custom_id")):
        return replace(result, custom_id=parsed["custom_id"])
    return result


def _valid_id(custom_id: object) -> bool:
    return isinstance(custom_id, str) and 0 < len(custom_id) <= MAX_CUSTOM_ID_CHARS


def _check(
    parsed: Mapping[str, Any], line_no: int, endpoint: str, options: TranslationOptions
) -> BatchLine | LineError:
    problem = _envelope(parsed, endpoint)
    if problem is not None:
        code, message, param = problem
        return LineError(line_no, code, message, param)
    custom_id, body = parsed["custom_id"], parsed["body"]
    if body.get("stream") is True:
        return LineError(
            line_no,
            "unsupported_parameter",
            "stream is not supported in a batch: each result is delivered whole.",
            "body.stream",
        )
    try:
        request = _translate(body, endpoint, options)
    except ProxyError as exc:
        param = "body" if exc.param is None else f"body.{exc.param}"
        return LineError(line_no, exc.code or "invalid_request", exc.message, param)
    return BatchLine(line_no, custom_id, request.body, request)


def _envelope(line: Mapping[str, Any], endpoint: str) -> tuple[str, str, str] | None:
    """(code, message, param) for the first fault of the line's envelope, else None."""
    for name in ("custom_id", "method", "url", "body"):
        if line.get(name) is None:
            return "missing_required_parameter", f"Missing required parameter: '{name}'.", name
    custom_id = line["custom_id"]
    if not isinstance(custom_id, str) or not custom_id:
        return "invalid_custom_id", "custom_id must be a non-empty string.", "custom_id"
    if len(custom_id) > MAX_CUSTOM_ID_CHARS:
        return (
            "invalid_custom_id",
            f"custom_id must be at most {MAX_CUSTOM_ID_CHARS} characters long.",
            "custom_id",
        )
    if line["method"] != "POST":
        return "invalid_method", "method must be 'POST'.", "method"
    url = line["url"]
    if url not in ENDPOINTS:
        supported = " or ".join(repr(e) for e in ENDPOINTS)
        return "invalid_url", f"url must be {supported}.", "url"
    if url != endpoint:
        return (
            "mismatched_url",
            f"The url {url!r} does not match the batch's endpoint {endpoint!r}.",
            "url",
        )
    if not isinstance(line["body"], Mapping):
        return "invalid_request", "body must be a JSON object.", "body"
    return None


def _translate(
    body: Mapping[str, Any], endpoint: str, options: TranslationOptions
) -> TranslatedRequest | ResponsesRequest:
    if endpoint == CHAT_ENDPOINT:
        return openai_chat.translate_request(body, options)
    # A batch has no conversation store to read: what the realtime door looks up before it
    # translates (previous turns, referenced items) cannot be had here.
    if body.get("previous_response_id") is not None:
        raise ProxyError(
            400,
            "previous_response_id is not supported in a batch: send the whole conversation "
            "in input.",
            param="previous_response_id",
            code="unsupported_parameter",
        )
    if openai_responses.item_references(body):
        raise ProxyError(
            400,
            "item_reference items are not supported in a batch: send the items themselves.",
            param="input",
            code="unsupported_parameter",
        )
    return openai_responses.translate_request(body, options)


@final
class LineChecker:
    """The file-wide rules, applied to lines taken in order: unique ``custom_id``, limits.

    Args:
      endpoint: the batch's endpoint.
      options: the translation's settings.
      max_lines: requests a file may hold (OpenAI: 50,000). Empty lines do not count.
      max_bytes: bytes a file may hold (OpenAI: 200 MB), terminators included.
      track_ids: refuse a repeated ``custom_id`` here, keeping every id in memory; False
        leaves repeats to the caller (``duplicate_id``).

    Each limit is reported once, on the first line past it; lines after it are still
    checked, so every bad line is named.
    """

    def __init__(
        self,
        endpoint: str,
        options: TranslationOptions,
        *,
        max_lines: int = MAX_FILE_LINES,
        max_bytes: int = MAX_FILE_BYTES,
        track_ids: bool = True,
    ) -> None:
        if endpoint not in ENDPOINTS:
            raise ValueError(f"unsupported batch endpoint {endpoint!r}")
        self._endpoint = endpoint
        self._options = options
        self._max_lines = max_lines
        self._max_bytes = max_bytes
        self._seen: set[str] | None = set() if track_ids else None
        self.line_no = 0
        self.requests = 0
        self.bytes = 0

    def feed(self, raw: bytes) -> list[BatchLine | LineError]:
        """Take the next physical line; what it gives: nothing for an empty line, else its
        result, after a limit's error when this line is the first past it."""
        self.line_no += 1
        self.bytes += len(raw)
        out: list[BatchLine | LineError] = []
        if self.bytes > self._max_bytes and self.bytes - len(raw) <= self._max_bytes:
            out.append(
                LineError(
                    self.line_no,
                    "max_file_size_exceeded",
                    f"The file is larger than {self._max_bytes} bytes.",
                )
            )
        if not raw.strip():
            return out
        self.requests += 1
        if self.requests == self._max_lines + 1:
            out.append(
                LineError(
                    self.line_no,
                    "max_requests_exceeded",
                    f"The file holds more than {self._max_lines} requests.",
                )
            )
        result = validate_line(raw, self.line_no, self._endpoint, self._options)
        custom_id = result.custom_id
        if custom_id is not None and self._seen is not None:
            if custom_id in self._seen:
                result = duplicate_id(self.line_no, custom_id)
            else:
                self._seen.add(custom_id)
        out.append(result)
        return out


def duplicate_id(line_no: int, custom_id: str) -> LineError:
    """OpenAI's error for line ``line_no`` (1-based) repeating an earlier ``custom_id``."""
    return LineError(
        line_no,
        "duplicate_custom_id",
        "The custom_id for this request is a duplicate of another request. "
        "The custom_id parameter must be unique for each request in a batch.",
        "custom_id",
        custom_id,
    )
