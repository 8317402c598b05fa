"""Everything an instance shares with the others through Redis, owned by one task.

``SharedState`` is what ``Runtime`` builds when ``REDIS_URL`` is set: it is the dispatcher's
``SharedSlots`` (delegating to ``ClusterSlots`` once connected) and it owns, in ``run()``,
the Redis link and every task that keeps the shared state alive -- the lease renewer and
release listener, the instance heartbeat, the fallback probe, the publisher of this
instance's cooldowns and the watch that adopts the others', the counter of its requests for the shared retry budget, and (with
``BATCH_ADAPTIVE``) the reporter of the cluster's adaptive limit, which replaces this
process's own while ``run()`` runs. ``run()`` is started in the app's nursery before the
dispatcher, so a job never asks for a slot before there is a link; a Redis that is down at
startup is not a failure to start, just an instance that begins in fallback, with a share of
0 until Redis first answers (``fallback``: it has seen no count of the instances).

While ``run()`` runs it holds ``Resilience.sharing(self)`` open (it is the resilience layer's
``SharedResilience``). Cooldowns go out through a bounded channel: ``cooldown_opened`` is
called synchronously where the failure is classified, and must not wait for Redis. A cooldown
that cannot be published (channel full, Redis down) still holds this instance, and the
others learn of the upstream's limit from their own next reply.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Final, final

import trio

from ..settings import Settings
from ..upstream.resilience import Resilience
from ..upstreams.affinity import DEFAULT_TTL_S as AFFINITY_TTL_S
from .adaptive import SharedAdaptiveLimit
from .affinity import SharedAffinity
from .budget import SharedRetryBudget
from .connection import ClusterConfig, ClusterUnavailable, RedisLink, open_link
from .cooldowns import CooldownWatch, SharedCooldowns
from .fallback import FallbackState, Mode
from .instances import InstanceRegistry, new_instance_id
from .leases import LeaseSemaphore
from .tenant_buckets import SharedTenantLimits
from .upstream_cooldowns import UpstreamCooldowns
from .upstream_slots import ClusterSlots

__all__ = ["SharedState"]

log = logging.getLogger("trio_batcher")

_COOLDOWN_QUEUE: Final = 64
_COUNT_EVERY_S: Final = 0.25

Cooldown = tuple[str | None, float, str]


@final
class SharedState:
    """Shared slots, cooldowns and instance count for one instance (see the module doc)."""

    def __init__(
        self,
        settings: Settings,
        resilience: Resilience,
        cap: int | None,
        upstreams: Sequence[tuple[str, Resilience, int | None]] = (),
    ) -> None:
        assert settings.redis_url is not None
        self.instance_id = new_instance_id()
        self._config = ClusterConfig(
            settings.redis_url,
            prefix=settings.redis_key_prefix.rstrip(":") or "trio-batcher",
            command_timeout_s=settings.redis_timeout_s,
        )
        self._ttl_s = settings.redis_lease_ttl_s
        self._request_timeout_s = settings.request_timeout_s
        self._fail_closed = settings.redis_failure == "closed"
        self._resilience = resilience
        self._cap = cap
        self.fallback = FallbackState()
        # Tenants' rpm, tpm and budgets, leased from Redis (the guard holds it from the start).
        self.tenant_limits = SharedTenantLimits(self.fallback)
        self._slots: ClusterSlots | None = None
        self._semaphore: LeaseSemaphore | None = None
        self._registry: InstanceRegistry | None = None
        self._send, self._recv = trio.open_memory_channel[Cooldown](_COOLDOWN_QUEUE)
        self._published = 0
        self._unpublished = 0
        self._budget: SharedRetryBudget | None = None
        self._cooldown_watch: CooldownWatch | None = None
        self._adaptive: SharedAdaptiveLimit | None = None
        self._link: RedisLink | None = None
        self._requests_to_count = 0
        # The cluster's cache-affinity table, while ``run()`` runs (``upstreams.fleet``).
        self.affinity: SharedAffinity | None = None
        # Each upstream's own resilience and cap (with ``UPSTREAMS_FILE``): its overload
        # cooldowns are shared while ``run()`` runs (``upstream_cooldowns``), and its cap,
        # when it has one, is a lease semaphore of its own, like the gateway's.
        self._upstreams = tuple(upstreams)
        self._upstream_cooldowns: UpstreamCooldowns | None = None
        self.upstream_slots: dict[str, ClusterSlots] = {}
        self._upstream_leases: dict[str, LeaseSemaphore] = {}

    @property
    def link(self) -> RedisLink | None:
        """The Redis link, once ``run()`` has started (for the tenants' spend)."""
        return self._link

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
            self._link = link
            config = self._resilience.config
            registry = InstanceRegistry(link, self.instance_id, ttl_s=self._ttl_s)
            self._registry = registry
            if self._cap is not None:
                self._share_gateway_cap(link, registry, self._cap)
            self._budget = SharedRetryBudget(
                link,
                ratio=config.budget_ratio,
                window_s=config.budget_window_s,
                min_retries=config.budget_min_retries,
            )
            with self._resilience.sharing(self):
                async with trio.open_nursery() as nursery:
                    if self._adaptive is not None:
                        await nursery.start(self._adaptive.run)
                    if self._semaphore is not None:
                        await nursery.start(self._semaphore.run)
                    await nursery.start(registry.run)  # one heartbeat first
                    if registry.last_seen_alive == 0:  # it failed: Redis is down at start
                        self.fallback.report_failure(
                            ClusterUnavailable("no answer from Redis at start")
                        )
                    await nursery.start(self.fallback.run_probe, link.ping)
                    alive = lambda: registry.last_seen_alive  # noqa: E731
                    await nursery.start(self.tenant_limits.run, link, alive)
                    nursery.start_soon(self._publish, SharedCooldowns(link))
                    self._cooldown_watch = CooldownWatch(link, self._resilience)
                    await nursery.start(self._cooldown_watch.run)
                    affinity = SharedAffinity(link, ttl_s=AFFINITY_TTL_S)
                    await nursery.start(affinity.run)
                    self.affinity = affinity
                    if self._upstreams:
                        own = [(name, resilience) for name, resilience, _ in self._upstreams]
                        per_upstream = UpstreamCooldowns(link, own)
                        await nursery.start(per_upstream.run)
                        self._upstream_cooldowns = per_upstream
                    for name, resilience, cap in self._upstreams:
                        if cap is not None:
                            await self._share_cap(nursery, link, registry, name, resilience, cap)
                    nursery.start_soon(self._count_requests_periodically)
                    nursery.start_soon(self._rejoin_after_outages)
                    task_status.started()

    def _share_gateway_cap(self, link: RedisLink, registry: InstanceRegistry, cap: int) -> None:
        """The windows' cap (``BATCH_MAX_CONCURRENCY``) across the cluster, and with
        ``BATCH_ADAPTIVE`` the cluster's adaptive limit on it."""
        config = self._resilience.config
        semaphore = LeaseSemaphore(
            link,
            "upstream",
            cap,
            ttl_s=self._ttl_s,
            instance_id=self.instance_id,
            adaptive=config.adaptive,
            instances_key=registry.key,
        )
        self._semaphore = semaphore
        if config.adaptive:
            self._adaptive = SharedAdaptiveLimit(
                link,
                semaphore,
                self.fallback,
                maximum=cap,
                decrease_factor=config.decrease_factor,
            )
        semaphore.on_reply = self._observe
        self._slots = ClusterSlots(
            semaphore,
            self.fallback,
            registry,
            self._resilience,
            fail_closed=self._fail_closed,
            # The others' probes find Redis within about one interval of ours.
            rejoin_s=2 * self.fallback.probe_interval_s + self._config.command_timeout_s,
            # No upstream call outlives its request's deadline.
            settle_max_s=self._request_timeout_s,
        )

    async def _share_cap(
        self,
        nursery: trio.Nursery,
        link: RedisLink,
        registry: InstanceRegistry,
        name: str,
        resilience: Resilience,
        cap: int,
    ) -> None:
        """One upstream's ``max_concurrency`` across the cluster: a lease semaphore of its
        own (``upstream:<name>``) behind the same fallback as the gateway's cap."""
        semaphore = LeaseSemaphore(
            link,
            f"upstream:{name}",
            cap,
            ttl_s=self._ttl_s,
            instance_id=self.instance_id,
            instances_key=registry.key,
        )
        semaphore.on_reply = lambda _capacity, _epoch, alive: registry.observe(alive)
        self.upstream_slots[name] = ClusterSlots(
            semaphore,
            self.fallback,
            registry,
            resilience,
            fail_closed=self._fail_closed,
            rejoin_s=2 * self.fallback.probe_interval_s + self._config.command_timeout_s,
            settle_max_s=self._request_timeout_s,
        )
        self._upstream_leases[name] = semaphore
        await nursery.start(semaphore.run)

    async def _rejoin_after_outages(self) -> None:
        """After every return to shared, put the calls admitted locally into Redis."""
        while True:
            await self.fallback.wait_mode(Mode.FALLBACK)
            await self.fallback.wait_mode(Mode.SHARED)
            gateway = [self._slots] if self._slots is not None else []
            for slots in (*gateway, *self.upstream_slots.values()):
                try:
                    await slots.rejoin()
                except ClusterUnavailable as exc:
                    self.fallback.report_failure(exc)
                    break

    def _observe(self, capacity: int, epoch: int, alive: int) -> None:
        """Every acquire reply: the instances alive, and the cluster's limit and epoch."""
        assert self._registry is not None
        self._registry.observe(alive)
        if self._adaptive is not None:
            self._adaptive.observe(capacity, epoch)

    # -- SharedResilience (see ``run``) ---------------------------------------------------------

    @property
    def adaptive(self) -> SharedAdaptiveLimit | None:
        return self._adaptive

    def cooldown_opened(self, scope: str | None, seconds: float, reason: str) -> None:
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

    def request_started(self) -> None:
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

    async def spend_retry(self) -> bool:
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
            # None until Redis has answered once: no count seen yet.
            "instances_alive": (self._registry.last_seen_alive or None) if self._registry else None,
            "cap": self._cap,
            "cap_in_force": self._semaphore.seen_capacity if self._semaphore else self._cap,
            "in_flight_seen": leases.in_flight_seen if leases else None,
            "held_here": (leases.held if leases else 0) + (slots.held_locally if slots else 0),
            "waiting_here": leases.waiting if leases else 0,
            "block_here": leases.block if leases else 0,
            "target_here": leases.target if leases else 0,
            "lease_syncs": leases.syncs if leases else 0,
            "leases_lost": leases.leases_lost if leases else 0,
            "renew_failures": leases.renew_failures if leases else 0,
            "cooldowns_published": self._published,
            "cooldowns_unpublished": self._unpublished,
            "cooldowns_adopted": (
                self._cooldown_watch.adopted if self._cooldown_watch is not None else 0
            ),
            "adaptive_limit": self._adaptive.limit if self._adaptive is not None else None,
            "adaptive_reports_dropped": (
                self._adaptive.reports_dropped if self._adaptive is not None else 0
            ),
            "redis": self._link.round_trips() if self._link is not None else None,
            "affinity": self.affinity.statistics() if self.affinity is not None else None,
            "upstream_slots": {
                name: {
                    "cap": leases.capacity,
                    "in_flight_seen": leases.in_flight_seen,
                    "held_here": leases.held + self.upstream_slots[name].held_locally,
                    "waiting_here": leases.waiting,
                    "block_here": leases.block,
                    "target_here": leases.target,
                    "leases_lost": leases.leases_lost,
                }
                for name, semaphore in self._upstream_leases.items()
                for leases in (semaphore.statistics(),)
            },
            "tenant_limits": self.tenant_limits.statistics(),
            "upstream_cooldowns": (
                self._upstream_cooldowns.statistics()
                if self._upstream_cooldowns is not None
                else None
            ),
        }
