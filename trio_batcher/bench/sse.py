"""Counting a stream's SSE events as the client receives them, across piece boundaries.

Pure (no I/O, no clock): the load driver feeds each piece of a streamed body as it arrives
and stamps whatever completed in it with the piece's arrival time. Two counters:

- ``ContentCounter`` spots *content* events -- the ones a user sees as text -- in either
  wire format: ``content_block_delta`` in Anthropic Messages, a chunk with a non-empty
  ``delta.content`` (or reasoning or tool-call delta) in OpenAI Chat. TTFT and
  inter-token latency are about these.
- ``EventCounter`` counts *every* event, whatever its kind (``message_start``, ``ping``,
  ``data: [DONE]``...): an event is complete at the blank line that ends it. What a relay
  does per event -- its delay, its CPU -- is about these.
- ``StreamEnding`` tells how a stream ended: whole (``message_stop`` in Anthropic
  Messages, ``data: [DONE]`` in OpenAI Chat), or with an ``error`` event, and its type.

Both servers the bench reads (the simulator and the proxy) end events with ``\\n\\n``;
``\\r\\n`` line endings, which SSE also allows, are not recognised here.
"""

from __future__ import annotations

import json
from typing import Literal, TypeAlias, final

__all__ = ["Api", "ContentCounter", "EventCounter", "StreamEnding"]

Api: TypeAlias = Literal["openai", "anthropic"]


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
    ``error_type`` once an error event did (its ``error.type``, or ``"unknown"``)."""

    __slots__ = ("_api", "_error_next", "_partial", "complete", "error_type")

    def __init__(self, api: Api) -> None:
        self._api = api
        self._partial = b""
        self._error_next = False  # Anthropic: the last line was ``event: error``
        self.complete = False
        self.error_type: str | None = None

    def feed(self, piece: bytes) -> None:
        lines = (self._partial + piece).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            if self._api == "anthropic":
                if line.startswith(b"event: "):
                    self._error_next = line == b"event: error"
                    if line == b"event: message_stop":
                        self.complete = True
                elif self._error_next and line.startswith(b"data: "):
                    self.error_type = _error_type(line[6:])
                    self._error_next = False
            elif line == b"data: [DONE]":
                self.complete = True
            elif line.startswith(b'data: {"error"'):
                self.error_type = _error_type(line[6:])


def _error_type(payload: bytes) -> str:
    try:
        kind = json.loads(payload)["error"]["type"]
    except (ValueError, KeyError, TypeError):
        return "unknown"
    return kind if isinstance(kind, str) else "unknown"
