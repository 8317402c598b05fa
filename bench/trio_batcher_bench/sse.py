"""Counting a stream's SSE events as the client receives them, across piece boundaries.

Pure (no I/O, no clock): the load driver feeds each piece of a streamed body as it arrives
and stamps whatever completed in it with the piece's arrival time. Two counters:

- ``ContentCounter`` spots *content* events -- the ones a user sees as text -- in each
  wire format: ``content_block_delta`` in Anthropic Messages, a chunk with a non-empty
  ``delta.content`` (or reasoning or tool-call delta) in OpenAI Chat, and
  ``response.output_text.delta`` (or ``function_call_arguments.delta`` or
  ``reasoning_summary_text.delta``) in OpenAI Responses. TTFT and inter-token latency are
  about these.
- ``EventCounter`` counts *every* event, whatever its kind (``message_start``, ``ping``,
  ``data: [DONE]``, ``response.created``...): an event is complete at the blank line that
  ends it. What a relay does per event -- its delay, its CPU -- is about these.
- ``StreamEnding`` tells how a stream ended: whole (``message_stop`` in Anthropic
  Messages, ``data: [DONE]`` in OpenAI Chat, a terminal ``response.completed`` or
  ``response.incomplete`` in OpenAI Responses, which has no ``[DONE]``), or with an error
  (an ``error`` event; in Responses also ``response.failed``), and its type and message.

Both servers the bench reads (the simulator and the proxy) end events with ``\\n\\n``;
``\\r\\n`` line endings, which SSE also allows, are not recognised here.
"""

from __future__ import annotations

import json
from typing import Any, Final, Literal, TypeAlias, final

__all__ = ["Api", "ContentCounter", "EventCounter", "StreamEnding"]

# The client dialects: OpenAI Chat, Anthropic Messages, OpenAI Responses.
Api: TypeAlias = Literal["openai", "anthropic", "responses"]

_RESPONSES_CONTENT: Final = (
    b"event: response.output_text.delta",
    b"event: response.function_call_arguments.delta",
    b"event: response.reasoning_summary_text.delta",
)
_RESPONSES_COMPLETE: Final = (b"event: response.completed", b"event: response.incomplete")
_RESPONSES_ERROR: Final = (b"event: response.failed", b"event: error")


@final
class ContentCounter:
    """Spots content events in a stream's body, whichever format."""

    __slots__ = ("_api", "_partial", "count")

    def __init__(self, api: Api) -> None:
        self._api = api
        self._partial = b""
        self.count = 0

    def feed(self, piece: bytes) -> int:
        """How many content events complete in ``piece``."""
        data = self._partial + piece
        lines = data.split(b"\n")
        self._partial = lines.pop()
        found = 0
        if self._api == "anthropic":
            for line in lines:
                if line.startswith(b"event: content_block_delta"):
                    found += 1
        elif self._api == "responses":
            for line in lines:
                if line in _RESPONSES_CONTENT:
                    found += 1
        else:
            for line in lines:
                if line.startswith(b"data: {") and _openai_has_content(line[6:]):
                    found += 1
        self.count += found
        return found


def _openai_has_content(payload: bytes) -> bool:
    try:
        chunk = json.loads(payload)
        delta = chunk["choices"][0]["delta"]
    except (ValueError, KeyError, IndexError, TypeError):
        return False
    return bool(delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"))


@final
class EventCounter:
    """Counts complete SSE events (each ends with a blank line) and the body's bytes."""

    __slots__ = ("_newline", "bytes", "count")

    def __init__(self) -> None:
        self._newline = False  # the last piece ended with an unpaired "\n"
        self.count = 0
        self.bytes = 0

    def feed(self, piece: bytes) -> int:
        """How many events complete in ``piece``."""
        self.bytes += len(piece)
        data = b"\n" + piece if self._newline else piece
        found = data.count(b"\n\n")
        # Matches pair newlines from the left, so an odd run of them at the end leaves one
        # that the next piece's leading newline completes.
        run = 0
        while run < len(data) and data[-1 - run] == 0x0A:
            run += 1
        self._newline = run % 2 == 1
        self.count += found
        return found


@final
class StreamEnding:
    """Watches a stream's lines for its end: ``complete`` once the terminator arrived,
    ``error_type`` once an error event did, with ``error_message``.

    ``error_type`` is what the error names itself: ``error.type`` in Chat and Messages,
    ``error.code`` in Responses (``response.error.code`` of ``response.failed``, e.g.
    ``server_error``); ``"unknown"`` when the event says nothing readable.
    """

    __slots__ = ("_api", "_error_next", "_partial", "complete", "error_message", "error_type")

    def __init__(self, api: Api) -> None:
        self._api = api
        self._partial = b""
        self._error_next = False  # the last line was an error event's ``event:`` line
        self.complete = False
        self.error_type: str | None = None
        self.error_message = ""

    def feed(self, piece: bytes) -> None:
        lines = (self._partial + piece).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            if self._api == "openai":
                if line == b"data: [DONE]":
                    self.complete = True
                elif line.startswith(b'data: {"error"'):
                    self._error(_error_object(line[6:]), "type")
            elif line.startswith(b"event: "):
                if self._api == "anthropic":
                    self._error_next = line == b"event: error"
                    self.complete |= line == b"event: message_stop"
                else:
                    self._error_next = line in _RESPONSES_ERROR
                    self.complete |= line in _RESPONSES_COMPLETE
            elif self._error_next and line.startswith(b"data: "):
                self._error_next = False
                if self._api == "anthropic":
                    self._error(_error_object(line[6:]), "type")
                else:
                    self._error(_responses_error(line[6:]), "code")

    def _error(self, error: dict[str, Any], key: str) -> None:
        kind, message = error.get(key), error.get("message")
        self.error_type = kind if isinstance(kind, str) and kind else "unknown"
        self.error_message = message if isinstance(message, str) else ""


def _json_object(payload: bytes) -> dict[str, Any]:
    try:
        value = json.loads(payload)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _error_object(payload: bytes) -> dict[str, Any]:
    """The ``error`` object of a Chat or Messages error event (``{}`` if none)."""
    error = _json_object(payload).get("error")
    return error if isinstance(error, dict) else {}


def _responses_error(payload: bytes) -> dict[str, Any]:
    """``response.error`` of ``response.failed``, or an ``error`` event itself (which carries
    ``code`` and ``message`` at its top level)."""
    event = _json_object(payload)
    if event.get("type") != "response.failed":
        return event
    response = event.get("response")
    error = response.get("error") if isinstance(response, dict) else None
    return error if isinstance(error, dict) else {}
