"""The API routes served straight from ASGI, in front of Quart: one door per client dialect.

Why: these are the routes whose cost is multiplied by the traffic. Quart's request
machinery -- the request and app contexts, werkzeug routing, ``Request`` and ``Response``
objects, the before/after hooks, a response sent as three ASGI messages -- is
general-purpose work the proxy does not need here. Every other route (models, metrics,
visuals, and the 404/405 answers) stays in Quart.

What every door gets from here, exactly as a Quart view would have it:

- the same checks in the same order: framing (``http.framing_error``), ``PROXY_API_KEYS``,
  the body (``MAX_BODY_BYTES`` against ``Content-Length`` first, then while reading; read
  by ``REQUEST_TIMEOUT_S`` or 408), then JSON (``body.parse_json_body``). Each failure is
  answered in the door's own dialect (``Door.error_reply``), anything unexpected a logged
  500;
- the same cancellation: like quart-trio, the handler runs beside a task waiting for
  ``http.disconnect``, and a disconnect cancels the handler -- the pipeline then records a
  499, closes the upstream call, and (mid-stream) closes the relay;
- streams: ``text/event-stream`` with ``Cache-Control: no-cache`` and ``X-Accel-Buffering:
  no``, one ASGI message per relay write, no response timeout (``REQUEST_TIMEOUT_S`` bounds
  it instead).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from typing import Final, Protocol, final

import trio

from ..errors import ProxyError, forget_traceback
from ..logs import RefusalLog, route_family
from ..pipeline.contract import CLIENT_CLOSED, JSONReply, StreamReply
from ..pipeline.core import Pipeline
from ..tenants import Tenant, TenantDirectory
from ..tracing import NOOP_TRACE, NOOP_TRACING, RequestTrace, Tracing, serving
from .auth import client_key, proxy_key_error
from .body import LARGE_BODY_BYTES, PacedReceive, parse_json_body, read_body
from .http import (
    ASGIApp,
    Incoming,
    Message,
    Receive,
    Scope,
    Send,
    asks_to_close,
    cancel_on_disconnect,
    closing_send,
    dialect_error,
    framing_error,
    has_body,
    normalize_path,
    send_json,
    send_stream,
    without_a_body,
)

log = logging.getLogger("trio_batcher")

_KEY_HEADERS: Final = frozenset({b"authorization", b"api-key", b"x-api-key"})


def _compaction_not_served(headers: dict[str, str]) -> ProxyError:
    return ProxyError(
        404,
        "POST /v1/responses/compact (conversation compaction) is not served by this gateway. "
        "It serves POST /v1/responses, GET and DELETE /v1/responses/{id} and GET "
        "/v1/responses/{id}/input_items. Compact the conversation on the client's side.",
        code="unknown_route",
        headers=headers,
    )


# POST routes of the APIs served that this gateway does not serve, each answered with a
# 404 that names what is served (where Quart's routing would take "compact" for a response
# id and answer 405).
UNSERVED: Final[Mapping[str, Callable[[dict[str, str]], ProxyError]]] = {
    "/v1/responses/compact": _compaction_not_served,
}


class Door(Protocol):
    """One client dialect's POST route: how its requests are decoded and its errors spelled."""

    @property
    def surface(self) -> str:
        """The observatory's name for the route (``"openai.chat"``...)."""
        ...

    @property
    def generates(self) -> bool:
        """Whether the route's calls generate (and are counted in ``requests``)."""
        ...

    @property
    def relays_body(self) -> bool:
        """Whether the door sends the client's own bytes upstream (``Incoming.raw``); the
        others get only the parsed body, and the bytes are freed as soon as it is parsed."""
        ...

    async def handle(self, pipeline: Pipeline, incoming: Incoming) -> JSONReply | StreamReply:
        """Answer a request whose body is read and parsed; raises ``ProxyError`` for
        anything but success."""
        ...

    def error_reply(self, exc: ProxyError) -> JSONReply:
        """A gateway error in this dialect's shape."""
        ...


