"""The lease semaphore's Lua scripts (``leases.py`` has the theory of operation).

Each is atomic on the Redis server and reads the time from it (``LUA_NOW_MS``). Kept apart
from the semaphore so the protocol on the wire can be read in one place.
"""

from __future__ import annotations

from .connection import LUA_NOW_MS, LuaScript
from .cooldowns import LUA_READ_COOLDOWNS

__all__ = ["ACQUIRE", "RELEASE", "RENEW"]

# Prune expired leases and tickets; publish when that freed anything. Needs KEYS[1..3] =
# holders, tickets, ticket_expiry and `channel`, `now` in scope.
_LUA_PRUNE = """
local freed = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local stale = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
for _, member in ipairs(stale) do
  redis.call('ZREM', KEYS[2], member)
end
if #stale > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
end
if freed + #stale > 0 then
  redis.call('PUBLISH', channel, 'expired')
end
"""

# KEYS: holders, tickets, ticket_expiry, the adaptive limit (a hash), the instance registry,
# then the cooldown keys holding the caller.
# ARGV: member, capacity, ttl ms, channel, '1' to obey the adaptive limit.
# Returns {1 granted / 0 refused, leases after the call, cooldown ms, cooldown reason,
#          the capacity in force, the adaptive limit's epoch, instances alive}.
ACQUIRE = LuaScript(
    "lease_acquire",
    LUA_NOW_MS
    + """
local member = ARGV[1]
local capacity = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local channel = ARGV[4]
local epoch = 0
if ARGV[5] == '1' then
  local adaptive = redis.call('HMGET', KEYS[4], 'limit', 'epoch')
  if adaptive[1] then
    capacity = math.min(capacity, tonumber(adaptive[1]))
    epoch = tonumber(adaptive[2]) or 0
  end
end
local alive = redis.call('ZCOUNT', KEYS[5], '(' .. now, '+inf')
"""
    + _LUA_PRUNE
    + LUA_READ_COOLDOWNS.replace("KEY_FIRST", "6")
    + """
local held = redis.call('ZCARD', KEYS[1])
local granted = 0
if redis.call('ZSCORE', KEYS[1], member) then
  granted = 1
elseif held < capacity then
  local free = capacity - held
  local rank = redis.call('ZRANK', KEYS[2], member)
  if rank == false then
    rank = redis.call('ZCARD', KEYS[2])
  end
  if rank < free then
    granted = 1
    held = held + 1
  end
end
if granted == 1 then
  redis.call('ZADD', KEYS[1], now + ttl, member)
  redis.call('ZREM', KEYS[2], member)
  redis.call('ZREM', KEYS[3], member)
else
  redis.call('ZADD', KEYS[2], 'NX', now, member)
  redis.call('ZADD', KEYS[3], now + ttl, member)
end
return {granted, held, cooldown_ms, cooldown_reason, capacity, epoch, alive}
""",
)

# KEYS: holders, tickets, ticket_expiry. ARGV: ttl ms, channel, then the members to renew.
# A member missing (its lease expired while this instance could not renew) is added back:
# its call is still running, and counting it keeps others from starting one more. (Or it
# was released after this renewal was sent, and the release ran first: the caller, which
# knows, releases those again.)
# Returns {leases after the call, then the members that had to be added back}.
RENEW = LuaScript(
    "lease_renew",
    LUA_NOW_MS
    + """
local ttl = tonumber(ARGV[1])
local channel = ARGV[2]
"""
    + _LUA_PRUNE
    + """
local added = {}
for i = 3, #ARGV do
  if redis.call('ZADD', KEYS[1], now + ttl, ARGV[i]) == 1 then
    added[#added + 1] = ARGV[i]
  end
end
return {redis.call('ZCARD', KEYS[1]), unpack(added)}
""",
)

# KEYS: holders, tickets, ticket_expiry. ARGV: member, channel.
# Returns 1 when a lease or ticket was dropped (and the channel told), else 0.
RELEASE = LuaScript(
    "lease_release",
    """
local dropped = redis.call('ZREM', KEYS[1], ARGV[1]) + redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if dropped > 0 then
  redis.call('PUBLISH', ARGV[2], 'released')
  return 1
end
return 0
""",
)
