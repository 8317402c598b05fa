"""Tenant rate limits and budgets shared by every instance: leased slices of one Redis bucket.

Theory of operation
-------------------
With ``REDIS_URL`` a tenant's ``rpm``, ``tpm`` and budget are the cluster's, not each
instance's. Asking Redis on every request would cost a round trip per request (what
issue 30 set out to remove), so each limit is a shared bucket in Redis from which each
instance *leases a slice* and spends it locally (the Doorman / Envoy idea: a coordinator
hands out capacity, the instances pre-filter locally):

- **rpm / tpm**: ``{prefix}:tenant-rate:<rpm|tpm>:<tenant>`` is a token bucket (a hash of
  ``level`` and ``stamp``, refilled lazily at ``limit / 60`` per second on the Redis server's
  clock, full when absent). ``RATE_TAKE`` refills it, applies what the instance settles (a
  returned slice, or a debt), and grants a slice of ``want`` tokens if at least ``need`` are
  there (else nothing, and the milliseconds until ``need`` would be: an honest
  ``Retry-After``). Only the bucket creates tokens, so whatever the instances do with their
  slices, the cluster admits at most the limit per minute plus the burst the bucket held.
- **budgets**: ``{prefix}:tenant-budget:<tenant>:<period start>`` counts the nano-dollars
  *committed* in the period: granted to an instance's slice, or spent beyond one.
  ``BUDGET_TAKE`` starts it, on first use, from what the spend store (``cluster.spend``)
  says was spent in the period, applies the instance's settlement and grants a slice of what
  is left. A request reserves its *estimated* cost (its input tokens at the model's price)
  from the slice before it is admitted and settles to its real cost when its usage is
  known, so the cluster stops admitting once the budget is committed: the overshoot is at
  most the part of the in-flight requests' cost the estimate did not see (their output).

Slices. A slice is sized from recent use: what the instance used per second over about the
last second (``LEAD_S``), at least what the request in hand needs plus one unit for each
request waiting behind it, at most a fraction of the limit divided by the instances alive
(``MAX_SLICE_FRACTION``), so one instance never sits on much of what another could use.
Requests are charged from the slice synchronously; only a request that finds it short
waits, for one round trip (bounded by the link's command deadline), and the requests of one
slice share that wait through a lock instead of each asking. A background task
(``run``, every ``TICK_S``) refills ahead of need a slice that ran below half of its last
grant while in use, and returns a slice (or settles its debt) once it has been idle for
``IDLE_RETURN_S``, so the other instances can use what this one does not. Settlements --
over-estimates given back, under-estimates owed, refunds of requests that never reached
the upstream -- change the local slice (it may go negative: a debt) and reach Redis with
the next call on that slice, whichever it is.

Redis slow or down. A failed call (``ClusterUnavailable``) enters the cluster's fallback
(``FallbackState``): each slice then admits from a local token bucket of its
``fallback_share`` of the limit (the limit divided by the instances last seen alive; 0 for
an instance that has never seen the count, which refuses), starting with what the slice
held, so N instances together stay within the limit, never N times it. A budget in
fallback lets the instance spend what its slice held plus its share of what was left of
the budget at the last answer. When Redis answers again (the fallback's probe) the
slices go back to shared: what was admitted locally beyond the slice is settled into the
shared bucket as a debt (at most one minute's limit for a rate, all of it for a budget). A
call that failed is assumed to have run when that errs towards admitting less: a returned
slice is taken as returned, a debt as not paid (it is sent again).

Fair order. The admission gate's fair queue stays per instance; across instances a
tenant's global limits bound it on every instance at once, so a tenant flooding one
instance spends its own minute, not another tenant's, and the gate on each instance orders
the tenants that are within their limits by weight. Capacity (the upstream cap) is leased
by instance, not by tenant: weights are honoured within each instance's share of the cap.

Without ``REDIS_URL`` none of this runs: ``tenants.TenantRateLimits`` and the spend
ledger are the limits, per instance, as before.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final, final

import trio

from ..tenants.buckets import Limited, LimitName, TokenBucket, limits_needed
from ..tenants.model import Tenant, hour_of
from ..tenants.spend import NANO, OverBudget
from ._tenant_scripts import BUDGET_TAKE, RATE_TAKE
from .connection import ClusterUnavailable, Link
from .fallback import FallbackState, Mode, fallback_share

__all__ = ["SharedTenantCharge", "SharedTenantLimits"]

TICK_S: Final = 0.1
"""How often the background task looks for slices to refill ahead of need or return."""
IDLE_RETURN_S: Final = 1.0
"""A slice unused this long goes back to the shared bucket."""
LEAD_S: Final = 1.0
"""A slice covers about this much of the instance's recent use."""
MAX_SLICE_FRACTION: Final = 0.2
"""At most this fraction of a limit, divided by the instances alive, per slice."""
REFUSAL_CACHE_S: Final = 0.25
"""A refusal from Redis is repeated locally this long (at most its wait) for requests that
need as much or more, instead of asking again."""


