"""The received-requests log behind ``GET /_sim/requests``: what the upstream was sent.

Theory of operation: ``SimulatorApp.asgi_app`` records every HTTP request outside
``/_sim/`` as it arrives (``ReceivedLog.record``): method, path, query string and every
header exactly as received, in order, repeats included. It then reads the whole body (the
first ``BODY_BYTES`` of it) *before* the route runs and replays it to Quart, so an entry is
complete whatever the route does -- one refused for its credentials never reads its body --
and notes the status when the response starts. The log keeps the newest ``capacity``
entries; decoding the body (text, JSON) waits until the log is read, off the request path.

This is a test double's memory, so the credentials in the headers are kept verbatim: they
are handed to whoever asks ``/_sim/requests`` (a loopback test) and never written to a log;
an entry's ``repr`` leaves headers and body out.
"""

from __future__ import annotations

import json
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final, final

from hypercorn.typing import ASGIReceiveCallable, ASGIReceiveEvent, HTTPScope

BODY_BYTES: Final = 8 * 1024 * 1024
"""The most of one body an entry keeps; the rest is still delivered, only not logged."""


@final
@dataclass(slots=True)
class ReceivedRequest:
    """One request as the simulator received it.

    Attributes:
      seq: its number since the simulator started (1, 2, ...); gaps mean entries that
        fell out of the log or were cleared.
      received_at: ``time.monotonic()`` at arrival, comparable with ``/_sim/stats`` traces.
      request_id: the ``request-id`` header sent back.
      method: ``POST``, ``GET``...
      path: the path, without the query string (``/v1/messages``).
      query: the raw query string (``beta=true``), ``""`` if none.
      headers: every ``(name, value)`` pair in arrival order; names lowercase, as the HTTP
        layer hands them over; values decoded as latin-1.
      body: the raw body (at most ``BODY_BYTES`` of it).
      body_truncated: whether the body was longer than what ``body`` holds.
      status: the HTTP status of the response, once it started.
    """

    seq: int
    received_at: float
    request_id: str | None
    method: str
    path: str
    query: str
    headers: tuple[tuple[str, str], ...] = field(repr=False)
    body: bytes = field(default=b"", repr=False)
    body_truncated: bool = False
    status: int | None = None

    def header_values(self, name: str) -> list[str]:
        """Every value of header ``name`` (case-insensitive), in arrival order."""
        wanted = name.lower()
        return [value for key, value in self.headers if key.lower() == wanted]

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-insensitive), or None."""
        values = self.header_values(name)
        return values[0] if values else None

    @property
    def text(self) -> str:
        """The body decoded as UTF-8 (undecodable bytes replaced)."""
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body parsed as JSON; None when it is empty, truncated or not JSON."""
        if not self.body or self.body_truncated:
            return None
        try:
            return json.loads(self.body)
        except (ValueError, RecursionError):
            return None

    def to_json(self) -> dict[str, Any]:
        """The entry as ``GET /_sim/requests`` lists it."""
        return {
            "seq": self.seq,
            "received_at": self.received_at,
            "request_id": self.request_id,
            "method": self.method,
            "path": self.path,
            "query": self.query,
            "headers": [[name, value] for name, value in self.headers],
            "body": self.text,
            "json": self.json(),
            "body_truncated": self.body_truncated,
            "status": self.status,
        }


@final
class ReceivedLog:
    """The newest ``capacity`` received requests, oldest first; 0 keeps none.

    Touched only from trio tasks between checkpoints, like the rest of the state.
    """

    def __init__(self, capacity: int) -> None:
        self._entries: deque[ReceivedRequest] = deque(maxlen=capacity)
        self._capacity = capacity
        self._seq = 0

    def __len__(self) -> int:
        return len(self._entries)

    def record(self, scope: HTTPScope, request_id: str | None) -> ReceivedRequest | None:
        """A new entry for the request ``scope`` describes (its body still to come), or
        None when the log keeps nothing."""
        if self._capacity == 0:
            return None
        self._seq += 1
        entry = ReceivedRequest(
            seq=self._seq,
            received_at=time.monotonic(),
            request_id=request_id,
            method=scope["method"],
            path=scope["path"],
            query=scope["query_string"].decode("latin-1"),
            headers=tuple(
                (name.decode("latin-1"), value.decode("latin-1"))
                for name, value in scope["headers"]
            ),
        )
        self._entries.append(entry)
        return entry

    def entries(self) -> tuple[ReceivedRequest, ...]:
        """The entries, oldest first."""
        return tuple(self._entries)

    def snapshot(self, recent: int | None = None) -> dict[str, Any]:
        """``{"requests": [...]}``, oldest first; ``recent`` keeps only the newest N."""
        entries = list(self._entries)
        if recent is not None:
            entries = entries[len(entries) - max(0, recent) :]
        return {"requests": [entry.to_json() for entry in entries]}

    def clear(self) -> None:
        """Forget every entry (the sequence numbers go on)."""
        self._entries.clear()


async def read_body(receive: ASGIReceiveCallable, entry: ReceivedRequest) -> ASGIReceiveCallable:
    """Read the request's body into ``entry`` and return a ``receive`` that replays it.

    Reading stops at the end of the body, at a disconnect, or once more than
    ``BODY_BYTES`` arrived; whatever was read is replayed first, then ``receive`` is
    called as usual (for the rest of a long body, and the disconnect Quart waits for).
    """
    held: deque[ASGIReceiveEvent] = deque()
    chunks: list[bytes] = []
    size = 0
    while size <= BODY_BYTES:
        message = await receive()
        held.append(message)
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        chunks.append(chunk[: max(0, BODY_BYTES - size)])
        size += len(chunk)
        if not message.get("more_body", False):
            break
    entry.body = b"".join(chunks)
    entry.body_truncated = size > BODY_BYTES

    async def replay() -> ASGIReceiveEvent:
        if held:
            return held.popleft()
        return await receive()

    return replay
