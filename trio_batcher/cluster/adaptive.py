"""The adaptive limit (AIMD) of the whole cluster, kept in one Redis hash.

Without Redis, ``upstream.resilience.AdaptiveLimit`` moves one process's limiter: a 529
seen by one instance cuts that instance's concurrency only, and N instances each discover
the upstream's overload for themselves. With ``REDIS_URL`` and ``BATCH_ADAPTIVE`` the limit
is the cluster's, with the same rules (``_aimd.py``: decrease to ``floor(limit * factor)``
once per epoch on an overload; +1 after ``limit`` clean calls in a row; a plain failure ends
the run) applied by one script to one hash ``{prefix}:sem:upstream:limit`` (fields
``limit``, ``epoch``, ``clean``, ``increases``, ``decreases``).

Theory of operation
-------------------
Enforcement costs no round trip: the lease ``ACQUIRE`` script reads the hash and grants
against ``min(cap, limit)``, so the global cap *is* the adaptive limit, exactly; and every
acquire reply carries the limit and its epoch back (``observe``), so every call is stamped
with the cluster's current epoch when it starts.

Outcomes are reported, not awaited. ``on_clean`` / ``on_failure`` / ``on_overload`` are
synchronous (the resilience layer calls them where it classifies a reply) and append to a
short list of operations; ``run()`` sends the list every ``flush_every_s`` in one script
call, and at once when it holds an overload (a cut must reach the others quickly). The
script applies the operations in order, ignoring those stamped with an epoch that is no
longer current -- which is TCP's one-decrease-per-window, cluster-wide: sixteen calls on
three instances meeting the same 529 cut the limit once. Consecutive clean calls of one
epoch are sent as one count, so the cost is one script per quarter second, not per call.

Approximation, by design: within one flush, clean runs between two failures are summed
only up to the failure (an increase needs ``limit`` clean calls, and a run shorter than a
flush's worth of calls rarely earns one); the cluster's run is the sum of every instance's
clean calls, which is what "``limit`` clean calls in a row" means for one shared limit.

The hash expires ``idle_ttl_s`` after the last report: a cluster that has been quiet for
that long starts again from the cap, like a restarted process. While Redis fails, reports
are dropped (counted) and the fallback share (``fallback.py``) is taken of the last limit
seen.
"""

from __future__ import annotations

import logging
from typing import Final, final

import trio

from ..upstream.resilience import AdaptiveStatistics
from .connection import ClusterUnavailable, Link, LuaScript
from .fallback import FallbackState
from .leases import LeaseSemaphore

__all__ = ["SharedAdaptiveLimit"]

logger = logging.getLogger(__name__)

# Flush at once past this many operations (a mix of failures and clean runs).
_MAX_OPS: Final = 64

# KEYS: the limit hash. ARGV: maximum, minimum, factor, idle ttl ms, channel, then triples
# (kind 'c' clean / 'f' failure / 'o' overload, epoch, count).
# Returns {limit, epoch, increases, decreases}. Publishes on the channel when it moved the
# limit, so that every instance syncs its block with it at once: a raise lets waiting heads
# grow, a cut makes each instance grant no more than its new due and give the rest back.
REPORT = LuaScript(
    "adaptive_report",
    """
local maximum = tonumber(ARGV[1])
local minimum = tonumber(ARGV[2])
local factor = tonumber(ARGV[3])
local state = redis.call('HMGET', KEYS[1], 'limit', 'epoch', 'clean', 'increases', 'decreases')
local limit = math.min(maximum, tonumber(state[1]) or maximum)
local epoch = tonumber(state[2]) or 0
local clean = tonumber(state[3]) or 0
local increases = tonumber(state[4]) or 0
local decreases = tonumber(state[5]) or 0
local raised = false
for i = 6, #ARGV, 3 do
  local kind = ARGV[i]
  if tonumber(ARGV[i + 1]) == epoch then
    if kind == 'o' then
      epoch = epoch + 1
      clean = 0
      local cut = math.max(minimum, math.floor(limit * factor + 1e-9))
      if cut ~= limit then
        limit = cut
        decreases = decreases + 1
        raised = true  -- (moved: the channel tells the others either way)
      end
    elseif kind == 'f' then
      clean = 0
    else
      clean = clean + tonumber(ARGV[i + 2])
      while clean >= limit do
        clean = clean - limit
        if limit >= maximum then
          clean = 0
          break
        end
        limit = limit + 1
        increases = increases + 1
        raised = true
      end
    end
  end
end
redis.call('HSET', KEYS[1], 'limit', limit, 'epoch', epoch, 'clean', clean,
  'increases', increases, 'decreases', decreases)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if raised then
  redis.call('PUBLISH', ARGV[5], 'raised')
end
return {limit, epoch, increases, decreases}
""",
)

Op = tuple[str, int, int]


