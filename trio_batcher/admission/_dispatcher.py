"""The dispatcher and its tickets: one room, because they share their bookkeeping.

A ``Ticket`` is the caller's handle on one admitted job; the ``Dispatcher`` runs the job and
resolves the ticket. They move the same counts (a ticket's phase is a dispatcher gauge) and
each acts on the other's state (``cancel()`` takes a ticket out of its window; a hand-out
records which shared slot a ticket holds), so they live in one module, as trio keeps
``Event``, ``CapacityLimiter``, ``Semaphore`` and ``Lock`` in one ``_sync.py``. ``dispatch``
is the face that re-exports them.

Theory of operation
-------------------
Ownership. ``run()`` is one long-lived task, started in the app's lifetime nursery. It opens
the dispatcher's nursery; every other task lives inside it. A *group* (a flushed window, or
one ticket of a dispatcher with a limiter and no windows) is one task that hands out tokens
of the shared ``CapacityLimiter``, borrowed on behalf of each ticket, and starts one *job
task* per ticket as its token arrives, in the group's own nursery. The job task runs the job
under the ticket's own cancel scope and returns the token in ``finally``: a token is held
for exactly as long as the job runs -- a streaming job holds it until its stream ends.
Without a limiter (and so without windows) each job task starts at once.

Token order. Tickets get tokens in the order their groups were enqueued (synchronously, at
flush) and, within a group, in arrival order. Groups queue in ``_turns``; only the head
acquires, first with ``acquire_on_behalf_of_nowait`` (so a group whose tokens are free starts
all its jobs without a scheduling round-trip), then parked in the limiter. Letting one task
per ticket race for the limiter would not do: trio runs tasks woken together in an arbitrary
order (it reverses half its batches on purpose).

Lanes (``lanes``). A ticket submitted ``deferrable`` (lanes on) is in the deferrable lane,
every other in the interactive lane, and ``_turns`` is one queue per lane: a group's tickets
of each lane take their turn in that lane's queue (a window with both is two parts, each
handed out by its own task in the window's nursery). When both lanes have a group waiting,
the turn goes to the interactive head except for the deferrable lane's share of tokens
(``lanes.LaneChooser``, counted token by token). The head may change while a group waits in
the limiter -- an interactive group arrives while a deferrable one waits -- and the waiting
group then steps back out of the limiter (a cancel scope of its own, ``_parked``), keeping
its place at the head of its lane, so the next token goes to the new head: deferrable work
never holds a token's turn against interactive work beyond its share. With shared slots
(Redis) the same holds for the wait for a shared slot: the lanes order this process's local
queue in front of the shared slots, not the cluster's. With every ticket interactive there
is one queue, as before.

Windows (with a ``WindowPolicy``; the rules are in ``windows``). At most one window is open.
Each window is one task, started when the window opens: it waits for the flush (size and
drain flushes are decided synchronously and wake it; a time flush is its ``move_on_at``),
then becomes the window's group, inside a cancel scope whose deadline is
``flushed_at + window_timeout``. A window whose tickets all left before its flush is
abandoned: its task exits and the next arrival opens a fresh window.

A job is called once, and let go of as it is called: the ticket drops it, so whatever the
job's arguments hold (a request body, for a stream possibly for minutes) lives only as long
as the job's own frame keeps it.

Invariants.
1. Every ticket is resolved exactly once; the first resolution wins and later ones are ignored.
   The possible outcomes: the job's value, the job's exception, 499 ``cancelled`` (its caller
   called ``cancel()``), 504 ``window_timeout`` (its window's deadline passed first), 503
   ``shutdown`` (``cancel_remaining()``, or ``run()`` cancelled from outside).
2. A job is called at most once, and never once its ticket is resolved or its task cancelled.
   A token handed to a group in the same tick as its ticket's ``cancel()`` is given back.
3. Gauges count work, not outcomes: ``queued`` (in an open window), then ``waiting_token``
   (flushed), then ``running`` from the job's call until it has *unwound*. A ticket resolved
   while not running leaves the gauges at once; a running one in its job task's ``finally``.
   Tasks that end early resolve the tickets they were responsible for in ``finally``, so a
   cancelled task leaves no count, token or unresolved ticket behind.
4. A flushed window never changes membership (a flushed ticket that is cancelled is resolved
   and its scope cancelled; it is not removed). ``windows_open_size`` is the open window's
   membership, 0 when none. ``flushed_by_*`` count flushes, not abandoned windows.

Cancellation.
- ``ticket.cancel()`` resolves the ticket at once (499) and cancels only that ticket's scope:
  a ticket still waiting (in an open window, or for a token) is never dispatched -- a queued
  one leaves its window; a running job sees ``trio.Cancelled`` at its next checkpoint, so its
  upstream connection closes at once. Its neighbours are untouched.
- A window's deadline cancels the window's scope: every ticket of that window not yet done --
  waiting for a token or running -- fails with 504 ``window_timeout`` (a running job's as soon
  as the job has unwound), while tickets that already finished keep their results.
- ``close()`` stops admitting and flushes the open window (``drain``); what was admitted
  keeps going and ``run()`` returns when it has drained. ``cancel_remaining()`` resolves
  every unresolved ticket with 503 at once, then cancels the dispatcher's nursery so every
  job unwinds.
- ``run()`` cancelled from outside: every task unwinds and resolves its unresolved tickets
  with 503 in ``finally`` (a window's, also before its flush).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Generic, Literal, TypeAlias, TypeVar, final

import trio

from ..errors import ProxyError
from ._statistics import DispatchStatistics
from .lanes import DEFAULT_LANES, LaneChooser, LanePolicy
from .shared_slots import SharedSlots
from .windows import FlushReason, WindowPolicy

__all__ = [
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

Job: TypeAlias = Callable[[], Awaitable[T]]
TicketState: TypeAlias = Literal["queued", "waiting_token", "running", "done"]
Resolution: TypeAlias = Literal["succeeded", "failed", "cancelled", "timed_out", "shut_down"]
# Work phases drive the gauges; "finished" means no task holds the ticket any more.
_Phase: TypeAlias = Literal["queued", "waiting_token", "running", "finished"]


def shutdown_error() -> ProxyError:
    return ProxyError(503, "The gateway is shutting down; retry the request.", code="shutdown")


def window_timeout_error() -> ProxyError:
    return ProxyError(
        504,
        "The admission window timed out before this request completed.",
        code="window_timeout",
    )


def cancelled_error() -> ProxyError:
    # 499 is nginx's "client closed request": nobody normally reads it, because the caller
    # that cancelled has gone; it exists so that a ticket always has exactly one outcome.
    return ProxyError(
        499,
        "The request was cancelled by its caller.",
        type="client_closed_request",
        code="cancelled",
    )


@final
class Ticket(Generic[T]):
    """The caller's handle on one submitted job; made by :meth:`Dispatcher.submit_nowait`.

    Timing attributes (``trio.current_time()``) serve metrics: queue wait is
    ``started_at - enqueued_at``; ``flushed_at`` is when its window flushed (equal to
    ``enqueued_at`` without windows); ``None`` means "did not happen (yet)".
    """

    def __init__(self, job: Job[T], owner: Dispatcher, scope: str | None, lane: int = 0) -> None:
        # Dropped as the job is called: see the module's theory of operation.
        self._job: Job[T] | None = job
        self._owner = owner
        self._lane = lane  # 0 interactive, 1 deferrable (``lanes``)
        self._scope_name = scope  # the model called, for shared cooldowns
        self._phase: _Phase = "queued"
        # Entered by the job's task around the job. Created unentered so that cancel() works
        # before the task starts: entering a cancelled scope cancels at once.
        self._scope = trio.CancelScope()
        # Entered by the group's task while it waits for this ticket's token.
        self._wait_scope = trio.CancelScope()
        # Handed to a job task, which resolves it in its ``finally`` whatever happens.
        self._handed_out = False
        # The shared (cross-instance) slot this ticket's job holds, if any.
        self._shared_holder: str | None = None
        self._resolved = trio.Event()
        self._value: T
        self._error: Exception | None = None
        self._resolution: Resolution | None = None
        self._enqueued_at = trio.current_time()
        self._flushed_at: float | None = None
        self._started_at: float | None = None
        self._finished_at: float | None = None

    async def wait(self) -> T:
        """Wait for the outcome.

        Returns:
          The job's result.

        Raises:
          Exception: the job's own exception, re-raised.
          ProxyError: 504 ``window_timeout``, 503 ``shutdown``, or 499 ``cancelled``.
        """
        await self._resolved.wait()
        if self._error is not None:
            raise self._error
        return self._value

    def cancel(self) -> None:
        """The caller has left: make sure the job does not run, or stops running.

        Synchronous, idempotent, callable from any task. A queued ticket leaves its window and
        is never dispatched; a ticket waiting for a token is never dispatched; a running job's
        own cancel scope is cancelled (nothing else is). No-op once the ticket is done.
        """
        if self.done:
            return
        self._owner._withdraw(self)
        self._resolve_error(cancelled_error(), "cancelled")
        self._wait_scope.cancel()
        self._scope.cancel()

    @property
    def done(self) -> bool:
        return self._resolved.is_set()

    @property
    def state(self) -> TicketState:
        if self.done or self._phase == "finished":
            return "done"
        return self._phase

    @property
    def resolution(self) -> Resolution | None:
        """How the ticket was resolved, for metrics; ``None`` while it is not done."""
        return self._resolution

    @property
    def enqueued_at(self) -> float:
        return self._enqueued_at

    @property
    def flushed_at(self) -> float | None:
        return self._flushed_at

    @property
    def started_at(self) -> float | None:
        return self._started_at

    @property
    def finished_at(self) -> float | None:
        """When the ticket was resolved (not when its job finished unwinding)."""
        return self._finished_at

    def __repr__(self) -> str:
        return f"<Ticket state={self.state} resolution={self._resolution}>"

    # For the dispatcher below.

    def _set_phase(self, phase: _Phase) -> None:
        old = self._phase
        if old != phase and old != "finished":
            self._phase = phase
            counts = self._owner._phase_counts
            counts[old] -= 1
            counts[phase] += 1

    def _resolve_value(self, value: T) -> None:
        if not self.done:
            self._value = value
            self._finish("succeeded")

    def _resolve_error(self, error: Exception, resolution: Resolution) -> None:
        if not self.done:
            self._error = error
            self._finish(resolution)

    def _finish(self, resolution: Resolution) -> None:
        self._resolution = resolution
        self._finished_at = trio.current_time()
        self._resolved.set()
        self._job = None  # never called now
        self._owner._on_resolved(self, resolution)
        if self._phase != "running":
            # Nothing will run it now, so it stops counting as queued/waiting at once; a
            # running job counts until it has unwound.
            self._set_phase("finished")

    def _call(self) -> Awaitable[T]:
        """Call the job, letting go of it: only the returned awaitable holds its arguments."""
        job, self._job = self._job, None
        assert job is not None
        return job()


_Part: TypeAlias = tuple[object, int, list["Ticket[Any]"]]
"""A group's tickets of one lane, with the key its turn is queued under and the lane."""