@final
class ApiEndpoint:
    """ASGI middleware: takes the doors' ``POST`` routes, passes everything else on.

    Paths are normalized first (``normalize_path``), for these routes and all the others.

    Args:
      inner: the Quart app's ASGI callable (lifespan and every other route).
      pipeline: returns the running app's ``Pipeline``, or None before startup.
      doors: the door for each canonical path.
      max_body_bytes: ``MAX_BODY_BYTES``.
      tenants: returns the tenant directory in force (``PROXY_API_KEYS`` and the tenants
        file): who a presented key is, and whether a key is needed at all.
      body_timeout: seconds from arrival by which the whole body must be in
        (``REQUEST_TIMEOUT_S``); a client still sending then gets 408 and the connection is
        closed, so a slow drip cannot hold a connection and a buffer for ever.
      body_window: ``BODY_READ_TIMEOUT_S``: each such span of waiting for a body must
        bring ``body.MIN_BYTES_PER_WINDOW`` or its end (``body.PacedReceive``), on every
        route, Quart's included; a client that trickles gets 408 and the connection is
        closed long before ``REQUEST_TIMEOUT_S``.
      refusals: where the 4xx answered here are logged (``logs.refusals``), shared with
        the Quart routes' error handlers.
      tracing: returns the running app's tracer (``tracing``): each door request is a
        SERVER span, whose trace the door hands the pipeline; the no-op one while traces
        are off or the app is not started.
    """

    def __init__(
        self,
        inner: ASGIApp,
        pipeline: Callable[[], Pipeline | None],
        doors: Mapping[str, Door],
        *,
        max_body_bytes: int,
        tenants: Callable[[], TenantDirectory],
        body_timeout: float = math.inf,
        body_window: float = math.inf,
        quart_bodies: frozenset[str] = frozenset(),
        refusals: RefusalLog | None = None,
        tracing: Callable[[], Tracing] = lambda: NOOP_TRACING,
    ) -> None:
        self._inner = inner
        self._refusals = refusals or RefusalLog()
        self._tracing = tracing
        self._body_window = body_window
        # POST routes served by Quart that read their own body (the batch file upload
        # streams it to disk); every other Quart route gets its body drained here.
        self._quart_bodies = quart_bodies
        self._pipeline = pipeline
        self._doors = dict(doors)
        self._max_body_bytes = max_body_bytes
        self._tenants = tenants
        self._body_timeout = body_timeout
        # Large bodies are parsed in a worker thread, one at a time: the event loop keeps
        # serving everyone else, and a flood of them queues instead of using every core.
        self._large_bodies = trio.CapacityLimiter(1)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._inner(scope, receive, send)
            return
        if asks_to_close(scope):
            send = closing_send(send)
        door = self._doors.get(scope["path"])
        if door is None:
            path = normalize_path(scope["path"])
            if path != scope["path"]:
                scope = {**scope, "path": path, "raw_path": path.encode()}
            door = self._doors.get(path)
        framing = framing_error(scope["headers"])
        if framing is not None:
            await _send_error(send, framing, door, scope, self._refusals)
            return
        if has_body(scope):
            receive = PacedReceive(receive, self._body_window)
        if door is None and scope["method"] == "POST" and scope["path"] in self._quart_bodies:
            if isinstance(receive, PacedReceive):
                quart = _QuartBody(scope, receive, send)
                await self._inner(scope, quart.receive, quart.send)
            else:
                await self._inner(scope, receive, send)
            return
        if door is None and scope["method"] == "POST" and scope["path"] in UNSERVED:
            # Before the body, which may be a whole conversation: left unread, the
            # connection closes with the answer.
            close = {"Connection": "close"} if has_body(scope) else {}
            await _send_error(send, UNSERVED[scope["path"]](close), None, scope, self._refusals)
            return
        if door is None or scope["method"] != "POST":
            await without_a_body(self._inner, scope, receive, send)
            return
        pipeline = self._pipeline()
        tracing = self._tracing()
        if pipeline is None or not tracing.enabled:
            await self._serve(door, pipeline, NOOP_TRACE, scope, receive, send)
            return
        # The SERVER span lasts until the answer is sent: a stream's last byte included.
        trace = tracing.request(scope, door.surface)
        try:
            with serving(trace):  # its log lines carry its trace's ids
                await self._serve(door, pipeline, trace, scope, receive, trace.watch(send))
        finally:
            trace.end()

    async def _serve(
        self,
        door: Door,
        pipeline: Pipeline | None,
        trace: RequestTrace,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        """A door's request, from its key and body to its answer."""
        arrived = trio.current_time()
        tenant: Tenant | None = None  # known once the key is: its refusals count under it
        try:
            if pipeline is None:
                raise ProxyError(503, "The proxy is starting up.", code="starting")
            tenant = self._authenticate(scope)
            trace.tenant(tenant.name)
            raw = None
            with trio.move_on_at(arrived + self._body_timeout) as reading:
                raw = await read_body(scope, receive, self._max_body_bytes)
            if reading.cancelled_caught:
                raise ProxyError(
                    408,
                    "The request body did not arrive in time (REQUEST_TIMEOUT_S).",
                    code="request_timeout",
                    headers={"Connection": "close"},
                )
            if raw is None:  # the client left while sending its body: nothing to answer
                pipeline.record_refused(
                    CLIENT_CLOSED,
                    arrived,
                    surface=door.surface,
                    generation=door.generates,
                    tenant=tenant,
                )
                return
            if len(raw) < LARGE_BODY_BYTES:
                payload = parse_json_body(raw)
            else:  # seconds of CPU for a pathological body: off the event loop
                payload = await trio.to_thread.run_sync(
                    parse_json_body, raw, limiter=self._large_bodies
                )
        except Exception as exc:
            if pipeline is not None:
                status = exc.status if isinstance(exc, ProxyError) else 500
                timing = pipeline.record_refused(
                    status, arrived, surface=door.surface, generation=door.generates, tenant=tenant
                )
                if isinstance(exc, ProxyError):
                    exc.headers["Server-Timing"] = timing.server_timing_header()
            await _send_error(send, exc, door, scope, self._refusals, tenant)
            return
        # Handed over in a list that _answer empties, the body held by nothing else: a
        # stream can stay open for minutes, and its body (for an agent, often the whole
        # conversation, hundreds of kilobytes) need not stay with it.
        large = len(raw) >= LARGE_BODY_BYTES
        if not door.relays_body:
            raw = b""
        handover = [Incoming(payload, raw, scope, arrived, large, tenant, trace)]
        del payload, raw
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_on_disconnect, receive, nursery.cancel_scope)
            await _answer(door, pipeline, handover, send, self._refusals)
            nursery.cancel_scope.cancel()

    def _authenticate(self, scope: Scope) -> Tenant:
        """The sender's tenant (``anonymous`` when no key is needed); 401 otherwise."""
        directory = self._tenants()
        if not directory.auth_required:
            return directory.lookup(None)  # type: ignore[return-value]
        found: dict[bytes, str] = {}
        for name, value in scope["headers"]:
            if name in _KEY_HEADERS:
                found.setdefault(name, value.decode("latin-1"))
        key = client_key(
            found.get(b"authorization"), found.get(b"api-key"), found.get(b"x-api-key")
        )
        tenant = directory.lookup(key)
        if tenant is None:
            raise proxy_key_error()
        return tenant


