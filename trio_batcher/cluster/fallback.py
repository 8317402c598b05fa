"""When Redis is slow or down: each instance keeps its share of the cap, until Redis is back.

Policy. A failed or timed-out Redis command (``ClusterUnavailable``) must never become a 5xx
and never lift the global cap. So the instance that sees one switches to *fallback*: it
admits calls through a local limiter of ``fallback_share(cap, instances_last_seen)`` slots
(the cap divided by the instances it last saw alive, at least 1) and local cooldowns. With
every instance doing the same, the cluster stays within the cap (up to the rounding to at
least 1 per instance). It returns to *shared* when a probe (one PING) succeeds.

An instance that has never had an answer from Redis (it started during an outage) has seen
no count, and no share of its own is safe: the instances that did see Redis divided the cap
among the instances *they* saw, which it is not one of, so any slot it took would come out
of theirs. Its share is 0 (``instances_last_seen`` 0): it makes no upstream call until Redis
answers, and its requests wait for that (or their deadline) as they wait for any slot. A
restart during an outage is such a start: the share the process had before is already
counted by the others, for the calls it left running until their leases expire.

``FallbackState`` is that two-state machine and nothing else: no I/O of its own except the
probe the owner passes to ``run_probe``; it logs each transition once (a warning into
fallback, info back), counts them for a gauge, and lets the owner wait for a mode.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import final

import trio

from .connection import ClusterUnavailable

__all__ = ["FallbackState", "FallbackStatistics", "Mode", "fallback_share"]

logger = logging.getLogger(__name__)


def fallback_share(cap: int, instances_last_seen: int) -> int:
    """This instance's slots while Redis is unreachable: ``cap // n``, at least 1; 0 for an
    instance that has never seen the count (``n`` 0: see the module docstring)."""
    if instances_last_seen <= 0:
        return 0
    return max(1, cap // instances_last_seen)


class Mode(enum.Enum):
    SHARED = "shared"
    FALLBACK = "fallback"


@final
@dataclass(frozen=True)
class FallbackStatistics:
    """``since``: ``trio.current_time()`` of the last transition (``-inf`` before any).
    ``fallbacks``: times it entered fallback. ``last_error``: what caused the last one."""

    mode: Mode
    since: float
    fallbacks: int
    last_error: str | None


@final
class FallbackState:
    """Shared or fallback; see the module docstring.

    Args:
      probe_interval_s: how often ``run_probe`` asks Redis while in fallback.
    """

    def __init__(self, *, probe_interval_s: float = 1.0) -> None:
        self.probe_interval_s = probe_interval_s
        self._mode = Mode.SHARED
        self._since = float("-inf")
        self._fallbacks = 0
        self._last_error: str | None = None
        self._changed = trio.Event()
        # Called synchronously at every transition, with the new mode: the owners of what
        # must be decided at that very moment (the share's snapshot, the frozen count).
        self.listeners: list[Callable[[Mode], None]] = []

    @property
    def mode(self) -> Mode:
        return self._mode

    @property
    def shared(self) -> bool:
        return self._mode is Mode.SHARED

    def statistics(self) -> FallbackStatistics:
        return FallbackStatistics(self._mode, self._since, self._fallbacks, self._last_error)

    def local_cap(self, cap: int, instances_last_seen: int) -> int:
        """The slots this instance may use locally: all of ``cap`` while shared (the Redis
        semaphore enforces the global cap), its ``fallback_share`` otherwise."""
        return cap if self.shared else fallback_share(cap, instances_last_seen)

    def report_failure(self, error: BaseException) -> None:
        """A Redis command failed: enter fallback (logged once per outage)."""
        self._last_error = repr(error)
        if self._mode is Mode.FALLBACK:
            return
        logger.warning("Redis unavailable, using local limits until it answers: %r", error)
        self._fallbacks += 1
        self._set(Mode.FALLBACK)

    def report_success(self) -> None:
        """Redis answered: return to shared state (logged once)."""
        if self._mode is Mode.SHARED:
            return
        logger.info("Redis answers again; shared limits resume")
        self._set(Mode.SHARED)

    def _set(self, mode: Mode) -> None:
        self._mode = mode
        self._since = trio.current_time()
        self._changed.set()
        self._changed = trio.Event()
        for listener in self.listeners:
            listener(mode)

    async def wait_mode(self, mode: Mode) -> None:
        """Return once the state is ``mode`` (at once if it already is)."""
        while self._mode is not mode:
            await self._changed.wait()

    async def run_probe(
        self,
        probe: Callable[[], Awaitable[object]],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Until cancelled: while in fallback, call ``probe()`` every ``probe_interval_s``;
        the first that returns (rather than raising ``ClusterUnavailable``) ends the
        fallback. ``probe`` must bound itself (``RedisLink.ping`` does)."""
        task_status.started()
        while True:
            await self.wait_mode(Mode.FALLBACK)
            await trio.sleep(self.probe_interval_s)
            try:
                await probe()
            except ClusterUnavailable as exc:
                self._last_error = repr(exc)
                continue
            self.report_success()
