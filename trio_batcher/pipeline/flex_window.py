"""The flex window: requests that can wait, gathered into one Message Batch at half price.

Theory of operation
-------------------
A request with ``service_tier: "flex"`` says it may be slow. ``FlexWindow.join`` gives it
a ``FlexTicket`` (synchronously, with no upstream slot and no gate slot: a flex request is
deferrable by definition) and the request waits on it. The window flushes -- its tickets
become ONE Message Batch -- when it holds ``size`` requests, when its bodies reach
``max_bytes`` (Anthropic's 256 MB limit, with margin), or ``window_s`` after the first
request joined, whichever comes first; ``close`` (graceful shutdown) flushes it at once.

Tasks: ``run`` is one task in the app's lifetime nursery and owns a nursery of its own,
in which each flushed window gets one task (``_run_batch``): create the batch, poll it
with a doubling interval (``poll_min_s`` .. ``poll_max_s``) until it has ended, stream
its results and answer each ticket by its ``custom_id``. The number of batch tasks is
bounded by ``max_pending`` (each holds at least one waiting request), which ``join``
enforces: past it, ``FlexFull`` (the pipeline's 429).

Leaving: a request that stops waiting without an answer (its client left, its wait ran
out) calls ``leave``. A ticket not yet flushed is taken out of the window -- nothing is
sent for it. One already in a submitted batch cannot be taken out of it (Message Batches
cancels whole batches only): it is marked gone, and its result, when it comes, is
dropped and counted (``FlexTotals.dropped``). When every ticket of a batch is gone, the
batch task cancels the batch upstream and ends, so no one pays for work no one awaits.

Everything here runs on one trio thread; ``join`` and ``leave`` never await, so the
window's state is never seen half-changed. A ticket's answer is set exactly once (by its
batch task) or never (it left first), and ``pending`` counts the tickets that still have
a waiter: it returns to 0 however requests end.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final, Protocol, final

import trio

from ..errors import ProxyError
from ..observatory.flex import FlexTotals
from ..upstream.errors import status_for_error_type, upstream_error

__all__ = [
    "MAX_BATCH_BYTES",
    "BatchesAPI",
    "FlexClosed",
    "FlexFull",
    "FlexResult",
    "FlexTicket",
    "FlexWindow",
]

log = logging.getLogger("trio_batcher")

MAX_BATCH_BYTES: Final = 200 * 1024 * 1024
"""A window flushes before its bodies pass this: Anthropic takes 256 MB per batch."""


class BatchesAPI(Protocol):
    """What the window needs of ``upstream.batches.MessageBatchesClient``."""

    async def create(self, body: bytes) -> dict[str, Any]: ...

    async def retrieve(self, batch_id: str) -> dict[str, Any]: ...

    async def cancel(self, batch_id: str) -> dict[str, Any]: ...

    def results(self, batch_id: str) -> AsyncGenerator[bytes, None]: ...


@final
class FlexFull(Exception):
    """``max_pending`` flex requests are already waiting."""


@final
class FlexClosed(Exception):
    """The window is closed: the gateway is shutting down."""


@final
@dataclass(frozen=True, slots=True)
class FlexResult:
    """A ticket's answer.

    Attributes:
      outcome: ``succeeded`` (``message``), ``errored`` (``error``: the error the
        realtime call would have raised), ``expired``, ``canceled``, or ``unavailable``
        (``error``: why the batch could not be made, polled or read).
      message: the Messages reply, its ``usage.service_tier`` ``"batch"``.
      error: see ``outcome``.
    """

    outcome: str
    message: dict[str, Any] | None = None
    error: ProxyError | None = None


@final
class FlexTicket:
    """One waiting request's place in a window, then in a batch."""

    __slots__ = ("_done", "batch", "custom_id", "gone", "joined_at", "model", "params", "result")

    def __init__(self, custom_id: str, params: bytes, model: str) -> None:
        self.custom_id = custom_id
        self.params = params
        self.model = model
        self.joined_at = trio.current_time()
        self.result: FlexResult | None = None
        self.batch: _Batch | None = None
        self.gone = False
        self._done = trio.Event()

    async def wait(self) -> FlexResult:
        """The answer, once the batch has it (put a deadline around the call)."""
        await self._done.wait()
        assert self.result is not None
        return self.result


@final
class _Batch:
    """A flushed window: its tickets by ``custom_id`` and how many still have a waiter."""

    __slots__ = ("all_gone", "id", "live", "tickets")

    def __init__(self, tickets: list[FlexTicket]) -> None:
        self.tickets = {t.custom_id: t for t in tickets}
        self.live = len(tickets)
        self.all_gone = trio.Event()
        self.id: str | None = None


