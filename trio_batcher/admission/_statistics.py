"""``DispatchStatistics``: the frozen snapshot a dispatcher's ``statistics()`` returns.

Kept apart from the dispatchers so that its readers (metrics, tests, the observatory) need
not know how the numbers are kept, as with ``trio.CapacityLimiter.statistics()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import final


@final
@dataclass(frozen=True)
class DispatchStatistics:
    """A snapshot of a dispatcher, modelled on ``trio.CapacityLimiter.statistics()``.

    Gauges (``queued``, ``waiting_token``, ``running``, ``windows_open_size``, ``unresolved``,
    ``limiter_borrowed``) return to 0 when the dispatcher is idle; the rest are counters.
    ``limiter_total`` is the limiter's current ``total_tokens``, ``None`` when unlimited.
    ``running`` counts jobs until they have unwound, so it may briefly exceed the number of
    unresolved tickets after a ``cancel()``.
    """

    queued: int
    waiting_token: int
    running: int
    unresolved: int
    windows_open_size: int
    windows_flushed: int
    flushed_by_size: int
    flushed_by_time: int
    flushed_by_drain: int
    items_submitted: int
    items_dispatched: int
    succeeded: int
    failed: int
    cancelled: int
    timed_out: int
    shut_down: int
    limiter_borrowed: int
    limiter_total: int | None
    closed: bool

    @property
    def idle(self) -> bool:
        """No ticket is unresolved, no job is running, waiting or queued, no token is lent."""
        return (
            self.queued == self.waiting_token == self.running == 0
            and self.unresolved == self.windows_open_size == self.limiter_borrowed == 0
        )
