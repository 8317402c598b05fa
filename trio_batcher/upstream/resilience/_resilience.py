"""``Resilience``: the per-process state every upstream call shares, and ``call``, one
request's attempts through it (the rules: the package's theory of operation)."""

from __future__ import annotations

import math
import random
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Final, TypeVar, final, get_args

import trio

from ...errors import ProxyError
from ._aimd import AdaptiveController, AdaptiveLimit
from ._budget import RetryBudget
from ._config import ResilienceConfig
from ._cooldown import Cooldown, CooldownReason
from ._policy import CLEAN, OVERLOAD, Failure, Signal, classify, retry_delay
from ._ratelimit import ratelimit_hold
from ._shared import SharedResilience

__all__ = ["Resilience", "ResilienceStatistics", "rate_limit_key"]

T = TypeVar("T")

_DATED: Final = re.compile(r"^(.+)-20\d{6}$")
# Model cooldowns kept before the expired ones are dropped (their counts are kept).
_MAX_MODEL_COOLDOWNS: Final = 64


def rate_limit_key(model: str) -> str:
    """Which rate limits a call to ``model`` counts against.

    Anthropic limits each model separately (a 429 on Opus says nothing about Haiku); a
    dated id and its alias are the same model.
    """
    dated = _DATED.match(model)
    return dated.group(1) if dated else model


@final
@dataclass(frozen=True)
class ResilienceStatistics:
    """A snapshot for metrics; gauges are ``waiting_for_cooldown``, ``cooldown_remaining``
    and ``current_limit`` (``None`` when adaptive concurrency is off), the rest counters.

    ``requests`` counts requests that made at least one attempt (``shed_by_cooldown`` those
    that made none), so ``attempts / requests`` is the retry amplification the upstream sees.
    """

    requests: int
    attempts: int
    retries: int
    retries_denied_by_budget: int
    retries_denied_by_deadline: int
    shed_by_cooldown: int
    failures_by_signal: Mapping[str, int]
    waiting_for_cooldown: int
    cooldowns_opened: int
    cooldowns_extended: int
    cooldown_remaining: float
    ratelimit_holds: int
    current_limit: int | None
    limit_increases: int
    limit_decreases: int