@final
class FlexWindow:
    """Collects flex requests and answers them through Message Batches (module doc).

    Args:
      client: the Message Batches API of the gateway's first anthropic upstream.
      size: flush at this many requests (``FLEX_WINDOW_SIZE``).
      window_s: flush this long after the first request joined (``FLEX_WINDOW_S``).
      max_pending: requests waiting at once, in the window and in batches
        (``FLEX_MAX_PENDING``); ``join`` raises ``FlexFull`` past it.
      totals: the flex counters (None: not counted).
      price_factor: the batch price, as a fraction of the realtime one (for the cost of
        dropped results).
    """

    def __init__(
        self,
        client: BatchesAPI,
        *,
        size: int,
        window_s: float,
        max_pending: int,
        totals: FlexTotals | None = None,
        price_factor: Decimal = Decimal("0.5"),
        max_bytes: int = MAX_BATCH_BYTES,
        poll_min_s: float = 0.25,
        poll_max_s: float = 30.0,
    ) -> None:
        self._client = client
        self._size = size
        self._window_s = window_s
        self._max_pending = max_pending
        self._totals = totals
        self._factor = price_factor
        self._max_bytes = max_bytes
        self._poll_min_s = poll_min_s
        self._poll_max_s = poll_max_s
        self._open: dict[str, FlexTicket] = {}  # bounded by max_pending
        self._open_bytes = 0
        self._first_at = 0.0
        self._first = trio.Event()  # a ticket joined an empty window
        self._full = trio.Event()  # the window must flush now
        self._seq = 0
        self._pending = 0
        self._idle = trio.Event()
        self._idle.set()
        self._closed = False
        self._batches: set[_Batch] = set()  # submitted and not ended: bounded by max_pending

    @property
    def pending(self) -> int:
        """Tickets with a waiter: in the window or in a submitted batch."""
        return self._pending

    def join(self, params: bytes, model: str) -> FlexTicket:
        """A ticket for the Messages request ``params`` (its JSON, without ``stream``).

        Raises:
          FlexFull: ``max_pending`` requests are already waiting.
          FlexClosed: the gateway is shutting down.
        """
        if self._closed:
            raise FlexClosed
        if self._pending >= self._max_pending:
            if self._totals is not None:
                self._totals.refused()
            raise FlexFull
        self._seq += 1
        ticket = FlexTicket(f"flex-{self._seq}", params, model)
        if not self._open:
            self._first_at = ticket.joined_at
            self._first.set()
        self._open[ticket.custom_id] = ticket
        self._open_bytes += len(params)
        self._pending += 1
        self._idle = trio.Event() if self._idle.is_set() else self._idle
        if len(self._open) >= self._size or self._open_bytes >= self._max_bytes:
            self._full.set()
        if self._totals is not None:
            self._totals.joined()
        return ticket

    def leave(self, ticket: FlexTicket) -> None:
        """``ticket``'s request stops waiting without its answer (client gone, wait over).

        Out of the window if not flushed yet (nothing is sent for it); else marked gone,
        and its batch cancelled upstream once every ticket of it is gone. Idempotent, and
        a no-op for a ticket already answered.
        """
        if ticket.result is not None or ticket.gone:
            return
        ticket.gone = True
        batch = ticket.batch
        if batch is None:
            del self._open[ticket.custom_id]
            self._open_bytes -= len(ticket.params)
            if self._totals is not None:
                self._totals.left()
        else:
            batch.live -= 1
            if batch.live == 0:
                batch.all_gone.set()
        ticket.params = b""
        self._settled()

    def close(self) -> None:
        """Stop taking requests and flush what the window holds (graceful shutdown); the
        batches already submitted go on answering their tickets."""
        if not self._closed:
            self._closed = True
            self._full.set()
            self._first.set()

    def fail_remaining(self) -> None:
        """The shutdown grace period is over: answer every request still waiting with
        ``shutdown`` (the pipeline's 503), and have each batch cancelled upstream, since
        no one will read its results."""
        for batch in list(self._batches):
            for ticket in list(batch.tickets.values()):
                if not ticket.gone and ticket.result is None:
                    self._answer(batch, ticket, FlexResult("shutdown"))
            batch.tickets.clear()
            batch.all_gone.set()

    async def wait_idle(self) -> None:
        """Return once no request is waiting for a flex answer."""
        await self._idle.wait()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Flush windows and run their batches, until cancelled (the app's lifetime)."""
        async with trio.open_nursery() as nursery:
            task_status.started()
            while True:
                await self._first.wait()
                with trio.move_on_at(self._first_at + self._window_s):
                    await self._full.wait()
                if self._closed:
                    reason = "drain"
                elif self._full.is_set():
                    reason = "size" if len(self._open) >= self._size else "bytes"
                else:
                    reason = "time"
                tickets = list(self._open.values())
                self._open, self._open_bytes = {}, 0
                self._first, self._full = trio.Event(), trio.Event()
                if tickets:
                    batch = _Batch(tickets)
                    for ticket in tickets:
                        ticket.batch = batch
                    if self._totals is not None:
                        self._totals.flushed(len(tickets), reason)
                    nursery.start_soon(self._run_batch, batch)
                if self._closed:
                    await trio.sleep_forever()

    # -- one batch ------------------------------------------------------------------------

    async def _run_batch(self, batch: _Batch) -> None:
        self._batches.add(batch)
        try:
            await self._step_batch(batch)
        finally:
            self._batches.discard(batch)

    async def _step_batch(self, batch: _Batch) -> None:
        body = _batch_body(batch.tickets.values())
        for ticket in batch.tickets.values():
            ticket.params = b""  # the body holds them now, until the batch is created
        try:
            created = await self._client.create(body)
        except ProxyError as exc:
            log.warning("could not create a flex Message Batch: %s", exc.message)
            self._fail(batch, exc)
            return
        del body
        batch.id = batch_id = str(created["id"])
        delay = self._poll_min_s
        while True:
            with trio.move_on_after(delay):
                await batch.all_gone.wait()
            if batch.all_gone.is_set():
                await self._cancel(batch_id)
                return
            try:
                state = await self._client.retrieve(batch_id)
            except ProxyError as exc:
                if exc.status < 500 and exc.status != 429:
                    self._fail(batch, exc)
                    return
                state = {}  # a passing failure: ask again later
            if state.get("processing_status") == "ended":
                break
            delay = min(delay * 2, self._poll_max_s)
        try:
            async with aclosing(self._client.results(batch_id)) as lines:
                async for line in lines:
                    self._deliver(batch, line)
        except ProxyError as exc:
            self._fail(batch, exc)
            return
        missing = ProxyError(
            502,
            "The Message Batch ended without a result for this request.",
            code="upstream_protocol_error",
        )
        self._fail(batch, missing)

    async def _cancel(self, batch_id: str) -> None:
        """Every waiter of the batch left: cancel it, so what is not processed yet is
        not billed. A failure is logged; the batch then runs to its end unread."""
        try:
            await self._client.cancel(batch_id)
        except ProxyError as exc:
            log.warning("could not cancel flex Message Batch %s: %s", batch_id, exc.message)
            return
        if self._totals is not None:
            self._totals.canceled()

    def _deliver(self, batch: _Batch, line: bytes) -> None:
        """Answer the ticket one results line is for (its ``custom_id``)."""
        try:
            entry = json.loads(line)
        except ValueError:
            return
        if not isinstance(entry, dict):
            return
        ticket = batch.tickets.pop(str(entry.get("custom_id")), None)
        if ticket is None:
            return
        result = parse_result(entry.get("result"))
        if ticket.gone:
            if self._totals is not None:
                usage = result.message.get("usage") if result.message is not None else None
                self._totals.dropped(
                    ticket.model, usage if isinstance(usage, Mapping) else None, self._factor
                )
            return
        self._answer(batch, ticket, result)

    def _fail(self, batch: _Batch, exc: ProxyError) -> None:
        """Answer every ticket of ``batch`` still waiting: its batch is unavailable."""
        for ticket in list(batch.tickets.values()):
            if not ticket.gone:
                self._answer(batch, ticket, FlexResult("unavailable", error=exc))
        batch.tickets.clear()

    def _answer(self, batch: _Batch, ticket: FlexTicket, result: FlexResult) -> None:
        ticket.result = result
        ticket._done.set()
        batch.live -= 1
        self._settled()

    def _settled(self) -> None:
        """A ticket stopped having a waiter."""
        self._pending -= 1
        if self._pending == 0:
            self._idle.set()


def _batch_body(tickets: Any) -> bytes:
    """``{"requests": [{"custom_id", "params"}, ...]}``, each ``params`` the request's
    own bytes (never decoded and encoded again)."""
    parts = [b'{"custom_id":"%s","params":%s}' % (t.custom_id.encode(), t.params) for t in tickets]
    return b'{"requests":[' + b",".join(parts) + b"]}"


def parse_result(result: object) -> FlexResult:
    """A results line's ``result`` as a ``FlexResult``.

    ``errored`` carries the upstream's error response (``{"type": "error", "error":
    {"type", "message"}}``; a bare error object is taken too), which becomes the very
    ``ProxyError`` the realtime call would have raised. A ``succeeded`` message is marked
    ``usage.service_tier: "batch"`` if the upstream left it out: that is how the codecs
    know it was served by a batch.
    """
    if not isinstance(result, Mapping):
        result = {}
    kind = result.get("type")
    if kind == "succeeded" and isinstance(result.get("message"), Mapping):
        message = dict(result["message"])
        usage = message.get("usage")
        usage = dict(usage) if isinstance(usage, Mapping) else {}
        usage["service_tier"] = "batch"
        message["usage"] = usage
        return FlexResult("succeeded", message=message)
    if kind == "errored":
        error = result.get("error")
        envelope: Mapping[str, Any] = error if isinstance(error, Mapping) else {}
        inner = envelope.get("error")
        if not isinstance(inner, Mapping):
            inner, envelope = envelope, {"type": "error", "error": envelope}
        exc = upstream_error(status_for_error_type(inner.get("type")), envelope, {})
        return FlexResult("errored", error=exc)
    if kind in ("expired", "canceled"):
        return FlexResult(str(kind))
    return FlexResult(
        "unavailable",
        error=ProxyError(
            502,
            f"The upstream's batch results hold a result of unknown type {kind!r}.",
            code="upstream_protocol_error",
        ),
    )
