"""Server-sent events: an incremental decoder for upstream streams, an encoder for ours.

Theory of operation: the decoder follows the WHATWG "interpreting an event stream" rules.
Bytes arrive in arbitrary pieces (a network read can end inside a UTF-8 sequence, inside a
field name, or between the ``\\r`` and ``\\n`` of one line ending), so the decoder keeps two
pieces of state between calls: an incremental UTF-8 decoder and the text of the unfinished
line. Complete lines are interpreted as they appear; a blank line dispatches the event built
so far. Nothing is dispatched for an event that never saw its blank line: a stream cut off
mid-event yields no half event (``pending`` tells the caller something was cut off).

Guarantees:
- Line endings ``\\r\\n``, ``\\n`` and ``\\r`` are all accepted, mixed freely, split anywhere.
- ``data:`` lines of one event are joined with ``\\n``; one leading space after the colon is
  dropped; comment lines (``:...``) and unknown fields are ignored; an event without data is
  not dispatched; the event name defaults to ``"message"``.
- Memory is bounded: one unfinished line or event larger than ``max_event_bytes`` raises
  ``SSEError`` instead of buffering without limit.
"""

from __future__ import annotations

import codecs
import json
from typing import Final, NamedTuple, final

__all__ = ["DONE", "SSEDecoder", "SSEError", "SSEEvent", "encode_data"]

DONE: Final = b"data: [DONE]\n\n"
"""The terminator OpenAI streams end with."""

_DEFAULT_MAX_EVENT_BYTES: Final = 32 * 1024 * 1024  # Anthropic's own request-size limit


class SSEError(ValueError):
    """The byte stream cannot be an event stream we are willing to buffer."""


class SSEEvent(NamedTuple):
    """One dispatched event; unpacks as ``(event, data)``."""

    event: str
    data: str


@final
class SSEDecoder:
    """Feed bytes as they arrive; get the events they complete.

    Args:
      max_event_bytes: upper bound (in characters) on one event's buffered text.
    """

    def __init__(self, *, max_event_bytes: int = _DEFAULT_MAX_EVENT_BYTES) -> None:
        self._max = max_event_bytes
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        # Text after the last complete line ending, in the pieces it arrived in: joined only
        # when its line ends, so a long line arriving in many reads costs linear time.
        self._line: list[str] = []
        self._line_size = 0
        self._skip_lf = False  # the last piece ended in "\r": a leading "\n" completes it
        self._at_start = True  # a byte-order mark is only stripped at the very start
        self._event = ""
        self._data: list[str] = []
        self._data_size = 0

    @property
    def pending(self) -> bool:
        """True if bytes of an unfinished event are buffered (a cut-off stream)."""
        return bool(self._line or self._data or self._event)

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume ``chunk``; return the events whose terminating blank line it completed."""
        text = self._utf8.decode(chunk)
        if self._at_start and text:
            self._at_start = False
            text = text.removeprefix("\ufeff")
        if self._skip_lf and text:
            self._skip_lf = False
            text = text.removeprefix("\n")
        events: list[SSEEvent] = []
        start = 0
        while True:
            cr = text.find("\r", start)
            lf = text.find("\n", start)
            if cr < 0 and lf < 0:
                break
            end = lf if cr < 0 or 0 <= lf < cr else cr
            if self._line:
                line = "".join(self._line) + text[start:end]
                self._line = []
                self._line_size = 0
            else:
                line = text[start:end]
            start = end + 1
            if text[end] == "\r":
                if start == len(text):
                    self._skip_lf = True
                elif text[start] == "\n":
                    start += 1
            event = self._interpret(line)
            if event is not None:
                events.append(event)
        if start < len(text):
            self._line.append(text[start:])
            self._line_size += len(text) - start
            if self._line_size + self._data_size > self._max:
                raise SSEError(f"an event stream line exceeded {self._max} characters")
        return events

    def _interpret(self, line: str) -> SSEEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._data_size += len(value) + 1
            if self._data_size > self._max:
                raise SSEError(f"an event exceeded {self._max} characters")
        elif name == "event":
            self._event = value
        # "id" and "retry" have no use here; unknown fields are ignored by the spec.
        return None

    def _dispatch(self) -> SSEEvent | None:
        event = SSEEvent(self._event or "message", "\n".join(self._data))
        had_data = bool(self._data)
        self._event = ""
        self._data = []
        self._data_size = 0
        return event if had_data else None


def encode_data(obj: object) -> bytes:
    """``data: {json}\\n\\n`` — one line, since JSON escapes every newline inside strings."""
    payload = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return b"data: " + payload.encode("utf-8") + b"\n\n"
