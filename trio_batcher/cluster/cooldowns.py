"""Shared cooldowns: one Redis key per scope whose PX TTL is the time new calls stay held.

A 529 ``retry-after`` (the shared cooldown, scope ``None``), a 429 or an
``anthropic-ratelimit-*-remaining: 0`` hold (scope = the model) seen by one instance hold new
calls on every instance. The key's value is the reason (``"rate_limited"`` /
``"overloaded"``), so whoever reads it can answer 429 or 503 honestly.

A hold only ever extends: the script sets the key only when the new TTL is longer than the
remaining one (the in-process ``Cooldown`` moves only later too). TTLs are counted by the
Redis server, so every instance sees the same end whatever its own clock says.

The admission path needs no call here: ``LeaseSemaphore.acquire`` reads both keys that hold
its caller (the shared one and its scope's) inside the acquire script and returns what is
left. ``remaining(scope)`` is for everything else (shedding before a slot is asked for,
metrics).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import final

from .connection import Link, LuaScript

__all__ = ["CooldownView", "SharedCooldowns", "cooldown_keys"]

# KEYS[1] the cooldown key; ARGV[1] milliseconds, ARGV[2] the reason.
# Returns {remaining ms after the call, reason in force}.
HOLD = LuaScript(
    "cooldown_hold",
    """
local ms = tonumber(ARGV[1])
local current = redis.call('PTTL', KEYS[1])
if current < ms then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ms)
  return {ms, ARGV[2]}
end
return {current, redis.call('GET', KEYS[1])}
""",
)

# KEYS the cooldown keys to read. Returns {longest remaining ms (0 if none), its reason or ''}.
# The same loop is inlined in the lease acquire script (see LUA_READ_COOLDOWNS).
LUA_READ_COOLDOWNS = """
local cooldown_ms = 0
local cooldown_reason = ''
for i = KEY_FIRST, #KEYS do
  local left = redis.call('PTTL', KEYS[i])
  if left > cooldown_ms then
    cooldown_ms = left
    cooldown_reason = redis.call('GET', KEYS[i]) or ''
  end
end
"""

REMAINING = LuaScript(
    "cooldown_remaining",
    LUA_READ_COOLDOWNS.replace("KEY_FIRST", "1") + "return {cooldown_ms, cooldown_reason}\n",
)


def cooldown_keys(link: Link, scope: str | None) -> list[str]:
    """The keys holding a call in ``scope``: the shared one, and the scope's own if any."""
    shared = link.key("cooldown", "*")
    return [shared] if scope is None else [shared, link.key("cooldown", "scope", scope)]


@final
@dataclass(frozen=True)
class CooldownView:
    """How long new calls in a scope stay held (0.0 when free), and why (``None`` when free)."""

    remaining_s: float
    reason: str | None

    @classmethod
    def from_reply(cls, milliseconds: int, reason: str) -> CooldownView:
        if milliseconds <= 0:
            return cls(0.0, None)
        return cls(milliseconds / 1000, reason or None)


@final
class SharedCooldowns:
    """Holds on new upstream calls, shared by every instance of one cluster."""

    def __init__(self, link: Link) -> None:
        self._link = link

    async def hold(
        self, scope: str | None, seconds: float, *, reason: str = "rate_limited"
    ) -> CooldownView:
        """Hold new calls in ``scope`` (``None``: every model) for ``seconds`` from now,
        unless an existing hold of that key lasts longer. Returns the hold now in force on
        that key.

        Raises:
          ClusterUnavailable: the hold may or may not have been set.
        """
        milliseconds = max(1, round(seconds * 1000))
        key = cooldown_keys(self._link, scope)[-1]
        left, in_force = await self._link.run(HOLD, [key], [milliseconds, reason])
        return CooldownView.from_reply(int(left), str(in_force))

    async def remaining(self, scope: str | None) -> CooldownView:
        """The longest hold on a call in ``scope``: the shared one or the scope's own.

        Raises:
          ClusterUnavailable
        """
        left, reason = await self._link.run(REMAINING, cooldown_keys(self._link, scope), [])
        return CooldownView.from_reply(int(left), str(reason))