@final
class _Window:
    def __init__(self, opened_at: float) -> None:
        self.opened_at = opened_at
        # Insertion-ordered so dispatch follows arrival; at most max_size entries.
        self.tickets: dict[Ticket[Any], None] = {}
        self.flushed_at: float | None = None
        self.wake = trio.Event()  # set on a size/drain flush or on abandonment
        self.parts: list[_Part] = []  # its turns, one per lane it has tickets in, once flushed


@final
class Dispatcher:
    """Runs admitted jobs on behalf of request handlers; see the module's theory of operation.

    Args:
      limiter: if given, each job holds one of its tokens while it runs (jobs start in
        submission order as tokens free up); reassign its ``total_tokens`` to retune at run
        time (the adaptive controller does). By default none: a job starts immediately.
      shared: slots shared with other instances (Redis), taken after the local token and in
        the same order; only with a limiter (the cap is the limiter's).
      windows: group arrivals into admission windows (``BATCH_ENABLED=1``); needs a limiter.
        By default none: every job is handed out at once, no window, no delay.
      on_flush: called as ``on_flush(size, reason)`` once per flushed window, synchronously
        at flush time, after the flush is complete (metrics). Must not raise.
      lanes: the priority lanes' policy: with it enabled, a job submitted ``deferrable``
        waits for its token behind interactive ones, but for its lane's share.

    Raises:
      ValueError: ``windows`` without a ``limiter``.
    """

    def __init__(
        self,
        *,
        limiter: trio.CapacityLimiter | None = None,
        shared: SharedSlots | None = None,
        windows: WindowPolicy | None = None,
        on_flush: Callable[[int, FlushReason], None] | None = None,
        lanes: LanePolicy = DEFAULT_LANES,
    ) -> None:
        if windows is not None and limiter is None:
            raise ValueError("admission windows need a limiter (their max_concurrency)")
        self._limiter = limiter
        self._shared = shared if limiter is not None else None
        self._windows = windows
        self._on_flush = on_flush
        self._open: _Window | None = None
        self._nursery: trio.Nursery | None = None
        self._started = False
        self._closed = False
        self._close_requested = trio.Event()
        self._drained = trio.Event()
        # Insertion-ordered set of tickets not yet resolved, so cancel_remaining() can resolve
        # them at once. Bounded by what the admission gate lets in.
        self._unresolved: dict[Ticket[Any], None] = {}
        # Groups (windows) waiting to hand out tokens, in the order they were enqueued; only
        # the head acquires. Bounded by the number of unresolved tickets.
        # One queue of turns per lane (0 interactive, 1 deferrable); the chooser says which
        # lane's head holds the turn when both have one.
        self._lanes = lanes
        self._turns: tuple[deque[object], deque[object]] = (deque(), deque())
        self._chooser = LaneChooser(lanes.deferrable_share)
        # The head waiting in the limiter (or for a shared slot), and the scope that takes it
        # back out if another group becomes the head meanwhile.
        self._parked: tuple[object, trio.CancelScope] | None = None
        self._turn_lot = trio.lowlevel.ParkingLot()
        self._phase_counts: dict[_Phase, int] = {
            "queued": 0,
            "waiting_token": 0,
            "running": 0,
            "finished": 0,
        }
        self._resolutions: dict[Resolution, int] = {
            "succeeded": 0,
            "failed": 0,
            "cancelled": 0,
            "timed_out": 0,
            "shut_down": 0,
        }
        self._flushed_by: dict[FlushReason, int] = {"size": 0, "time": 0, "drain": 0}
        # Jobs running inline in their callers' tasks (see call()), so cancel_remaining()
        # can reach them. Bounded by what the admission gate lets in.
        self._inline: dict[trio.CancelScope, None] = {}
        self._submitted = 0
        self._dispatched = 0

    @property
    def limiter(self) -> trio.CapacityLimiter | None:
        """The limiter jobs hold a token of; reassign its ``total_tokens`` to retune at run time."""
        return self._limiter

    def submit_nowait(
        self, job: Job[T], *, scope: str | None = None, deferrable: bool = False
    ) -> Ticket[T]:
        """Admit a job; it will run in the dispatcher's nursery, never in the caller's task.

        ``scope`` (the model called) picks the shared cooldowns its shared slot reads.
        ``deferrable``: the job can wait; with lanes on it waits for a token in the
        deferrable lane.

        Raises:
          ProxyError: 503 ``shutdown`` once ``close()`` has been called or ``run()`` has ended.
          RuntimeError: if ``run()`` has not started yet.
        """
        if self._closed:
            raise shutdown_error()
        nursery = self._nursery
        if nursery is None:
            raise RuntimeError("submit before the dispatcher's run() has started")
        ticket = Ticket(job, self, scope, 1 if deferrable and self._lanes.enabled else 0)
        self._submitted += 1
        self._phase_counts["queued"] += 1
        self._unresolved[ticket] = None
        if self._windows is not None:
            self._join_window(ticket, self._windows, nursery)
            return ticket
        ticket._flushed_at = ticket.enqueued_at
        if self._limiter is None:
            ticket._handed_out = True
            nursery.start_soon(self._run_job, ticket, None)
        else:
            self._enqueue(ticket, (ticket,))
            nursery.start_soon(self._run_group_of_one, ticket)
        return ticket

    async def submit(self, job: Job[T], *, scope: str | None = None, deferrable: bool = False) -> T:
        """``submit_nowait`` + ``wait``; if the caller is cancelled, the ticket is cancelled too."""
        ticket = self.submit_nowait(job, scope=scope, deferrable=deferrable)
        try:
            return await ticket.wait()
        finally:
            ticket.cancel()  # no-op once done; abandons the job if we were cancelled

    async def call(self, job: Job[T], *, scope: str | None = None, deferrable: bool = False) -> T:
        """The result of ``job``, run in the caller's own task when nothing needs to wait.

        With no window and no limiter (the direct path), a job has nothing to wait for, so
        it runs here: no task to start, no scheduler turn before the upstream call. The
        guarantees are ``submit``'s: 503 once closed, the caller's cancellation cancels it,
        ``cancel_remaining()`` cancels it with 503 ``shutdown``, and it counts as
        ``running`` meanwhile. Otherwise this is ``submit``.
        """
        if self._limiter is not None:
            return await self.submit(job, scope=scope, deferrable=deferrable)
        if self._closed:
            raise shutdown_error()
        inline = trio.CancelScope()
        self._inline[inline] = None
        self._submitted += 1
        self._dispatched += 1
        self._phase_counts["running"] += 1
        try:
            with inline:
                value = await job()
        except Exception:
            self._resolutions["failed"] += 1
            raise
        finally:
            del self._inline[inline]
            self._phase_counts["running"] -= 1
        if inline.cancelled_caught:  # cancel_remaining(), not the caller: answer 503
            self._resolutions["shut_down"] += 1
            raise shutdown_error()
        self._resolutions["succeeded"] += 1
        return value

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own every job's task; return after ``close()`` once everything admitted has drained."""
        if self._started:
            raise RuntimeError("a dispatcher's run() can only be called once")
        self._started = True
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await self._close_requested.wait()
        finally:
            self._closed = True
            self._nursery = None
            self._drained.set()

    def close(self) -> None:
        """Stop admitting (``submit_nowait`` raises 503) and flush the open window; admitted
        work keeps going. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._open is not None:
            self._flush(self._open, "drain")
        self._close_requested.set()
        if not self._started:
            self._drained.set()

    def cancel_remaining(self) -> None:
        """After the grace period: resolve every unresolved ticket with 503 and cancel all jobs.

        Implies ``close()``. On return every ticket is done; ``run()`` returns once the cancelled
        jobs have unwound.
        """
        self.close()
        for ticket in list(self._unresolved):
            ticket._resolve_error(shutdown_error(), "shut_down")
        for scope in self._inline:
            scope.cancel()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    async def wait_drained(self) -> None:
        """Return once ``run()`` has returned (or ``close()`` was called before it started)."""
        await self._drained.wait()

    def statistics(self) -> DispatchStatistics:
        borrowed = 0
        total: int | None = None
        if self._limiter is not None:
            stats = self._limiter.statistics()
            borrowed = stats.borrowed_tokens
            if stats.total_tokens != math.inf:
                total = int(stats.total_tokens)
        flushed = self._flushed_by
        return DispatchStatistics(
            queued=self._phase_counts["queued"],
            waiting_token=self._phase_counts["waiting_token"],
            running=self._phase_counts["running"],
            unresolved=len(self._unresolved),
            windows_open_size=0 if self._open is None else len(self._open.tickets),
            windows_flushed=sum(flushed.values()),
            flushed_by_size=flushed["size"],
            flushed_by_time=flushed["time"],
            flushed_by_drain=flushed["drain"],
            items_submitted=self._submitted,
            items_dispatched=self._dispatched,
            succeeded=self._resolutions["succeeded"],
            failed=self._resolutions["failed"],
            cancelled=self._resolutions["cancelled"],
            timed_out=self._resolutions["timed_out"],
            shut_down=self._resolutions["shut_down"],
            limiter_borrowed=borrowed,
            limiter_total=total,
            closed=self._closed,
        )

    # -- for Ticket ---------------------------------------------------------------------------

    def _withdraw(self, ticket: Ticket[Any]) -> None:
        """Take a cancelled ticket out of the open window, if it is in it."""
        window = self._open
        if window is None or ticket not in window.tickets:
            return
        del window.tickets[ticket]
        if not window.tickets:
            self._open = None
            window.wake.set()

    def _on_resolved(self, ticket: Ticket[Any], resolution: Resolution) -> None:
        del self._unresolved[ticket]
        self._resolutions[resolution] += 1

    # -- windows ------------------------------------------------------------------------------

    def _join_window(
        self, ticket: Ticket[Any], policy: WindowPolicy, nursery: trio.Nursery
    ) -> None:
        window = self._open
        if window is None:
            window = _Window(opened_at=ticket.enqueued_at)
            nursery.start_soon(self._run_window, window, policy)
            self._open = window
        window.tickets[ticket] = None
        if len(window.tickets) >= policy.max_size:
            self._flush(window, "size")

    def _flush(self, window: _Window, reason: FlushReason) -> None:
        self._open = None
        now = trio.current_time()
        window.flushed_at = now
        self._flushed_by[reason] += 1
        for ticket in window.tickets:
            ticket._flushed_at = now
        window.parts = self._enqueue(window, window.tickets)
        window.wake.set()
        if self._on_flush is not None:
            self._on_flush(len(window.tickets), reason)

    async def _run_window(self, window: _Window, policy: WindowPolicy) -> None:
        deadline: trio.CancelScope | None = None
        try:
            with trio.move_on_at(window.opened_at + policy.max_wait):
                await window.wake.wait()
            if window is self._open:
                self._flush(window, "time")
            if window.flushed_at is None:
                return  # abandoned: every ticket left before the flush
            deadline = trio.CancelScope(deadline=window.flushed_at + policy.window_timeout)
            with deadline:
                async with trio.open_nursery() as nursery:
                    parts = window.parts
                    if len(parts) == 1:  # one lane: hand out in this task
                        await self._dispatch(*parts[0], deadline, nursery)
                    else:  # each lane's part takes its own turn in its lane
                        for part in parts:
                            nursery.start_soon(self._dispatch, *part, deadline, nursery)
        finally:
            # Whatever ended this task early (its deadline, or cancellation from outside,
            # possibly before the flush), tickets whose job never started are resolved here.
            if window is self._open:
                self._open = None
            for key, lane, _ in window.parts:
                self._leave_turn(key, lane)
            for ticket in window.tickets:
                if not ticket._handed_out:
                    self._abandon(ticket, deadline)

    # -- handing out tokens and running jobs -------------------------------------------------

    async def _run_group_of_one(self, ticket: Ticket[Any]) -> None:
        try:
            async with trio.open_nursery() as nursery:
                await self._dispatch(ticket, ticket._lane, [ticket], None, nursery)
        finally:
            self._leave_turn(ticket, ticket._lane)
            if not ticket._handed_out:
                self._abandon(ticket, None)

    def _enqueue(self, group: object, tickets: Iterable[Ticket[Any]]) -> list[_Part]:
        """Fix a group's place in the token queue of each lane it has tickets in;
        synchronous, so flush order is queue order within a lane. Returns its parts: the
        group itself is the key of its first lane's turn."""
        by_lane: tuple[list[Ticket[Any]], list[Ticket[Any]]] = ([], [])
        for ticket in tickets:
            ticket._set_phase("waiting_token")
            by_lane[ticket._lane].append(ticket)
        parts: list[_Part] = []
        for lane, members in enumerate(by_lane):
            if members:
                key = group if not parts else object()
                self._turns[lane].append(key)
                parts.append((key, lane, members))
        self._reconsider_turn()
        return parts

    def _head(self) -> object | None:
        """The group whose turn it is: the head of the lane the chooser picks."""
        turns = self._turns
        lane = self._chooser.pick(bool(turns[0]), bool(turns[1]))
        if lane is None:
            return None
        return turns[1 if lane == "deferrable" else 0][0]

    def _reconsider_turn(self) -> None:
        """The head may have changed: a group parked in the limiter that is no longer the
        head steps back out (it keeps its place at the head of its lane)."""
        parked = self._parked
        if parked is not None and parked[0] is not self._head():
            parked[1].cancel()

    async def _dispatch(
        self,
        group: object,
        lane: int,
        tickets: Iterable[Ticket[Any]],
        deadline: trio.CancelScope | None,
        nursery: trio.Nursery,
    ) -> None:
        """Start each ticket's job in ``nursery`` as soon as it has a token, in order.

        Holds the group's turn until every ticket has a token (or left), so groups receive
        tokens in the order they were enqueued and tickets start in arrival order -- the
        order in which sibling tasks reach a lock is not something trio promises. Tokens are
        borrowed on behalf of the ticket and returned by its job's task. With both lanes
        waiting, the turn moves between the lanes' heads token by token (``lanes``).
        """
        limiter = self._limiter
        assert limiter is not None
        turns = self._turns
        try:
            for ticket in tickets:
                while True:
                    while self._head() is not group:
                        await self._turn_lot.park()
                    taken = not ticket.done and await self._take_token(limiter, ticket, group)
                    if taken is not None:
                        break
                    # None: stepped back for the other lane's head; wait for the turn again.
                if not taken:
                    ticket._set_phase("finished")
                    continue
                if turns[1 - lane]:  # both lanes waited: the lane rule counts it
                    self._chooser.admitted("deferrable" if lane else "interactive", True)
                    self._turn_lot.unpark_all()
                else:
                    self._chooser.admitted("interactive", False)
                ticket._handed_out = True
                nursery.start_soon(self._run_job, ticket, deadline)
        finally:
            self._leave_turn(group, lane)

    async def _take_token(
        self, limiter: trio.CapacityLimiter, ticket: Ticket[Any], group: object
    ) -> bool | None:
        """The ticket's local token, then its shared slot if there are shared ones; False
        (holding neither) if the ticket was cancelled meanwhile or the shared slot refused
        (the ticket then has that error as its outcome); None (holding neither) if its
        group stopped being the head while it waited (``_reconsider_turn``)."""
        local = False
        try:
            limiter.acquire_on_behalf_of_nowait(ticket)
            local = True
        except trio.WouldBlock:
            pass
        shared = self._shared
        if local and shared is None:
            return True  # the usual path: nothing to wait for
        holder = shared.new_holder() if shared is not None else None
        granted = False
        step_back = trio.CancelScope()
        try:
            # cancel() interrupts this wait, and only this; so does the other lane's head
            # taking the turn (step_back).
            with ticket._wait_scope, step_back:
                self._parked = (group, step_back)
                try:
                    if not local:
                        await limiter.acquire_on_behalf_of(ticket)
                        local = True
                    if shared is not None and holder is not None:
                        await shared.acquire(holder, ticket._scope_name)
                    granted = True
                finally:
                    if self._parked is not None and self._parked[1] is step_back:
                        self._parked = None
        except ProxyError as exc:  # no shared slot to be had (Redis down, fail-closed)
            ticket._resolve_error(exc, "failed")
        if granted and not ticket.done:
            ticket._shared_holder = holder
            return True
        # Cancelled while waiting, or handed over as cancel() ran: give back what we took.
        if local:
            limiter.release_on_behalf_of(ticket)
        if shared is not None and holder is not None:
            with trio.CancelScope(shield=True):
                await shared.release(holder)  # idempotent: also for a half-done acquire
        if step_back.cancel_called and not ticket.done:
            ticket._wait_scope = trio.CancelScope()  # a scope is entered once: a fresh one
            return None
        return False

    def _leave_turn(self, group: object, lane: int) -> None:
        turns = self._turns[lane]
        if group in turns:
            was_head = turns[0] is group
            turns.remove(group)
            if was_head:
                self._turn_lot.unpark_all()
                self._reconsider_turn()

    def _abandon(self, ticket: Ticket[Any], deadline: trio.CancelScope | None) -> None:
        """Resolve a ticket whose task is going away without an outcome; no-op if resolved.

        ``deadline`` is its window's scope: if that was cancelled (its deadline passed), the
        ticket fails with 504; any other cancellation means the dispatcher is going away (503).
        """
        if deadline is not None and deadline.cancel_called:
            ticket._resolve_error(window_timeout_error(), "timed_out")
        else:
            ticket._resolve_error(shutdown_error(), "shut_down")
        ticket._set_phase("finished")

    async def _run_job(self, ticket: Ticket[Any], deadline: trio.CancelScope | None) -> None:
        """The task a job runs in: under the ticket's own scope, returning its token at the end."""
        try:
            with ticket._scope:
                await self._call_job(ticket)
        finally:
            # The shared slot first: another instance may be waiting for it.
            holder, ticket._shared_holder = ticket._shared_holder, None
            if holder is not None and self._shared is not None:
                with trio.CancelScope(shield=True):
                    await self._shared.release(holder)
            if self._limiter is not None:
                self._limiter.release_on_behalf_of(ticket)
            self._abandon(ticket, deadline)

    async def _call_job(self, ticket: Ticket[Any]) -> None:
        if ticket.done:
            return
        await trio.lowlevel.checkpoint_if_cancelled()
        ticket._set_phase("running")
        ticket._started_at = trio.current_time()
        self._dispatched += 1
        try:
            value = await ticket._call()
        except Exception as exc:
            ticket._resolve_error(exc, "failed")
        except BaseExceptionGroup as group:
            # A job's own nursery can mix its errors with the Cancelled of a deadline or a
            # cancel(): the errors are this ticket's outcome (they must not escape into the
            # window and fail its neighbours); the Cancelled must still propagate.
            cancelled, errors = group.split(trio.Cancelled)
            if not isinstance(errors, ExceptionGroup):
                raise  # only Cancelled, or KeyboardInterrupt and the like
            ticket._resolve_error(errors, "failed")
            if cancelled is not None:
                raise cancelled from None
        else:
            ticket._resolve_value(value)
