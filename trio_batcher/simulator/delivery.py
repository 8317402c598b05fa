"""Delivering a streamed reply on the latency model's schedule.

Theory of operation: the whole event sequence is rendered up front (``sse.py``); this
generator walks it, sleeping until each token's absolute deadline (``start + offset``, so
per-event work never accumulates as drift) and coalescing every event already due into one
chunk -- with no latency configured, a whole reply leaves in one write. It closes the
request's trace itself just before handing over the last chunk, so a client that has read
everything sees it counted. If the client goes away first, quart-trio cancels the generator
at its current ``yield`` or sleep; the trace stays open and the app's ASGI wrapper records
the abandon in its ``finally``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import trio

from .faults import Faults
from .sse import Event, error_event
from .stats import SimulatorStats, Trace


async def stream_body(
    stats: SimulatorStats,
    trace: Trace,
    events: list[Event],
    offsets: list[float],
    base: float,
    faults: Faults,
) -> AsyncIterator[bytes]:
    """The SSE body: events on the latency schedule, coalescing those already due.

    Closes the trace itself before yielding the final chunk; if the client goes away first,
    quart-trio cancels this generator and the ASGI wrapper records the abandon.
    """
    request_id = trace.request_id
    if faults.stream_error_first:
        trace.note_event(time.monotonic())
        stats.finish(trace, "error")
        yield error_event("overloaded_error", "Overloaded", request_id)
        return
    error_after = faults.stream_error_after
    message_delta_at = len(events) - 2
    pending: list[bytes] = []
    first_token_pending = False
    k = 0

    def flush() -> bytes:
        nonlocal first_token_pending
        now = time.monotonic()
        trace.note_event(now)
        if first_token_pending:
            trace.first_token_at = now
            first_token_pending = False
        data = b"".join(pending)
        pending.clear()
        return data

    for i, event in enumerate(events):
        # The error replaces the next content event once ``error_after`` deltas are out
        # (so ``stream_error_after=0`` fails before any block starts), or the message_delta.
        if error_after is not None and (
            i == message_delta_at or ((event.token or event.opens_block) and k >= error_after)
        ):
            pending.append(error_event("overloaded_error", "Overloaded", request_id))
            data = flush()
            stats.finish(trace, "error")
            yield data
            return
        cut_at = faults.stream_end_after
        if cut_at is not None and (event.token or event.opens_block) and k >= cut_at:
            data = flush()
            stats.finish(trace, "cut")
            yield data
            return
        if event.token:
            deadline = base + offsets[k]
            if deadline > trio.current_time():
                if pending:
                    yield flush()
                await trio.sleep_until(deadline)
            if k == 0:
                first_token_pending = True
            k += 1
        pending.append(event.data)
    data = flush()
    stats.finish(trace, "completed")
    yield data
