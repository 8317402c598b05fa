"""A stream attempt: open the upstream stream and read up to its first content event.

This is the part of a stream that can still be retried: nothing has been sent to the client
yet, and an overload that the upstream reports as the stream's first event (a 200 whose
first event is ``error``) is as retryable as a 529 status. ``open_until_content`` is the
attempt to hand to ``Resilience.call``; what it returns is past the point of no return.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any, Final, Generic, Protocol, TypeAlias, TypeVar, final

import trio

from ...errors import ProxyError

__all__ = ["EventStream", "StreamEvent", "StreamStart", "open_until_content"]

StreamEvent: TypeAlias = tuple[str, dict[str, Any], str]
"""``(name, data, raw)``: the SSE event name, its JSON data, and that data's text as sent."""

# Events that come before any content and can be held back while we may still retry.
# Events before the first delta: nothing the client could have seen depends on them yet, so
# an error or a retry up to here is invisible to it.
_PRELUDE: Final = frozenset({"message_start", "ping", "content_block_start"})


class EventStream(Protocol):
    """What ``UpstreamClient.open_stream`` returns (``UpstreamStream``), as far as we need it."""

    @property
    def headers(self) -> Mapping[str, str]: ...

    def events(self) -> AsyncGenerator[StreamEvent, None]: ...

    async def aclose(self) -> None: ...


S = TypeVar("S", bound=EventStream)


@final
class StreamStart(Generic[S]):
    """An upstream stream that has produced its first content event.

    ``prelude`` holds every event read so far, in order, the first content event last;
    ``rest`` continues the same event iterator. The owner must ``aclose()`` it.
    """

    def __init__(
        self, stream: S, prelude: list[StreamEvent], rest: AsyncGenerator[StreamEvent, None]
    ) -> None:
        self.stream = stream
        self.prelude = prelude
        self.rest = rest

    @property
    def headers(self) -> Mapping[str, str]:
        return self.stream.headers

    async def aclose(self) -> None:
        """Close the event iterator and the stream; shielded, so it completes when cancelled."""
        with trio.CancelScope(shield=True):
            try:
                await self.rest.aclose()
            finally:
                await self.stream.aclose()


async def open_until_content(
    open_stream: Callable[[], Awaitable[S]],
    *,
    error_for: Callable[[Mapping[str, Any], Mapping[str, str]], ProxyError],
) -> StreamStart[S]:
    """Open a stream and read events until the first one that is not ``message_start``/``ping``.

    Args:
      open_stream: e.g. ``partial(upstream.open_stream, body)``.
      error_for: turns an ``error`` event read before any content (its data, and the
        stream's response headers) into the ``ProxyError`` a retry decision is made on; an
        ``overloaded_error`` should carry ``upstream_status=529``.

    Raises:
      ProxyError: from ``open_stream``, from the event iterator, ``error_for``'s, or a 502
        ``upstream_connection_error`` for a stream that ends before its first content
        event. The stream is closed before anything propagates.
    """
    stream = await open_stream()
    events = stream.events()
    prelude: list[StreamEvent] = []
    try:
        while True:
            try:
                event = await anext(events)
            except StopAsyncIteration:
                # Ended with nothing to show for it: nothing reached the client yet, so this
                # is a failed call like a dropped connection (an HTTP status, or a retry),
                # not a 200 stream that breaks off at once.
                raise ProxyError(
                    502,
                    "The upstream closed the stream before sending any content.",
                    code="upstream_connection_error",
                ) from None
            # An event without an ``event:`` line is named by its JSON ``type``.
            name, data = event[0], event[1]
            kind = name if name and name != "message" else str(data.get("type") or "")
            if kind == "error":
                raise error_for(data, stream.headers)
            prelude.append(event)
            if kind not in _PRELUDE:
                break
    except BaseException:
        await StreamStart(stream, prelude, events).aclose()
        raise
    return StreamStart(stream, prelude, events)