@final
class SharedAdaptiveLimit:
    """The cluster's AIMD limit; duck-types ``AdaptiveLimit`` for ``Resilience``.

    Args:
      link: the cluster's Redis link.
      semaphore: the upstream lease semaphore (built with ``adaptive=True``); its replies
        are fed to ``observe`` by the owner, and its ``seen_capacity`` follows the limit.
      fallback: skip reports while Redis is known to be down, and report failures to it.
      maximum: the cap, where the limit starts and which it never exceeds.
      minimum: the floor, at least 1.
      decrease_factor: the multiplicative decrease, in (0, 1).
      flush_every_s: how often clean runs and failures are sent.
      idle_ttl_s: the hash's lifetime after the last report.
    """

    def __init__(
        self,
        link: Link,
        semaphore: LeaseSemaphore,
        fallback: FallbackState,
        *,
        maximum: int,
        minimum: int = 1,
        decrease_factor: float = 0.9,
        flush_every_s: float = 0.25,
        idle_ttl_s: float = 600.0,
    ) -> None:
        if not 1 <= minimum <= maximum:
            raise ValueError(f"need 1 <= minimum <= maximum, got {minimum}, {maximum}")
        if not 0 < decrease_factor < 1:
            raise ValueError(f"decrease_factor must be in (0, 1), not {decrease_factor}")
        self._link = link
        self._semaphore = semaphore
        self._fallback = fallback
        self._min = minimum
        self._max = maximum
        self._factor = decrease_factor
        self._flush_every_s = flush_every_s
        self._idle_ttl_ms = max(1, round(idle_ttl_s * 1000))
        self._limit = maximum
        self._epoch = 0
        self._increases = 0
        self._decreases = 0
        self._ops: list[Op] = []
        self._overload_sent: int | None = None  # the epoch whose cut is already queued
        self._urgent = trio.Event()
        self.reports_dropped = 0

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def epoch(self) -> int:
        """The cluster's epoch as last seen: stamp a call with it when it starts."""
        return self._epoch

    def observe(self, limit: int, epoch: int) -> None:
        """What Redis said last (an acquire or a report reply): taken as the truth, since
        the hash may have expired and started again from epoch 0."""
        self._limit = max(self._min, min(self._max, limit))
        self._epoch = epoch
        self._semaphore.seen_capacity = self._limit

    # -- the AdaptiveLimit interface (synchronous; see the module docstring) -----------------

    def on_overload(self, epoch: int) -> None:
        if epoch != self._epoch or self._overload_sent == epoch:
            return
        self._overload_sent = epoch
        self._ops.append(("o", epoch, 1))
        self._urgent.set()

    def on_clean(self, epoch: int) -> None:
        if epoch != self._epoch:
            return
        if self._ops and self._ops[-1][0] == "c" and self._ops[-1][1] == epoch:
            self._ops[-1] = ("c", epoch, self._ops[-1][2] + 1)
        else:
            self._append(("c", epoch, 1))

    def on_failure(self, epoch: int) -> None:
        if epoch != self._epoch or (self._ops and self._ops[-1][:2] == ("f", epoch)):
            return
        self._append(("f", epoch, 0))

    def _append(self, op: Op) -> None:
        self._ops.append(op)
        if len(self._ops) >= _MAX_OPS:
            self._urgent.set()

    def statistics(self) -> AdaptiveStatistics:
        """The cluster's limit and counters as of the last reply; ``clean_run`` is this
        instance's clean calls not yet reported."""
        return AdaptiveStatistics(
            limit=self._limit,
            minimum=self._min,
            maximum=self._max,
            epoch=self._epoch,
            clean_run=sum(n for kind, _, n in self._ops if kind == "c"),
            increases=self._increases,
            decreases=self._decreases,
        )

    # -- the reporter ---------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Send the queued outcomes every ``flush_every_s`` (at once for a cut), until
        cancelled. Redis failures are reported to the fallback state and never end it."""
        task_status.started()
        while True:
            with trio.move_on_after(self._flush_every_s):
                await self._urgent.wait()
            self._urgent = trio.Event()
            await self.flush()

    async def flush(self) -> None:
        """Send what is queued, in one script call; dropped (counted) while Redis fails."""
        ops, self._ops = self._ops, []
        if not ops:
            return
        if not self._fallback.shared:
            self.reports_dropped += len(ops)
            return
        args: list[str | int | float] = [
            self._max,
            self._min,
            repr(self._factor),
            self._idle_ttl_ms,
            self._semaphore.limit_channel,
        ]
        for op in ops:
            args.extend(op)
        try:
            limit, epoch, increases, decreases = await self._link.run(
                REPORT, [self._semaphore.limit_key], args
            )
        except ClusterUnavailable as exc:
            self.reports_dropped += len(ops)
            self._fallback.report_failure(exc)
            return
        self._increases, self._decreases = int(increases), int(decreases)
        self.observe(int(limit), int(epoch))