@final
class Resilience:
    """Everything the upstream calls of one process share: cooldown, budget, adaptive limit.

    Args:
      config: the knobs (see ``ResilienceConfig``).
      limiter: the upstream limiter; required when ``config.adaptive``, whose controller
        takes over its ``total_tokens`` (starting at, and never exceeding, its current value).
      rng: returns floats in [0, 1) for the jitter; inject a seeded one in tests.
      wall_clock: the current UTC instant, to turn RFC 3339 reset times into trio time.

    Raises:
      ValueError: ``config.adaptive`` without a ``limiter``.
    """

    def __init__(
        self,
        config: ResilienceConfig | None = None,
        *,
        limiter: trio.CapacityLimiter | None = None,
        rng: Callable[[], float] | None = None,
        wall_clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.config = config = config or ResilienceConfig()
        self._limiter = limiter
        # Overloads (and rate limits of calls that name no model) hold every call; a rate
        # limit holds only calls to the model it was for.
        self.cooldown = Cooldown(enabled=config.coordinated)
        self._model_cooldowns: dict[str, Cooldown] = {}
        self._dropped_opened = 0
        self._dropped_extended = 0
        self.budget = RetryBudget(
            config.budget_ratio,
            window=config.budget_window_s,
            min_retries=config.budget_min_retries,
        )
        self.adaptive: AdaptiveController | None = None
        self._local_adaptive: AdaptiveLimit | None = None
        if config.adaptive:
            if limiter is None:
                raise ValueError("adaptive concurrency needs the upstream limiter")
            self.adaptive = self._local_adaptive = AdaptiveLimit(
                limiter, decrease_factor=config.decrease_factor
            )
        self._rng = rng or random.random
        self._wall_clock = wall_clock or (lambda: datetime.now(UTC))
        self._requests = 0
        self._attempts = 0
        self._retries = 0
        self._denied_by_budget = 0
        self._denied_by_deadline = 0
        self._shed = 0
        self._waiting = 0
        self._ratelimit_holds = 0
        self._failures: dict[str, int] = dict.fromkeys(get_args(Signal), 0)
        # The cluster, while ``sharing`` is in force: told of every cooldown this process
        # opens and of every request, asked for every retry instead of the local budget.
        self._shared: SharedResilience | None = None

    @contextmanager
    def sharing(self, shared: SharedResilience) -> Iterator[None]:
        """Share this process's upstream state with a cluster for the duration of the block.

        Meanwhile every cooldown this process opens is told to ``shared`` (so it can hold the
        other instances too; cooldowns it adopts from them with ``adopt_cooldown`` are not
        told back), every request is counted there, every retry the policy and the deadline
        allow is asked of the cluster's budget instead of the local one, and with adaptive
        concurrency the cluster's limit (``shared.adaptive``) decides instead of this
        process's: the local limiter is opened to the cap, since the shared limit is enforced
        where the cluster grants its slots. On exit the local budget and limit are back in
        force, the limiter at the local limit.

        Raises:
          RuntimeError: already sharing.
        """
        if self._shared is not None:
            raise RuntimeError("this Resilience is already shared")
        self._shared = shared
        self._use_adaptive(shared.adaptive)
        try:
            yield
        finally:
            self._shared = None
            self._use_adaptive(None)

    def _use_adaptive(self, controller: AdaptiveController | None) -> None:
        """Let ``controller`` (the cluster's limit) decide instead of this process's, or
        ``None`` to take the local one back."""
        if self._local_adaptive is None or self._limiter is None:
            return
        if controller is None:
            self.adaptive = self._local_adaptive
            self._limiter.total_tokens = self._local_adaptive.limit
        else:
            self.adaptive = controller
            self._limiter.total_tokens = self._local_adaptive.statistics().maximum

    def shed_error(self, deadline: float, model: str | None = None) -> ProxyError | None:
        """The error to answer at once if a cooldown holding calls to ``model`` (the shared
        one, or the model's own) lasts until ``deadline`` or later.

        The gate can call this before admitting a request; ``call`` calls it before every
        attempt. The ``Retry-After`` is the cooldown's remaining time, rounded
        up to whole seconds: a 429 when the upstream rate-limited us, a 503 when it said it
        was overloaded. Every error returned counts as one request shed by the cooldown.
        """
        cooldown = self._holding(model)
        until = cooldown.until
        now = trio.current_time()
        if until <= now or until < deadline:
            return None
        self._shed += 1
        wait = max(1, math.ceil(until - now))
        if cooldown.reason == "rate_limited":
            return ProxyError(
                429,
                f"The upstream is rate limiting this gateway; retry after {wait} s.",
                type="rate_limit_error",
                code="upstream_cooldown",
                headers={"Retry-After": str(wait)},
            )
        return ProxyError(
            503,
            f"The upstream is overloaded; retry after {wait} s.",
            code="upstream_cooldown",
            headers={"Retry-After": str(wait)},
        )

    def observe_headers(self, headers: Mapping[str, str], model: str | None = None) -> None:
        """Hold new calls to ``model`` while a rate-limit resource is exhausted (remaining 0).

        The hold lasts until the upstream bucket has refilled as many units as the limiter
        releases at once (one without a limiter), not until it is full again.

        Takes any upstream response's headers (or an upstream error's translated ones). The
        hold is capped at ``max_wait_s`` and, like a cooldown, only ever extends.
        """
        if not self.cooldown.enabled:
            return
        limiter = self._limiter
        units = 1
        if limiter is not None and limiter.total_tokens != math.inf:
            units = max(1, int(limiter.total_tokens))
        hold = ratelimit_hold(headers, self._wall_clock(), units)
        if hold is None or hold <= 0:
            return
        if self._open_cooldown(model, "rate_limited", min(hold, self.config.max_wait_s)):
            self._ratelimit_holds += 1

    def adopt_cooldown(self, scope: str | None, seconds: float, reason: CooldownReason) -> None:
        """A cooldown another instance opened (shared state): hold this process's calls
        too, without telling the others again."""
        if self.cooldown.enabled and seconds > 0:
            wait = min(seconds, self.config.max_wait_s)
            self._cooldown_for(scope, reason).open_until(trio.current_time() + wait, reason)

    def _open_cooldown(self, model: str | None, reason: CooldownReason, seconds: float) -> bool:
        opened = self._cooldown_for(model, reason).open_until(trio.current_time() + seconds, reason)
        if opened and self._shared is not None:
            scope = None if model is None or reason == "overloaded" else model
            self._shared.cooldown_opened(scope, seconds, reason)
        return opened

    def _cooldown_for(self, model: str | None, reason: CooldownReason) -> Cooldown:
        """The cooldown a failure with ``reason`` on a call to ``model`` opens."""
        if model is None or reason == "overloaded":
            return self.cooldown
        key = rate_limit_key(model)
        cooldown = self._model_cooldowns.get(key)
        if cooldown is None:
            if len(self._model_cooldowns) >= _MAX_MODEL_COOLDOWNS:
                self._drop_expired()
            cooldown = self._model_cooldowns[key] = Cooldown(enabled=self.cooldown.enabled)
        return cooldown

    def _holding(self, model: str | None) -> Cooldown:
        """Of the cooldowns that hold calls to ``model``, the one that ends last."""
        cooldown = self.cooldown
        if model is None or not self._model_cooldowns:  # the usual case: no rate limit yet
            return cooldown
        own = self._model_cooldowns.get(rate_limit_key(model))
        if own is not None and own.until > cooldown.until:
            return own
        return cooldown

    def _drop_expired(self) -> None:
        now = trio.current_time()
        for key, cooldown in list(self._model_cooldowns.items()):
            if cooldown.until <= now:
                stats = cooldown.statistics()
                self._dropped_opened += stats.opened
                self._dropped_extended += stats.extended
                del self._model_cooldowns[key]

    def statistics(self) -> ResilienceStatistics:
        cooldowns = [c.statistics() for c in (self.cooldown, *self._model_cooldowns.values())]
        adaptive = self.adaptive.statistics() if self.adaptive is not None else None
        return ResilienceStatistics(
            requests=self._requests,
            attempts=self._attempts,
            retries=self._retries,
            retries_denied_by_budget=self._denied_by_budget,
            retries_denied_by_deadline=self._denied_by_deadline,
            shed_by_cooldown=self._shed,
            failures_by_signal=MappingProxyType(dict(self._failures)),
            waiting_for_cooldown=self._waiting,
            cooldowns_opened=self._dropped_opened + sum(c.opened for c in cooldowns),
            cooldowns_extended=self._dropped_extended + sum(c.extended for c in cooldowns),
            cooldown_remaining=max(c.remaining for c in cooldowns),
            ratelimit_holds=self._ratelimit_holds,
            current_limit=None if adaptive is None else adaptive.limit,
            limit_increases=0 if adaptive is None else adaptive.increases,
            limit_decreases=0 if adaptive is None else adaptive.decreases,
        )

    async def call(
        self,
        attempt: Callable[[], Awaitable[T]],
        *,
        deadline: float,
        headers_of: Callable[[T], Mapping[str, str]] | None = None,
        model: str | None = None,
    ) -> T:
        """Run ``attempt`` until it succeeds, retrying what the policy, deadline and budget allow.

        Before every attempt (the first included) it waits for the cooldowns holding the call
        to pass. Only a ``ProxyError`` raised *by* ``attempt`` is considered for a retry;
        whatever happens to the value after it is returned is the caller's (for a stream:
        everything after the first content event). ``deadline`` (``trio.current_time()``
        scale, may be ``math.inf``) is used for decisions only; enforce it with a cancel
        scope around this call.

        Args:
          attempt: one upstream call; called at most ``1 + config.max_retries`` times.
          deadline: no attempt starts, and no retry is planned, at or after this instant.
          headers_of: the upstream response headers of a successful result, for rate-limit
            awareness (``lambda reply: reply.headers``).
          model: the model called: a rate limit (429, or a resource at 0) then holds only
            calls to that model, while an overload holds every call. ``None``: every
            cooldown is shared.

        Returns:
          The first successful attempt's value.

        Raises:
          ProxyError: the last attempt's error when no retry is allowed, or a 429/503
            ``upstream_cooldown`` with ``Retry-After`` when a cooldown outlasts ``deadline``.
          trio.Cancelled: at any wait (cooldown or backoff); no further attempt starts.
        """
        retries = 0
        while True:
            await self._wait_clear(deadline, model)
            try:
                return await self.attempt(
                    attempt,
                    deadline=deadline,
                    headers_of=headers_of,
                    model=model,
                    first=retries == 0,
                )
            except ProxyError as exc:
                retry_at = self._plan_retry(classify(exc), retries, deadline, model)
                if retry_at is None:
                    raise
                last_error = exc
            if not await self._spend_shared_retry():  # outside the except, as the sleep below
                raise last_error
            retries += 1
            await trio.sleep_until(retry_at)  # outside the except: a Cancelled is not chained

    async def attempt(
        self,
        attempt: Callable[[], Awaitable[T]],
        *,
        deadline: float,
        headers_of: Callable[[T], Mapping[str, str]] | None = None,
        model: str | None = None,
        first: bool = True,
    ) -> T:
        """One attempt, recorded as ``call`` records each of its own (counts, the
        cooldowns a failure opens, the adaptive limit), and never retried here: its
        ``ProxyError`` propagates. For a caller that decides itself where the next attempt
        goes: the fleet, which fails over to another upstream (``upstreams.fleet``).
        ``first``: the request's first attempt anywhere (it earns retry budget)."""
        epoch = self._start_attempt(first=first)
        try:
            result = await attempt()
        except trio.Cancelled:
            if trio.current_time() >= deadline:  # not a client that left: a slow upstream
                self._record_deadline(epoch)
            raise
        except ProxyError as exc:
            self._record_failure(exc, classify(exc), epoch, model)
            raise
        if headers_of is not None:
            self.observe_headers(headers_of(result), model)
        self._record_clean(epoch)
        return result

    async def allow_failover(self, failure: Failure, retries_done: int, deadline: float) -> bool:
        """Whether a request that failed elsewhere with ``failure`` may make its next
        attempt here, now: the policy (a retryable failure, retries left), the deadline and
        this upstream's retry budget -- the budget of the upstream the extra attempt lands
        on, which is the load a retry adds. Counted as a retry (or a denial) here."""
        if not failure.retryable or retries_done >= self.config.max_retries:
            return False
        if trio.current_time() >= deadline:
            self._denied_by_deadline += 1
            return False
        if self._shared is None and not self.budget.try_spend():
            self._denied_by_budget += 1
            return False
        self._retries += 1
        return await self._spend_shared_retry()

    def backoff(self, failure: Failure, retries_done: int) -> float | None:
        """The retry policy's wait before the next attempt after ``failure`` (the
        ``retry-after``, or full jitter with this resilience's own random source), or
        ``None`` when the policy says stop; for a caller that plans its own rounds."""
        return retry_delay(failure, retries_done, self.config, self._rng)

    def cooling_until(self, model: str | None = None) -> float:
        """When the cooldowns holding calls to ``model`` end (trio time; past: none)."""
        return self._holding(model).until

    # -- the steps of call ---------------------------------------------------------------------

    async def _wait_clear(self, deadline: float, model: str | None) -> None:
        """Wait out the cooldowns that hold ``model``, or raise the shed error if they would
        outlast ``deadline``."""
        while True:
            error = self.shed_error(deadline, model)
            if error is not None:
                raise error
            until = self._holding(model).until
            if trio.current_time() >= until:
                return
            self._waiting += 1
            try:
                await trio.sleep_until(until)
            finally:
                self._waiting -= 1

    def _start_attempt(self, *, first: bool) -> int:
        if first:
            # Counted here, not on entry: a request shed by the cooldown never reached the
            # upstream, so it must not earn retry budget or dilute the amplification ratio.
            self._requests += 1
            self.budget.record_request()
            if self._shared is not None:
                self._shared.request_started()
        self._attempts += 1
        return self.adaptive.epoch if self.adaptive is not None else 0

    def _record_clean(self, epoch: int) -> None:
        if self.adaptive is not None:
            self.adaptive.on_clean(epoch)

    def _record_failure(
        self, exc: ProxyError, failure: Failure, epoch: int, model: str | None
    ) -> None:
        self._failures[failure.signal] += 1
        if failure.retry_after is not None and failure.signal in ("rate_limited", "overloaded"):
            wait = min(failure.retry_after, self.config.max_wait_s)
            self._open_cooldown(model, failure.signal, wait)
        self.observe_headers(exc.headers, model)
        if self.adaptive is not None:
            if failure.signal in OVERLOAD:
                self.adaptive.on_overload(epoch)
            elif failure.signal in CLEAN:
                self.adaptive.on_clean(epoch)
            else:
                self.adaptive.on_failure(epoch)

    def _record_deadline(self, epoch: int) -> None:
        """An attempt the request's deadline cut off: an upstream too slow to answer in
        time counts as a timeout, for the statistics and the adaptive limit alike."""
        self._failures["timeout"] += 1
        if self.adaptive is not None:
            self.adaptive.on_overload(epoch)

    def _plan_retry(
        self, failure: Failure, retries_done: int, deadline: float, model: str | None
    ) -> float | None:
        """When to retry (trio time), or ``None``: policy, then deadline, then budget."""
        delay = retry_delay(failure, retries_done, self.config, self._rng)
        if delay is None:
            return None
        retry_at = trio.current_time() + delay
        if max(retry_at, self._holding(model).until) >= deadline:
            self._denied_by_deadline += 1
            return None
        if self._shared is None and not self.budget.try_spend():
            self._denied_by_budget += 1
            return None
        self._retries += 1
        return retry_at

    async def _spend_shared_retry(self) -> bool:
        """The cluster's budget's say on a retry ``_plan_retry`` allowed (while shared only;
        the cluster falls back to the local budget when it cannot be asked)."""
        if self._shared is None or await self._shared.spend_retry():
            return True
        self._retries -= 1
        self._denied_by_budget += 1
        return False
