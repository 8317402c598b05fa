"""One request's way through the gateway, from an upstream request to a reply.

Theory of operation
-------------------
The pipeline speaks the upstream's own currency: a door at the edge has already decoded the
client's body into an ``UpstreamRequest`` (or refused it with a 400, before anything here
runs, so bad input never costs an upstream call) and gives a ``ReplyCodec`` that encodes
answers in the client's dialect. Gate, windows, dispatcher, resilience, cancellation and
metrics therefore serve every dialect alike. A request passes three stations, each of
which can end it with a ``ProxyError``:

1. **admit**: the admission gate hands out a ``Slot`` or sheds the request (429, or 503
   while shutting down). The slot is held until the reply is completely sent -- for a
   stream, until its last byte -- and released exactly once, in a ``finally``.
2. **dispatch**: the upstream call is a *job* given to the dispatcher (direct, or an
   admission window). A job that has to wait (a window, a limiter token) and every stream
   runs in a nursery the app lifespan owns, and the handler holds a ``Ticket``; a direct
   non-streaming job runs in the handler's task under a scope the dispatcher tracks
   (``Dispatcher.call``). If the client disconnects, the edge cancels the handler (or the
   stream relay), whose ``finally`` cancels the ticket: a queued job is never
   dispatched, a running one has its own cancel scope cancelled and its upstream
   connection closed at once.
3. **relay**: a non-stream reply is encoded and sent. A stream job pumps upstream SSE
   events into a small bounded channel (so a slow client slows the upstream read instead of
   growing a buffer); the handler reads until the first content event before answering, so
   an upstream failure before any content is still a proper HTTP error status, then hands
   the channel to the response body generator (``relay.StreamRelay``), which encodes event
   by event with no buffering.

One deadline, ``REQUEST_TIMEOUT_S`` from arrival, covers admission, queueing and every
upstream byte; passing it answers 504 (or, mid-stream, an error event).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from functools import partial
from typing import Any, Final, final

import trio

from ..admission.dispatch import Dispatcher, Ticket
from ..admission.gate import AdmissionGate, Shed, Slot
from ..errors import ProxyError
from ..observatory.metrics import MetricsRegistry, Timing
from ..settings import Settings
from ..upstream.client import UpstreamClient, UpstreamReply, UpstreamStream
from ..upstream.errors import status_for_error_type, upstream_error
from ..upstream.request import UpstreamRequest
from ..upstream.resilience import (
    Resilience,
    StreamEvent,
    StreamStart,
    call_with_resilience,
    open_until_content,
)
from .contract import CLIENT_CLOSED, JSONReply, ReplyCodec, StreamReply
from .relay import HEADERS_EVENT, StreamRelay, deadline_error
from .tally import event_kind

__all__ = ["Pipeline"]

# Upstream events buffered between the pump and the client. Small on purpose: the upstream
# read waits for the client rather than the proxy holding a growing backlog.
_STREAM_BUFFER: Final = 16
# How long the stream job reads on after message_stop for the upstream to end its body.
_LINGER_AFTER_STOP_S: Final = 1.0


@final
class Pipeline:
    """Runs upstream requests for every door of an app; one per app."""

    def __init__(
        self,
        *,
        settings: Settings,
        upstream: UpstreamClient,
        dispatcher: Dispatcher,
        gate: AdmissionGate,
        metrics: MetricsRegistry | None,
        resilience: Resilience | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self._resilience = resilience or Resilience()
        self._upstream = upstream
        self._dispatcher = dispatcher
        self._gate = gate

    async def handle(
        self, request: UpstreamRequest, codec: ReplyCodec, arrived: float
    ) -> JSONReply | StreamReply:
        """Answer one request; raises ``ProxyError`` (already ``codec.error``-ed) for
        anything but success."""
        deadline = arrived + self.settings.request_timeout_s
        early = self._resilience.shed_error(deadline, request.model)
        if early is not None:  # the upstream asked us to wait longer than this request may
            if self.metrics is not None:
                self.metrics.record_rejected(early.code or "upstream_cooldown")
            timing = Timing(total=trio.current_time() - arrived)
            early.headers["Server-Timing"] = timing.server_timing_header()
            raise codec.error(early)
        slot = await self._admit(request, arrived, deadline)
        try:
            if request.stream:
                return await self._start_stream(request, codec, slot, arrived, deadline)
            try:
                return await self._complete(request, codec, arrived, deadline)
            finally:
                slot.release()
        except ProxyError as exc:
            raise codec.error(exc) from None

    async def _admit(self, request: UpstreamRequest, arrived: float, deadline: float) -> Slot:
        try:
            return await self._gate.acquire(deadline)
        except trio.Cancelled:
            # The client left while queued: not shed, but it was a request, so count it.
            waited = trio.current_time() - arrived
            self.record_error(
                request,
                CLIENT_CLOSED,
                Timing(total=waited, queue=waited),
            )
            raise
        except Shed as shed:
            if self.metrics is not None:
                self.metrics.record_rejected(shed.reason)
            waited = trio.current_time() - arrived
            headers = {
                "Retry-After": str(math.ceil(shed.retry_after)),
                "Server-Timing": Timing(total=waited, queue=waited).server_timing_header(),
            }
            if shed.reason == "shutdown":
                raise ProxyError(
                    503,
                    "The proxy is shutting down; retry on another instance.",
                    code="shutdown",
                    headers=headers,
                ) from None
            raise ProxyError(
                429,
                f"The proxy is at capacity ({shed.reason}); retry after "
                f"{headers['Retry-After']} s.",
                type="rate_limit_error",
                code=shed.reason,
                headers=headers,
            ) from None

    # -- non-streaming ------------------------------------------------------------------------

    async def _complete(
        self, request: UpstreamRequest, codec: ReplyCodec, arrived: float, deadline: float
    ) -> JSONReply:
        dispatched: float | None = None

        async def job() -> UpstreamReply:
            nonlocal dispatched
            dispatched = trio.current_time()
            return await call_with_resilience(
                partial(self._upstream.create_message, request),
                deadline=deadline,
                ctx=self._resilience,
                headers_of=_reply_headers_of,
                model=request.model,
            )

        reply: UpstreamReply | None = None
        status = CLIENT_CLOSED
        failure: ProxyError | None = None
        try:
            with trio.move_on_at(deadline):
                reply = await self._dispatcher.call(job, scope=request.model)
            if reply is None:
                raise deadline_error(self.settings)
            status = 200
        except ProxyError as exc:
            status, failure = exc.status, exc
            raise
        except Exception:
            status = 500
            raise
        finally:
            if status != 200:
                timing = self.timing(arrived, dispatched)
                if failure is not None:  # an error answer shows where its time went too
                    failure.headers["Server-Timing"] = timing.server_timing_header()
                self.record_error(request, status, timing)
        body = codec.reply(reply.message, reply.raw)
        timing = self.timing(
            arrived, dispatched, reply.started_at, reply.first_byte_at, reply.finished_at
        )
        if self.metrics is not None:
            self.metrics.record_success(
                request.model,
                reply.message.get("usage") or {},
                timing,
                surface=request.surface,
            )
        headers = codec.headers(reply.headers)
        headers["Server-Timing"] = timing.server_timing_header()
        return JSONReply(body, headers)

    # -- streaming ----------------------------------------------------------------------------

    async def _pump(
        self,
        request: UpstreamRequest,
        deadline: float,
        send: trio.MemorySendChannel[StreamEvent],
    ) -> None:
        """The stream job: relay upstream events into ``send`` until the stream ends.

        Runs in the dispatcher's nursery and holds the upstream slot (a limiter token when
        batching) for the whole stream. Opening the stream and reading up to its first
        content event is one retryable attempt; after that nothing is retried, because
        the client may already have content. Returns quietly if the reader went away.
        """
        complete = False
        async with send:
            with trio.move_on_at(deadline) as scope:
                start = await call_with_resilience(
                    partial(
                        open_until_content,
                        partial(self._upstream.open_stream, request),
                        error_for=_prelude_error,
                    ),
                    deadline=deadline,
                    ctx=self._resilience,
                    headers_of=_stream_headers_of,
                    model=request.model,
                )
                try:
                    upstream = {
                        "headers": start.stream.headers,
                        "started_at": start.stream.started_at,
                        "first_byte_at": start.stream.first_byte_at,
                    }
                    await send.send((HEADERS_EVENT, upstream, ""))
                    for item in start.prelude:
                        await send.send(item)
                    async for item in start.rest:
                        await send.send(item)
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
                raise deadline_error(self.settings)

    async def _start_stream(
        self,
        request: UpstreamRequest,
        codec: ReplyCodec,
        slot: Slot,
        arrived: float,
        deadline: float,
    ) -> StreamReply:
        send, recv = trio.open_memory_channel[StreamEvent](_STREAM_BUFFER)
        try:
            ticket: Ticket[None] = self._dispatcher.submit_nowait(
                partial(self._pump, request, deadline, send), scope=request.model
            )
        except BaseException:
            # Refused (the dispatcher is shutting down): the slot is still ours to give back.
            slot.release()
            raise
        relay = StreamRelay(self, request, codec, ticket, recv, slot, arrived)
        handed_off = False
        try:
            with trio.move_on_at(deadline):
                headers = await relay.read_prelude()
                handed_off = True
                return StreamReply(relay.body(), headers, relay.close, deadline, relay.expire)
            raise deadline_error(self.settings)
        except ProxyError as exc:
            relay.status = exc.status
            exc.headers["Server-Timing"] = relay.timing().server_timing_header()
            raise
        except Exception:
            relay.status = 500
            raise
        finally:
            if not handed_off:
                relay.close()

    # -- bookkeeping --------------------------------------------------------------------------

    def timing(
        self,
        arrived: float,
        dispatched: float | None,
        started_at: float | None = None,
        first_byte_at: float | None = None,
        finished_at: float | None = None,
        first_token_at: float | None = None,
    ) -> Timing:
        """Where the time went. ``upstream`` runs from the end of the queue (the first
        attempt's start) to the last byte, so failed attempts, retries and the waits the
        upstream asked for between them are the upstream's time, not the proxy's overhead;
        ``upstream_ttfb`` is the answering attempt's own."""
        now = trio.current_time()
        begun = dispatched if dispatched is not None else started_at
        return Timing(
            total=now - arrived,
            queue=max(0.0, (now if dispatched is None else dispatched) - arrived),
            upstream_ttfb=None
            if started_at is None or first_byte_at is None
            else first_byte_at - started_at,
            ttft=None if first_token_at is None else first_token_at - arrived,
            upstream=None if begun is None else (finished_at or now) - begun,
        )

    def record_refused(
        self,
        status: int,
        arrived: float,
        *,
        stream: bool = False,
        surface: str | None = None,
        generation: bool = True,
    ) -> Timing:
        """Count a request answered with an error before any upstream work (bad input, a
        missing key): a request all the same, under the model ``(none)``; a call that would
        generate nothing (``generation=False``: ``count_tokens``) under its surface only, as
        it is counted when it succeeds."""
        timing = Timing(total=trio.current_time() - arrived)
        if self.metrics is not None:
            if generation:
                self.metrics.record_error(None, status, timing, stream=stream, surface=surface)
            elif surface is not None:
                self.metrics.record_call(surface, status, timing)
        return timing

    def record_error(
        self,
        request: UpstreamRequest,
        status: int,
        timing: Timing,
        usage: Mapping[str, Any] | None = None,
    ) -> None:
        if self.metrics is not None:
            self.metrics.record_error(
                request.model,
                status,
                timing,
                stream=request.stream,
                usage=usage,
                surface=request.surface,
            )

    # -- calls that generate nothing --------------------------------------------------------

    async def count_tokens(
        self, request: UpstreamRequest, arrived: float
    ) -> tuple[UpstreamReply, Timing]:
        """Forward a ``count_tokens`` call: the request's deadline, cooldowns and retries,
        but no gate slot or window (it generates nothing, and clients send it in bursts).
        Counted under its surface only; raises ``ProxyError``."""
        deadline = arrived + self.settings.request_timeout_s
        status = CLIENT_CLOSED
        started: float | None = None
        try:
            early = self._resilience.shed_error(deadline, request.model)
            if early is not None:
                raise early
            reply = None
            started = trio.current_time()
            with trio.move_on_at(deadline):
                reply = await call_with_resilience(
                    partial(self._upstream.count_tokens, request),
                    deadline=deadline,
                    ctx=self._resilience,
                    headers_of=_reply_headers_of,
                    model=request.model,
                )
            if reply is None:
                raise deadline_error(self.settings)
            status = 200
            return reply, self.timing(
                arrived, started, reply.started_at, reply.first_byte_at, reply.finished_at
            )
        except ProxyError as exc:
            status = exc.status
            exc.headers["Server-Timing"] = self.timing(arrived, started).server_timing_header()
            raise
        finally:
            if self.metrics is not None:
                self.metrics.record_call(request.surface, status, self.timing(arrived, started))


def _reply_headers_of(reply: UpstreamReply) -> Mapping[str, str]:
    return reply.headers


def _stream_headers_of(start: StreamStart[UpstreamStream]) -> Mapping[str, str]:
    return start.stream.headers


def _prelude_error(data: Mapping[str, Any], headers: Mapping[str, str]) -> ProxyError:
    """An ``error`` event before any content, as the error an HTTP status would have been."""
    error = data.get("error")
    kind = error.get("type") if isinstance(error, Mapping) else None
    body = {"type": "error", "error": error if isinstance(error, Mapping) else {}}
    return upstream_error(
        status_for_error_type(kind), json.dumps(body, ensure_ascii=False).encode(), headers
    )
