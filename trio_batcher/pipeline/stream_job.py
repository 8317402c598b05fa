"""The stream job: one upstream stream, read into a bounded channel for the relay.

Runs in the dispatcher's nursery, so it holds the upstream slot (a limiter token when
batching) for the whole stream; the relay (``relay.StreamRelay``) reads the other end.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import partial
from typing import Any, Final

import trio

from ..errors import ProxyError
from ..settings import Settings
from ..tracing import NOOP_WAITING, Waiting
from ..upstream.caller import MessagesCaller, MessagesStream
from ..upstream.errors import status_for_error_type, upstream_error
from ..upstream.request import UpstreamRequest
from ..upstream.resilience import StreamEvent, StreamStart, open_until_content
from ..upstreams.fleet import Fleet
from .relay import HEADERS_EVENT, deadline_error
from .tally import event_kind

__all__ = ["pump_stream"]

# How long the stream job reads on after message_stop for the upstream to end its body.
_LINGER_AFTER_STOP_S: Final = 1.0


async def pump_stream(
    fleet: Fleet,
    settings: Settings,
    request: UpstreamRequest,
    deadline: float,
    send: trio.MemorySendChannel[StreamEvent],
    waiting: Waiting = NOOP_WAITING,
) -> None:
    """The stream job: relay upstream events into ``send`` until the stream ends.

    The job lets go of ``request`` once the stream is open (nothing is retried after that),
    and so does its dispatcher, which drops a job as it calls it: the body -- for an agent,
    often the whole conversation -- need not live as long as the stream.

    Runs in the dispatcher's nursery and holds the upstream slot (a limiter token when
    batching, and the chosen upstream's own slot) for the whole stream. Opening the
    stream and reading up to its first content event is one retryable attempt (on
    another upstream, with several: ``upstreams.fleet``); after that nothing is retried,
    because the client may already have content. Returns quietly if the reader went away.
    ``waiting``: the request's dispatch wait (``tracing``), over once the job runs.
    """
    waiting.done()
    complete = False
    async with send:
        with trio.move_on_at(deadline) as scope:
            opening = fleet.open(
                request, _open_until_content, deadline=deadline, headers_of=_stream_headers_of
            )
            del request
            async with opening as served:
                start = served.value
                try:
                    opened = {
                        "headers": start.stream.headers,
                        "started_at": start.stream.started_at,
                        "first_byte_at": start.stream.first_byte_at,
                        "upstream": served.upstream,
                    }
                    await send.send((HEADERS_EVENT, opened, ""))
                    for item in start.prelude:
                        await send.send(item)
                    start.prelude = []  # the relay has them: held here they outlive the stream
                    async for item in start.rest:
                        await _forward(send, item)
                        if event_kind(item[0], item[1]) == "message_stop":
                            complete = True
                            break
                    await send.aclose()  # the answer is complete: the relay may finish
                    # An upstream should end its body right after message_stop; reading
                    # that end lets the connection be reused, and one that lingers is
                    # not waited for.
                    with trio.move_on_after(_LINGER_AFTER_STOP_S):
                        async for _ in start.rest:
                            pass
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return
                finally:
                    await start.aclose()
        if scope.cancelled_caught and not complete:
            raise deadline_error(settings)


async def _forward(send: trio.MemorySendChannel[StreamEvent], item: StreamEvent) -> None:
    """Hand ``item`` to the relay without yielding while the channel has room.

    The events of one network read then reach the relay together, when the pump next
    waits on the socket, so the relay can write them as one (``StreamRelay.body``). No
    event waits for more: the relay is woken by the first and runs as soon as the pump has
    parsed the rest of what was already read. A full channel is waited on as before.
    """
    try:
        send.send_nowait(item)
    except trio.WouldBlock:
        await send.send(item)


def _stream_headers_of(start: StreamStart[MessagesStream]) -> Mapping[str, str]:
    return start.stream.headers


async def _open_until_content(
    caller: MessagesCaller, request: UpstreamRequest
) -> StreamStart[MessagesStream]:
    """One attempt at a stream: open it and read up to its first content event."""
    return await open_until_content(partial(caller.open_stream, request), error_for=_prelude_error)


def _prelude_error(data: Mapping[str, Any], headers: Mapping[str, str]) -> ProxyError:
    """An ``error`` event before any content, as the error an HTTP status would have been."""
    error = data.get("error")
    kind = error.get("type") if isinstance(error, Mapping) else None
    body = {"type": "error", "error": error if isinstance(error, Mapping) else {}}
    return upstream_error(
        status_for_error_type(kind), json.dumps(body, ensure_ascii=False).encode(), headers
    )
