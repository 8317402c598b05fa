"""State one simulator app shares between its requests.

Counters and traces (``stats``), the log of received requests (``received``), the prompt
cache, the seeded RNG for latency jitter and fault draws, a bounded memo of replies, the
enforced rate limits, the overload schedule and the overload on demand, the use counts of ``times=N`` directives,
and the message threads it holds (``threads.py``). Trio tasks touch it only between
checkpoints, so no request ever sees another's update half-done.
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Final, final

import trio

from .config import SimulatorConfig
from .faults import Faults
from .files_api import SimulatedFiles
from .overload import OverloadOnDemand, OverloadSchedule
from .prompt import InputUsage, Prompt, PromptCache
from .ratelimit import RateLimits
from .received import ReceivedLog
from .replies import Reply, build_reply
from .sse import Event, render_content
from .stats import SimulatorStats
from .threads import ThreadStore

MEMO_ENTRIES: Final = 512
# Distinct ``times=N`` directives remembered; past this the oldest is forgotten (and would
# fault again). Tests and benchmarks use a handful.
TRANSIENT_ENTRIES: Final = 4096

# Plausible account limits for the anthropic-ratelimit-* headers of resources no enforced
# limit governs.
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
        self.received = ReceivedLog(config.request_log_entries)
        # The Files API's uploads, on disk (``files_api.py``); a reset keeps them.
        self.files = SimulatedFiles()
        self.cache = PromptCache(config.cache_entries)
        self.rng = random.Random(config.seed)
        self._reset_second = -1
        self._reset_at = b""
        # (digest, reply_tokens) -> [reply, its content events or None]; bounded below.
        self._replies: OrderedDict[tuple[bytes, int], _Memo] = OrderedDict()
        self.limits = RateLimits(config.rpm_limit, config.tpm_limit, config.ratelimit_period_s)
        self.overload = OverloadSchedule(config.overload_every_s, config.overload_for_s)
        self.on_demand = OverloadOnDemand()
        # Directive text -> requests it has faulted; bounded by TRANSIENT_ENTRIES.
        self._transient: OrderedDict[str, int] = OrderedDict()
        self.threads = ThreadStore()

    def reset(self) -> None:
        """Zero the counters, empty the request log and the prompt cache, re-seed the RNG,
        refill the rate-limit buckets, restart the overload schedule, end an overload on
        demand, forget ``times=N`` use counts and the held message threads."""
        self.stats.reset()
        self.received.clear()
        self.cache.clear()
        self.rng.seed(self.config.seed)
        self.limits.reset()
        self.overload.reset()
        self.on_demand.stop()
        self._transient.clear()
        self.threads.clear()

    def transient_spent(self, faults: Faults) -> bool:
        """Whether a ``times=N`` directive has already faulted N requests."""
        if faults.times is None:
            return False
        return self._transient.get(faults.describe(), 0) >= faults.times

    def use_transient(self, faults: Faults) -> None:
        """Count one more request faulted by a ``times=N`` directive."""
        if faults.times is None:
            return
        key = faults.describe()
        self._transient[key] = self._transient.get(key, 0) + 1
        self._transient.move_to_end(key)
        if len(self._transient) > TRANSIENT_ENTRIES:
            self._transient.popitem(last=False)

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
        """``request-id`` and the ``anthropic-ratelimit-*`` headers.

        A resource an enforced limit governs reports its bucket exactly (``ratelimit.py``);
        the others report plausible constants whose reset is the next second (and, on a
        429, a remaining of 0).
        """
        wall = time.time()
        now = int(wall)
        if now != self._reset_second:
            self._reset_second = now
            self._reset_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + 1)).encode()
        enforced = self.limits.headers(trio.current_time(), wall) if self.limits.enabled else {}
        headers = [(b"request-id", request_id.encode())]
        busy = self.stats.in_flight
        for name, limit in LIMITS.items():
            if name in enforced:
                limit, remaining, reset_at = enforced[name]
            else:
                remaining = limit - 1 - busy if name == "requests" else limit
                if status == 429:
                    remaining = 0
                reset_at = self._reset_at
            prefix = b"anthropic-ratelimit-" + name.encode()
            headers.append((prefix + b"-limit", str(limit).encode()))
            headers.append((prefix + b"-remaining", str(max(0, remaining)).encode()))
            headers.append((prefix + b"-reset", reset_at))
        return headers
