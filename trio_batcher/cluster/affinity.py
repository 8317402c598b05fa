"""Cache affinity across instances: which upstream served a conversation, in Redis.

With several gateway instances behind a load balancer, the turns of one conversation land
on any of them; the upstream whose prompt cache is warm must be the same whichever instance
routes the turn. Each instance keeps its own ``upstreams.AffinityTable`` (the hot path:
no round trip for a conversation it served itself) and this module shares it:

- ``remember(key, upstream)`` is called where a turn succeeded; it must not wait, so it
  queues the entry (bounded: when full, the entry is dropped and counted; the next turn
  remembers it again) for ``run()``'s writer, which sets one key per conversation with the
  table's TTL (``PX``: Redis' clock expires it, whatever each instance's says);
- ``recall(key)`` is asked only when the local table has no entry: one GET, within the
  link's command deadline; any failure is "not known" (the request is routed by weight,
  never failed or held up by Redis).

Keys are ``{prefix}:affinity:<conversation key>``; the conversation key is already a
SHA-256 of the tenant and the conversation's prefix, so nothing about a prompt or a tenant
is readable from Redis.
"""

from __future__ import annotations

from typing import Any, Final, final

import trio

from .connection import ClusterUnavailable, Link, LuaScript

__all__ = ["SharedAffinity"]

_QUEUE: Final = 256

# KEYS[1] the conversation's key; ARGV[1] the upstream, ARGV[2] milliseconds to keep it.
_REMEMBER = LuaScript("affinity_remember", "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])")
# KEYS[1] the conversation's key. Returns the upstream or false.
_RECALL = LuaScript("affinity_recall", "return redis.call('GET', KEYS[1])")


@final
class SharedAffinity:
    """The cluster's affinity table (see the module doc). ``run()`` owns the writer."""

    def __init__(self, link: Link, *, ttl_s: float) -> None:
        self._link = link
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._send, self._recv = trio.open_memory_channel[tuple[str, str]](_QUEUE)
        self.recalled = 0
        self.recall_misses = 0
        self.recall_failures = 0
        self.remembered = 0
        self.dropped = 0

    def remember(self, key: str, upstream: str) -> None:
        """Share that ``upstream`` served a turn of ``key``; never waits."""
        try:
            self._send.send_nowait((key, upstream))
        except trio.WouldBlock:
            self.dropped += 1

    async def recall(self, key: str) -> str | None:
        """The upstream another instance (or this one) last recorded for ``key``."""
        try:
            found: Any = await self._link.run(_RECALL, [self._link.key("affinity", key)], [])
        except ClusterUnavailable:
            self.recall_failures += 1
            return None
        if isinstance(found, bytes):
            found = found.decode()
        if not isinstance(found, str) or not found:
            self.recall_misses += 1
            return None
        self.recalled += 1
        return found

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Write what ``remember`` queued, one entry at a time, until cancelled."""
        task_status.started()
        async for key, upstream in self._recv:
            try:
                await self._link.run(
                    _REMEMBER, [self._link.key("affinity", key)], [upstream, self._ttl_ms]
                )
            except ClusterUnavailable:
                self.dropped += 1
            else:
                self.remembered += 1

    def statistics(self) -> dict[str, int]:
        return {
            "recalled": self.recalled,
            "recall_misses": self.recall_misses,
            "recall_failures": self.recall_failures,
            "remembered": self.remembered,
            "dropped": self.dropped,
        }
