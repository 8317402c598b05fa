"""One request's way through the gateway, from an upstream request to a reply.

Theory of operation
-------------------
The pipeline speaks the upstream's own currency: a door at the edge has already decoded the
client's body into an ``UpstreamRequest`` (or refused it with a 400, before anything here
runs, so bad input never costs an upstream call) and gives a ``ReplyCodec`` that encodes
answers in the client's dialect. Gate, windows, dispatcher, resilience, cancellation and
metrics therefore serve every dialect alike. A request passes four stations, each of
which can end it with a ``ProxyError``:

0. **tenant**: the sender's tenant may use this model, is within its budget and its rate
   limits (``tenancy.TenantGuard``: 403 or 429, charged nothing); its grant carries the
   fair share the gate schedules by, and is settled with the usage wherever that is known.
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
3. **relay**: a non-stream reply is encoded and sent (after the request's ``on_reply``
   hook, if it has one, was told the reply's id and upstream; a stream's is told at its
   ``message_start``, while the prelude is read). A stream job (``stream_job.py``) pumps upstream SSE
   events into a small bounded channel (so a slow client slows the upstream read instead of
   growing a buffer); the handler reads until the first content event before answering, so
   an upstream failure before any content is still a proper HTTP error status, then hands
   the channel to the response body generator (``relay.StreamRelay``), which encodes event
   by event with no buffering.

A non-streaming request the door marked ``service_tier="flex"`` leaves after station 0:
it takes no gate slot and no upstream slot, and waits for its Message Batch instead
(``flex.FlexPath``, ``flex_window``); if that wait runs out and ``FLEX_ON_TIMEOUT`` is
``realtime``, it comes back to station 1 as a realtime request with a deadline of its own.

One deadline, ``REQUEST_TIMEOUT_S`` from arrival, covers admission, queueing and every
upstream byte; passing it answers 504 (or, mid-stream, an error event).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import replace
from functools import partial
from typing import Final, final

import trio

from ..admission.dispatch import Dispatcher, Ticket
from ..admission.gate import AdmissionGate, Shed, Slot
from ..errors import ProxyError
from ..logs import decision_notes
from ..observatory.metrics import MetricsRegistry, Timing
from ..settings import Settings
from ..tenants import Tenant
from ..tracing import NOOP_TRACE, RequestTrace
from ..upstream.caller import MessagesCaller
from ..upstream.client import UpstreamReply
from ..upstream.request import UpstreamRequest
from ..upstream.resilience import StreamEvent
from ..upstreams.facts import FactsOf, facts_of
from ..upstreams.fleet import Fleet, Served
from .contract import CLIENT_CLOSED, JSONReply, ReplyCodec, StreamReply
from .flex import FLEX, FlexPath
from .outcomes import Outcomes, request_timing
from .relay import StreamRelay, deadline_error
from .stream_job import pump_stream
from .tenancy import TenantGrant, TenantGuard

__all__ = ["Pipeline"]

# Upstream events buffered between the pump and the client. Small on purpose: the upstream
# read waits for the client rather than the proxy holding a growing backlog.
_STREAM_BUFFER: Final = 16


@final
class Pipeline:
    """Runs upstream requests for every door of an app; one per app."""

    def __init__(
        self,
        *,
        settings: Settings,
        fleet: Fleet,
        dispatcher: Dispatcher,
        gate: AdmissionGate,
        metrics: MetricsRegistry | None,
        guard: TenantGuard | None = None,
        flex: FlexPath | None = None,
    ) -> None:
        self.settings = settings
        self._flex = flex
        self.metrics = metrics
        self._outcomes = Outcomes(metrics, gate.lanes)
        self._guard = guard
        self._fleet = fleet
        self._dispatcher = dispatcher
        self._gate = gate

    @property
    def flex_ready(self) -> bool:
        """Whether a ``service_tier: "flex"`` request can be batched here (an anthropic
        upstream, ``FLEX_MAX_PENDING`` > 0); a door names the tier as ignored if not."""
        return self._flex is not None

    def route_facts(
        self, tenant: Tenant | None, headers: Iterable[tuple[bytes, bytes]]
    ) -> FactsOf | None:
        """What a door works out of a request's whole body for the router
        (``upstreams.facts``): its conversation key, for cache affinity, and a feature
        only Anthropic's own API carries; ``None`` when neither could change the route
        (one upstream, no cloud), so nothing is computed."""
        conversation = self._fleet.routes and self.settings.upstream_affinity
        capabilities = self._fleet.has_clouds
        if not conversation and not capabilities:
            return None
        name = tenant.name if tenant is not None else None
        return facts_of(name, headers, conversation=conversation, capabilities=capabilities)

    def check_budget(self, tenant: Tenant | None) -> None:
        """Refuse (429 ``insufficient_quota``) a tenant over its budget, charging nothing:
        for work accepted now and run later (a background response), whose rate limits
        are charged when it runs."""
        if tenant is not None and self._guard is not None:
            self._guard.check_budget(tenant)

    async def handle(
        self,
        request: UpstreamRequest,
        codec: ReplyCodec,
        arrived: float,
        tenant: Tenant | None = None,
        trace: RequestTrace = NOOP_TRACE,
    ) -> JSONReply | StreamReply:
        """Answer one request for ``tenant`` (None: no tenant checks or fair share);
        raises ``ProxyError`` (already ``codec.error``-ed) for anything but success.
        ``trace``: the request's trace (``tracing``), which its waits and upstream
        attempts are recorded under."""
        deadline = arrived + self.settings.request_timeout_s
        if trace.recording:
            request = replace(request, trace=trace)
        grant: TenantGrant | None = None
        notes = decision_notes()  # None unless DEBUG: the request's line (logs.decisions)
        if notes is not None:
            request = replace(request, notes=notes)
        if tenant is not None:
            request = replace(request, tenant=tenant.name)
            if self._guard is not None:
                try:
                    grant = await self._guard.admit(tenant, request)
                except ProxyError as exc:  # counted by the guard, under the tenant
                    timing = Timing(total=trio.current_time() - arrived)
                    exc.headers["Server-Timing"] = timing.server_timing_header()
                    raise codec.error(exc) from None
        if self._flex is not None and request.service_tier == FLEX and not request.stream:
            # Deferrable: no gate slot, no upstream slot while it waits for its batch.
            try:
                flexed = await self._flex.serve(request, codec, arrived, grant)
            except ProxyError as exc:
                raise codec.error(exc) from None
            if flexed is not None:
                return flexed
            # FLEX_ON_TIMEOUT=realtime: a realtime call now, with a deadline of its own, in
            # the deferrable lane (the client said it can wait: interactive work goes first).
            request = replace(request, service_tier=None, deferrable=True)
            deadline = trio.current_time() + self.settings.request_timeout_s
        early = self._fleet.shed_error(deadline, request.model, request.pinned)
        if early is not None:  # the upstream asked us to wait longer than this request may
            if grant is not None:
                grant.refund()
            if self.metrics is not None:
                self.metrics.record_rejected(
                    early.code or "upstream_cooldown", tenant=request.tenant
                )
            timing = Timing(total=trio.current_time() - arrived)
            early.headers["Server-Timing"] = timing.server_timing_header()
            raise codec.error(early)
        try:
            slot = await self._admit(request, arrived, deadline, grant)
        except BaseException:
            if grant is not None:
                grant.refund()
            raise
        try:
            if request.stream:
                return await self._start_stream(request, codec, slot, arrived, deadline, grant)
            try:
                return await self._complete(request, codec, arrived, deadline, grant)
            finally:
                slot.release()
        except ProxyError as exc:
            raise codec.error(exc) from None

    async def _admit(
        self,
        request: UpstreamRequest,
        arrived: float,
        deadline: float,
        grant: TenantGrant | None,
    ) -> Slot:
        lane = self._gate.lanes.lane(request.deferrable)
        waiting = request.trace.waiting("gate wait", lane=lane)
        try:
            slot = await self._gate.acquire(
                deadline,
                tenant=grant.share if grant is not None else None,
                deferrable=request.deferrable,
            )
        except trio.Cancelled:
            # The client left while queued: not shed, but it was a request, so count it.
            waited = trio.current_time() - arrived
            self._outcomes.error(
                request,
                CLIENT_CLOSED,
                Timing(total=waited, queue=waited),
            )
            raise
        except Shed as shed:
            if self.metrics is not None:
                self.metrics.record_rejected(shed.reason, tenant=request.tenant)
                self.metrics.record_lane_shed(lane, shed.reason)
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
        finally:
            waiting.done()
        if self.metrics is not None:
            self.metrics.record_lane_admitted(lane)
        if request.notes is not None:
            request.notes.gate_wait = trio.current_time() - arrived
        return slot

    # -- non-streaming ------------------------------------------------------------------------

    async def _complete(
        self,
        request: UpstreamRequest,
        codec: ReplyCodec,
        arrived: float,
        deadline: float,
        grant: TenantGrant | None,
    ) -> JSONReply:
        dispatched: float | None = None
        waiting = request.trace.waiting("dispatch wait")

        async def job() -> Served[UpstreamReply]:
            nonlocal dispatched
            dispatched = trio.current_time()
            waiting.done()
            return await self._fleet.call(
                request, _create_message, deadline=deadline, headers_of=_reply_headers_of
            )

        served: Served[UpstreamReply] | None = None
        status = CLIENT_CLOSED
        failure: ProxyError | None = None
        try:
            with trio.move_on_at(deadline):
                served = await self._dispatcher.call(
                    job, scope=request.model, deferrable=request.deferrable
                )
            if served is None:
                raise deadline_error(self.settings)
            status = 200
        except ProxyError as exc:
            status, failure = exc.status, exc
            raise
        except Exception:
            status = 500
            raise
        finally:
            waiting.done()
            if status != 200:
                if grant is not None:  # no usage: the request counts, its tokens do not
                    grant.refund() if dispatched is None else grant.settle(request.model, None)
                timing = request_timing(arrived, dispatched)
                if failure is not None:  # an error answer shows where its time went too
                    failure.headers["Server-Timing"] = timing.server_timing_header()
                upstream = failure.upstream if failure is not None else None
                self._outcomes.error(request, status, timing, upstream=upstream)
        reply = served.value
        message_id = reply.message.get("id")
        if request.on_reply is not None and isinstance(message_id, str):
            await request.on_reply(message_id, served.upstream)
        if grant is not None:
            grant.settle(request.model, reply.message.get("usage"), upstream=served.upstream)
        body = codec.reply(reply.message, reply.raw)
        timing = request_timing(
            arrived, dispatched, reply.started_at, reply.first_byte_at, reply.finished_at
        )
        self._outcomes.success(
            request, reply.message.get("usage") or {}, timing, upstream=served.upstream
        )
        headers = codec.headers(reply.headers)
        headers["Server-Timing"] = timing.server_timing_header()
        return JSONReply(body, headers)

    # -- streaming ----------------------------------------------------------------------------

    async def _start_stream(
        self,
        request: UpstreamRequest,
        codec: ReplyCodec,
        slot: Slot,
        arrived: float,
        deadline: float,
        grant: TenantGrant | None,
    ) -> StreamReply:
        send, recv = trio.open_memory_channel[StreamEvent](_STREAM_BUFFER)
        waiting = request.trace.waiting("dispatch wait")
        try:
            ticket: Ticket[None] = self._dispatcher.submit_nowait(
                partial(
                    pump_stream,
                    self._fleet,
                    self.settings,
                    request,
                    deadline,
                    send,
                    waiting,
                ),
                scope=request.model,
                deferrable=request.deferrable,
            )
        except BaseException:
            # Refused (the dispatcher is shutting down): the slot is still ours to give back.
            waiting.done()
            slot.release()
            if grant is not None:
                grant.refund()
            raise
        relay = StreamRelay(
            self._outcomes,
            self.settings,
            request,
            codec.stream(),
            ticket,
            recv,
            slot,
            arrived,
            grant,
        )
        handed_off = False
        try:
            with trio.move_on_at(deadline):
                headers = await relay.read_prelude(codec)
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

    def record_refused(
        self,
        status: int,
        arrived: float,
        *,
        stream: bool = False,
        surface: str | None = None,
        generation: bool = True,
        tenant: Tenant | None = None,
    ) -> Timing:
        """Count a request answered with an error before any upstream work (bad input, a
        missing key): a request all the same, under the model ``(none)`` and, once its key
        was known, under its ``tenant`` (whose own view of the metrics shows it); a call
        that would generate nothing (``generation=False``: ``count_tokens``) under its
        surface only, as it is counted when it succeeds."""
        timing = Timing(total=trio.current_time() - arrived)
        if self.metrics is not None:
            if generation:
                self.metrics.record_error(
                    None,
                    status,
                    timing,
                    stream=stream,
                    surface=surface,
                    tenant=tenant.name if tenant is not None else None,
                )
            elif surface is not None:
                self.metrics.record_call(surface, status, timing)
        return timing

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
        upstream: str | None = None
        notes = decision_notes()  # None unless DEBUG: the request's line (logs.decisions)
        if notes is not None:
            request = replace(request, notes=notes)
        try:
            early = self._fleet.shed_error(deadline, request.model, request.pinned)
            if early is not None:
                raise early
            served = None
            started = trio.current_time()
            with trio.move_on_at(deadline):
                served = await self._fleet.call(
                    request, _count_tokens, deadline=deadline, headers_of=_reply_headers_of
                )
            if served is None:
                raise deadline_error(self.settings)
            reply, upstream = served.value, served.upstream
            status = 200
            return reply, request_timing(
                arrived, started, reply.started_at, reply.first_byte_at, reply.finished_at
            )
        except ProxyError as exc:
            status, upstream = exc.status, exc.upstream
            exc.headers["Server-Timing"] = request_timing(arrived, started).server_timing_header()
            raise
        finally:
            timing = request_timing(arrived, started)
            if self.metrics is not None:
                self.metrics.record_call(request.surface, status, timing)
            if notes is not None:
                self._outcomes.logged(request, status, timing, upstream)


def _reply_headers_of(reply: UpstreamReply) -> Mapping[str, str]:
    return reply.headers


async def _create_message(caller: MessagesCaller, request: UpstreamRequest) -> UpstreamReply:
    return await caller.create_message(request)


async def _count_tokens(caller: MessagesCaller, request: UpstreamRequest) -> UpstreamReply:
    return await caller.count_tokens(request)
