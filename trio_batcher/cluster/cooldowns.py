"""Shared cooldowns: one Redis key per scope whose PX TTL is the time new calls stay held.

A 529 ``retry-after`` (the shared cooldown, scope ``None``), a 429 or an
``anthropic-ratelimit-*-remaining: 0`` hold (scope = the model) seen by one instance hold new
calls on every instance. The key's value is the reason (``"rate_limited"`` /
``"overloaded"``), so whoever reads it can answer 429 or 503 honestly.

A hold only ever extends: the script sets the key only when the new TTL is longer than the
remaining one (the in-process ``Cooldown`` moves only later too). TTLs are counted by the
Redis server, so every instance sees the same end whatever its own clock says.

The admission path needs no call here either: slots are granted from a block held locally
(``leases``), so the others' holds come to each instance instead. Every hold is also
indexed (a sorted set of the scopes held, scored by the hold's end) and announced on a
channel; ``CooldownWatch`` reads the index when the channel speaks (and every ``WATCH_S``,
for a message lost in a reconnection) and has this instance's ``Resilience`` adopt each
hold. A hold seen by one instance thus holds the others within a round trip, for one
script per hold and per instance rather than one per request. ``remaining(scope)`` is for
everything else (tests, tools).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final, final

import trio

from ..upstream.resilience import CooldownReason, Resilience
from .connection import LUA_NOW_MS, ClusterUnavailable, Link, LuaScript

__all__ = ["WATCH_S", "CooldownView", "CooldownWatch", "SharedCooldowns", "cooldown_keys"]

logger = logging.getLogger(__name__)

WATCH_S: Final = 1.0

# KEYS[1] the cooldown key, and optionally KEYS[2] the index of holds; ARGV[1]
# milliseconds, ARGV[2] the reason, and with the index ARGV[3] the scope's name in it and
# ARGV[4] the channel to announce the hold on.
# Returns {remaining ms after the call, reason in force}.
HOLD = LuaScript(
    "cooldown_hold",
    LUA_NOW_MS
    + """
local ms = tonumber(ARGV[1])
local current = redis.call('PTTL', KEYS[1])
if current < ms then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ms)
  if KEYS[2] then
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
    redis.call('ZADD', KEYS[2], now + ms, ARGV[3])
    redis.call('PEXPIRE', KEYS[2], ms)
    redis.call('PUBLISH', ARGV[4], ARGV[3])
  end
  return {ms, ARGV[2]}
end
return {current, redis.call('GET', KEYS[1])}
""",
)

# KEYS[1] the index of holds; ARGV[1] the cooldown keys' common start. The keys read are
# named by the index rather than passed (their set is open: one per model); they share
# the cluster's hash tag, so they live with the index.
# Returns {scope, remaining ms, reason, ...} for every hold still in force.
READ_INDEX = LuaScript(
    "cooldown_read_index",
    LUA_NOW_MS
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local out = {}
for _, scope in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local key = ARGV[1] .. scope
  local left = redis.call('PTTL', key)
  if left > 0 then
    out[#out + 1] = scope
    out[#out + 1] = left
    out[#out + 1] = redis.call('GET', key) or ''
  end
end
return out
""",
)

_SHARED_SCOPE: Final = "*"

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
    shared = link.key("cooldown", _SHARED_SCOPE)
    return [shared] if scope is None else [shared, link.key("cooldown", "scope", scope)]


def _index_name(scope: str | None) -> str:
    """A scope's name in the index: its key's end, after ``{prefix}:cooldown:``."""
    return _SHARED_SCOPE if scope is None else f"scope:{scope}"


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
        left, in_force = await self._link.run(
            HOLD,
            [key, self._link.key("cooldown", "index")],
            [milliseconds, reason, _index_name(scope), self._link.key("cooldown", "news")],
        )
        return CooldownView.from_reply(int(left), str(in_force))

    async def remaining(self, scope: str | None) -> CooldownView:
        """The longest hold on a call in ``scope``: the shared one or the scope's own.

        Raises:
          ClusterUnavailable
        """
        left, reason = await self._link.run(REMAINING, cooldown_keys(self._link, scope), [])
        return CooldownView.from_reply(int(left), str(reason))


@final
class CooldownWatch:
    """Brings every hold another instance set to this instance's ``Resilience`` (module
    doc). ``run()`` it in the owner's nursery; Redis failures never end it."""

    def __init__(self, link: Link, resilience: Resilience) -> None:
        self._link = link
        self._resilience = resilience
        self._news = trio.Event()
        self.adopted = 0
        self.reads = 0

    def _on_news(self) -> None:
        self._news.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(
                self._link.listen, self._link.key("cooldown", "news"), self._on_news
            )
            nursery.start_soon(self._watch)
            task_status.started()

    async def _watch(self) -> None:
        base = self._link.key("cooldown", "")
        index = self._link.key("cooldown", "index")
        while True:
            with trio.move_on_after(WATCH_S):
                await self._news.wait()
            self._news = trio.Event()
            try:
                reply = await self._link.run(READ_INDEX, [index], [base])
            except ClusterUnavailable as exc:
                logger.debug("reading the shared cooldowns failed: %s", exc)
                continue
            self.reads += 1
            for i in range(0, len(reply), 3):
                name, milliseconds, reason = str(reply[i]), int(reply[i + 1]), str(reply[i + 2])
                if reason not in ("overloaded", "rate_limited"):
                    continue
                scope = None if name == _SHARED_SCOPE else name.removeprefix("scope:")
                kind: CooldownReason = "overloaded" if reason == "overloaded" else "rate_limited"
                self._resilience.adopt_cooldown(scope, milliseconds / 1000, kind)
                self.adopted += 1