@final
class _QuartBody:
    """A paced body for a Quart route, which reads it in a task of its own and would take
    an exception from ``receive`` for a crash: a body too slow is answered 408 here (in
    the client's dialect, the connection closed) and Quart is told the client left, which
    cancels its handler; anything Quart sends after that goes nowhere."""

    def __init__(self, scope: Scope, receive: PacedReceive, send: Send) -> None:
        self._scope = scope
        self._receive = receive
        self._send = send
        self._started = self._answered = False

    async def receive(self) -> Message:
        try:
            return await self._receive()
        except ProxyError as exc:
            if not self._started:
                self._answered = True
                status, body, headers = dialect_error(self._scope, exc)
                await send_json(self._send, body, status, headers)
            return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if self._answered:
            return
        if message["type"] == "http.response.start":
            self._started = True
        await self._send(message)


async def _answer(
    door: Door, pipeline: Pipeline, handover: list[Incoming], send: Send, refusals: RefusalLog
) -> None:
    """Run the door on the request ``handover`` holds (taken out of it) and send its
    answer; raises only ``trio.Cancelled``. Once a stream has started, nothing here holds
    the request any more."""
    incoming = handover.pop()
    try:
        reply = await door.handle(pipeline, incoming)
    except Exception as exc:
        try:
            await _send_error(send, exc, door, incoming.scope, refusals, incoming.tenant)
        finally:
            forget_traceback(exc)
        return
    if isinstance(reply, JSONReply):
        await send_json(send, reply.body, reply.status, reply.headers)
        return
    where = f"POST {incoming.scope['path']}"
    del incoming
    await send_stream(send, reply, where)


async def _send_error(
    send: Send,
    exc: Exception,
    door: Door | None,
    scope: Scope,
    refusals: RefusalLog,
    tenant: Tenant | None = None,
) -> None:
    """A ``ProxyError`` in the door's dialect (OpenAI's off any door), a 4xx of the
    gateway's own logged (``logs.refusals``); else a logged 500."""
    if not isinstance(exc, ProxyError):
        # ascii(): the path is the client's, and must not write lines of its own into the log
        log.error("unhandled error on POST %s", ascii(scope["path"]), exc_info=exc)
        exc = ProxyError(500, "Internal proxy error.", type="server_error")
    path = scope["path"]
    refusals.answered(
        exc,
        # A door's path or an unserved one is a fixed route; any other may hold ids.
        method=scope["method"],
        route=path if door is not None or path in UNSERVED else route_family(path),
        door=door.surface if door is not None else None,
        tenant=tenant.name if tenant is not None else None,
    )
    if door is None:
        await send_json(send, exc.body(), exc.status, exc.headers)
        return
    reply = door.error_reply(exc)
    await send_json(send, reply.body, reply.status, reply.headers)
