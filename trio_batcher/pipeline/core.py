"""One chat completion, from a parsed body to a reply: the proxy's request pipeline.

Theory of operation
-------------------
A request passes four stations, each of which can end it with a ``ProxyError``:

1. **translate** (pure): the OpenAI body becomes an Anthropic body, or a 400 names the bad
   field. Nothing below runs for a bad request, so bad input never costs an upstream call.
2. **admit**: the admission gate hands out a ``Slot`` or sheds the request (429, or 503 while
   shutting down). The slot is held until the reply is completely sent -- for a stream,
   until its last byte -- and released exactly once, in a ``finally``.
3. **dispatch**: the upstream call is a *job* given to the dispatcher (direct, or an
   admission window). A job that has to wait (a window, a limiter token) and every stream
   runs in a nursery the app lifespan owns, and the handler holds a ``Ticket``; a direct
   non-streaming job runs in the handler's task under a scope the dispatcher tracks
   (``Dispatcher.call``). If the client disconnects, the chat endpoint cancels the handler
   (or the stream relay), whose ``finally`` cancels the ticket: a queued job is never
   dispatched, a running one has its own cancel scope cancelled and its upstream
   connection closed at once.
4. **relay**: a non-stream reply is translated and sent. A stream job pumps upstream SSE
   events into a small bounded channel (so a slow client slows the upstream read instead of
   growing a buffer); the handler reads until the first content event before answering, so
   an upstream failure before any content is still a proper HTTP error status, then hands
   the channel to the response body generator, which translates event by event with no
   buffering.

One deadline, ``REQUEST_TIMEOUT_S`` from arrival, covers admission, queueing and every
upstream byte; passing it answers 504 (or, mid-stream, an error event).
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final, final

import trio

from ..admission.dispatch import Dispatcher, Ticket
from ..admission.gate import AdmissionGate, Shed, Slot
from ..errors import ProxyError
from ..observatory.metrics import MetricsRegistry, Timing
from ..settings import Settings
from ..translation.openai_chat import (
    StreamTranslator,
    TranslatedRequest,
    TranslationOptions,
    UpstreamStreamError,
    client_status,
    new_completion_id,
    ratelimit_headers,
    status_for_error_type,
    translate_request,
    translate_response,
    upstream_error,
)
from ..upstream.client import UpstreamClient, UpstreamReply, UpstreamStream
from ..upstream.resilience import Resilience, StreamStart, call_with_resilience, open_until_content
from ..upstream.sse import DONE, encode_data

# Upstream events buffered between the pump and the client. Small on purpose: the upstream
# read waits for the client rather than the proxy holding a growing backlog.
_STREAM_BUFFER: Final = 16
# First item the stream pump sends: the upstream's response headers and timing.
_HEADERS_EVENT: Final = "trio-batcher.upstream-headers"
# How long the stream job reads on after message_stop for the upstream to end its body.
_LINGER_AFTER_STOP_S: Final = 1.0
# Status recorded for a request whose client went away (nginx's convention).
CLIENT_CLOSED: Final = 499

StreamItem = tuple[str, Mapping[str, Any]]
# Read before answering a stream: up to the first delta, an upstream failure can still be a
# proper HTTP status (and is retried), because the client has seen nothing yet.
_PRELUDE_EVENTS: Final = frozenset({_HEADERS_EVENT, "message_start", "ping", "content_block_start"})


@final
@dataclass
class JSONReply:
    body: dict[str, Any]
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


def _reply_headers(tr: TranslatedRequest, upstream_headers: Mapping[str, str]) -> dict[str, str]:
    headers = ratelimit_headers(upstream_headers)
    request_id = upstream_headers.get("request-id")
    if request_id:
        headers["x-request-id"] = request_id
    if tr.ignored_params:
        headers["x-trio-batcher-ignored-params"] = ",".join(tr.ignored_params)
    return headers


@final
class ChatPipeline:
    """Runs chat completions against one upstream; shared by every request of an app."""

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
        self._settings = settings
        self._resilience = resilience or Resilience()
        self._large_bodies = trio.CapacityLimiter(1)
        self._upstream = upstream
        self._dispatcher = dispatcher
        self._gate = gate
        self._metrics = metrics
        self._options = TranslationOptions(
            default_model=settings.default_model,
            default_max_tokens=settings.default_max_tokens,
            anthropic_version=settings.anthropic_version,
        )

    async def handle(
        self, payload: object, arrived: float, *, large: bool = False
    ) -> JSONReply | StreamReply:
        """Answer one request body; raises ``ProxyError`` for anything but success.

        ``large``: translate in a worker thread (one at a time), so that a body with a
        million parts does not stall every other request on the event loop.
        """
        try:
            if large:
                tr = await trio.to_thread.run_sync(
                    translate_request, payload, self._options, limiter=self._large_bodies
                )
            else:
                tr = translate_request(payload, self._options)
        except ProxyError as exc:
            # Under ``(none)``: the model named by a request we refuse is unchecked input,
            # and must not use up the registry's per-model entries.
            stream = isinstance(payload, dict) and payload.get("stream") is True
            timing = self.record_refused(exc.status, arrived, stream=stream)
            exc.headers["Server-Timing"] = timing.server_timing_header()
            raise
        deadline = arrived + self._settings.request_timeout_s
        early = self._resilience.shed_error(deadline, tr.upstream_model)
        if early is not None:  # the upstream asked us to wait longer than this request may
            if self._metrics is not None:
                self._metrics.record_rejected(early.code or "upstream_cooldown")
            timing = Timing(total=trio.current_time() - arrived)
            early.headers["Server-Timing"] = timing.server_timing_header()
            raise early
        slot = await self._admit(tr, arrived, deadline)
        try:
            if tr.stream:
                return await self._start_stream(tr, slot, arrived, deadline)
            try:
                return await self._complete(tr, arrived, deadline)
            finally:
                slot.release()
        except ProxyError as exc:
            _name_the_cap(exc, tr)
            raise

    async def _admit(self, tr: TranslatedRequest, arrived: float, deadline: float) -> Slot:
        try:
            return await self._gate.acquire(deadline)
        except trio.Cancelled:
            # The client left while queued: not shed, but it was a request, so count it.
            waited = trio.current_time() - arrived
            self._record_error(
                tr.upstream_model,
                CLIENT_CLOSED,
                Timing(total=waited, queue=waited),
                stream=tr.stream,
            )
            raise
        except Shed as shed:
            if self._metrics is not None:
                self._metrics.record_rejected(shed.reason)
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

    async def _complete(self, tr: TranslatedRequest, arrived: float, deadline: float) -> JSONReply:
        dispatched: float | None = None

        async def job() -> UpstreamReply:
            nonlocal dispatched
            dispatched = trio.current_time()
            return await call_with_resilience(
                partial(self._upstream.create_message, tr.body),
                deadline=deadline,
                ctx=self._resilience,
                headers_of=_reply_headers_of,
                model=tr.upstream_model,
            )

        reply: UpstreamReply | None = None
        status = CLIENT_CLOSED
        failure: ProxyError | None = None
        try:
            with trio.move_on_at(deadline):
                reply = await self._dispatcher.call(job)
            if reply is None:
                raise _deadline_error(self._settings)
            status = 200
        except ProxyError as exc:
            status, failure = exc.status, exc
            raise
        except Exception:
            status = 500
            raise
        finally:
            if status != 200:
                timing = self._timing(arrived, dispatched)
                if failure is not None:  # an error answer shows where its time went too
                    failure.headers["Server-Timing"] = timing.server_timing_header()
                self._record_error(tr.upstream_model, status, timing, stream=False)
        body = translate_response(
            reply.message,
            model=tr.model,
            completion_id=new_completion_id(),
            created=int(time.time()),
        )
        timing = self._timing(
            arrived, dispatched, reply.started_at, reply.first_byte_at, reply.finished_at
        )
        if self._metrics is not None:
            self._metrics.record_success(
                tr.upstream_model, reply.message.get("usage") or {}, timing
            )
        headers = _reply_headers(tr, reply.headers)
        headers["Server-Timing"] = timing.server_timing_header()
        return JSONReply(body, headers)

    # -- streaming ----------------------------------------------------------------------------

    async def _pump(
        self, body: Mapping[str, Any], deadline: float, send: trio.MemorySendChannel[StreamItem]
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
                        partial(self._upstream.open_stream, body),
                        error_for=_prelude_error,
                    ),
                    deadline=deadline,
                    ctx=self._resilience,
                    headers_of=_stream_headers_of,
                    model=str(body["model"]),
                )
                try:
                    upstream = {
                        "headers": start.stream.headers,
                        "started_at": start.stream.started_at,
                        "first_byte_at": start.stream.first_byte_at,
                    }
                    await send.send((_HEADERS_EVENT, upstream))
                    for item in start.prelude:
                        await send.send(item)
                    async for item in start.rest:
                        await send.send(item)
                        if _is_message_stop(item):
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
                raise _deadline_error(self._settings)

    async def _start_stream(
        self, tr: TranslatedRequest, slot: Slot, arrived: float, deadline: float
    ) -> StreamReply:
        send, recv = trio.open_memory_channel[StreamItem](_STREAM_BUFFER)
        try:
            ticket: Ticket[None] = self._dispatcher.submit_nowait(
                partial(self._pump, tr.body, deadline, send)
            )
        except BaseException:
            # Refused (the dispatcher is shutting down): the slot is still ours to give back.
            slot.release()
            raise
        relay = _StreamRelay(self, tr, ticket, recv, slot, arrived)
        handed_off = False
        try:
            with trio.move_on_at(deadline):
                headers = await relay.read_prelude()
                handed_off = True
                return StreamReply(relay.body(), headers, relay.close, deadline, relay.expire)
            raise _deadline_error(self._settings)
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

    def _timing(
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

    def record_refused(self, status: int, arrived: float, *, stream: bool = False) -> Timing:
        """Count a request answered with an error before any upstream work (bad input, a
        missing key): a request all the same, under the model ``(none)``."""
        timing = Timing(total=trio.current_time() - arrived)
        if self._metrics is not None:
            self._metrics.record_error(None, status, timing, stream=stream)
        return timing

    def _record_error(self, model: str, status: int, timing: Timing, *, stream: bool) -> None:
        if self._metrics is not None:
            self._metrics.record_error(model, status, timing, stream=stream)


def _name_the_cap(exc: ProxyError, tr: TranslatedRequest) -> None:
    """Anthropic's "max_tokens: 200000 > 64000, which is the maximum..." names its own
    field; say it in the client's terms, naming the field the client set (or the setting
    the gateway filled in)."""
    if exc.upstream_status != 400 or exc.param is not None:
        return
    if not exc.message.startswith("max_tokens:"):
        return
    if tr.cap_param is not None:
        exc.param = tr.cap_param
        exc.message = tr.cap_param + exc.message.removeprefix("max_tokens")
    else:
        exc.param = "max_completion_tokens"
        exc.message += (
            " The request set no max_completion_tokens, so the gateway sent its "
            "DEFAULT_MAX_TOKENS (plus the thinking budget, if reasoning_effort asked for one); "
            "set max_completion_tokens within the model's limit."
        )


def _is_message_stop(item: StreamItem) -> bool:
    name, data = item
    return name == "message_stop" or (
        name in ("", "message") and data.get("type") == "message_stop"
    )


def _deadline_error(settings: Settings) -> ProxyError:
    return ProxyError(
        504,
        f"The request did not complete within REQUEST_TIMEOUT_S "
        f"({settings.request_timeout_s:g} s).",
        code="request_timeout",
    )


def _reply_headers_of(reply: UpstreamReply) -> Mapping[str, str]:
    return reply.headers


def _stream_headers_of(start: StreamStart[UpstreamStream]) -> Mapping[str, str]:
    return start.stream.headers


def _prelude_error(data: Mapping[str, Any], headers: Mapping[str, str]) -> ProxyError:
    """An ``error`` event before any content, as the error an HTTP status would have been."""
    error = data.get("error")
    kind = error.get("type") if isinstance(error, Mapping) else None
    return upstream_error(
        status_for_error_type(kind), {"type": "error", "error": error or {}}, headers
    )


def _stream_error_status(error: Mapping[str, Any]) -> int:
    """What a stream that failed after its 200 is counted as: the status the same upstream
    error would have been given before the first byte (an overload is a 503, not a 529)."""
    kind = error.get("error", {}).get("code") or error.get("error", {}).get("type") or ""
    return client_status(status_for_error_type(kind))


class _Expired(Exception):
    """The relay was closed from outside (``expire``) while its body was suspended."""


@final
class _StreamRelay:
    """Owns one stream's resources from the first event to the last byte sent.

    Ownership moves from the request handler to the response body generator once the
    prelude is read; whichever holds it last calls ``close()``, exactly once.
    """

    def __init__(
        self,
        pipeline: ChatPipeline,
        tr: TranslatedRequest,
        ticket: Ticket[None],
        recv: trio.MemoryReceiveChannel[StreamItem],
        slot: Slot,
        arrived: float,
    ) -> None:
        self._pipeline = pipeline
        self._tr = tr
        self._ticket = ticket
        self._recv = recv
        self._slot = slot
        self._arrived = arrived
        self._translator = StreamTranslator(
            model=tr.model,
            completion_id=new_completion_id(),
            created=int(time.time()),
            include_usage=tr.include_usage,
        )
        self._prelude: list[bytes] = []
        self._upstream_started: float | None = None
        self._upstream_first_byte: float | None = None
        self._first_token_at: float | None = None
        self._deltas = 0
        self._stopped = False  # message_stop relayed: the answer is whole
        self._closed = False
        self.status = CLIENT_CLOSED

    async def _next(self) -> StreamItem | None:
        """The next upstream event, or None at the end of the stream (job outcome checked)."""
        try:
            return await self._recv.receive()
        except trio.ClosedResourceError:
            raise _Expired from None
        except trio.EndOfChannel:
            if not self._stopped:  # else the job is only reading the body's end: no waiting
                await self._ticket.wait()  # re-raises the job's ProxyError, if it failed
            return None

    def _feed(self, name: str, data: Mapping[str, Any]) -> list[bytes]:
        if _is_message_stop((name, data)):
            self._stopped = True
        if name == _HEADERS_EVENT:
            self._upstream_headers: Mapping[str, str] = data["headers"]
            self._upstream_started = data["started_at"]
            self._upstream_first_byte = data["first_byte_at"]
            return []
        chunks = self._translator.feed(name, data)
        if name == "content_block_delta":
            self._deltas += 1
            if chunks and self._first_token_at is None:
                self._first_token_at = trio.current_time()
        return [encode_data(chunk) for chunk in chunks]

    async def read_prelude(self) -> dict[str, str]:
        """Collect what the pump forwarded up to the first delta, or raise its failure.

        The pump forwards nothing until ``open_until_content`` has read the upstream past its
        first delta, and an error before that point is the job's (retried, or raised as a
        ``ProxyError``), so a failure here still becomes a real HTTP status.
        """
        self._upstream_headers = {}
        while (item := await self._next()) is not None:
            name, data = item
            self._prelude += self._feed(name, data)
            if name not in _PRELUDE_EVENTS:
                break
        headers = _reply_headers(self._tr, self._upstream_headers)
        headers["Server-Timing"] = self.timing().server_timing_header()
        return headers

    def timing(self) -> Timing:
        return self._pipeline._timing(
            self._arrived,
            self._ticket.started_at,
            self._upstream_started,
            self._upstream_first_byte,
            None,
            self._first_token_at,
        )

    async def body(self) -> AsyncIterator[bytes]:
        try:
            if self._prelude:
                yield b"".join(self._prelude)
                self._prelude = []
            while (item := await self._next()) is not None:
                out = self._feed(*item)
                # Events already buffered go out in the same write: when the upstream is
                # ahead of the client this is one send per scheduling turn, not one per
                # token; when it is not, nothing is buffered and nothing waits.
                while True:
                    try:
                        more = self._recv.receive_nowait()
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                    try:
                        out += self._feed(*more)
                    except UpstreamStreamError:
                        if out:
                            yield b"".join(out)
                        raise
                if out:
                    yield b"".join(out)
            if not self._translator.finished:
                # Neither a stop reason nor message_stop: the upstream closed the stream
                # early. Ending it cleanly would pass a truncated answer off as complete.
                raise ProxyError(
                    502,
                    "The upstream stream ended before the message was complete.",
                    code="upstream_stream_truncated",
                )
            for chunk in self._translator.finish():
                yield encode_data(chunk)
            self.status = 200  # everything is out but the last line: the answer is whole
            yield DONE
        except _Expired:
            # expire() freed the stream while a write was stuck; once that write got
            # through, the client still learns why the stream ends here.
            yield encode_data(_deadline_error(self._pipeline._settings).body())
        except UpstreamStreamError as exc:
            self.status = _stream_error_status(exc.error)
            yield encode_data(exc.error)
        except ProxyError as exc:
            self.status = exc.status
            yield encode_data(exc.body())
        finally:
            self.close()

    def expire(self) -> None:
        """The deadline passed while a write to the client was stuck: free the stream's
        resources now, counted a 504 unless only ``[DONE]`` was left to write."""
        if not self._closed:
            if self.status != 200:
                self.status = 504
            self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self._stopped:
            # Stop the upstream call. A whole answer's job is left to finish reading the
            # body's end (a second at most), which lets its connection be reused.
            self._ticket.cancel()
        self._recv.close()
        self._slot.release()
        metrics = self._pipeline._metrics
        if metrics is None:
            return
        timing = self.timing()
        if self.status == 200:
            usage = self._translator.upstream_usage
            metrics.record_success(self._tr.upstream_model, usage, timing, stream=True)
        else:
            # What the upstream reported before the end is spent all the same. Anthropic
            # reports output tokens only at the end, so the deltas relayed (each at least a
            # token) stand in for them when that is more.
            usage = self._translator.upstream_usage
            if usage:
                usage["output_tokens"] = max(int(usage.get("output_tokens") or 0), self._deltas)
            metrics.record_error(
                self._tr.upstream_model, self.status, timing, stream=True, usage=usage
            )