@final
class _RateSlice:
    """This instance's slice of one tenant's ``rpm`` or ``tpm`` bucket."""

    __slots__ = (
        "capacity",
        "credit",
        "fallback",
        "grant",
        "held",
        "last_used",
        "lock",
        "outage_used",
        "refused_amount",
        "refused_at",
        "refused_until",
        "refused_wait",
        "used",
        "used_since",
        "waiting",
    )

    def __init__(self, capacity: int, now: float) -> None:
        self.capacity = capacity
        self.held = 0.0  # leased and not used; negative: used beyond the lease (a debt)
        self.lock = trio.Lock()
        self.waiting = 0
        self.grant = 0.0  # the last slice granted
        self.last_used = float("-inf")
        self.used = 0.0  # since used_since: the recent use that sizes the next slice
        self.used_since = now
        self.fallback: TokenBucket | None = None  # while Redis is away
        self.credit = 0.0  # what the fallback bucket started with (already leased)
        self.outage_used = 0.0
        # Redis's last refusal: of ``refused_amount``, at ``refused_at``, ``refused_wait``
        # seconds to wait; answered locally until ``refused_until``.
        self.refused_amount = 0.0
        self.refused_at = self.refused_until = float("-inf")
        self.refused_wait = 0.0

    def use(self, amount: float, now: float) -> None:
        """Take ``amount`` (negative: give back) from wherever this slice admits now."""
        if self.fallback is not None:
            self.fallback.take(amount, now)
            self.outage_used += amount
        else:
            self.held -= amount
        if amount > 0:
            self.used += amount
            self.last_used = now


@final
class _BudgetSlice:
    """This instance's slice of one tenant's budget in one period (nano-dollars)."""

    __slots__ = (
        "extra",
        "grant",
        "held",
        "last_used",
        "lock",
        "over_until",
        "period_start",
        "tenant",
        "used",
        "waiting",
    )

    def __init__(self, period_start: int | None, tenant: Tenant | None = None) -> None:
        self.period_start = period_start
        self.tenant = tenant  # as last seen by a request (its budget, for the idle return)
        self.held = 0  # reserved and not spent; negative: spent beyond the slice
        self.lock = trio.Lock()
        self.waiting = 0
        self.grant = 0
        self.used = 0
        self.last_used = float("-inf")
        self.extra: int | None = None  # while Redis is away: its share of what was left
        self.over_until = float("-inf")  # over budget at the last answer: refused till then


