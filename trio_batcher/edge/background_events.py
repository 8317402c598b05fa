"""The events of one streamed background response, kept so a client can resume them.

A background response created with ``stream: true`` runs detached from the connection
that created it: its events go into an ``EventLog``, and every reader -- the creating
request, and each ``GET /v1/responses/{id}?stream=true&starting_after=N`` -- follows the
log at its own pace, replaying what it has not seen and then waiting for more. A reader
that leaves takes nothing with it; the response runs on.

Bounded: the log keeps at most ``max_bytes`` of encoded events, dropping the oldest past
it (the newest event is always kept). A resume that starts before the oldest kept event
is refused (``EventsDropped``), and a reader that falls that far behind while following
is ended with an ``error`` event, so nobody silently misses events. Events are numbered
by their order, which is their ``sequence_number`` (the Responses stream translation
numbers every event it emits, from 0, and each is one ``event:``/``data:`` block).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator
from itertools import islice
from typing import Final, final

import trio

__all__ = ["EventLog", "EventsDropped"]

_SEPARATOR: Final = b"\n\n"


@final
class EventsDropped(LookupError):
    """The events after ``starting_after`` are no longer all kept."""

    def __init__(self, first_kept: int) -> None:
        super().__init__(first_kept)
        self.first_kept = first_kept


@final
class EventLog:
    """Encoded SSE events by sequence number, bounded by ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._events: deque[bytes] = deque()
        self._bytes = 0
        self._first = 0  # sequence number of self._events[0]
        self.finished = False
        self.finished_at: float | None = None
        self._changed = trio.Event()

    @property
    def next_sequence(self) -> int:
        return self._first + len(self._events)

    @property
    def first_kept(self) -> int:
        return self._first

    def append(self, chunk: bytes) -> None:
        """One or more encoded events, in order, as the stream codec wrote them."""
        for piece in chunk.split(_SEPARATOR):
            if piece.strip():
                self._push(piece + _SEPARATOR)
        self._wake()

    def finish(self) -> None:
        """No more events: readers end once they have the last one."""
        if not self.finished:
            self.finished = True
            self.finished_at = trio.current_time()
            self._wake()

    def check(self, starting_after: int | None) -> None:
        """Raise ``EventsDropped`` if the events after ``starting_after`` are not all kept."""
        wanted = 0 if starting_after is None else starting_after + 1
        if wanted < self._first:
            raise EventsDropped(self._first)

    async def follow(self, starting_after: int | None) -> AsyncIterator[bytes]:
        """The events after ``starting_after`` (all, with None), then the new ones as they
        come, until the log is finished; each batch already kept is one chunk."""
        wanted = 0 if starting_after is None else starting_after + 1
        while True:
            changed = self._changed
            if wanted < self._first:
                yield _dropped_event(wanted, self._first)
                return
            if wanted < self.next_sequence:
                start = wanted - self._first
                chunk = b"".join(islice(self._events, start, None))
                wanted = self.next_sequence
                yield chunk
                continue
            if self.finished:
                return
            await changed.wait()

    def _push(self, event: bytes) -> None:
        self._events.append(event)
        self._bytes += len(event)
        while self._bytes > self._max_bytes and len(self._events) > 1:
            self._bytes -= len(self._events.popleft())
            self._first += 1

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()


def _dropped_event(wanted: int, first_kept: int) -> bytes:
    """An ``error`` event for a reader that fell behind the kept events."""
    event = {
        "type": "error",
        "code": "stream_events_dropped",
        "message": (
            f"Events from sequence number {wanted} are no longer kept (the oldest kept is "
            f"{first_kept}; BACKGROUND_STREAM_BUFFER_BYTES). Retrieve the response without "
            "stream=true for its current state."
        ),
        "param": None,
        "sequence_number": wanted,
    }
    data = json.dumps(event, separators=(",", ":"))
    return f"event: error\ndata: {data}\n\n".encode()
