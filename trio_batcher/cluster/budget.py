"""The retry budget, counted across the cluster: retries add at most a fraction to traffic.

The rule is the in-process ``RetryBudget``'s (Finagle's shape): within the window, retries
may number at most ``min_retries + floor(ratio * requests)``, where ``requests`` counts
first attempts only. Here both counts live in Redis, so N instances share one budget
instead of earning N.

Counting. Each count is a hash of per-bucket counters (field = bucket index, the Redis
server's milliseconds // ``bucket_ms``); a window is the current bucket plus the
``buckets - 1`` before it, so it spans between ``window_s - bucket`` and ``window_s``
(``bucket = window_s / buckets``; 10 buckets by default: at most a tenth of the window of
imprecision, and at most ``buckets + 1`` fields per hash). Each script prunes the buckets
that left the window and sets a TTL of twice the window, so an idle cluster leaves nothing.
``try_spend`` checks and spends in one script: concurrent retries on several instances can
never overspend.
"""

from __future__ import annotations

from typing import final

from .connection import LUA_NOW_MS, Link, LuaScript

__all__ = ["SharedRetryBudget"]

# KEYS: requests hash, retries hash. ARGV: op ('request' | 'retry'), bucket ms, buckets,
# ratio, min retries. Returns 1 (recorded / spent) or 0 (budget spent, nothing taken).
BUDGET = LuaScript(
    "retry_budget",
    LUA_NOW_MS
    + """
local bucket_ms = tonumber(ARGV[2])
local buckets = tonumber(ARGV[3])
local bucket = math.floor(now / bucket_ms)
local horizon = bucket - buckets
local function count(key)
  local total = 0
  local flat = redis.call('HGETALL', key)
  for i = 1, #flat, 2 do
    if tonumber(flat[i]) <= horizon then
      redis.call('HDEL', key, flat[i])
    else
      total = total + tonumber(flat[i + 1])
    end
  end
  return total
end
local function add(key, n)
  redis.call('HINCRBY', key, bucket, n)
  redis.call('PEXPIRE', key, 2 * buckets * bucket_ms)
end
if ARGV[1] == 'request' then
  count(KEYS[1])
  add(KEYS[1], tonumber(ARGV[6] or '1'))
  return 1
end
local allowed = tonumber(ARGV[5]) + math.floor(tonumber(ARGV[4]) * count(KEYS[1]) + 1e-9)
if count(KEYS[2]) >= allowed then
  return 0
end
add(KEYS[2], 1)
return 1
""",
)


@final
class SharedRetryBudget:
    """``record_request`` / ``try_spend``, as ``RetryBudget`` has them, across the cluster.

    Args:
      link: the cluster's Redis link.
      ratio: retries allowed per request in the window.
      window_s: the window's length.
      min_retries: retries allowed on top, so a lone request can retry on a quiet server.
      buckets: how finely the window slides.
      name: the budget's name in Redis (one per upstream).
    """

    def __init__(
        self,
        link: Link,
        *,
        ratio: float,
        window_s: float,
        min_retries: int,
        buckets: int = 10,
        name: str = "upstream",
    ) -> None:
        self._link = link
        self._keys = [link.key("budget", name, "requests"), link.key("budget", name, "retries")]
        self._bucket_ms = max(1, round(window_s * 1000 / buckets))
        self._buckets = buckets
        self._ratio = repr(float(ratio))
        self._min = min_retries

    async def _run(self, op: str, n: int = 1) -> bool:
        reply = await self._link.run(
            BUDGET, self._keys, [op, self._bucket_ms, self._buckets, self._ratio, self._min, n]
        )
        return int(reply) == 1

    async def record_request(self, n: int = 1) -> None:
        """``n`` new requests arrived (their first attempts are about to happen, or just
        did: an instance counts them locally and adds them up in one call now and then).

        Raises:
          ClusterUnavailable: they may or may not have been counted.
        """
        await self._run("request", n)

    async def try_spend(self) -> bool:
        """Take one retry from the shared budget; ``False`` (nothing taken) when it is spent.

        Raises:
          ClusterUnavailable: it may or may not have been taken.
        """
        return await self._run("retry")
