"""State one simulator app shares between its requests.

Counters and traces (``stats``), the prompt cache, the seeded RNG for latency jitter and
fault draws, and a bounded memo of replies. Trio tasks touch it only between checkpoints,
so no request ever sees another's update half-done.
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Final, final

from .config import SimulatorConfig
from .prompt import InputUsage, Prompt, PromptCache
from .replies import Reply, build_reply
from .sse import Event, render_content
from .stats import SimulatorStats

MEMO_ENTRIES: Final = 512

# Plausible account limits for the anthropic-ratelimit-* headers.
LIMITS: Final = {
    "requests": 4_000,
    "tokens": 2_400_000,
    "input-tokens": 2_000_000,
    "output-tokens": 400_000,
}


@final
class _Memo:
    """A memoised reply and, once a stream needed them, its content events."""

    __slots__ = ("_events", "reply")

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self._events: tuple[Event, ...] | None = None

    def content(self) -> tuple[Event, ...]:
        if self._events is None:
            self._events = render_content(self.reply)
        return self._events


@final
class SimulatorState:
    """Everything one simulator app shares between requests."""

    def __init__(self, config: SimulatorConfig) -> None:
        self.config = config
        self.stats = SimulatorStats()
        self.cache = PromptCache(config.cache_entries)
        self.rng = random.Random(config.seed)
        self._reset_second = -1
        self._reset_at = b""
        # (digest, reply_tokens) -> [reply, its content events or None]; bounded below.
        self._replies: OrderedDict[tuple[bytes, int], _Memo] = OrderedDict()

    def reset(self) -> None:
        """Zero the counters, empty the prompt cache and re-seed the RNG."""
        self.stats.reset()
        self.cache.clear()
        self.rng.seed(self.config.seed)

    def reply(
        self, body: dict[str, Any], prompt: Prompt, usage: InputUsage, reply_tokens: int
    ) -> tuple[Reply, Callable[[], tuple[Event, ...]]]:
        """``build_reply`` memoised on what it depends on (the digest covers the body), and
        the reply's content events, rendered at most once.

        Benchmarks repeat a few prompts many times; this keeps them off the slow path.
        """
        key = (prompt.digest, reply_tokens)
        memo = self._replies.get(key)
        if memo is None:
            memo = self._replies[key] = _Memo(
                build_reply(
                    body, digest=prompt.digest, input_usage=usage, reply_tokens=reply_tokens
                )
            )
            if len(self._replies) > MEMO_ENTRIES:
                self._replies.popitem(last=False)
        else:
            self._replies.move_to_end(key)
        return replace(memo.reply, input_usage=usage), memo.content

    def response_headers(self, request_id: str, status: int) -> list[tuple[bytes, bytes]]:
        """``request-id`` and the rate-limit headers (reset: the next second, RFC 3339)."""
        now = int(time.time())
        if now != self._reset_second:
            self._reset_second = now
            self._reset_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + 1)).encode()
        headers = [(b"request-id", request_id.encode())]
        busy = self.stats.in_flight
        for name, limit in LIMITS.items():
            remaining = limit - 1 - busy if name == "requests" else limit
            if status == 429:
                remaining = 0
            prefix = b"anthropic-ratelimit-" + name.encode()
            headers.append((prefix + b"-limit", str(limit).encode()))
            headers.append((prefix + b"-remaining", str(max(0, remaining)).encode()))
            headers.append((prefix + b"-reset", self._reset_at))
        return headers
