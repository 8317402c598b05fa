"""Admission windows (microbatching): requests that arrive close together are dispatched together.

Theory of operation
-------------------
At most one window is *open* at a time. A submitted ticket joins the open window, or opens a
new one. A window *flushes* -- is detached from ``_open`` and stamped with ``flushed_at`` --
exactly once, for the first of these reasons:

- ``size``: the ``max_size``-th ticket joins it; decided synchronously in ``submit_nowait``, so
  ``max_size`` arrivals at t=0 flush at t=0;
- ``time``: ``max_wait`` seconds after its FIRST ticket joined (a ``move_on_at`` deadline fixed
  when the window opened, so the flush happens at exactly ``opened_at + max_wait``);
- ``drain``: ``close()`` flushes the open window at once, so shutdown drains it.

If every queued ticket leaves (``cancel()``) before the flush, the window is *abandoned*: it is
detached unflushed, its task exits, and the next arrival opens a fresh window.

Ownership. Each window is one task in the Batcher's nursery (owned by ``run()``), started
when the window opens. It waits for the flush, then opens a cancel scope with deadline
``flushed_at + window_timeout`` and, inside it, a nursery in which it hands out limiter tokens
to its tickets in arrival order and starts one job task per ticket as its token arrives (see
``dispatch._DispatcherBase._dispatch``). The ``CapacityLimiter`` is shared by all windows, so
the upstream never sees more than its ``total_tokens`` calls in flight, and windows receive
tokens in flush order, so tickets start in arrival order across windows too.

Invariants. A flushed window never changes membership (a flushed ticket that is cancelled is
resolved and its scope cancelled; it is not removed). ``windows_open_size`` is the open
window's membership, 0 when none. ``flushed_by_*`` count flushes, not abandoned windows.

Cancellation. Queued ticket cancelled: removed from the open window, never dispatched.
Flushed ticket cancelled before it gets a token: never dispatched. Running ticket cancelled:
only its own scope is cancelled. Window deadline: the window's scope is cancelled, so every
ticket of that window not yet done -- waiting for a token or running -- fails with 504
``window_timeout`` at the deadline (a running job's ticket as soon as the job has unwound,
which is at once unless the job shields its cleanup), while tickets that already finished
keep their results.
A window task cancelled from outside before its flush resolves its tickets with 503.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal, TypeAlias, final

import trio

from .dispatch import Ticket, _DispatcherBase
from .shared_slots import SharedSlots

__all__ = ["Batcher", "FlushReason"]

FlushReason: TypeAlias = Literal["size", "time", "drain"]


@final
class _Window:
    def __init__(self, opened_at: float) -> None:
        self.opened_at = opened_at
        # Insertion-ordered so dispatch follows arrival; at most max_size entries.
        self.tickets: dict[Ticket[Any], None] = {}
        self.flushed_at: float | None = None
        self.wake = trio.Event()  # set on a size/drain flush or on abandonment


@final
class Batcher(_DispatcherBase):
    """A dispatcher that groups arrivals into admission windows (``BATCH_ENABLED=1``).

    Args:
      max_size: a window flushes as soon as it holds this many tickets.
      max_wait: seconds after a window's first ticket at which it flushes regardless.
      max_concurrency: jobs in flight across all windows (the limiter's ``total_tokens``).
      window_timeout: seconds after its flush by which every ticket of a window is done;
        any left then fail with 504 ``window_timeout``. May be ``math.inf``.
      limiter: share an existing limiter (e.g. with an adaptive controller that retunes
        ``total_tokens``); its ``total_tokens`` must equal ``max_concurrency`` at construction.
      on_flush: called as ``on_flush(size, reason)`` once per flushed window, synchronously
        at flush time, after the flush is complete (metrics). Must not raise.
    """

    def __init__(
        self,
        *,
        max_size: int,
        max_wait: float,
        max_concurrency: int,
        window_timeout: float,
        limiter: trio.CapacityLimiter | None = None,
        on_flush: Callable[[int, FlushReason], None] | None = None,
        shared: SharedSlots | None = None,
    ) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be >= 1, not {max_size}")
        if not 0 <= max_wait < math.inf:
            raise ValueError(f"max_wait must be finite and >= 0, not {max_wait}")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, not {max_concurrency}")
        if not window_timeout > 0:
            raise ValueError(f"window_timeout must be > 0, not {window_timeout}")
        if limiter is None:
            limiter = trio.CapacityLimiter(max_concurrency)
        elif limiter.total_tokens != max_concurrency:
            raise ValueError(
                f"limiter.total_tokens ({limiter.total_tokens}) "
                f"!= max_concurrency ({max_concurrency})"
            )
        super().__init__(limiter, shared)
        self._max_size = max_size
        self._max_wait = max_wait
        self._window_timeout = window_timeout
        self._open: _Window | None = None
        self._on_flush = on_flush

    def _admit(self, ticket: Ticket[Any], nursery: trio.Nursery) -> None:
        window = self._open
        if window is None:
            window = _Window(opened_at=ticket.enqueued_at)
            nursery.start_soon(self._run_window, window)
            self._open = window
        window.tickets[ticket] = None
        if len(window.tickets) >= self._max_size:
            self._flush(window, "size")

    def _withdraw(self, ticket: Ticket[Any]) -> None:
        window = self._open
        if window is None or ticket not in window.tickets:
            return
        del window.tickets[ticket]
        if not window.tickets:
            self._open = None
            window.wake.set()

    def _on_close(self) -> None:
        if self._open is not None:
            self._flush(self._open, "drain")

    def _open_window_size(self) -> int:
        return 0 if self._open is None else len(self._open.tickets)

    def _flush(self, window: _Window, reason: FlushReason) -> None:
        self._open = None
        now = trio.current_time()
        window.flushed_at = now
        self._flushed_by[reason] += 1
        for ticket in window.tickets:
            ticket._mark_flushed(now)
        self._enqueue(window, window.tickets)
        window.wake.set()
        if self._on_flush is not None:
            self._on_flush(len(window.tickets), reason)

    async def _run_window(self, window: _Window) -> None:
        deadline: trio.CancelScope | None = None
        try:
            with trio.move_on_at(window.opened_at + self._max_wait):
                await window.wake.wait()
            if window is self._open:
                self._flush(window, "time")
            if window.flushed_at is None:
                return  # abandoned: every ticket left before the flush
            deadline = trio.CancelScope(deadline=window.flushed_at + self._window_timeout)
            with deadline:
                async with trio.open_nursery() as nursery:
                    await self._dispatch(window, window.tickets, deadline, nursery)
        finally:
            # Whatever ended this task early (its deadline, or cancellation from outside,
            # possibly before the flush), tickets whose job never started are resolved here.
            if window is self._open:
                self._open = None
            self._leave_turn(window)
            for ticket in window.tickets:
                if not ticket._job_started:
                    self._abandon(ticket, deadline)
