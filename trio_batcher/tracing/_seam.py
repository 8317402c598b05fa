"""The seam the rest of the gateway calls: tracing off is these classes, which do nothing.

Every hook in the request path calls a method of one of these objects. With tracing off they
are the shared no-op instances below, so a hook costs one method call that returns at once and
nothing from ``opentelemetry`` is ever imported; with tracing on, ``_otel.py`` subclasses them
with methods that make spans. The hooks never ask which one they hold (the edge and the fleet
check ``recording`` only to skip work whose sole purpose is a span).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any, Final

__all__ = [
    "NOOP_ATTEMPT",
    "NOOP_TRACE",
    "NOOP_TRACING",
    "NOOP_WAITING",
    "AttemptTrace",
    "RequestTrace",
    "Tracing",
    "Waiting",
]

Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]


class Waiting:
    """A wait being timed (at the gate, for a dispatch): ``done`` once it is over."""

    __slots__ = ()

    def done(self) -> None:
        """The wait is over (idempotent)."""


class AttemptTrace:
    """One upstream attempt: a CLIENT span with the GenAI attributes, when recording."""

    __slots__ = ()

    def headers(self) -> tuple[tuple[bytes, bytes], ...]:
        """Headers that carry this attempt's trace context upstream (``traceparent``)."""
        return ()

    def replied(self, message: Mapping[str, Any]) -> None:
        """A whole (non-stream) reply came back: its facts are recorded, the span ends."""

    def opened(self, message: Mapping[str, Any] | None) -> None:
        """A stream reached its first content (``message``: its ``message_start``); the
        span stays open until the request's ``stream_ended``."""

    def failed(self, exc: BaseException) -> None:
        """The attempt failed (or was cancelled): ``error.type`` is recorded, the span ends."""


class RequestTrace:
    """One request's SERVER span and the spans under it, when recording."""

    __slots__ = ()

    @property
    def recording(self) -> bool:
        return False

    @property
    def trace_id(self) -> str | None:
        """The trace's id in hex (for a log line), or None when not recording."""
        return None

    @property
    def span_id(self) -> str | None:
        """The SERVER span's id in hex (for a log line), or None when not recording."""
        return None

    def watch(self, send: Send) -> Send:
        """``send`` wrapped to see the response's status (itself, when not recording)."""
        return send

    def tenant(self, name: str) -> None:
        """Who sent it (the tenant's name; never a key)."""

    def waiting(self, name: str, **attributes: str) -> Waiting:
        """A queueing span from now until ``done`` (an INTERNAL child)."""
        return NOOP_WAITING

    def attempt(
        self,
        *,
        model: str,
        body: Mapping[str, Any],
        content: bytes | None,
        upstream: str,
        kind: str,
        server: tuple[str, int] | None,
        number: int,
        cause: str,
        after: str | None,
    ) -> AttemptTrace:
        """An upstream attempt starts now (a CLIENT child). ``kind``: the upstream's kind
        (anthropic, bedrock, vertex); ``cause``: first, retry or failover; ``after``: the
        failure that caused it."""
        return NOOP_ATTEMPT

    def stream_ended(self, status: int, usage: Mapping[str, Any], stop_reason: str | None) -> None:
        """The streamed reply is over: the open attempt span gets its usage and ends."""

    def end(self) -> None:
        """The answer is sent (or abandoned): the SERVER span ends (idempotent)."""


class Tracing:
    """The process's tracer: ``request`` starts a request's trace. Off: everything no-op."""

    __slots__ = ()

    @property
    def enabled(self) -> bool:
        return False

    def request(self, scope: Mapping[str, Any], door: str) -> RequestTrace:
        """The trace of one request that came in by ``door`` (``openai.chat``...)."""
        return NOOP_TRACE

    def statistics(self) -> dict[str, Any]:
        """The ``tracing`` block of ``/metrics``."""
        return {"enabled": False}

    async def aclose(self) -> None:
        """Flush what is queued and stop the export thread (bounded)."""


NOOP_WAITING: Final = Waiting()
NOOP_ATTEMPT: Final = AttemptTrace()
NOOP_TRACE: Final = RequestTrace()
NOOP_TRACING: Final = Tracing()
