"""A ticket: the caller's handle on one admitted job, and the one outcome it resolves to.

A ticket is resolved exactly once (the first resolution wins): the job's value or exception,
or one of the errors below -- 499 ``cancelled``, 504 ``window_timeout``, 503 ``shutdown``.
Its work phase (queued, waiting for a token, running, finished) drives its dispatcher's
gauges; the dispatcher's side of that bookkeeping, and the theory of operation, are in
``_dispatcher_base``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Generic, Literal, TypeAlias, TypeVar, final

import trio

from ..errors import ProxyError

if TYPE_CHECKING:
    from ._dispatcher_base import _DispatcherBase

T = TypeVar("T")

Job: TypeAlias = Callable[[], Awaitable[T]]
TicketState: TypeAlias = Literal["queued", "waiting_token", "running", "done"]
Resolution: TypeAlias = Literal["succeeded", "failed", "cancelled", "timed_out", "shut_down"]
# Work phases drive the gauges; "finished" means no task holds the ticket any more.
Phase: TypeAlias = Literal["queued", "waiting_token", "running", "finished"]


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
    """The caller's handle on one submitted job.

    Timing attributes (``trio.current_time()``) serve metrics: queue wait is
    ``started_at - enqueued_at``; ``flushed_at`` is when its window flushed (equal to
    ``enqueued_at`` without batching); ``None`` means "did not happen (yet)".
    """

    def __init__(self, job: Job[T], owner: _DispatcherBase) -> None:
        self._job = job
        self._owner = owner
        self._phase: Phase = "queued"
        # Entered by the job's task around the job. Created unentered so that cancel() works
        # before the task starts: entering a cancelled scope cancels at once.
        self._scope = trio.CancelScope()
        # Entered by the group's task while it waits for this ticket's token.
        self._wait_scope = trio.CancelScope()
        self._job_started = False
        # The shared (cross-instance) slot this ticket's job holds, if any.
        self._shared_holder: str | None = None
        self._scope_name: str | None = None  # the model called, for shared cooldowns
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

    # The rest is for dispatchers (_dispatcher_base.py and windows.py) only.

    def _mark_flushed(self, now: float) -> None:
        self._flushed_at = now

    def _set_phase(self, phase: Phase) -> None:
        old = self._phase
        if old != phase and old != "finished":
            self._phase = phase
            self._owner._phase_counts[old] -= 1
            self._owner._phase_counts[phase] += 1

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
        self._owner._on_resolved(self, resolution)
        if self._phase != "running":
            # Nothing will run it now, so it stops counting as queued/waiting at once; a
            # running job counts until it has unwound.
            self._set_phase("finished")