@final
class SharedTenantCharge:
    """What one request took from its tenant's shared slices; settle it once usage is
    known (``tenants.Charge``'s contract, plus the budget's ``settle_cost``)."""

    __slots__ = ("_charged", "_done", "_limits", "_request", "_reserved", "_tenant", "_tokens")

    def __init__(
        self,
        limits: SharedTenantLimits,
        tenant: str,
        request: _RateSlice | None,
        tokens: _RateSlice | None,
        estimate: int,
        reserved_nano: int,
    ) -> None:
        self._limits = limits
        self._tenant = tenant
        self._request = request
        self._tokens = tokens
        self._charged = estimate
        self._reserved = reserved_nano
        self._done = False

    @property
    def tokens_charged(self) -> int:
        return self._charged

    def settle(self, actual_tokens: int) -> None:
        """Move the token charge to ``actual_tokens`` (the running total so far)."""
        if self._done:
            return
        delta = actual_tokens - self._charged
        self._charged = actual_tokens
        if self._tokens is not None and delta:
            self._tokens.use(delta, trio.current_time())

    def settle_cost(self, usd: float) -> None:
        """Move the budget's reservation to the request's real cost (once)."""
        if self._reserved < 0:
            return
        reserved, self._reserved = self._reserved, -1
        self._limits.spend(self._tenant, usd, reserved_nano=reserved)

    def refund(self) -> None:
        """Give back the request, its tokens and its reservation: it never reached the
        upstream."""
        if self._done:
            return
        now = trio.current_time()
        if self._request is not None:
            self._request.use(-1, now)
        if self._tokens is not None:
            self._tokens.use(-self._charged, now)
        self._charged = 0
        self._done = True
        self.settle_cost(0.0)


@final
@dataclass
class _Counters:
    refills: int = 0
    refills_ahead: int = 0
    returns: int = 0
    redis_failures: int = 0
    fallback_admitted: int = 0
    refused_rate: int = 0
    refused_budget: int = 0


