"""Spend per tenant per UTC hour on Redis: the ``SpendStore`` every instance shares.

Same semantics as the SQLite store (``tenants.sqlite_spend``): whole nano-dollars per
tenant per UTC hour, the hour taken from the ``now`` the caller passes (the budgets follow
the calendar of the gateway, as with SQLite, not the Redis server's clock); ``spent`` sums
the hours from ``period.start(now)`` to the hour holding ``now``. With it, N instances
count one total per tenant, so a budget is the cluster's, not N budgets.

Layout. One hash per tenant, ``{prefix}:spend:tenant:<tenant>``, field = the hour's start (Unix
seconds), value = nano-dollars, added to with ``HINCRBY`` (64-bit integers: exact in any
order). A set ``{prefix}:spend:tenants`` names the tenants that have a hash, so
``purge_before`` can find them without a ``SCAN`` of a Redis other clusters may share.
Every command is one Lua script through ``Link.run``, so each is atomic on the server.

Bounded without anyone's help. Each add renews the hash's and the set's expiry to
``RETENTION_S`` (1000 days, longer than the longest budget period the tenants file
accepts: 999 days and the hour more a rolling window reads), so a tenant that stops
spending leaves nothing behind; and the first add of each hour drops that tenant's hours
older than the retention, so a tenant that never stops keeps at most one field per hour
of it. ``purge_before`` still forgets what its caller asks, as SQLite's does.

``spent`` sums in the script (one round trip, whatever the period's length); Lua numbers
are doubles, exact up to 2**53 nano-dollars (about $9 million) per tenant per period.

Failures. Every ``ClusterUnavailable`` becomes the protocol's ``StoreUnavailable``. A
timed-out ``add`` may have run on the server (``RedisLink`` never retries); a caller that
retries it may count that spend twice, which errs towards stopping a tenant early, never
towards letting it overspend.
"""

from __future__ import annotations

from typing import Any, final

from ..store.responses import StoreUnavailable
from ..tenants.ledger import RETENTION_S
from ..tenants.model import BudgetPeriod, hour_of
from ..tenants.spend import NANO, nano_usd
from .connection import ClusterUnavailable, Link, LuaScript

__all__ = ["RedisSpendStore"]

# KEYS: the tenant's hash, the tenants set. ARGV: hour, nano-dollars (> 0), TTL seconds,
# horizon (hours before it are dropped), tenant name. Returns the hour's new total.
ADD = LuaScript(
    "spend_add",
    """
local total = redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])
if total == tonumber(ARGV[2]) then
  local horizon = tonumber(ARGV[4])
  local hours = redis.call('HKEYS', KEYS[1])
  for i = 1, #hours do
    if tonumber(hours[i]) < horizon then
      redis.call('HDEL', KEYS[1], hours[i])
    end
  end
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('SADD', KEYS[2], ARGV[5])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return total
""",
)

# KEYS: the tenant's hash. ARGV: first hour, last hour (both counted). Returns nano-dollars.
SPENT = LuaScript(
    "spend_spent",
    """
local first, last = tonumber(ARGV[1]), tonumber(ARGV[2])
local total = 0
local flat = redis.call('HGETALL', KEYS[1])
for i = 1, #flat, 2 do
  local hour = tonumber(flat[i])
  if hour >= first and hour <= last then
    total = total + tonumber(flat[i + 1])
  end
end
return total
""",
)

# KEYS: the tenants set. Returns its members.
TENANTS = LuaScript("spend_tenants", "return redis.call('SMEMBERS', KEYS[1])\n")

# KEYS: the tenant's hash, the tenants set. ARGV: before (seconds), tenant name.
# Returns the number of hours dropped; a tenant left with none leaves the set.
PURGE = LuaScript(
    "spend_purge",
    """
local before = tonumber(ARGV[1])
local purged = 0
local hours = redis.call('HKEYS', KEYS[1])
for i = 1, #hours do
  if tonumber(hours[i]) < before then
    redis.call('HDEL', KEYS[1], hours[i])
    purged = purged + 1
  end
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SREM', KEYS[2], ARGV[2])
end
return purged
""",
)


@final
class RedisSpendStore:
    """``SpendStore`` on the cluster's Redis: one total per tenant for every instance.

    Args:
      link: the cluster's link (``open_link``); owned by the caller, so ``aclose`` leaves
        it open.
    """

    def __init__(self, link: Link) -> None:
        self._link = link
        # Tenant hashes sit one level below the index, so no tenant name can be its key.
        self._tenants_key = link.key("spend", "tenants")

    def _key(self, tenant: str) -> str:
        return self._link.key("spend", "tenant", tenant)

    async def add(self, tenant: str, usd: float, now: float) -> None:
        """Count ``usd`` (>= 0) against ``tenant`` in the hour holding ``now``.

        Raises:
          ValueError: ``usd`` is negative or not finite (nothing is sent).
          StoreUnavailable: Redis failed; the amount may or may not have been counted.
        """
        amount = nano_usd(usd)
        if not amount:
            return
        hour = hour_of(now)
        horizon = hour_of(now - RETENTION_S)
        args: list[str | int | float] = [hour, amount, RETENTION_S, horizon, tenant]
        await self._run(ADD, [self._key(tenant), self._tenants_key], args)

    async def spent(self, tenant: str, period: BudgetPeriod, now: float) -> float:
        """USD spent by ``tenant`` from ``period.start(now)`` to the hour holding ``now``.

        Raises:
          StoreUnavailable: Redis failed.
        """
        first, last = period.start(now), hour_of(now)
        total = await self._run(SPENT, [self._key(tenant)], [first, last])
        return int(total) / NANO

    async def purge_before(self, before: float) -> int:
        """Forget every tenant's hours that start before ``before``; returns how many.

        Not atomic across tenants (one script per tenant, so each names its keys, as Redis
        Cluster wants); each tenant's purge is.

        Raises:
          StoreUnavailable: Redis failed; the tenants already purged stay purged.
        """
        tenants = await self._run(TENANTS, [self._tenants_key], [])
        purged = 0
        for tenant in sorted(str(t) for t in tenants):
            keys = [self._key(tenant), self._tenants_key]
            purged += int(await self._run(PURGE, keys, [repr(float(before)), tenant]))
        return purged

    async def aclose(self) -> None:
        """Nothing to release: the link belongs to whoever opened it."""

    async def _run(self, script: LuaScript, keys: list[str], args: list[str | int | float]) -> Any:
        try:
            return await self._link.run(script, keys, args)
        except ClusterUnavailable as exc:
            raise StoreUnavailable(str(exc)) from exc
