"""What each tenant has spent, and whether it is over its budget.

Spend is counted per tenant per UTC hour, in whole nano-dollars (10⁻⁹ USD): integers add
up exactly in any order and in any backend (SQLite ``INTEGER``, Redis ``HINCRBY``), where
floats would drift with every request; a nano-dollar is far below the price of a token.
Any budget period is then a sum over hours: the calendar month (UTC) from its first hour,
a rolling ``N``-day window from the hour ``N`` days ago (``BudgetPeriod.start``). So a
reload that changes a tenant's period needs no migration, and a restart loses nothing the
backend kept.

The interface is small on purpose, so a Redis backend (shared by every instance) can sit
behind it: ``add`` after a request's cost is known, ``spent`` before admitting one. Times
are wall-clock Unix seconds (``time.time()``), passed in, since budgets follow the
calendar, not ``trio.current_time()``. Backends raise ``StoreUnavailable`` when they fail;
whether a gateway then serves (fail open) or refuses is the caller's policy.

What a budget guarantees: once the tenant's spend in the period reaches ``budget_usd``,
``check_budget`` says so and new requests are refused until the period moves on. Requests
admitted before that finish and are counted, so the final spend can exceed the budget by
what the tenant had in flight -- the cost of a call is only known once it has been made.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Final, Protocol, final

from ..store.responses import StoreUnavailable
from .model import BudgetPeriod, Tenant, hour_of

__all__ = [
    "MemorySpendStore",
    "OverBudget",
    "SpendStore",
    "StoreUnavailable",
    "check_budget",
    "nano_usd",
]

NANO: Final = 1_000_000_000


def nano_usd(usd: float) -> int:
    """USD as whole nano-dollars (rounded to the nearest); refuses negative or non-finite."""
    if not math.isfinite(usd) or usd < 0:
        raise ValueError(f"a spend must be a finite amount >= 0, got {usd!r}")
    return round(usd * NANO)


class SpendStore(Protocol):
    """Spend per tenant per UTC hour. Safe to cancel: an ``add`` that started is counted
    whole or not at all. Every method raises ``StoreUnavailable`` when the backend fails."""

    async def add(self, tenant: str, usd: float, now: float) -> None:
        """Count ``usd`` (>= 0) against ``tenant`` in the hour holding ``now``."""
        ...

    async def spent(self, tenant: str, period: BudgetPeriod, now: float) -> float:
        """USD spent by ``tenant`` in ``period`` as of ``now``: the hours from
        ``period.start(now)`` to the one holding ``now`` (an instance whose clock is ahead
        may have counted a later hour; it counts once that hour comes)."""
        ...

    async def purge_before(self, before: float) -> int:
        """Forget hours that start before ``before`` (no budget looks back that far)."""
        ...

    async def aclose(self) -> None: ...


@final
class MemorySpendStore:
    """``SpendStore`` in this process's memory: for tests, and for a gateway that accepts
    that a restart resets every budget."""

    def __init__(self) -> None:
        self._hours: defaultdict[str, dict[int, int]] = defaultdict(dict)

    async def add(self, tenant: str, usd: float, now: float) -> None:
        amount = nano_usd(usd)
        if amount:
            hours = self._hours[tenant]
            hour = hour_of(now)
            hours[hour] = hours.get(hour, 0) + amount

    async def spent(self, tenant: str, period: BudgetPeriod, now: float) -> float:
        start, end = period.start(now), hour_of(now)
        hours = self._hours.get(tenant, {})
        return sum(n for hour, n in hours.items() if start <= hour <= end) / NANO

    async def purge_before(self, before: float) -> int:
        purged = 0
        for hours in self._hours.values():
            for hour in [h for h in hours if h < before]:
                del hours[hour]
                purged += 1
        return purged

    async def aclose(self) -> None:
        pass


@final
@dataclass(frozen=True)
class OverBudget:
    """A tenant that has spent its budget: the edge answers 429 ``insufficient_quota``
    (Anthropic dialect: ``rate_limit_error``) with ``message`` and ``Retry-After``."""

    tenant: str
    budget_usd: float
    spent_usd: float
    period: BudgetPeriod
    retry_after_s: float
    next_change: int  # Unix time: the next month, or (rolling) the next hour

    @property
    def message(self) -> str:
        if self.period.monthly:
            until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.next_change))
            when = f"this month (UTC); it resets at {until}"
        else:
            when = f"in the last {self.period.days} days"
        return (
            f"Tenant '{self.tenant}' has reached its {self.period.describe()} budget of "
            f"{_usd(self.budget_usd)}: {_usd(self.spent_usd)} spent {when}."
        )

    @property
    def retry_after_header(self) -> str:
        return str(max(1, math.ceil(self.retry_after_s)))


def _usd(amount: float) -> str:
    """Cents for a dollar or more; below that, enough digits to tell small budgets apart."""
    return f"${amount:,.2f}" if amount >= 1 else f"${amount:.6f}".rstrip("0").rstrip(".")


async def check_budget(store: SpendStore, tenant: Tenant, now: float) -> OverBudget | None:
    """None when ``tenant`` may spend (or has no budget: then the store is not asked).

    ``retry_after_s`` is the earliest time the answer can change: the next month, or for a
    rolling window the next hour, when the oldest hour leaves it.

    Raises:
      StoreUnavailable: the store failed.
    """
    budget = tenant.budget
    if budget is None:
        return None
    spent = await store.spent(tenant.name, budget.period, now)
    if spent < budget.usd:
        return None
    next_change = budget.period.next_change(now)
    return OverBudget(
        tenant=tenant.name,
        budget_usd=budget.usd,
        spent_usd=spent,
        period=budget.period,
        retry_after_s=max(0.0, next_change - now),
        next_change=next_change,
    )
