"""Tickets and the dispatcher: how an admitted upstream call runs, how its caller gets the outcome.

A *job* is a zero-argument async callable the HTTP layer builds for one upstream call. The
:class:`Dispatcher` turns a job into a :class:`Ticket`; the caller awaits ``ticket.wait()``
(or calls :meth:`Dispatcher.submit`, which does both) and calls ``ticket.cancel()`` when its
client leaves. Callers never run jobs themselves, with one exception: :meth:`Dispatcher.call`
runs a job in the caller's task when nothing would make it wait (no window, no limiter),
under a cancel scope the dispatcher tracks, with ``submit``'s guarantees.

One dispatcher serves every configuration by composition: ``Dispatcher()`` starts each job at
once (batching off); ``Dispatcher(limiter=...)`` holds a token of the limiter per running job;
``shared=`` adds a slot shared with other instances; ``windows=windows.WindowPolicy(...)``
groups arrivals into admission windows.

This module is the face. Behind it: ``_dispatcher`` (the ticket and the dispatcher, one room,
with the theory of operation: ownership, token order, invariants, cancellation) and
``_statistics``.
"""

from __future__ import annotations

from ._dispatcher import Dispatcher as Dispatcher
from ._dispatcher import Job as Job
from ._dispatcher import Resolution as Resolution
from ._dispatcher import Ticket as Ticket
from ._dispatcher import TicketState as TicketState
from ._dispatcher import cancelled_error as cancelled_error
from ._dispatcher import shutdown_error as shutdown_error
from ._dispatcher import window_timeout_error as window_timeout_error
from ._statistics import DispatchStatistics as DispatchStatistics

__all__ = [
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
