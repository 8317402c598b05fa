"""The Lua scripts of the tenants' shared buckets (``tenant_buckets.py`` has the theory of
operation): a token bucket per tenant and limit, and a committed counter per tenant and
budget period. Each is atomic on the Redis server; kept apart so the wire can be read in one
place.
"""

from __future__ import annotations

from .connection import LUA_NOW_MS, LuaScript

__all__ = ["BUDGET_TAKE", "RATE_TAKE"]

# KEYS: the tenant's bucket (a hash: level, stamp). ARGV: capacity (per minute), settle
# (tokens given back: a returned slice, over-estimates and refunds; negative: a debt), want
# (the slice asked for), need (the least worth taking; 0: settle only).
# Returns {granted, wait_ms until `need` would be there (0 when granted)} as strings.
RATE_TAKE = LuaScript(
    "tenant_rate_take",
    LUA_NOW_MS
    + """
local capacity = tonumber(ARGV[1])
local settle = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local need = tonumber(ARGV[4])
local rate = capacity / 60000
local level = capacity
local saved = redis.call('HMGET', KEYS[1], 'level', 'stamp')
if saved[1] then
  local elapsed = math.max(0, now - tonumber(saved[2]))
  level = math.min(capacity, tonumber(saved[1]) + elapsed * rate)
end
level = math.min(capacity, level + settle)
local granted = 0
local wait_ms = 0
if need > 0 then
  -- A request larger than the whole bucket needs a full bucket, then leaves it in debt.
  local floor = math.min(need, capacity)
  if level >= floor then
    granted = math.max(need, math.min(want, level))
    level = level - granted
  else
    wait_ms = math.ceil((floor - level) / rate)
  end
end
redis.call('HSET', KEYS[1], 'level', string.format('%.17g', level), 'stamp', now)
-- Once refilled the bucket is the same as no key: let it go then.
redis.call('PEXPIRE', KEYS[1], math.ceil((capacity - level) / rate) + 1000)
return {string.format('%.17g', granted), tostring(wait_ms)}
""",
)

# KEYS: the tenant's committed counter for the period, the tenant's spend hash
# (``cluster.spend``). ARGV: budget (nano-dollars), settle (nano-dollars given back; negative:
# spent beyond the slice), want (the slice asked for; 0: settle only), the period's first
# hour, the current hour, TTL seconds. Returns {granted, committed after} (nano-dollars).
BUDGET_TAKE = LuaScript(
    "tenant_budget_take",
    """
local budget = tonumber(ARGV[1])
local settle = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local committed = tonumber(redis.call('GET', KEYS[1]) or '-1')
if committed < 0 then
  -- First use in this period (or Redis lost it): start from what was spent.
  committed = 0
  local first, last = tonumber(ARGV[4]), tonumber(ARGV[5])
  local flat = redis.call('HGETALL', KEYS[2])
  for i = 1, #flat, 2 do
    local hour = tonumber(flat[i])
    if hour >= first and hour <= last then
      committed = committed + tonumber(flat[i + 1])
    end
  end
end
committed = math.max(0, committed - settle)
local granted = 0
if want > 0 and committed < budget then
  granted = math.min(want, budget - committed)
  committed = committed + granted
end
redis.call('SET', KEYS[1], string.format('%.0f', committed), 'EX', ARGV[6])
return {math.floor(granted), math.floor(committed)}
""",
)
