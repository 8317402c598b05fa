"""One stream's life after the upstream said 200: from the first event to the last byte.

The stream job (``stream_job.pump_stream``) forwards upstream events into a bounded channel; a
``StreamRelay`` reads them, keeps the dialect-free facts (``StreamTally``: usage, whether
the answer is whole), and has the door's ``StreamCodec`` encode each one for the client.

Ownership moves from the request handler to the response body generator once the prelude
is read; whichever holds the relay last calls ``close()``, exactly once, which stops the
upstream call (unless the answer was already whole), gives the gate slot back and records
the request (``outcomes.Outcomes``: the relay gets the recorder, not the pipeline).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from typing import Any, Final, final

import trio

from ..admission.dispatch import Ticket
from ..admission.gate import Slot
from ..errors import ProxyError
from ..observatory.metrics import Timing
from ..settings import Settings
from ..upstream.errors import client_status, status_for_error_type
from ..upstream.request import UpstreamRequest
from ..upstream.resilience import StreamEvent
from .coalesce import coalesce_deltas
from .contract import CLIENT_CLOSED, ReplyCodec, StreamCodec
from .outcomes import Outcomes, request_timing
from .tally import StreamTally, event_kind
from .tenancy import TenantGrant

__all__ = ["HEADERS_EVENT", "StreamRelay", "deadline_error"]

# First item the stream pump sends: the upstream's response headers and timing.
HEADERS_EVENT: Final = "trio-batcher.upstream-headers"
# Read before answering a stream: up to the first delta, an upstream failure can still be a
# proper HTTP status (and is retried), because the client has seen nothing yet.
_PRELUDE_EVENTS: Final = frozenset({HEADERS_EVENT, "message_start", "ping", "content_block_start"})
_DELTA: Final = "content_block_delta"
# A bound on one write's work; the pump's channel holds 16 events, so it rarely binds.
_MAX_EVENTS_PER_WRITE: Final = 64


def deadline_error(settings: Settings) -> ProxyError:
    return ProxyError(
        504,
        f"The request did not complete within REQUEST_TIMEOUT_S "
        f"({settings.request_timeout_s:g} s).",
        code="request_timeout",
    )


def _stream_error_status(data: Mapping[str, Any]) -> int:
    """What a stream that failed after its 200 is counted as: the status the same upstream
    error would have been given before the first byte (an overload is a 503, not a 529)."""
    error = data.get("error")
    kind = error.get("type") if isinstance(error, Mapping) else None
    return client_status(status_for_error_type(kind))


class _Expired(Exception):
    """The relay was closed from outside (``expire``) while its body was suspended."""


class _UpstreamFailed(Exception):
    """The upstream sent an ``error`` event mid-stream; its encoding is ``chunk``."""

    def __init__(self, chunk: bytes, status: int) -> None:
        self.chunk = chunk
        self.status = status


@final
class StreamRelay:
    """Owns one stream's resources from the first event to the last byte sent."""

    def __init__(
        self,
        outcomes: Outcomes,
        settings: Settings,
        request: UpstreamRequest,
        encoder: StreamCodec,
        ticket: Ticket[None],
        recv: trio.MemoryReceiveChannel[StreamEvent],
        slot: Slot,
        arrived: float,
        grant: TenantGrant | None = None,
    ) -> None:
        self._outcomes = outcomes
        self._settings = settings
        self._grant = grant
        # What the bookkeeping at the end reads (model, surface, tenant), without the body:
        # a stream can stay open for minutes, its request's conversation need not.
        self._request = replace(request, body={}, content=None)
        self._encoder = encoder
        self._ticket = ticket
        self._recv = recv
        self._slot = slot
        self._arrived = arrived
        self._tally = StreamTally()
        self._prelude: list[bytes] = []
        self._upstream_headers: Mapping[str, str] = {}
        self._upstream_started: float | None = None
        self._upstream_name: str | None = None  # which upstream serves the stream
        self._upstream_first_byte: float | None = None
        self._first_token_at: float | None = None
        self._closed = False
        self.status = CLIENT_CLOSED

    async def _next(self) -> StreamEvent | None:
        """The next upstream event, or None at the end of the stream (job outcome checked)."""
        try:
            return await self._recv.receive()
        except trio.ClosedResourceError:
            raise _Expired from None
        except trio.EndOfChannel:
            if not self._tally.stopped:  # else the job is only reading the body's end
                await self._ticket.wait()  # re-raises the job's ProxyError, if it failed
            return None

    def _feed(self, events: list[StreamEvent]) -> list[bytes]:
        """The bytes for ``events`` (read in one go), in order; the tally sees each one.

        A translating codec gets each run of deltas of one block merged into one event
        (``coalesce_deltas``): what was read together is written as one chunk, not one per
        token. An ``error`` event raises ``_UpstreamFailed`` carrying the bytes of the events
        before it, then its own.
        """
        todo: list[StreamEvent] = []
        for event in events:
            name, data, raw = event
            if name == HEADERS_EVENT:
                self._upstream_headers = data["headers"]
                self._upstream_started = data["started_at"]
                self._upstream_first_byte = data["first_byte_at"]
                self._upstream_name = data.get("upstream")
                continue
            kind = event_kind(name, data)
            if kind == "error":
                before = self._encode(todo)
                failed = self._encoder.upstream_error(data, raw)
                raise _UpstreamFailed(b"".join([*before, failed]), _stream_error_status(data))
            self._tally.observe(kind, data)
            todo.append(event)
        return self._encode(todo)

    def _encode(self, events: list[StreamEvent]) -> list[bytes]:
        encoder = self._encoder
        if len(events) > 1 and encoder.coalesces:
            events = coalesce_deltas(events)
        out: list[bytes] = []
        for name, data, raw in events:
            chunks = encoder.feed(name, data, raw)
            if chunks and self._first_token_at is None and event_kind(name, data) == _DELTA:
                self._first_token_at = trio.current_time()
            out += chunks
        return out

    async def read_prelude(self, codec: ReplyCodec) -> dict[str, str]:
        """Collect what the pump forwarded up to the first delta, or raise its failure.

        The pump forwards nothing until ``open_until_content`` has read the upstream past its
        first delta, and an error before that point is the job's (retried, or raised as a
        ``ProxyError``), so a failure here still becomes a real HTTP status.
        """
        while (event := await self._next()) is not None:
            self._prelude += self._feed([event])
            if event[0] not in _PRELUDE_EVENTS:
                break
        hook, message_id = self._request.on_reply, self._tally.message_id
        if hook is not None and message_id is not None and self._upstream_name is not None:
            await hook(message_id, self._upstream_name)  # before the client sees the id
        headers = codec.headers(self._upstream_headers)
        headers["Server-Timing"] = self.timing().server_timing_header()
        return headers

    def timing(self) -> Timing:
        return request_timing(
            self._arrived,
            self._ticket.started_at,
            self._upstream_started,
            self._upstream_first_byte,
            None,
            self._first_token_at,
        )

    async def body(self) -> AsyncIterator[bytes]:
        encoder = self._encoder
        try:
            if self._prelude:
                yield b"".join(self._prelude)
                self._prelude = []
            while (event := await self._next()) is not None:
                # Events already buffered go out in the same write, their deltas merged:
                # when the upstream is ahead of the client this is one send per scheduling
                # turn, not one per token; when it is not, nothing is buffered and nothing
                # waits.
                events = [event]
                while len(events) < _MAX_EVENTS_PER_WRITE:
                    try:
                        events.append(self._recv.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                if out := self._feed(events):
                    yield b"".join(out)
            if not self._tally.complete:
                # Neither a stop reason nor message_stop: the upstream closed the stream
                # early. Ending it cleanly would pass a truncated answer off as complete.
                raise ProxyError(
                    502,
                    "The upstream stream ended before the message was complete.",
                    code="upstream_stream_truncated",
                )
            for chunk in encoder.finish():
                if chunk:
                    yield chunk
            self.status = 200  # everything is out but the terminator: the answer is whole
            if encoder.terminator:
                yield encoder.terminator
        except _Expired:
            # expire() freed the stream while a write was stuck; once that write got
            # through, the client still learns why the stream ends here.
            # (An encoder whose stream already ended says so with b"": nothing to write.)
            if chunk := encoder.error(deadline_error(self._settings)):
                yield chunk
        except _UpstreamFailed as exc:
            self.status = exc.status
            if exc.chunk:
                yield exc.chunk
        except ProxyError as exc:
            self.status = exc.status
            if chunk := encoder.error(exc):
                yield chunk
        finally:
            self.close()

    def expire(self) -> None:
        """The deadline passed while a write to the client was stuck: free the stream's
        resources now, counted a 504 unless only the terminator was left to write."""
        if not self._closed:
            if self.status != 200:
                self.status = 504
            self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self._tally.stopped:
            # Stop the upstream call. A whole answer's job is left to finish reading the
            # body's end (a second at most), which lets its connection be reused.
            self._ticket.cancel()
        self._recv.close()
        self._slot.release()
        usage = self._tally.usage
        if self.status != 200 and usage:
            # What the upstream reported before the end is spent all the same. Anthropic
            # reports output tokens only at the end, so the deltas relayed (each at least a
            # token) stand in for them when that is more.
            usage["output_tokens"] = max(int(usage.get("output_tokens") or 0), self._tally.deltas)
        upstream = self._upstream_name
        self._request.trace.stream_ended(self.status, usage, self._tally.stop_reason)
        if self._grant is not None:
            self._grant.settle(self._request.model, usage, upstream=upstream)
        timing = self.timing()
        if self.status == 200:
            self._outcomes.success(self._request, usage, timing, upstream=upstream)
        else:
            self._outcomes.error(self._request, self.status, timing, usage, upstream=upstream)
