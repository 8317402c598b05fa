"""What the pipeline needs from a client dialect, and what it hands back to the edge.

The pipeline speaks Anthropic Messages: an ``UpstreamRequest`` in, an upstream reply or a
stream of upstream events out. A door at the edge gives it a ``ReplyCodec`` for each
request, which encodes those in the client's dialect; the pipeline itself never looks at a
dialect. ``JSONReply`` and ``StreamReply`` are what the edge sends.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, final

from ..errors import ProxyError

__all__ = ["CLIENT_CLOSED", "JSONReply", "ReplyCodec", "StreamCodec", "StreamReply"]

# Status recorded for a request whose client went away (nginx's convention).
CLIENT_CLOSED: Final = 499


class StreamCodec(Protocol):
    """One stream's encoder: upstream events in, bytes for the client out.

    ``feed`` gets every event in order but ``error`` events (``upstream_error`` gets
    those), the deltas read together merged into one when ``coalesces``; ``finish`` and then ``terminator`` close a stream that ended whole; ``error``
    renders a failure of the gateway's own (deadline, truncation, shutdown) after the
    response has started.
    """

    @property
    def terminator(self) -> bytes: ...

    @property
    def coalesces(self) -> bool:
        """True if ``feed`` may be given deltas merged by ``coalesce_deltas`` (they have no
        ``raw`` text); a codec that relays each event's own text says False."""
        ...

    def feed(self, name: str, data: Mapping[str, Any], raw: str) -> list[bytes]: ...

    def finish(self) -> list[bytes]: ...

    def upstream_error(self, data: Mapping[str, Any], raw: str) -> bytes: ...

    def error(self, exc: ProxyError) -> bytes: ...


class ReplyCodec(Protocol):
    """One request's answers in the client's dialect."""

    def headers(self, upstream: Mapping[str, str]) -> dict[str, str]:
        """Response headers to send, from the upstream's (request id, rate limits...)."""
        ...

    def reply(self, message: dict[str, Any], raw: bytes) -> dict[str, Any] | bytes:
        """The body for a non-streaming reply (``raw``: the upstream's bytes)."""
        ...

    def stream(self) -> StreamCodec: ...

    def error(self, exc: ProxyError) -> ProxyError:
        """An error before the first byte, as this client should read it."""
        ...


@final
@dataclass
class JSONReply:
    """A whole answer: a JSON object to serialise, or bytes to send as they are."""

    body: dict[str, Any] | bytes
    headers: dict[str, str] = field(default_factory=dict)
    status: int = 200


@final
@dataclass
class StreamReply:
    """An SSE answer: ``body`` to send, then ``close()``, exactly as for any stream.

    ``deadline`` (``trio.current_time()`` scale) is the request's; the server calls
    ``expire()`` if the body is still being written a moment after it, which frees the
    stream's resources even when the write itself is stuck on a client that stopped reading.
    """

    body: AsyncIterator[bytes]
    headers: dict[str, str]
    close: Callable[[], None]
    deadline: float = math.inf
    expire: Callable[[], None] = lambda: None
