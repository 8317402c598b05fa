"""The admission gate (backpressure): a bounded number of requests in flight, a bounded FIFO queue.

Theory of operation
-------------------
State: ``_active`` slots held, and ``_waiters``, an insertion-ordered dict used as a FIFO queue
of parked acquirers (at most ``max_queue``).

Invariants.
1. ``_active`` counts slots that exist and are not released -- including a slot handed to a
   waiter that has not woken up yet. So ``_active <= max_inflight`` always (when enabled).
2. A slot is never free while someone waits: ``release()`` hands the slot straight to the
   oldest waiter (``_active`` unchanged) and only frees it when nobody waits. Newcomers are
   admitted immediately only if a slot is free *and* the queue is empty, so nobody overtakes.
3. Every slot is released exactly once (``Slot.release`` is idempotent) and that release is
   the only way ``_active`` goes down.

Decisions are synchronous: ``acquire()`` raises ``Shed("queue_full")`` or
``Shed("shutdown")`` before its first ``await``, so a shed costs no scheduling round-trip.

Ownership. The gate owns no tasks. A ``Slot`` carries no task identity: the handler that
acquired it may pass it to the streaming response generator, which releases it.

Cancellation. A waiter that is cancelled (or times out) removes itself from the queue. The
race: ``release()`` may hand a slot to a waiter in the same tick in which that waiter was
cancelled -- trio has already scheduled it to resume with ``Cancelled`` but it is still in
the queue. The waiter then finds the slot in ``waiter.slot`` when it resumes: on an outer
cancellation it releases it (handing it on to the next waiter, or freeing it) before
re-raising; on its own ``acquire_timeout`` it keeps it, since it was admitted in time.
``close()`` wakes every waiter with ``Shed("shutdown")``; slots already held stay held until
released, and ``wait_idle()`` returns when the last one is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType, TracebackType
from typing import Literal, TypeAlias, final

import trio

__all__ = ["AdmissionGate", "GateStatistics", "Shed", "ShedReason", "Slot"]

ShedReason: TypeAlias = Literal["queue_full", "queue_timeout", "shutdown"]
_REASONS: tuple[ShedReason, ...] = ("queue_full", "queue_timeout", "shutdown")


@final
class Shed(Exception):
    """The gate refused a request; the HTTP layer answers 429 or 503 with ``Retry-After``.

    Attributes:
      reason: ``"queue_full"``, ``"queue_timeout"`` or ``"shutdown"``.
      retry_after: suggested seconds before a retry.
    """

    def __init__(self, reason: ShedReason, retry_after: float) -> None:
        super().__init__(f"request shed: {reason}")
        self.reason: ShedReason = reason
        self.retry_after = retry_after


@final
@dataclass(frozen=True)
class GateStatistics:
    """A snapshot; ``active`` and ``waiting`` are gauges, the rest counters or configuration."""

    active: int
    waiting: int
    max_inflight: int
    max_queue: int
    shed_by_reason: Mapping[str, int]
    admitted_total: int
    closed: bool


@final
class Slot:
    """The right to be in flight. Release it exactly when the reply is completely sent.

    ``release()`` is idempotent and may be called from any task. A ``Slot`` is also a
    context manager that releases on exit.
    """

    def __init__(self, gate: AdmissionGate) -> None:
        self._gate: AdmissionGate | None = gate

    def release(self) -> None:
        gate, self._gate = self._gate, None
        if gate is not None:
            gate._release()

    @property
    def released(self) -> bool:
        return self._gate is None

    def __enter__(self) -> Slot:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


@final
class _Waiter:
    def __init__(self) -> None:
        self.woken = trio.Event()
        self.slot: Slot | None = None  # set by release(): the hand-off
        self.shut_out = False  # set by close()


@final
class AdmissionGate:
    """Admit up to ``max_inflight`` requests; queue up to ``max_queue`` more, FIFO.

    Args:
      max_inflight: slots; 0 disables the gate (always admits, still counts ``active``).
      max_queue: waiters allowed at once; an acquirer beyond that is shed at once.
      acquire_timeout: seconds a waiter waits before ``Shed("queue_timeout")`` (may be
        ``math.inf``): a safety net so a queued request cannot outwait its client.
      retry_after: the ``retry_after`` every ``Shed`` carries.
    """

    def __init__(
        self,
        max_inflight: int,
        max_queue: int,
        acquire_timeout: float,
        *,
        retry_after: float = 1.0,
    ) -> None:
        if max_inflight < 0 or max_queue < 0:
            raise ValueError("max_inflight and max_queue must be >= 0")
        if not acquire_timeout >= 0:
            raise ValueError(f"acquire_timeout must be >= 0, not {acquire_timeout}")
        self._max_inflight = max_inflight
        self._max_queue = max_queue
        self._acquire_timeout = acquire_timeout
        self._retry_after = retry_after
        self._active = 0
        self._waiters: dict[_Waiter, None] = {}
        self._closed = False
        self._admitted = 0
        self._shed: dict[str, int] = dict.fromkeys(_REASONS, 0)
        self._idle = trio.lowlevel.ParkingLot()

    def acquire_nowait(self) -> Slot:
        """Take a free slot, never waiting.

        Raises:
          Shed: ``"shutdown"`` once closed; ``"queue_full"`` when no slot is free now.
        """
        if self._closed:
            raise self._shed_now("shutdown")
        if not self._slot_free():
            raise self._shed_now("queue_full")
        return self._grant()

    async def acquire(self, deadline: float = math.inf) -> Slot:
        """Take a slot, waiting in the FIFO queue for up to ``acquire_timeout`` if need be,
        and never past ``deadline`` (the request's own, ``trio.current_time()`` scale).

        Raises:
          Shed: ``"shutdown"`` (closed, before or while waiting), ``"queue_full"`` (no slot
            and ``max_queue`` already waiting; raised before any checkpoint), or
            ``"queue_timeout"``.
        """
        if self._closed:
            raise self._shed_now("shutdown")
        if self._slot_free():
            await trio.lowlevel.checkpoint_if_cancelled()
            slot = self._grant()
            await trio.lowlevel.cancel_shielded_checkpoint()
            return slot
        if len(self._waiters) >= self._max_queue:
            raise self._shed_now("queue_full")

        waiter = _Waiter()
        self._waiters[waiter] = None
        try:
            with trio.move_on_at(min(trio.current_time() + self._acquire_timeout, deadline)):
                await waiter.woken.wait()
        except BaseException:
            self._waiters.pop(waiter, None)
            if waiter.slot is not None:
                waiter.slot.release()  # handed over as we were cancelled: pass it on
            raise
        self._waiters.pop(waiter, None)
        if waiter.slot is not None:
            self._admitted += 1
            return waiter.slot
        raise self._shed_now("shutdown" if waiter.shut_out else "queue_timeout")

    def close(self) -> None:
        """Shed every waiter and every later acquirer with ``"shutdown"``. Idempotent."""
        self._closed = True
        waiters, self._waiters = self._waiters, {}
        for waiter in waiters:
            waiter.shut_out = True
            waiter.woken.set()

    async def wait_idle(self) -> None:
        """Return once no slot is held (for the shutdown drain)."""
        if self._active == 0:
            await trio.lowlevel.checkpoint()
            return
        while self._active:
            await self._idle.park()

    def statistics(self) -> GateStatistics:
        return GateStatistics(
            active=self._active,
            waiting=len(self._waiters),
            max_inflight=self._max_inflight,
            max_queue=self._max_queue,
            shed_by_reason=MappingProxyType(dict(self._shed)),
            admitted_total=self._admitted,
            closed=self._closed,
        )

    def _slot_free(self) -> bool:
        if self._max_inflight == 0:
            return True
        return self._active < self._max_inflight and not self._waiters

    def _grant(self) -> Slot:
        self._active += 1
        self._admitted += 1
        return Slot(self)

    def _shed_now(self, reason: ShedReason) -> Shed:
        self._shed[reason] += 1
        return Shed(reason, self._retry_after)

    def _release(self) -> None:
        if self._waiters:
            waiter = next(iter(self._waiters))
            del self._waiters[waiter]
            waiter.slot = Slot(self)
            waiter.woken.set()
            return
        self._active -= 1
        if self._active == 0:
            self._idle.unpark_all()
