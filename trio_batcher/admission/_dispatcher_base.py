"""What both dispatchers share: lifecycle, bookkeeping, and handing out limiter tokens.

Theory of operation
-------------------
Ownership. ``run()`` is one long-lived task, started in the app's lifetime nursery. It opens
the dispatcher's nursery; every other task lives inside it. A *group* (a flushed window, or
one ticket of a :class:`DirectDispatcher` with a limiter) is one task that hands out tokens of
the shared ``CapacityLimiter``, borrowed on behalf of each ticket, and starts one *job task*
per ticket as its token arrives, in the group's own nursery. The job task runs the job under
the ticket's own cancel scope and returns the token in ``finally``: a token is held for
exactly as long as the job runs -- a streaming job holds it until its stream ends.

Token order. Tickets get tokens in the order their groups were enqueued (synchronously, at
flush) and, within a group, in arrival order. Groups queue in ``_turns``; only the head
acquires, first with ``acquire_on_behalf_of_nowait`` (so a group whose tokens are free starts
all its jobs without a scheduling round-trip), then parked in the limiter. Letting one task
per ticket race for the limiter would not do: trio runs tasks woken together in an arbitrary
order (it reverses half its batches on purpose).

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

Cancellation.
- ``ticket.cancel()`` resolves the ticket at once (499) and cancels only that ticket's scope:
  a ticket still waiting (queued, or for a token) is never dispatched; a running job sees
  ``trio.Cancelled`` at its next checkpoint, so its upstream connection closes at once. Its
  neighbours are untouched.
- ``close()`` stops admitting; what was admitted keeps going and ``run()`` returns when it has
  drained. ``cancel_remaining()`` resolves every unresolved ticket with 503 at once, then
  cancels the dispatcher's nursery so every job unwinds.
- ``run()`` cancelled from outside: every task unwinds and resolves its unresolved tickets
  with 503 in ``finally``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from typing import Any, TypeVar

import trio

from ..errors import ProxyError
from ._statistics import DispatchStatistics
from ._tickets import (
    Job,
    Phase,
    Resolution,
    Ticket,
    shutdown_error,
    window_timeout_error,
)
from .shared_slots import SharedSlots

T = TypeVar("T")


class _DispatcherBase:
    """Lifecycle, bookkeeping and token hand-out shared by both dispatchers.

    Subclasses decide *when* a ticket is handed out (``_admit``), whether a queued ticket can
    simply leave (``_withdraw``), and what closing flushes (``_on_close``).
    """

    def __init__(
        self, limiter: trio.CapacityLimiter | None, shared: SharedSlots | None = None
    ) -> None:
        self._limiter = limiter
        # Slots shared with other instances (Redis), taken after the local token and in the
        # same order; only with a limiter (the cap is the limiter's).
        self._shared = shared if limiter is not None else None
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
        self._turns: deque[object] = deque()
        self._turn_lot = trio.lowlevel.ParkingLot()
        self._phase_counts: dict[Phase, int] = {
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
        self._flushed_by = {"size": 0, "time": 0, "drain": 0}
        # Jobs running inline in their callers' tasks (see call()), so cancel_remaining()
        # can reach them. Bounded by what the admission gate lets in.
        self._inline: dict[trio.CancelScope, None] = {}
        self._submitted = 0
        self._dispatched = 0

    @property
    def limiter(self) -> trio.CapacityLimiter | None:
        """The limiter jobs hold a token of; reassign its ``total_tokens`` to retune at run time."""
        return self._limiter

    def submit_nowait(self, job: Job[T], *, scope: str | None = None) -> Ticket[T]:
        """Admit a job; it will run in the dispatcher's nursery, never in the caller's task.

        ``scope`` (the model called) picks the shared cooldowns its shared slot reads.

        Raises:
          ProxyError: 503 ``shutdown`` once ``close()`` has been called or ``run()`` has ended.
          RuntimeError: if ``run()`` has not started yet.
        """
        if self._closed:
            raise shutdown_error()
        nursery = self._nursery
        if nursery is None:
            raise RuntimeError("submit before the dispatcher's run() has started")
        ticket = Ticket(job, self)
        ticket._scope_name = scope
        self._submitted += 1
        self._phase_counts["queued"] += 1
        self._unresolved[ticket] = None
        self._admit(ticket, nursery)
        return ticket

    async def submit(self, job: Job[T], *, scope: str | None = None) -> T:
        """``submit_nowait`` + ``wait``; if the caller is cancelled, the ticket is cancelled too."""
        ticket = self.submit_nowait(job, scope=scope)
        try:
            return await ticket.wait()
        finally:
            ticket.cancel()  # no-op once done; abandons the job if we were cancelled

    async def call(self, job: Job[T], *, scope: str | None = None) -> T:
        """The result of ``job``, run in the caller's own task when nothing needs to wait.

        With no window and no limiter (the direct path), a job has nothing to wait for, so
        it runs here: no task to start, no scheduler turn before the upstream call. The
        guarantees are ``submit``'s: 503 once closed, the caller's cancellation cancels it,
        ``cancel_remaining()`` cancels it with 503 ``shutdown``, and it counts as
        ``running`` meanwhile. Otherwise this is ``submit``.
        """
        if not self._runs_inline():
            return await self.submit(job, scope=scope)
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
        """Stop admitting (``submit_nowait`` raises 503); admitted work keeps going. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._on_close()
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
            windows_open_size=self._open_window_size(),
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

    # Hooks for subclasses.

    def _runs_inline(self) -> bool:
        """Whether ``call`` may run a job in its caller's task (nothing to wait for)."""
        return False

    def _admit(self, ticket: Ticket[Any], nursery: trio.Nursery) -> None:
        raise NotImplementedError

    def _withdraw(self, ticket: Ticket[Any]) -> None:
        """Take a cancelled ticket out of an open window, if it is in one."""

    def _on_close(self) -> None:
        pass

    def _open_window_size(self) -> int:
        return 0

    def _on_resolved(self, ticket: Ticket[Any], resolution: Resolution) -> None:
        del self._unresolved[ticket]
        self._resolutions[resolution] += 1

    # Handing out tokens and running jobs.

    def _enqueue(self, group: object, tickets: Iterable[Ticket[Any]]) -> None:
        """Fix a group's place in the token queue; synchronous, so flush order is queue order."""
        self._turns.append(group)
        for ticket in tickets:
            ticket._set_phase("waiting_token")

    async def _dispatch(
        self,
        group: object,
        tickets: Iterable[Ticket[Any]],
        deadline: trio.CancelScope | None,
        nursery: trio.Nursery,
    ) -> None:
        """Start each ticket's job in ``nursery`` as soon as it has a token, in order.

        Holds the group's turn until every ticket has a token (or left), so groups receive
        tokens in the order they were enqueued and tickets start in arrival order -- the
        order in which sibling tasks reach a lock is not something trio promises. Tokens are
        borrowed on behalf of the ticket and returned by its job's task.
        """
        limiter = self._limiter
        assert limiter is not None
        try:
            while self._turns[0] is not group:
                await self._turn_lot.park()
            for ticket in tickets:
                if ticket.done or not await self._take_token(limiter, ticket):
                    ticket._set_phase("finished")
                    continue
                ticket._job_started = True
                nursery.start_soon(self._run_job, ticket, deadline)
        finally:
            self._leave_turn(group)

    async def _take_token(self, limiter: trio.CapacityLimiter, ticket: Ticket[Any]) -> bool:
        """The ticket's local token, then its shared slot if there are shared ones; False
        (holding neither) if the ticket was cancelled meanwhile or the shared slot refused
        (the ticket then has that error as its outcome)."""
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
        try:
            with ticket._wait_scope:  # cancel() interrupts this wait, and only this
                if not local:
                    await limiter.acquire_on_behalf_of(ticket)
                    local = True
                if shared is not None and holder is not None:
                    await shared.acquire(holder, ticket._scope_name)
                granted = True
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
        return False

    def _leave_turn(self, group: object) -> None:
        if group in self._turns:
            was_head = self._turns[0] is group
            self._turns.remove(group)
            if was_head:
                self._turn_lot.unpark_all()

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
            value = await ticket._job()
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
