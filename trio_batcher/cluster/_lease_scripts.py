"""The capacity lease's Lua script (``leases.py`` has the theory of operation).

One script, ``SYNC``, atomic on the Redis server and reading the time from it
(``LUA_NOW_MS``): it is the whole protocol, so the wire can be read in one place. An
instance sends what it keeps of its block, what it uses and what it wants; the script
prunes the instances whose lease expired, works out every instance's fair target, grows
the caller's block from the capacity nobody holds, and says whether anyone should look
again (``PUBLISH`` on the channel). Its cost is O(instances), a handful of commands.
"""

from __future__ import annotations

from .connection import LUA_NOW_MS, LuaScript

__all__ = ["SYNC"]

# KEYS: blocks (hash instance -> slots held), wants (hash instance -> used + waiting),
#       used (hash instance -> slots in use), expiry (zset instance -> lease end, ms),
#       the adaptive limit (a hash), the instance registry (a zset).
# ARGV: instance, capacity, ttl ms, channel, '1' to obey the adaptive limit,
#       keep (slots of its block the caller keeps; never below its use), used, want,
#       '1' when the caller believes Redis holds a block of its, '1' when it has been idle
#       since its last sync (it gives everything back and leaves).
# Returns {the caller's block, its target, the capacity in force, the adaptive epoch,
#          instances alive, every block summed, the others' blocks, 1 if the caller's lease
#          had expired, every instance's use summed, the other instances short of their
#          target, the other instances wanting more than they hold}.
SYNC = LuaScript(
    "lease_sync",
    LUA_NOW_MS
    + """
local me = ARGV[1]
local capacity = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local channel = ARGV[4]
local keep = tonumber(ARGV[6])
local used = tonumber(ARGV[7])
local want = tonumber(ARGV[8])
local epoch = 0
if ARGV[5] == '1' then
  local adaptive = redis.call('HMGET', KEYS[5], 'limit', 'epoch')
  if adaptive[1] then
    capacity = math.min(capacity, tonumber(adaptive[1]))
    epoch = tonumber(adaptive[2]) or 0
  end
end
local alive = redis.call('ZCOUNT', KEYS[6], '(' .. now, '+inf')

-- Instances whose lease ran out (crashed, or cut off from Redis for a whole TTL): their
-- blocks go back to the pool.
local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
for _, name in ipairs(dead) do
  redis.call('HDEL', KEYS[1], name)
  redis.call('HDEL', KEYS[2], name)
  redis.call('HDEL', KEYS[3], name)
end
if #dead > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
end
local lost = 0
if ARGV[9] == '1' and redis.call('HEXISTS', KEYS[1], me) == 0 then
  lost = 1
end
-- Idle since its last renewal: it gives its whole block back and leaves the split.
if ARGV[10] == '1' then
  local stored = tonumber(redis.call('HGET', KEYS[1], me)) or 0
  for i = 1, 3 do redis.call('HDEL', KEYS[i], me) end
  redis.call('ZREM', KEYS[4], me)
  if stored > 0 then redis.call('PUBLISH', channel, me) end
  local total, in_use = 0, 0
  for _, v in ipairs(redis.call('HVALS', KEYS[1])) do total = total + tonumber(v) end
  for _, v in ipairs(redis.call('HVALS', KEYS[3])) do in_use = in_use + tonumber(v) end
  return {0, 0, capacity, epoch, alive, total, total, lost, in_use, 0, 0}
end
-- Was the caller short of what it wants at its last sync? (Its news is only a change.)
local wanted_before = (tonumber(redis.call('HGET', KEYS[2], me)) or 0)
    > (tonumber(redis.call('HGET', KEYS[1], me)) or 0)
redis.call('HSET', KEYS[2], me, want)
redis.call('HSET', KEYS[3], me, used)
redis.call('ZADD', KEYS[4], now + ttl, me)

local names = redis.call('HKEYS', KEYS[2])
table.sort(names)
local n = #names
local wants = redis.call('HMGET', KEYS[2], unpack(names))
local blocks = redis.call('HMGET', KEYS[1], unpack(names))
local uses = redis.call('HMGET', KEYS[3], unpack(names))
local total_want, sum_blocks, sum_used, mine = 0, 0, 0, 0
for i = 1, n do
  wants[i] = tonumber(wants[i]) or 0
  blocks[i] = tonumber(blocks[i]) or 0
  total_want = total_want + wants[i]
  sum_blocks = sum_blocks + blocks[i]
  sum_used = sum_used + (tonumber(uses[i]) or 0)
  if names[i] == me then mine = i end
end

-- Targets. When everyone's want fits, each gets it plus an even part of what is left (a
-- burst then needs no round trip). When it does not, max-min fair shares: an equal part
-- for each instance that wants any, what one of them does not want going to the others in
-- equal parts again. Busy instances hold steady equal blocks however their queues move,
-- so a binding cap is not rebalanced back and forth. What cannot be split evenly (a
-- remainder, or fewer slots than instances) goes by turns: the order starts one instance
-- further every second, so nobody starves.
local order = {}
local shift = math.floor(now / 1000) % n
for k = 1, n do order[k] = (k + shift - 1) % n + 1 end
local targets = {}
if total_want <= capacity then
  local spare = capacity - total_want
  local each = math.floor(spare / n)
  local extra = spare % n
  for k = 1, n do
    local i = order[k]
    targets[i] = wants[i] + each
    if k <= extra then targets[i] = targets[i] + 1 end
  end
else
  local left = capacity
  local active = {}
  for k = 1, n do
    local i = order[k]
    targets[i] = 0
    if wants[i] > 0 then active[#active + 1] = i end
  end
  while left > 0 and #active > 0 do
    local part = math.floor(left / #active)
    if part == 0 then
      for k = 1, left do
        targets[active[k]] = targets[active[k]] + 1
      end
      break
    end
    local still = {}
    for _, i in ipairs(active) do
      local give = math.min(part, wants[i] - targets[i])
      targets[i] = targets[i] + give
      left = left - give
      if targets[i] < wants[i] then still[#still + 1] = i end
    end
    active = still
  end
end

-- The caller's block: what it keeps (it never holds fewer than it uses), grown toward its
-- target from what no instance holds. Never taken from another instance: each gives back
-- by itself, so the blocks add up to at most the capacity.
local stored = blocks[mine]
local others = sum_blocks - stored
local target = targets[mine]
local block = keep
if keep < target and capacity - others > keep then
  block = math.min(target, capacity - others)
end
blocks[mine] = block
redis.call('HSET', KEYS[1], me, block)
sum_blocks = others + block
for i = 1, 4 do
  redis.call('PEXPIRE', KEYS[i], 4 * ttl)
end

-- Tell the others to look again only when it can change something: the caller gave back
-- while another wants more; it is short of its target (those with idle slots give them
-- back); or it has just come to want more than it holds (an instance sitting on idle
-- slots then syncs, and its lower want moves the targets). Never for a state that merely
-- persists, so two busy instances do not wake each other in turn.
local short, wanting = 0, 0
for i = 1, n do
  if i ~= mine then
    if blocks[i] < math.min(wants[i], targets[i]) then short = short + 1 end
    if blocks[i] < wants[i] then wanting = wanting + 1 end
  end
end
if #dead > 0 or (keep < stored and wanting > 0) or block < math.min(want, target)
    or (block < want and not wanted_before) then
  redis.call('PUBLISH', channel, me)
end
return {block, target, capacity, epoch, alive, sum_blocks, others, lost, sum_used, short,
        wanting}
""",
)
