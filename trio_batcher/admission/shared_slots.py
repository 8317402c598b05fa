"""What the dispatcher needs from upstream slots shared with other instances.

With ``REDIS_URL`` the upstream cap is global: a job takes its process-local token first
(which keeps arrival order within the process and bounds what one process asks for), then
one slot of the global cap. Only the dispatcher's hand-out task takes slots, one ticket at a
time and in order, so the order in which this process asks for global slots is its
arrival order. The cluster package provides the implementation; the admission layer knows
only this.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["SharedSlots"]


class SharedSlots(Protocol):
    def new_holder(self) -> str:
        """A fresh holder id (unique across instances) for one job's slot."""
        ...

    async def acquire(self, holder: str, scope: str | None = None) -> None:
        """Wait for a slot for ``holder``; cancellable. ``scope`` (the model called, when
        known) picks the shared cooldowns to adopt with it. Raises ``ProxyError`` when no
        slot can be had at all (shared state unreachable under a fail-closed policy)."""
        ...

    async def release(self, holder: str) -> None:
        """Give ``holder``'s slot back; idempotent (also for a holder whose acquire was
        cancelled half way), bounded in time, never raises."""
        ...
