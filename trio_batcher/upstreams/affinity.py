"""Which upstream served a conversation, remembered for a while so its next turn goes there.

Anthropic's prompt cache lives in one deployment: a conversation's second turn reads its
first turn's prefix from the cache only on the upstream that wrote it. So the router sends a
continuing conversation back where it went before (``routing``), and this table is that
memory: keyed by a conversation key (``conversation.conversation_key``), bounded in entries
(least recently served dropped first) and in age (an entry not refreshed for ``ttl_s`` is
gone: by then the upstream's cache has expired too, so spreading the next turn by weight
loses nothing). Each served turn refreshes its entry.

The clock is injected (``trio.current_time`` in the gateway, a fake in tests), so expiry is
exact under test. Not thread-safe: one trio thread owns it.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Final, final

__all__ = ["DEFAULT_MAX_ENTRIES", "DEFAULT_TTL_S", "AffinityTable"]

DEFAULT_MAX_ENTRIES: Final = 10_000
DEFAULT_TTL_S: Final = 3600.0


@final
class AffinityTable:
    """conversation key -> the upstream that last served it, LRU-bounded, with a TTL."""

    def __init__(
        self,
        clock: Callable[[], float],
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        ttl_s: float = DEFAULT_TTL_S,
    ) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        if not ttl_s > 0:
            raise ValueError(f"ttl_s must be > 0, got {ttl_s}")
        self._clock = clock
        self._max = max_entries
        self._ttl = ttl_s
        # Kept in the order entries were last served, which (one TTL for all) is also the
        # order they expire in: the front is both the least recent and the first to go.
        self._entries: collections.OrderedDict[str, tuple[str, float]] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> str | None:
        """The upstream that served ``key`` within the TTL, or None."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        upstream, expires = entry
        if self._clock() >= expires:
            del self._entries[key]
            return None
        return upstream

    def served(self, key: str, upstream: str) -> None:
        """Record that ``upstream`` served a turn of ``key``: kept another ``ttl_s``."""
        now = self._clock()
        self._entries[key] = (upstream, now + self._ttl)
        self._entries.move_to_end(key)
        self._expire(now)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def forget_upstream(self, upstream: str) -> None:
        """Drop every conversation ``upstream`` served (it left the configuration)."""
        for key in [k for k, (name, _) in self._entries.items() if name == upstream]:
            del self._entries[key]

    def _expire(self, now: float) -> None:
        while self._entries:
            _, expires = next(iter(self._entries.values()))
            if now < expires:
                return
            self._entries.popitem(last=False)