@final
class SharedTenantLimits:
    """Every tenant's leased slices on this instance; see the module docstring.

    Built before the link exists (the guard holds it from the start); ``run(link,
    instances)`` connects it and keeps the slices moving. Until then it behaves as in a
    fallback with no count of the instances: it refuses what a limit governs.

    Args:
      fallback: the cluster's shared/fallback state: a failed call enters it, and its
        transitions switch the slices between shared and local.
      clock: the wall clock for budget periods (Unix seconds).
    """

    def __init__(self, fallback: FallbackState, *, clock: Callable[[], float] = time.time) -> None:
        self._fallback = fallback
        self._clock = clock
        self._link: Link | None = None
        self._instances: Callable[[], int] = lambda: 0
        self._rates: dict[tuple[str, LimitName], _RateSlice] = {}
        self._budgets: dict[str, _BudgetSlice] = {}
        # The last committed total and budget each tenant's reply said: a fallback's base.
        self._left: dict[str, int] = {}
        self._counters = _Counters()
        self._keep: frozenset[str] | None = None
        fallback.listeners.append(self._mode_changed)

    # -- the request path ---------------------------------------------------------------

    async def admit(
        self, tenant: Tenant, estimate_tokens: int, estimate_usd: float
    ) -> SharedTenantCharge | Limited | OverBudget:
        """Reserve ``estimate_usd`` of the tenant's budget, then take one request and
        ``estimate_tokens`` from its rate slices; a refusal takes nothing."""
        reserved = -1
        if tenant.budget is not None:
            over = await self._reserve(tenant, nano(estimate_usd))
            if isinstance(over, OverBudget):
                self._counters.refused_budget += 1
                return over
            reserved = over
        slices: dict[LimitName, _RateSlice] = {}
        for limit, per_minute, amount in limits_needed(tenant, estimate_tokens):
            taken = await self._take(tenant.name, limit, per_minute, amount)
            if isinstance(taken, Limited):
                now = trio.current_time()
                for name, done in slices.items():
                    done.use(-(1.0 if name == "rpm" else float(max(0, estimate_tokens))), now)
                if reserved >= 0:
                    self.spend(tenant.name, 0.0, reserved_nano=reserved)
                self._counters.refused_rate += 1
                return taken
            slices[limit] = taken
        return SharedTenantCharge(
            self,
            tenant.name,
            slices.get("rpm"),
            slices.get("tpm"),
            max(0, estimate_tokens),
            reserved,
        )

    def spend(self, tenant: str, usd: float, *, reserved_nano: int = 0) -> None:
        """``usd`` was spent by ``tenant`` (a settled request whose reservation was
        ``reserved_nano``, or a delivered batch): the budget slice moves by the difference."""
        budget = self._budgets.get(tenant)
        if budget is None:
            if not usd:
                return
            budget = self._budgets[tenant] = _BudgetSlice(None)
        budget.held -= nano(usd) - reserved_nano

    async def _take(
        self, tenant: str, limit: LimitName, per_minute: int, amount: float
    ) -> _RateSlice | Limited:
        now = trio.current_time()
        key = (tenant, limit)
        slice_ = self._rates.get(key)
        if slice_ is None:
            slice_ = self._rates[key] = _RateSlice(per_minute, now)
            if not self._shared:
                self._to_fallback(slice_, fresh=True)
        elif slice_.capacity != per_minute:
            slice_.capacity = per_minute
            if slice_.fallback is not None:
                share = fallback_share(per_minute, self._instances())
                slice_.fallback.reconfigure(share, now)
        if slice_.fallback is None and slice_.held >= amount:
            slice_.use(amount, now)
            return slice_
        if slice_.fallback is not None:
            return self._take_locally(tenant, limit, slice_, amount)
        refused = self._still_refused(slice_, amount, now)
        if refused is not None:
            return Limited(tenant, limit, per_minute, refused)
        async with _queued(slice_):
            if slice_.fallback is None and slice_.held < amount:
                refused = self._still_refused(slice_, amount, trio.current_time())
                if refused is None:
                    refused = await self._refill(tenant, limit, slice_, amount)
                if refused is not None:
                    return Limited(tenant, limit, per_minute, refused)
            if slice_.fallback is None:
                slice_.use(amount, trio.current_time())
                return slice_
        return self._take_locally(tenant, limit, slice_, amount)

    @staticmethod
    def _still_refused(slice_: _RateSlice, amount: float, now: float) -> float | None:
        """Seconds to wait if Redis refused at least ``amount`` less than
        ``REFUSAL_CACHE_S`` ago (so a tenant past its limit costs no round trip a request),
        else None."""
        if amount >= slice_.refused_amount and now < slice_.refused_until:
            return max(0.0, slice_.refused_at + slice_.refused_wait - now)
        return None

    def _take_locally(
        self, tenant: str, limit: LimitName, slice_: _RateSlice, amount: float
    ) -> _RateSlice | Limited:
        bucket = slice_.fallback
        assert bucket is not None
        now = trio.current_time()
        if bucket.capacity <= 0:  # no count of the instances: no share is safe
            return Limited(tenant, limit, slice_.capacity, self._fallback.probe_interval_s)
        wait = bucket.wait_for(amount, now)
        if wait > 0:
            return Limited(tenant, limit, slice_.capacity, wait)
        slice_.use(amount, now)
        self._counters.fallback_admitted += 1
        return slice_

    async def _refill(
        self,
        tenant: str,
        limit: LimitName,
        slice_: _RateSlice,
        amount: float,
        *,
        ahead: bool = False,
    ) -> float | None:
        """One ``RATE_TAKE``: settle the slice's debt and ask for enough for ``amount``
        (None: granted, or Redis failed and the slice is local now; else seconds to wait)."""
        link = self._link
        if link is None:
            self._fallback.report_failure(ClusterUnavailable("not connected to Redis yet"))
            return None
        now = trio.current_time()
        settle = min(0.0, slice_.held)  # a debt is paid now; what is held is kept
        held = max(0.0, slice_.held)
        need = max(0.0, amount - held)
        want = self._want(slice_.capacity, need, slice_, now, waiting=slice_.waiting)
        try:
            granted_s, wait_ms = await link.run(
                RATE_TAKE,
                [link.key("tenant-rate", limit, tenant)],
                [slice_.capacity, _num(settle), _num(want), _num(need)],
            )
        except ClusterUnavailable as exc:
            self._counters.redis_failures += 1
            self._fallback.report_failure(exc)  # the debt stays: it is sent again
            return None
        granted = float(granted_s)
        slice_.held -= settle  # paid
        slice_.refused_until = float("-inf")
        if ahead:
            self._counters.refills_ahead += 1
        else:
            self._counters.refills += 1
        if granted <= 0:
            slice_.refused_at, slice_.refused_wait = now, float(wait_ms) / 1000
            slice_.refused_amount = amount
            slice_.refused_until = now + min(REFUSAL_CACHE_S, slice_.refused_wait)
            return slice_.refused_wait
        if slice_.fallback is not None:  # an outage began while asking: keep it for later
            slice_.credit += granted
            slice_.fallback.take(-granted, trio.current_time())
        else:
            slice_.held += granted
        slice_.grant = granted
        slice_.used, slice_.used_since = 0.0, now
        return None

    def _want(
        self, capacity: int, need: float, slice_: _RateSlice, now: float, *, waiting: int
    ) -> float:
        """The slice to ask for: recent use over ``LEAD_S``, at least ``need`` and one
        more unit per waiting request, at most ``MAX_SLICE_FRACTION`` of the limit per
        instance alive (never less than ``need``)."""
        elapsed = max(now - slice_.used_since, 0.1)
        recent = slice_.used / elapsed * LEAD_S
        per_unit = need if need > 0 else 1.0
        most = capacity * MAX_SLICE_FRACTION / max(1, self._instances())
        return max(need, min(max(recent, need + waiting * per_unit), most))

    async def _reserve(self, tenant: Tenant, amount: int) -> int | OverBudget:
        """Reserve ``amount`` nano-dollars of the budget in this slice; returns it, or the
        ``OverBudget`` to answer."""
        budget = tenant.budget
        assert budget is not None
        now = self._clock()
        period_start = budget.period.start(now)
        slice_ = self._budgets.get(tenant.name)
        if slice_ is None:
            slice_ = self._budgets[tenant.name] = _BudgetSlice(period_start)
        elif slice_.period_start is None:
            slice_.period_start = period_start
        elif slice_.period_start != period_start:  # a new period: the old slice is gone
            slice_ = self._budgets[tenant.name] = _BudgetSlice(period_start)
        slice_.tenant = tenant
        if not self._shared and slice_.extra is None:
            self._budget_to_fallback(tenant.name, slice_)
        if slice_.extra is None and slice_.held > 0:
            return self._reserved(slice_, amount)
        if slice_.extra is not None:
            return self._reserve_locally(tenant, slice_, amount)
        if trio.current_time() < slice_.over_until:
            return self._over(tenant, budget.usd)
        async with _queued(slice_):
            if slice_.extra is None and slice_.held <= 0:
                if trio.current_time() < slice_.over_until:
                    return self._over(tenant, budget.usd)
                committed = await self._budget_call(tenant, slice_, max(1, amount))
                if committed is not None and slice_.held <= 0:
                    # Spent (or all of it leased): only a returned slice or a new period
                    # changes that, so ask again no sooner than a slice comes back.
                    slice_.over_until = trio.current_time() + IDLE_RETURN_S
                    return self._over(tenant, committed / NANO)
            if slice_.extra is None:
                return self._reserved(slice_, amount)
        return self._reserve_locally(tenant, slice_, amount)

    @staticmethod
    def _reserved(slice_: _BudgetSlice, amount: int) -> int:
        slice_.held -= amount
        slice_.used += amount
        slice_.last_used = trio.current_time()
        return amount

    def _reserve_locally(
        self, tenant: Tenant, slice_: _BudgetSlice, amount: int
    ) -> int | OverBudget:
        assert slice_.extra is not None and tenant.budget is not None
        if slice_.held + slice_.extra <= 0:
            spent = tenant.budget.usd - (slice_.held + slice_.extra) / NANO
            return self._over(tenant, spent)
        self._counters.fallback_admitted += 1
        return self._reserved(slice_, amount)

    async def _budget_call(
        self, tenant: Tenant, slice_: _BudgetSlice, need: int, *, settle_only: bool = False
    ) -> int | None:
        """One ``BUDGET_TAKE``; the committed total after it (None: Redis failed)."""
        budget = tenant.budget
        assert budget is not None
        link = self._link
        if link is None:
            self._fallback.report_failure(ClusterUnavailable("not connected to Redis yet"))
            return None
        now = self._clock()
        budget_nano = nano(budget.usd)
        held = slice_.held
        settle = held if settle_only else min(0, held)
        want = 0
        if not settle_only:
            most = budget_nano * MAX_SLICE_FRACTION / max(1, self._instances())
            want = round(max(need - max(0, held), min(max(slice_.used, need), most)))
        period_start = slice_.period_start if slice_.period_start is not None else 0
        ttl = max(60, math.ceil(budget.period.next_change(now) - now) + 3600)
        keys = [
            link.key("tenant-budget", tenant.name, str(period_start)),
            link.key("spend", "tenant", tenant.name),
        ]
        args: list[str | int | float] = [
            budget_nano,
            settle,
            want,
            period_start,
            hour_of(now),
            ttl,
        ]
        try:
            granted, committed = await link.run(BUDGET_TAKE, keys, args)
        except ClusterUnavailable as exc:
            self._counters.redis_failures += 1
            if settle > 0:  # a returned slice is taken as returned; a debt is sent again
                slice_.held -= settle
            self._fallback.report_failure(exc)
            return None
        slice_.held -= settle
        if settle_only:
            self._counters.returns += 1
        else:
            self._counters.refills += 1
        self._left[tenant.name] = budget_nano - int(committed)
        if slice_.extra is not None:  # an outage began while asking: keep it for later
            slice_.extra += int(granted)
        else:
            slice_.held += int(granted)
        slice_.grant = int(granted)
        slice_.used = 0
        return int(committed)

    def _over(self, tenant: Tenant, spent_usd: float) -> OverBudget:
        budget = tenant.budget
        assert budget is not None
        now = self._clock()
        next_change = budget.period.next_change(now)
        return OverBudget(
            tenant=tenant.name,
            budget_usd=budget.usd,
            spent_usd=max(spent_usd, budget.usd),
            period=budget.period,
            retry_after_s=max(0.0, next_change - now),
            next_change=next_change,
        )

    # -- shared and fallback -------------------------------------------------------------

    @property
    def _shared(self) -> bool:
        return self._link is not None and self._fallback.shared

    def _mode_changed(self, mode: Mode) -> None:
        if mode is Mode.FALLBACK:
            for slice_ in self._rates.values():
                if slice_.fallback is None:
                    self._to_fallback(slice_, fresh=False)
            for name, budget in self._budgets.items():
                if budget.extra is None:
                    self._budget_to_fallback(name, budget)
        else:
            for slice_ in self._rates.values():
                self._to_shared(slice_)
            for budget in self._budgets.values():
                budget.extra = None  # what was spent beyond the slice is a debt now

    def _to_fallback(self, slice_: _RateSlice, *, fresh: bool) -> None:
        now = trio.current_time()
        share = fallback_share(slice_.capacity, self._instances())
        bucket = TokenBucket(share, now)
        start = float(share) if fresh else min(float(share), max(0.0, slice_.held))
        bucket.take(share - start, now)
        if not fresh:
            slice_.held = min(0.0, slice_.held)  # what it held is in the bucket; a debt stays
        slice_.fallback = bucket
        slice_.credit = 0.0 if fresh else start
        slice_.outage_used = 0.0

    @staticmethod
    def _to_shared(slice_: _RateSlice) -> None:
        if slice_.fallback is None:
            return
        beyond = max(0.0, slice_.outage_used - slice_.credit)
        slice_.held -= min(float(slice_.capacity), beyond)
        slice_.fallback = None
        slice_.credit = slice_.outage_used = 0.0

    def _budget_to_fallback(self, name: str, slice_: _BudgetSlice) -> None:
        left = max(0, self._left.get(name, 0))
        instances = self._instances()
        slice_.extra = left // instances if instances > 0 else 0

    # -- the background task -------------------------------------------------------------

    async def run(
        self,
        link: Link,
        instances: Callable[[], int],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Connect to ``link`` and, every ``TICK_S`` while shared, refill ahead of need
        and return idle slices, until cancelled. ``instances()`` is the count of
        instances last seen alive (what a fallback divides a limit by)."""
        self._link = link
        self._instances = instances
        if not self._fallback.shared:
            self._mode_changed(Mode.FALLBACK)
        task_status.started()
        try:
            while True:
                await trio.sleep(TICK_S)
                if self._fallback.shared:
                    await self._tend()
        finally:
            self._link = None

    async def _tend(self) -> None:
        now = trio.current_time()
        keep = self._keep
        for (name, limit), slice_ in list(self._rates.items()):
            if slice_.lock.locked() or slice_.fallback is not None:
                continue
            gone = keep is not None and name not in keep
            idle = now - slice_.last_used >= IDLE_RETURN_S
            if (idle or gone) and slice_.held != 0:
                await self._return(name, limit, slice_)
            elif not idle and slice_.held < slice_.grant / 2 and now >= slice_.refused_until:
                async with slice_.lock:
                    await self._refill(name, limit, slice_, slice_.grant / 2, ahead=True)
            if gone and slice_.held == 0:
                del self._rates[name, limit]
            if not self._fallback.shared:
                return
        for name, budget in list(self._budgets.items()):
            tenant = budget.tenant
            if budget.lock.locked() or budget.extra is not None or tenant is None:
                continue
            if tenant.budget is None or (keep is not None and name not in keep):
                del self._budgets[name]
                continue
            if now - budget.last_used >= IDLE_RETURN_S and budget.held != 0:
                async with budget.lock:
                    await self._budget_call(tenant, budget, 0, settle_only=True)
            if not self._fallback.shared:
                return

    async def _return(self, tenant: str, limit: LimitName, slice_: _RateSlice) -> None:
        """Give back what the slice holds (or pay its debt), in one call."""
        link = self._link
        if link is None:
            return
        async with slice_.lock:
            settle = slice_.held
            try:
                await link.run(
                    RATE_TAKE,
                    [link.key("tenant-rate", limit, tenant)],
                    [slice_.capacity, _num(settle), 0, 0],
                )
            except ClusterUnavailable as exc:
                self._counters.redis_failures += 1
                if settle > 0:  # taken as returned; a debt is sent again
                    slice_.held -= settle
                self._fallback.report_failure(exc)
                return
            slice_.held -= settle
            slice_.grant = 0.0
            self._counters.returns += 1

    def prune(self, names: Iterable[str]) -> None:
        """The tenants in force (after a reload): the background task returns the slices
        of the others, then forgets them."""
        self._keep = frozenset(names)

    # -- the observatory -----------------------------------------------------------------

    def statistics(self) -> dict[str, Any]:
        """The ``tenant_limits`` part of ``/metrics``' ``cluster`` block."""
        counters = self._counters
        return {
            "slices_held": sum(1 for s in self._rates.values() if s.held > 0)
            + sum(1 for b in self._budgets.values() if b.held > 0),
            "refills": counters.refills,
            "refills_ahead": counters.refills_ahead,
            "returns": counters.returns,
            "redis_failures": counters.redis_failures,
            "fallback_admitted": counters.fallback_admitted,
            "refused_rate": counters.refused_rate,
            "refused_budget": counters.refused_budget,
        }


@asynccontextmanager
async def _queued(slice_: _RateSlice | _BudgetSlice) -> AsyncIterator[None]:
    """Hold the slice's lock, counted in ``waiting`` while waiting for it (the next
    slice's size counts the requests queued behind it)."""
    slice_.waiting += 1
    try:
        await slice_.lock.acquire()
    finally:
        slice_.waiting -= 1
    try:
        yield
    finally:
        slice_.lock.release()


def nano(usd: float) -> int:
    """Whole nano-dollars (negative amounts are 0)."""
    if not math.isfinite(usd) or usd <= 0:
        return 0
    return round(usd * NANO)


def _num(value: float) -> str:
    return repr(float(value))
