"""Upstream resilience: retries before the first byte, a shared cooldown, an adaptive limit.

Theory of operation
-------------------
One ``Resilience`` object per process holds what every upstream call shares; each request
runs its upstream call through ``resilience.call(attempt, deadline=...)``, inside its
dispatcher job (so it holds its limiter token throughout, backoffs included).

Per request, a loop of *attempts*:

1. **Cooldown.** Before each attempt (the first too), wait until the cooldowns holding the
   call have passed: the shared one (overloads) and the called model's own (rate limits,
   which Anthropic keeps per model; ``rate_limit_key``). If the cooldown lasts until the request's deadline or later, fail at once with
   an honest ``Retry-After`` (429 if the upstream rate-limited us, 503 if it was
   overloaded) instead of waiting to time out. ``Resilience.shed_error(deadline)`` is the
   same test, for the admission gate to shed before a slot is even taken.
2. **Attempt.** ``attempt()`` is one upstream call. For a stream it is
   ``open_until_content``: open, and read up to the first content event; an ``error`` event
   before that is raised as a ``ProxyError`` like any error status. Only exceptions raised
   *inside* the attempt are retried; after it returns, nothing is.
3. **Record.** Every outcome feeds the shared state: a 529 with ``retry-after`` opens or
   extends the shared cooldown, a 429 the model's, to ``now + retry_after`` (capped at ``max_wait_s``; it never
   shrinks); ``anthropic-ratelimit-*-remaining: 0`` on any response holds new calls until
   that resource's reset, through the model's cooldown; the adaptive limit (if on) sees an
   overload (429 with retry-after, 529, timeout), a clean call, or another failure.
4. **Decide.** Retry only if all of these allow it, in this order: the policy (retryable
   signal -- 429 with retry-after, 529, 500/502/503/504, connect error, timeout -- fewer
   than ``max_retries`` retries so far, a ``retry-after`` no longer than ``max_wait_s``);
   the deadline (the next attempt could start -- after the backoff *and* the cooldown --
   strictly before it); the budget (retries in the last ``budget_window_s`` stay within
   ``budget_min_retries + budget_ratio * requests``). Otherwise the attempt's own error
   propagates unchanged. The backoff is the ``retry-after`` exactly, or full jitter
   ``U[0, min(backoff_cap_s, backoff_base_s * 2**retry))``. Then sleep and go to 1.

Invariants. At most ``1 + max_retries`` attempts per request. No attempt starts while a
cooldown is in force, or at/after the request's deadline. Calls in flight are never
interrupted by a cooldown or a limit decrease: the cooldown gates starts, and a lowered
``CapacityLimiter.total_tokens`` lets holders finish. The cooldown only moves later.

Ownership. Nothing here owns a task: all waiting happens in the caller's task (the
dispatcher job), so the job's cancel scope covers it. Cancellation during a cooldown wait
or a backoff sleep propagates at once and no further attempt starts; the waiting gauge is
restored in ``finally``. The module never imposes a deadline itself: the caller's
``trio.move_on_at(deadline)`` does, and ``deadline`` is passed in only for decisions.

Shared with a cluster (``REDIS_URL``): for as long as ``cluster.SharedState`` runs it holds
``Resilience.sharing(shared)`` open, with itself as the small ``SharedResilience`` protocol
(``_shared``): the cooldowns this process opens are told to it, requests are counted there,
the budget step asks the cluster's budget, and the cluster's adaptive limit decides. The
cooldowns other instances opened come back through ``adopt_cooldown``.

Coordination off (``coordinated=False``): the cooldown and rate-limit holds are ignored, so
each request only honours its own ``retry-after`` -- what independent clients would do.
"""

from __future__ import annotations

from ._aimd import AdaptiveController as AdaptiveController
from ._aimd import AdaptiveLimit as AdaptiveLimit
from ._aimd import AdaptiveStatistics as AdaptiveStatistics
from ._budget import RetryBudget as RetryBudget
from ._config import ResilienceConfig as ResilienceConfig
from ._cooldown import Cooldown as Cooldown
from ._cooldown import CooldownReason as CooldownReason
from ._cooldown import CooldownStatistics as CooldownStatistics
from ._policy import Failure as Failure
from ._policy import Signal as Signal
from ._policy import classify as classify
from ._policy import retry_delay as retry_delay
from ._ratelimit import parse_go_duration as parse_go_duration
from ._ratelimit import ratelimit_hold as ratelimit_hold
from ._resilience import Resilience as Resilience
from ._resilience import ResilienceStatistics as ResilienceStatistics
from ._resilience import rate_limit_key as rate_limit_key
from ._shared import SharedResilience as SharedResilience
from ._stream import EventStream as EventStream
from ._stream import StreamEvent as StreamEvent
from ._stream import StreamStart as StreamStart
from ._stream import open_until_content as open_until_content

__all__ = [
    "AdaptiveController",
    "AdaptiveLimit",
    "AdaptiveStatistics",
    "Cooldown",
    "CooldownReason",
    "CooldownStatistics",
    "EventStream",
    "Failure",
    "Resilience",
    "ResilienceConfig",
    "ResilienceStatistics",
    "RetryBudget",
    "SharedResilience",
    "Signal",
    "StreamEvent",
    "StreamStart",
    "classify",
    "open_until_content",
    "parse_go_duration",
    "rate_limit_key",
    "ratelimit_hold",
    "retry_delay",
]
