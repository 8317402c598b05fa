"""Which instances are alive: a heartbeat registry in one sorted set.

Member = instance id, score = expiry in the Redis server's milliseconds. ``heartbeat()``
prunes the expired ones, re-scores this instance and returns how many are alive, in one
script; ``run()`` heartbeats every ``ttl_s / 3`` and leaves the registry when cancelled
(shielded, best effort: a crashed instance just expires). The count it last saw
(``last_seen_alive``) is what the fallback divides the cap by when Redis is gone, so it is
kept from before the outage, never re-read during one; it is 0 until Redis has answered once
(an instance that starts during an outage knows no count, and takes no share: ``fallback``).
Besides the heartbeat, every lease
acquire reads the count in its own script (``observe``), so a busy instance learns of a new
one at its next acquire rather than up to ``ttl_s / 3`` later: the window in which an outage
could find it dividing by one instance too few is then the time since its last acquire.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
from typing import final

import trio

from .connection import LUA_NOW_MS, ClusterUnavailable, Link, LuaScript

__all__ = ["InstanceRegistry", "new_instance_id"]

logger = logging.getLogger(__name__)

# KEYS: the registry. ARGV: instance id, ttl ms. Returns the instances alive after it.
HEARTBEAT = LuaScript(
    "instance_heartbeat",
    LUA_NOW_MS
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
return redis.call('ZCARD', KEYS[1])
""",
)

# KEYS: the registry. Returns the instances alive now (expired ones are not counted).
ALIVE = LuaScript(
    "instance_alive",
    LUA_NOW_MS + "return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')\n",
)

LEAVE = LuaScript("instance_leave", "return redis.call('ZREM', KEYS[1], ARGV[1])\n")


def new_instance_id() -> str:
    """``host:pid:random``: unique per process, readable in ``redis-cli``."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


@final
class InstanceRegistry:
    """This instance's heartbeat, and the count of instances alive.

    Args:
      link: the cluster's Redis link.
      instance_id: this process's id (``new_instance_id()``).
      ttl_s: how long an instance counts as alive after its last heartbeat.
    """

    def __init__(self, link: Link, instance_id: str, *, ttl_s: float) -> None:
        self._link = link
        self._key = link.key("instances")
        self.instance_id = instance_id
        self.ttl_s = ttl_s
        self._ttl_ms = max(1, round(ttl_s * 1000))
        self.last_seen_alive = 0  # no count seen yet
        self._frozen = False
        self._hold_until = float("-inf")

    def freeze(self) -> None:
        """Keep ``last_seen_alive`` as it is (an outage began): a Redis that comes back
        empty must not make this instance believe it is alone before the others have
        heartbeaten again."""
        self._frozen = True

    def thaw(self) -> None:
        """Redis answers again: take counts again once every live instance has had time to
        heartbeat (``ttl_s``), not before."""
        self._frozen = False
        self._hold_until = trio.current_time() + self.ttl_s

    def _count(self, alive: int) -> None:
        if alive >= 1 and not self._frozen and trio.current_time() >= self._hold_until:
            self.last_seen_alive = alive

    async def heartbeat(self) -> int:
        """Mark this instance alive for ``ttl_s``; returns the instances alive.

        Raises:
          ClusterUnavailable
        """
        alive = int(await self._link.run(HEARTBEAT, [self._key], [self.instance_id, self._ttl_ms]))
        self._count(alive)
        return alive

    @property
    def key(self) -> str:
        """The registry's sorted set (the lease acquire script counts it too)."""
        return self._key

    def observe(self, alive: int) -> None:
        """A count read elsewhere (an acquire reply); 0 means it was not counted."""
        self._count(alive)

    async def alive(self) -> int:
        """The instances alive now, without heartbeating.

        Raises:
          ClusterUnavailable
        """
        alive = int(await self._link.run(ALIVE, [self._key], []))
        self._count(alive)
        return alive

    async def leave(self) -> None:
        """Drop this instance from the registry (on a clean shutdown).

        Raises:
          ClusterUnavailable
        """
        await self._link.run(LEAVE, [self._key], [self.instance_id])

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Heartbeat now and every ``ttl_s / 3`` until cancelled, then leave (shielded).
        Redis failures are logged at DEBUG and never end it."""
        period = self.ttl_s / 3
        try:
            while True:
                try:
                    await self.heartbeat()
                except ClusterUnavailable as exc:
                    logger.debug("heartbeat failed: %s", exc)
                task_status.started()
                task_status = trio.TASK_STATUS_IGNORED
                await trio.sleep(period)
        finally:
            # If Redis does not answer, this instance expires within ttl_s anyway.
            with trio.CancelScope(shield=True), contextlib.suppress(ClusterUnavailable):
                await self.leave()
