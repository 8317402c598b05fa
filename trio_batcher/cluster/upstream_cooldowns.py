"""Each upstream's cooldown, shared by every instance: one upstream's 529 storm, seen once.

With several upstreams (``UPSTREAMS_FILE``) each has its own ``Resilience``, whose
cooldowns hold only its calls. When one instance sees an upstream overloaded (a 529 or 503
with a ``retry-after``), every instance should leave that upstream alone for as long, and
route to the others, rather than each paying a failed attempt to learn it. So:

- an upstream's resilience is *shared* with an ``UpstreamShare`` for as long as the link
  runs (``Resilience.sharing``): the cooldowns it opens for every call (an overload, or a
  rate limit of calls that name no model) are queued for ``run()``'s writer, which sets one
  key per upstream, ``{prefix}:cooldown:upstream:<name>``, with ``PX`` = the hold (only
  ever extended, as the gateway's own cooldowns are: the same script as
  ``cooldowns.HOLD``). A rate limit of one model stays with the instance that saw it:
  each instance learns it from its own next reply, as before.
- ``run()`` also reads every upstream's key, in one script, every ``POLL_S``, and has each
  upstream's resilience adopt what it finds (``Resilience.adopt_cooldown``: held without
  telling the others again). A quarter of a second is well inside any retry-after (whole
  seconds), and costs one round trip per instance per poll, whatever the traffic.

The retry budget and the adaptive limit stay each instance's own for an upstream: the
cluster-wide ones are the gateway cap's (``shared_state``). A Redis that fails only costs the
sharing: every instance keeps its own cooldowns.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from typing import Final, final

import trio

from ..upstream.resilience import AdaptiveController, CooldownReason, Resilience
from .connection import ClusterUnavailable, Link, LuaScript
from .cooldowns import HOLD

__all__ = ["POLL_S", "UpstreamCooldowns"]

POLL_S: Final = 0.25
_QUEUE: Final = 64

# KEYS: one cooldown key per upstream. Returns {pttl, reason} for each, in order.
_READ = LuaScript(
    "upstream_cooldowns_read",
    """
local out = {}
for i = 1, #KEYS do
  out[#out + 1] = redis.call('PTTL', KEYS[i])
  out[#out + 1] = redis.call('GET', KEYS[i]) or ''
end
return out
""",
)


@final
class _UpstreamShare:
    """One upstream's ``SharedResilience``: its cooldowns for every call go to the
    cluster; its budget and adaptive limit stay local."""

    def __init__(self, owner: UpstreamCooldowns, name: str, resilience: Resilience) -> None:
        self._owner = owner
        self._name = name
        self._resilience = resilience

    @property
    def adaptive(self) -> AdaptiveController | None:
        return None

    def cooldown_opened(self, scope: str | None, seconds: float, reason: CooldownReason) -> None:
        if scope is None:
            self._owner.queue(self._name, seconds, reason)

    def request_started(self) -> None:
        pass

    async def spend_retry(self) -> bool:
        return self._resilience.budget.try_spend()


@final
class UpstreamCooldowns:
    """The upstreams' shared cooldowns (module doc); ``run()`` owns the writer and reader."""

    def __init__(self, link: Link, upstreams: Sequence[tuple[str, Resilience]]) -> None:
        self._link = link
        self._upstreams = tuple(upstreams)
        self._send, self._recv = trio.open_memory_channel[tuple[str, float, str]](_QUEUE)
        self.published = 0
        self.unpublished = 0
        self.adopted = 0

    def queue(self, name: str, seconds: float, reason: str) -> None:
        """A cooldown of upstream ``name`` to tell the others; never waits."""
        try:
            self._send.send_nowait((name, seconds, reason))
        except trio.WouldBlock:
            self.unpublished += 1

    def _key(self, name: str) -> str:
        return self._link.key("cooldown", "upstream", name)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Share every upstream's resilience, write and read the keys, until cancelled."""
        with ExitStack() as stack:
            for name, resilience in self._upstreams:
                stack.enter_context(resilience.sharing(_UpstreamShare(self, name, resilience)))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write)
                nursery.start_soon(self._read)
                task_status.started()

    async def _write(self) -> None:
        async for name, seconds, reason in self._recv:
            milliseconds = max(1, round(seconds * 1000))
            try:
                await self._link.run(HOLD, [self._key(name)], [milliseconds, reason])
            except ClusterUnavailable:
                self.unpublished += 1
            else:
                self.published += 1

    async def _read(self) -> None:
        keys = [self._key(name) for name, _ in self._upstreams]
        while True:
            await trio.sleep(POLL_S)
            try:
                reply = await self._link.run(_READ, keys, [])
            except ClusterUnavailable:
                continue
            for (_, resilience), i in zip(self._upstreams, range(0, len(reply), 2), strict=True):
                milliseconds, reason = int(reply[i]), str(reply[i + 1])
                if milliseconds <= 0 or reason not in ("overloaded", "rate_limited"):
                    continue
                seconds = milliseconds / 1000
                if resilience.cooling_until() >= trio.current_time() + seconds - POLL_S:
                    continue  # already held about as long (its own, or adopted before)
                kind: CooldownReason = "overloaded" if reason == "overloaded" else "rate_limited"
                resilience.adopt_cooldown(None, seconds, kind)
                self.adopted += 1

    def statistics(self) -> dict[str, int]:
        return {
            "published": self.published,
            "unpublished": self.unpublished,
            "adopted": self.adopted,
        }
