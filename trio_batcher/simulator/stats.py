"""Bookkeeping behind ``GET /_sim/stats``: counters, the in-flight gauge, request traces.

Theory of operation: every ``POST /v1/messages`` gets a ``Trace`` when it arrives
(``begin``) and is closed exactly once (``finish``), either by the code that produced its
answer -- just before the last byte is handed to the server, so a client that has read
the whole response always sees it counted -- or, failing that, by the ASGI wrapper's
``finally`` when the request ends without an answer: the client went away, quart-trio
cancelled the handler, and the trace is ``abandoned``. ``in_flight`` therefore returns to
0 however a request ends. Times are ``time.monotonic()`` seconds, which is system-wide on
one machine, so other processes can compare them with their own clocks.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Final, final

RECENT_TRACES: Final = 1000
EVENT_TIMES: Final = 256


@final
@dataclass(slots=True)
class Trace:
    """One request's life.

    Attributes:
      request_id: the ``request-id`` header sent back.
      started_at: when the request reached the app.
      stream: whether a stream was requested (and the body was valid).
      status: the HTTP status sent; ``None`` if no response started.
      outcome: ``completed`` | ``error`` | ``abandoned``, set when finished.
      first_token_at: when the first output token was handed to the server (a stream's
        first content delta; a non-streamed reply's body).
      finished_at: when the answer was complete or the request was abandoned.
      event_times: when each chunk of a stream was handed to the server (first 256).
      output_tokens: the reply's output tokens, if a reply was generated.
      fault: the injected fault that shaped the answer, if any: a directive
        (``status=529,times=1``), ``status=N`` for a configured-rate draw, ``rate_limit``
        for a refusal by an enforced limit, ``overload`` inside an overload window.
      retry_after: the ``retry-after`` (seconds) sent with a 429/529, if any.
    """

    request_id: str
    started_at: float
    stream: bool = False
    status: int | None = None
    outcome: str | None = None
    first_token_at: float | None = None
    finished_at: float | None = None
    event_times: list[float] = field(default_factory=list)
    output_tokens: int | None = None
    fault: str | None = None
    retry_after: float | None = None
    closed: bool = False

    def note_event(self, at: float) -> None:
        if len(self.event_times) < EVENT_TIMES:
            self.event_times.append(at)

    def as_json(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "stream": self.stream,
            "status": self.status,
            "outcome": self.outcome,
            "started_at": self.started_at,
            "first_token_at": self.first_token_at,
            "finished_at": self.finished_at,
            "event_times": self.event_times,
            "output_tokens": self.output_tokens,
            "fault": self.fault,
            "retry_after": self.retry_after,
        }


@final
class SimulatorStats:
    """Counters for ``/v1/messages``; see the module docstring for when they move."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.reset()

    def reset(self) -> None:
        """Zero the counters and forget traces; ``in_flight`` is a gauge and is kept
        (``max_in_flight`` restarts from it, i.e. from 0 when idle)."""
        self.requests_total = 0
        self.by_status: Counter[int] = Counter()
        self.max_in_flight = self.in_flight
        self.completed = 0
        self.abandoned = 0
        self.errors = 0
        self.streams = 0
        self.recent: deque[Trace] = deque(maxlen=RECENT_TRACES)

    def begin(self, trace: Trace) -> None:
        self.requests_total += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def finish(self, trace: Trace, outcome: str, status: int | None = None) -> None:
        """Close ``trace`` with ``outcome``; later calls for the same trace do nothing."""
        if trace.closed:
            return
        trace.closed = True
        self.in_flight -= 1
        if status is not None:
            trace.status = status
        trace.outcome = outcome
        trace.finished_at = time.monotonic()
        if trace.status is not None:
            self.by_status[trace.status] += 1
        if outcome == "completed":
            self.completed += 1
        elif outcome == "abandoned":
            self.abandoned += 1
        else:
            self.errors += 1
        if trace.stream and trace.status == 200:
            self.streams += 1
        self.recent.append(trace)

    def snapshot(self, recent: int | None = None) -> dict[str, Any]:
        traces = list(self.recent)
        if recent is not None:
            traces = traces[-recent:] if recent > 0 else []
        return {
            "requests_total": self.requests_total,
            "by_status": {str(k): v for k, v in sorted(self.by_status.items())},
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "completed": self.completed,
            "abandoned": self.abandoned,
            "errors": self.errors,
            "streams": self.streams,
            "recent": [t.as_json() for t in traces],
        }
