"""Tickets and dispatchers: how an admitted upstream call runs, how its caller gets the outcome.

A *job* is a zero-argument async callable the HTTP layer builds for one upstream call. A
dispatcher turns a job into a :class:`Ticket`; the caller awaits ``ticket.wait()`` (or calls
:meth:`Dispatcher.submit`, which does both) and calls ``ticket.cancel()`` when its client
leaves. Callers never run jobs themselves, with one exception: :meth:`call` runs a job in the
caller's task when nothing would make it wait (no window, no limiter), under a cancel scope
the dispatcher tracks, with ``submit``'s guarantees.

This module is the face: the ``Dispatcher`` protocol the HTTP layer talks to, and
``DirectDispatcher`` (batching off; ``windows.Batcher`` is the other implementation). The
parts behind it: ``_tickets`` (a ticket and its one outcome), ``_dispatcher_base`` (lifecycle,
gauges and token hand-out, with the theory of operation: ownership, token order, invariants,
cancellation) and ``_statistics``.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar, final

import trio

from ._dispatcher_base import _DispatcherBase as _DispatcherBase
from ._statistics import DispatchStatistics as DispatchStatistics
from ._tickets import Job as Job
from ._tickets import Resolution as Resolution
from ._tickets import Ticket as Ticket
from ._tickets import TicketState as TicketState
from ._tickets import cancelled_error as cancelled_error
from ._tickets import shutdown_error as shutdown_error
from ._tickets import window_timeout_error as window_timeout_error
from .shared_slots import SharedSlots

__all__ = [
    "DirectDispatcher",
    "DispatchStatistics",
    "Dispatcher",
    "Job",
    "Resolution",
    "Ticket",
    "TicketState",
    "cancelled_error",
    "shutdown_error",
    "window_timeout_error",
]

T = TypeVar("T")


class Dispatcher(Protocol):
    """What the HTTP layer talks to; :class:`DirectDispatcher` and ``Batcher`` implement it."""

    @property
    def limiter(self) -> trio.CapacityLimiter | None: ...

    def submit_nowait(self, job: Job[T], *, scope: str | None = None) -> Ticket[T]: ...

    async def submit(self, job: Job[T], *, scope: str | None = None) -> T: ...

    async def call(self, job: Job[T], *, scope: str | None = None) -> T: ...

    def statistics(self) -> DispatchStatistics: ...

    async def run(self, *, task_status: trio.TaskStatus[None] = ...) -> None: ...

    def close(self) -> None: ...

    def cancel_remaining(self) -> None: ...

    async def wait_drained(self) -> None: ...


@final
class DirectDispatcher(_DispatcherBase):
    """Batching off: every job is handed out at once, no window, no delay.

    Args:
      limiter: if given, each job holds one of its tokens while it runs (jobs start in
        submission order as tokens free up); by default none, and a job starts immediately.
    """

    def __init__(
        self, *, limiter: trio.CapacityLimiter | None = None, shared: SharedSlots | None = None
    ) -> None:
        super().__init__(limiter, shared)

    def _runs_inline(self) -> bool:
        return self._limiter is None

    def _admit(self, ticket: Ticket[Any], nursery: trio.Nursery) -> None:
        ticket._mark_flushed(ticket.enqueued_at)
        if self._limiter is None:
            ticket._job_started = True
            nursery.start_soon(self._run_job, ticket, None)
        else:
            self._enqueue(ticket, (ticket,))
            nursery.start_soon(self._run_group_of_one, ticket)

    async def _run_group_of_one(self, ticket: Ticket[Any]) -> None:
        try:
            async with trio.open_nursery() as nursery:
                await self._dispatch(ticket, (ticket,), None, nursery)
        finally:
            self._leave_turn(ticket)
            if not ticket._job_started:
                self._abandon(ticket, None)
