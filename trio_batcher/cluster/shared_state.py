"""Everything an instance shares with the others through Redis, owned by one task.

``SharedState`` is what ``Runtime`` builds when ``REDIS_URL`` is set: it is the dispatcher's
``SharedSlots`` (delegating to ``ClusterSlots`` once connected) and it owns, in ``run()``,
the Redis link and every task that keeps the shared state alive -- the lease renewer and
release listener, the instance heartbeat, the fallback probe, the publisher of this
instance's cooldowns, and the counter of its requests for the shared retry budget. ``run()`` is started in the app's nursery before the dispatcher, so a
job never asks for a slot before there is a link; a Redis that is down at startup is not a
failure to start, just an instance that begins in fallback.

Cooldowns go out through a bounded channel: ``Resilience.on_cooldown`` is called
synchronously where the failure is classified, and must not wait for Redis. A cooldown
that cannot be published (channel full, Redis down) still holds this instance, and the
others learn of the upstream's limit from their own next reply.
"""

from __future__ import annotations

import logging
from typing import Any, Final, final

import trio

from ..settings import Settings
from ..upstream.resilience import Resilience
from .budget import SharedRetryBudget
from .connection import ClusterConfig, ClusterUnavailable, open_link
from .cooldowns import SharedCooldowns
from .fallback import FallbackState
from .instances import InstanceRegistry, new_instance_id
from .leases import LeaseSemaphore
from .upstream_slots import ClusterSlots

__all__ = ["SharedState"]

log = logging.getLogger("trio_batcher")

_COOLDOWN_QUEUE: Final = 64
_COUNT_EVERY_S: Final = 0.25

Cooldown = tuple[str | None, float, str]


@final
class SharedState:
    """Shared slots, cooldowns and instance count for one instance (see the module doc)."""

    def __init__(self, settings: Settings, resilience: Resilience, cap: int) -> None:
        assert settings.redis_url is not None
        self.instance_id = new_instance_id()
        self._config = ClusterConfig(
            settings.redis_url,
            prefix=settings.redis_key_prefix.rstrip(":") or "trio-batcher",
            command_timeout_s=settings.redis_timeout_s,
        )
        self._ttl_s = settings.redis_lease_ttl_s
        self._fail_closed = settings.redis_failure == "closed"
        self._resilience = resilience
        self._cap = cap
        self.fallback = FallbackState()
        self._slots: ClusterSlots | None = None
        self._semaphore: LeaseSemaphore | None = None
        self._registry: InstanceRegistry | None = None
        self._send, self._recv = trio.open_memory_channel[Cooldown](_COOLDOWN_QUEUE)
        self._published = 0
        self._unpublished = 0
        self._budget: SharedRetryBudget | None = None
        self._requests_to_count = 0

    # -- SharedSlots -------------------------------------------------------------------------

    def new_holder(self) -> str:
        return self._connected().new_holder()

    async def acquire(self, holder: str, scope: str | None = None) -> None:
        await self._connected().acquire(holder, scope)

    async def release(self, holder: str) -> None:
        await self._connected().release(holder)

    def _connected(self) -> ClusterSlots:
        if self._slots is None:
            raise RuntimeError("SharedState.run() has not started")
        return self._slots

    # -- the tasks ---------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with open_link(self._config) as link:
            semaphore = LeaseSemaphore(
                link, "upstream", self._cap, ttl_s=self._ttl_s, instance_id=self.instance_id
            )
            registry = InstanceRegistry(link, self.instance_id, ttl_s=self._ttl_s)
            self._semaphore, self._registry = semaphore, registry
            self._slots = ClusterSlots(
                semaphore,
                self.fallback,
                registry,
                self._resilience,
                fail_closed=self._fail_closed,
            )
            config = self._resilience.config
            self._budget = SharedRetryBudget(
                link,
                ratio=config.budget_ratio,
                window_s=config.budget_window_s,
                min_retries=config.budget_min_retries,
            )
            self._resilience.on_cooldown = self._tell
            self._resilience.on_request = self._count_request
            self._resilience.shared_retry = self._spend_retry
            try:
                async with trio.open_nursery() as nursery:
                    await nursery.start(semaphore.run)
                    await nursery.start(registry.run)
                    await nursery.start(self.fallback.run_probe, link.ping)
                    nursery.start_soon(self._publish, SharedCooldowns(link))
                    nursery.start_soon(self._count_requests_periodically)
                    task_status.started()
            finally:
                self._resilience.on_cooldown = None
                self._resilience.on_request = None
                self._resilience.shared_retry = None

    def _tell(self, scope: str | None, seconds: float, reason: str) -> None:
        try:
            self._send.send_nowait((scope, seconds, reason))
        except trio.WouldBlock:
            self._unpublished += 1

    async def _publish(self, cooldowns: SharedCooldowns) -> None:
        async for scope, seconds, reason in self._recv:
            if not self.fallback.shared:
                self._unpublished += 1
                continue
            try:
                await cooldowns.hold(scope, seconds, reason=reason)
            except ClusterUnavailable as exc:
                self._unpublished += 1
                self.fallback.report_failure(exc)
            else:
                self._published += 1

    def _count_request(self) -> None:
        self._requests_to_count += 1

    async def _count_requests_periodically(self) -> None:
        """The requests that earn the shared retry budget, added up every
        ``_COUNT_EVERY_S`` in one round trip rather than one per request: the budget is a
        ratio over a window of seconds, which a quarter of a second does not move."""
        assert self._budget is not None
        while True:
            await trio.sleep(_COUNT_EVERY_S)
            n, self._requests_to_count = self._requests_to_count, 0
            if not n or not self.fallback.shared:
                continue
            try:
                await self._budget.record_request(n)
            except ClusterUnavailable as exc:
                self.fallback.report_failure(exc)

    async def _spend_retry(self) -> bool:
        """One retry from the cluster's budget; this instance's own while Redis fails."""
        if self._budget is not None and self.fallback.shared:
            try:
                return await self._budget.try_spend()
            except ClusterUnavailable as exc:
                self.fallback.report_failure(exc)
        return self._resilience.budget.try_spend()

    # -- the observatory ----------------------------------------------------------------------

    def statistics(self) -> dict[str, Any]:
        """The ``cluster`` block of ``/metrics``."""
        fallback = self.fallback.statistics()
        leases = self._semaphore.statistics() if self._semaphore is not None else None
        slots = self._slots
        return {
            "instance": self.instance_id,
            "mode": fallback.mode.value,
            "fallbacks": fallback.fallbacks,
            "instances_alive": self._registry.last_seen_alive if self._registry else None,
            "cap": self._cap,
            "in_flight_seen": leases.in_flight_seen if leases else None,
            "held_here": (leases.held if leases else 0) + (slots.held_locally if slots else 0),
            "waiting_here": leases.waiting if leases else 0,
            "leases_lost": leases.leases_lost if leases else 0,
            "renew_failures": leases.renew_failures if leases else 0,
            "cooldowns_published": self._published,
            "cooldowns_unpublished": self._unpublished,
        }
