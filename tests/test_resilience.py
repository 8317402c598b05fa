"""Upstream resilience (issue 7), under virtual time (autojump_clock) with scripted fake upstreams.

Errors are built with the real ``upstream_error`` so the retry decisions are made on exactly
what ``UpstreamClient`` raises in production.
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing

from trio_batcher.errors import ProxyError
from trio_batcher.upstream.errors import upstream_error
from trio_batcher.upstream.resilience import (
    AdaptiveController,
    AdaptiveLimit,
    Cooldown,
    CooldownReason,
    Resilience,
    ResilienceConfig,
    RetryBudget,
    StreamEvent,
    StreamStart,
    classify,
    open_until_content,
    parse_go_duration,
    ratelimit_hold,
    retry_delay,
)

# -- upstream failures, as UpstreamClient raises them --------------------------------------


def _anthropic_error(
    status: int, kind: str, headers: Mapping[str, str] | None = None
) -> ProxyError:
    body = {"type": "error", "error": {"type": kind, "message": f"{kind} ({status})"}}
    return upstream_error(status, body, headers or {})


def overloaded(retry_after: float | None = None) -> ProxyError:
    headers = {} if retry_after is None else {"retry-after-ms": f"{retry_after * 1000:g}"}
    return _anthropic_error(529, "overloaded_error", headers)


def rate_limited(retry_after: float | None = None) -> ProxyError:
    headers = {} if retry_after is None else {"retry-after-ms": f"{retry_after * 1000:g}"}
    return _anthropic_error(429, "rate_limit_error", headers)


def server_error(status: int = 500) -> ProxyError:
    return _anthropic_error(status, "api_error")


def rejected(status: int) -> ProxyError:
    return _anthropic_error(status, "invalid_request_error")


def connect_error() -> ProxyError:
    return ProxyError(
        502, "Could not reach the upstream (ConnectError).", code="upstream_connection_error"
    )


def timeout_error() -> ProxyError:
    return ProxyError(504, "The upstream did not answer in time.", code="upstream_timeout")


# -- a scripted fake upstream ---------------------------------------------------------------


@dataclass
class Step:
    """One attempt: takes ``duration`` seconds, then raises ``error()`` or returns headers."""

    duration: float = 0.0
    error: Callable[[], ProxyError] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Reply:
    headers: Mapping[str, str]
    started_at: float


class FakeUpstream:
    """Plays ``script`` one step per attempt, then ``then`` forever; records attempt times."""

    def __init__(self, script: Iterable[Step] = (), *, then: Step | None = None) -> None:
        self._script: Iterator[Step] = iter(script)
        self._then = then or Step()
        self.starts: list[float] = []
        self.ends: list[float] = []

    async def attempt(self) -> Reply:
        started = trio.current_time()
        self.starts.append(started)
        step = next(self._script, self._then)
        await trio.sleep(step.duration)
        self.ends.append(trio.current_time())
        if step.error is not None:
            raise step.error()
        return Reply(step.headers, started)


def scripted_rng(values: Iterable[float]) -> Callable[[], float]:
    return iter(values).__next__


def _no_jitter() -> float:
    raise AssertionError("this test expects no jitter to be drawn")


async def call(upstream: FakeUpstream, ctx: Resilience, *, deadline: float = math.inf) -> Reply:
    return await ctx.call(upstream.attempt, deadline=deadline, headers_of=lambda r: r.headers)


# -- the policy (pure) ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "signal"),
    [
        (partial(rate_limited, 2.0), "rate_limited"),
        (rate_limited, "spend_limited"),
        (overloaded, "overloaded"),
        (partial(server_error, 500), "server_error"),
        (partial(server_error, 502), "server_error"),
        (partial(server_error, 503), "server_error"),
        (partial(server_error, 504), "timeout"),
        (timeout_error, "timeout"),
        (connect_error, "connect_error"),
        (partial(rejected, 400), "rejected"),
        (partial(rejected, 413), "rejected"),
        (
            lambda: ProxyError(502, "bad JSON", code="upstream_protocol_error"),
            "other",
        ),
    ],
)
def test_classify_names_each_upstream_failure(error: Callable[[], ProxyError], signal: str) -> None:
    assert classify(error()).signal == signal


def test_full_jitter_ceiling_doubles_per_retry_and_is_capped() -> None:
    config = ResilienceConfig(max_retries=10, backoff_base_s=0.5, backoff_cap_s=3.0)
    failure = classify(overloaded())
    ceilings = [retry_delay(failure, n, config, lambda: 1.0) for n in range(5)]
    assert ceilings == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert retry_delay(failure, 10, config, lambda: 1.0) is None  # max_retries reached


def test_retry_after_replaces_the_jitter_and_is_capped() -> None:
    config = ResilienceConfig(max_wait_s=60.0)
    assert retry_delay(classify(overloaded(60.0)), 0, config, _no_jitter) == 60.0
    assert retry_delay(classify(overloaded(61.0)), 0, config, _no_jitter) is None


def test_the_upstreams_x_should_retry_overrides_the_status() -> None:
    """Anthropic says per answer whether a retry can help; its SDKs obey, and so do we."""
    config = ResilienceConfig()

    def with_verdict(error: ProxyError, verdict: str) -> ProxyError:
        error.headers["x-should-retry"] = verdict
        return error

    assert (
        retry_delay(classify(with_verdict(server_error(500), "false")), 0, config, _no_jitter)
        is None
    )
    assert (
        retry_delay(classify(with_verdict(overloaded(1.0), "false")), 0, config, _no_jitter) is None
    )
    assert retry_delay(classify(with_verdict(rejected(409), "true")), 0, config, lambda: 1.0) == 0.5
    assert (
        retry_delay(classify(with_verdict(server_error(500), "maybe")), 0, config, lambda: 1.0)
        == 0.5
    )


# -- the retry loop -------------------------------------------------------------------------


async def test_retry_after_is_honoured_exactly(autojump_clock: trio.testing.MockClock) -> None:
    upstream = FakeUpstream([Step(error=partial(overloaded, 2.0))])
    ctx = Resilience(rng=_no_jitter)
    reply = await call(upstream, ctx)
    assert upstream.starts == [0.0, 2.0]
    assert reply.started_at == trio.current_time() == 2.0
    stats = ctx.statistics()
    assert (stats.requests, stats.attempts, stats.retries) == (1, 2, 1)


async def test_rate_limit_retry_after_ms_is_honoured_exactly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    upstream = FakeUpstream([Step(duration=0.25, error=partial(rate_limited, 1.5))])
    await call(upstream, Resilience(rng=_no_jitter))
    assert upstream.starts == [0.0, 1.75]


async def test_full_jitter_schedule_is_exact_with_a_scripted_rng(
    autojump_clock: trio.testing.MockClock,
) -> None:
    upstream = FakeUpstream(
        [Step(error=partial(server_error, 502)), Step(error=partial(server_error, 503))]
    )
    # Ceilings 0.5 then 1.0; draws 0.5 and 0.25 give waits of 0.25 each.
    await call(upstream, Resilience(rng=scripted_rng([0.5, 0.25])))
    assert upstream.starts == [0.0, 0.25, 0.5]


async def test_full_jitter_schedule_is_exact_with_a_seeded_rng(
    autojump_clock: trio.testing.MockClock,
) -> None:
    upstream = FakeUpstream([Step(error=connect_error), Step(error=overloaded)])
    await call(upstream, Resilience(rng=random.Random(7).random))
    twin = random.Random(7)
    first = 0.0 + twin.random() * 0.5
    second = first + twin.random() * 1.0
    assert upstream.starts == [0.0, first, second]


@pytest.mark.parametrize(
    "error",
    [
        rate_limited,  # a 429 without retry-after is a spend limit
        partial(rejected, 400),
        partial(rejected, 401),
        partial(rejected, 403),
        partial(rejected, 404),
        partial(rejected, 413),
    ],
)
async def test_spend_limits_and_client_errors_are_never_retried(
    autojump_clock: trio.testing.MockClock, error: Callable[[], ProxyError]
) -> None:
    upstream = FakeUpstream(then=Step(error=error))
    ctx = Resilience(rng=_no_jitter)
    with pytest.raises(ProxyError) as caught:
        await call(upstream, ctx)
    assert caught.value.upstream_status == error().upstream_status
    assert upstream.starts == [0.0]
    assert trio.current_time() == 0.0
    assert ctx.statistics().retries == 0


async def test_attempts_stop_at_max_retries_with_the_last_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    upstream = FakeUpstream(
        [Step(error=partial(server_error, 500)), Step(error=partial(server_error, 502))],
        then=Step(error=partial(server_error, 503)),
    )
    with pytest.raises(ProxyError) as caught:
        await call(upstream, Resilience(ResilienceConfig(max_retries=2), rng=lambda: 0.0))
    assert caught.value.upstream_status == 503
    assert len(upstream.starts) == 3


async def test_max_retries_zero_turns_retries_off(autojump_clock: trio.testing.MockClock) -> None:
    upstream = FakeUpstream(then=Step(error=partial(overloaded, 1.0)))
    with pytest.raises(ProxyError):
        await call(upstream, Resilience(ResilienceConfig(max_retries=0)))
    assert upstream.starts == [0.0]


async def test_no_retry_when_the_wait_would_reach_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    upstream = FakeUpstream(then=Step(duration=1.0, error=partial(overloaded, 3.0)))
    ctx = Resilience(rng=_no_jitter)
    with pytest.raises(ProxyError) as caught:
        await call(upstream, ctx, deadline=4.0)  # next attempt would start at exactly 4
    assert caught.value.upstream_status == 529
    assert trio.current_time() == 1.0  # answered as soon as the attempt failed
    assert upstream.starts == [0.0]
    assert ctx.statistics().retries_denied_by_deadline == 1


async def test_retry_after_beyond_max_wait_is_surfaced_and_caps_the_cooldown(
    autojump_clock: trio.testing.MockClock,
) -> None:
    upstream = FakeUpstream(then=Step(error=partial(rate_limited, 120.0)))
    ctx = Resilience(ResilienceConfig(max_wait_s=60.0), rng=_no_jitter)
    with pytest.raises(ProxyError) as caught:
        await call(upstream, ctx)
    assert caught.value.headers["retry-after-ms"] == "120000"  # the client hears the truth
    assert upstream.starts == [0.0]
    assert ctx.cooldown.until == 60.0


async def test_connect_timeout_is_retried_while_the_deadline_allows(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A connect timeout (10 s) leaves time for another attempt; a read timeout, which fires
    # at REQUEST_TIMEOUT_S, does not.
    upstream = FakeUpstream([Step(duration=10.0, error=timeout_error)])
    await call(upstream, Resilience(rng=lambda: 0.0), deadline=30.0)
    assert upstream.starts == [0.0, 10.0]

    late = FakeUpstream(then=Step(duration=30.0, error=timeout_error))
    with pytest.raises(ProxyError):
        await call(late, Resilience(rng=lambda: 0.0), deadline=trio.current_time() + 30.0)
    assert len(late.starts) == 1


async def test_cancellation_during_backoff_stops_everything(
    autojump_clock: trio.testing.MockClock,
) -> None:
    upstream = FakeUpstream(then=Step(error=partial(overloaded, 5.0)))
    ctx = Resilience(rng=_no_jitter)
    with trio.move_on_after(3.0) as scope:
        await call(upstream, ctx)
    assert scope.cancelled_caught
    assert trio.current_time() == 3.0
    await trio.sleep(20.0)
    assert upstream.starts == [0.0]  # no attempt after the cancellation
    stats = ctx.statistics()
    assert (stats.attempts, stats.retries, stats.waiting_for_cooldown) == (1, 1, 0)


async def test_cancellation_while_waiting_for_a_cooldown_leaves_no_waiter(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ctx = Resilience()
    ctx.cooldown.open_until(5.0, "overloaded")
    upstream = FakeUpstream()
    with trio.move_on_after(1.0):
        await call(upstream, ctx)
    await trio.sleep(10.0)
    assert upstream.starts == []
    assert ctx.statistics().waiting_for_cooldown == 0


# -- the retry budget -----------------------------------------------------------------------


async def test_budget_stops_retries_at_the_ratio_when_everything_fails(
    autojump_clock: trio.testing.MockClock,
) -> None:
    upstream = FakeUpstream(then=Step(duration=1.0, error=overloaded))
    ctx = Resilience(
        ResilienceConfig(max_retries=2, budget_ratio=0.1, budget_min_retries=2), rng=lambda: 0.0
    )
    failures: list[int] = []

    async def client() -> None:
        try:
            await call(upstream, ctx)
        except ProxyError as exc:
            failures.append(exc.status)

    async with trio.open_nursery() as nursery:
        for _ in range(100):
            nursery.start_soon(client)

    stats = ctx.statistics()
    assert failures == [503] * 100
    assert stats.retries == 2 + 10  # the floor plus 10% of 100 requests
    assert stats.attempts == 112
    assert stats.retries_denied_by_budget == 100  # 88 first refusals, then the 12 again


async def test_budget_floor_lets_a_lone_request_retry_and_the_window_slides(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ctx = Resilience(ResilienceConfig(budget_min_retries=2, budget_window_s=10.0), rng=lambda: 0.0)
    failing_twice = [Step(error=connect_error), Step(error=connect_error)]

    first = FakeUpstream(failing_twice)
    await call(first, ctx)
    assert len(first.starts) == 3  # a quiet server: both retries come from the floor

    second = FakeUpstream(failing_twice)
    with pytest.raises(ProxyError):
        await call(second, ctx)
    assert len(second.starts) == 1
    assert ctx.statistics().retries_denied_by_budget == 1

    await trio.sleep(10.0)  # the first request's retries leave the window
    third = FakeUpstream(failing_twice)
    await call(third, ctx)
    assert len(third.starts) == 3


async def test_budget_counts_requests_in_a_sliding_window(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget = RetryBudget(0.5, window=10.0, min_retries=0)
    for _ in range(4):
        budget.record_request()
    assert budget.allowed() == 2
    assert budget.try_spend() and budget.try_spend()
    assert not budget.try_spend()
    await trio.sleep(9.0)
    budget.record_request()
    assert budget.allowed() == 2  # floor(0.5 * 5), two already spent
    await trio.sleep(1.0)  # the first four requests and both retries age out
    assert budget.allowed() == 0
    assert not budget.try_spend()


# -- the coordinated cooldown ---------------------------------------------------------------


async def test_no_attempt_starts_during_a_cooldown_and_in_flight_calls_continue(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ctx = Resilience(rng=_no_jitter)
    in_flight = FakeUpstream([Step(duration=5.0)])
    failing = FakeUpstream([Step(duration=0.5, error=partial(overloaded, 2.0))])
    late = [FakeUpstream() for _ in range(3)]
    finished: dict[str, float] = {}

    async def run(name: str, upstream: FakeUpstream, arrive: float) -> None:
        await trio.sleep(arrive)
        await call(upstream, ctx)
        finished[name] = trio.current_time()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, "in_flight", in_flight, 0.0)
        nursery.start_soon(run, "failing", failing, 0.0)
        for i, upstream in enumerate(late):
            nursery.start_soon(run, f"late{i}", upstream, 1.0 + i * 0.5)
        await trio.sleep(1.75)
        assert ctx.statistics().waiting_for_cooldown == 2  # arrived at 1 and 1.5

    # The 529 at t=0.5 opened a cooldown until 2.5: nothing starts before it ends...
    assert failing.starts == [0.0, 2.5]
    assert [u.starts for u in late] == [[2.5], [2.5], [2.5]]
    # ...and the call already in flight was not disturbed.
    assert in_flight.starts == [0.0]
    assert finished["in_flight"] == 5.0
    stats = ctx.statistics()
    assert (stats.cooldowns_opened, stats.cooldowns_extended, stats.waiting_for_cooldown) == (
        1,
        0,
        0,
    )


async def test_a_longer_retry_after_extends_the_cooldown_and_a_shorter_one_does_not(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ctx = Resilience(rng=_no_jitter)
    long_one = FakeUpstream([Step(duration=1.0, error=partial(overloaded, 4.0))])
    short_one = FakeUpstream([Step(duration=2.0, error=partial(overloaded, 1.0))])
    waiter = FakeUpstream()

    async def waiter_arrives() -> None:
        await trio.sleep(1.5)
        await call(waiter, ctx)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call, long_one, ctx)
        nursery.start_soon(call, short_one, ctx)
        nursery.start_soon(waiter_arrives)

    # t=1: cooldown until 5. t=2: retry-after 1 would end at 3, which is earlier: ignored.
    assert ctx.cooldown.until == 5.0
    assert long_one.starts == [0.0, 5.0]
    assert short_one.starts == [0.0, 5.0]
    assert waiter.starts == [5.0]
    stats = ctx.statistics()
    assert (stats.cooldowns_opened, stats.cooldowns_extended) == (1, 0)


async def test_a_waiter_sleeps_on_when_the_cooldown_is_extended(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cooldown = Cooldown()
    assert cooldown.open_until(2.0, "overloaded")
    woke: list[float] = []

    async def wait() -> None:
        await cooldown.wait_until_clear()
        woke.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.sleep(1.0)
        assert cooldown.open_until(6.0, "rate_limited")
        assert not cooldown.open_until(3.0, "overloaded")
    assert woke == [6.0]
    assert cooldown.reason == "rate_limited"
    stats = cooldown.statistics()
    assert (stats.opened, stats.extended, stats.remaining) == (1, 1, 0.0)


@pytest.mark.parametrize(
    ("error", "status"), [(partial(overloaded, 10.0), 503), (partial(rate_limited, 10.0), 429)]
)
async def test_a_cooldown_that_outlasts_the_deadline_sheds_at_once(
    autojump_clock: trio.testing.MockClock, error: Callable[[], ProxyError], status: int
) -> None:
    ctx = Resilience(rng=_no_jitter)
    with pytest.raises(ProxyError):
        await call(FakeUpstream(then=Step(error=error)), ctx, deadline=5.0)
    assert ctx.cooldown.until == 10.0
    await trio.sleep(1.5)

    assert ctx.shed_error(deadline=trio.current_time() + 9.0) is None  # it would make it
    late = FakeUpstream()
    with pytest.raises(ProxyError) as caught:
        await call(late, ctx, deadline=trio.current_time() + 8.0)
    assert caught.value.status == status
    assert caught.value.code == "upstream_cooldown"
    assert caught.value.headers == {"Retry-After": "9"}  # 8.5 s left, rounded up
    assert trio.current_time() == 1.5  # shed without waiting
    assert late.starts == []
    stats = ctx.statistics()
    assert (stats.shed_by_cooldown, stats.requests, stats.attempts) == (1, 1, 1)
    # The pipeline's own check on arrival counts the same way.
    assert ctx.shed_error(deadline=trio.current_time() + 8.0) is not None
    assert ctx.statistics().shed_by_cooldown == 2


async def test_without_coordination_each_request_only_honours_its_own_retry_after(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ctx = Resilience(ResilienceConfig(coordinated=False), rng=_no_jitter)
    failing = FakeUpstream([Step(duration=0.5, error=partial(overloaded, 2.0))])
    other = FakeUpstream()

    async def other_arrives() -> None:
        await trio.sleep(1.0)
        await call(other, ctx)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call, failing, ctx)
        nursery.start_soon(other_arrives)
    assert failing.starts == [0.0, 2.5]
    assert other.starts == [1.0]
    assert ctx.statistics().cooldowns_opened == 0


# -- adaptive concurrency (AIMD) ------------------------------------------------------------


def test_aimd_trajectory_is_exact_for_a_scripted_sequence() -> None:
    limiter = trio.CapacityLimiter(10)
    aimd = AdaptiveLimit(limiter, decrease_factor=0.9)
    script = (
        ["overload"]  # 10 -> 9
        + ["clean"] * 9  # a window of 9 clean calls -> 10
        + ["clean"] * 10  # at the maximum: stays 10
        + ["overload"] * 10  # 9, 8, 7, 6, 5, 4, 3, 2, 1, 1
        + ["clean"]  # 1 clean call at limit 1 -> 2
        + ["clean", "failure", "clean", "clean"]  # the failure restarts the window -> 3
    )
    trajectory: list[int] = []
    for outcome in script:
        epoch = aimd.epoch  # calls run one after another, so each starts in the current epoch
        {"overload": aimd.on_overload, "clean": aimd.on_clean, "failure": aimd.on_failure}[outcome](
            epoch
        )
        trajectory.append(aimd.limit)
        assert limiter.total_tokens == aimd.limit
    assert trajectory == (
        [9] + [9] * 8 + [10] + [10] * 10 + [9, 8, 7, 6, 5, 4, 3, 2, 1, 1] + [2] + [2, 2, 2, 3]
    )
    stats = aimd.statistics()
    assert (stats.increases, stats.decreases) == (3, 10)  # the last overload at 1 is a no-op


def test_aimd_decreases_once_for_calls_sent_under_the_same_limit() -> None:
    limiter = trio.CapacityLimiter(16)
    aimd = AdaptiveLimit(limiter)
    epochs = [aimd.epoch for _ in range(16)]  # 16 calls in flight together
    for epoch in epochs:
        aimd.on_overload(epoch)
    assert aimd.limit == limiter.total_tokens == 14
    for epoch in epochs:
        aimd.on_clean(epoch)  # late successes from the old limit prove nothing
    assert aimd.statistics().clean_run == 0
    aimd.on_overload(aimd.epoch)  # a call sent under the new limit
    assert aimd.limit == 12


async def test_aimd_through_the_call_wrapper(autojump_clock: trio.testing.MockClock) -> None:
    limiter = trio.CapacityLimiter(4)
    ctx = Resilience(ResilienceConfig(adaptive=True, max_retries=0), limiter=limiter)
    outcomes: list[tuple[Callable[[], ProxyError] | None, int]] = [
        (partial(overloaded, None), 3),
        (timeout_error, 2),
        (partial(server_error, 500), 2),  # not an overload: no decrease
        (partial(rejected, 400), 2),  # the request's own fault: counts as clean
        (None, 3),  # the second clean call in a row at limit 2
        (partial(rate_limited, 1.0), 2),
    ]
    limits: list[int | None] = []
    for error, _ in outcomes:
        await trio.sleep(ctx.cooldown.remaining())
        upstream = FakeUpstream([Step(error=error)])
        with contextlib.suppress(ProxyError):
            await call(upstream, ctx)
        limits.append(ctx.statistics().current_limit)
    assert limits == [expected for _, expected in outcomes]
    assert limiter.total_tokens == 2


def test_adaptive_without_a_limiter_is_refused() -> None:
    with pytest.raises(ValueError, match="limiter"):
        Resilience(ResilienceConfig(adaptive=True))


async def test_current_limit_is_none_when_adaptive_is_off() -> None:
    assert Resilience(limiter=trio.CapacityLimiter(4)).statistics().current_limit is None


# -- per-model rate limits ------------------------------------------------------------------


async def call_model(
    upstream: FakeUpstream, ctx: Resilience, model: str, *, deadline: float = math.inf
) -> Reply:
    return await ctx.call(
        upstream.attempt,
        deadline=deadline,
        headers_of=lambda r: r.headers,
        model=model,
    )


async def test_a_rate_limit_holds_only_calls_to_the_model_it_was_for(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ctx = Resilience(ResilienceConfig(max_retries=0))
    with pytest.raises(ProxyError):
        await call_model(
            FakeUpstream([Step(error=partial(rate_limited, 5.0))]), ctx, "claude-opus-4-5"
        )
    other, same = FakeUpstream(), FakeUpstream()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(call_model, other, ctx, "claude-haiku-4-5")
        nursery.start_soon(call_model, same, ctx, "claude-opus-4-5-20251101")  # same model
    assert other.starts == [0.0]
    assert same.starts == [5.0]
    # Shedding by deadline is per model too.
    assert ctx.shed_error(trio.current_time() + 1.0, "claude-opus-4-5") is None  # it passed
    with pytest.raises(ProxyError):
        await call_model(FakeUpstream([Step(error=partial(rate_limited, 9.0))]), ctx, "claude-x")
    assert ctx.shed_error(trio.current_time() + 2.0, "claude-x") is not None
    assert ctx.shed_error(trio.current_time() + 2.0, "claude-y") is None
    stats = ctx.statistics()
    assert (stats.cooldowns_opened, stats.cooldown_remaining) == (2, 9.0)


async def test_an_overload_holds_calls_to_every_model(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ctx = Resilience(ResilienceConfig(max_retries=0))
    with pytest.raises(ProxyError):
        await call_model(FakeUpstream([Step(error=partial(overloaded, 4.0))]), ctx, "claude-a")
    other = FakeUpstream()
    await call_model(other, ctx, "claude-b")
    assert other.starts == [4.0]


async def test_exhausted_rate_limit_headers_hold_only_their_model(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ctx = Resilience(wall_clock=lambda: datetime(2026, 1, 1, tzinfo=UTC))
    headers = {
        "anthropic-ratelimit-tokens-remaining": "0",
        "anthropic-ratelimit-tokens-reset": "2026-01-01T00:00:03Z",
    }
    await call_model(FakeUpstream([Step(headers=headers)]), ctx, "claude-a")
    other, same = FakeUpstream(), FakeUpstream()
    await call_model(other, ctx, "claude-b")
    await call_model(same, ctx, "claude-a")
    assert (other.starts, same.starts) == ([0.0], [3.0])


async def test_expired_model_cooldowns_are_dropped_and_still_counted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ctx = Resilience(ResilienceConfig(max_retries=0))
    for i in range(100):
        with pytest.raises(ProxyError):
            await call_model(
                FakeUpstream([Step(error=partial(rate_limited, 1.0))]), ctx, f"claude-{i}"
            )
        await trio.sleep(1.0)
    assert len(ctx._model_cooldowns) <= 64
    assert ctx.statistics().cooldowns_opened == 100


# -- rate-limit awareness -------------------------------------------------------------------

_WALL = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("resource", ["requests", "tokens", "input-tokens", "output-tokens"])
async def test_a_resource_at_zero_holds_new_calls_until_its_reset(
    autojump_clock: trio.testing.MockClock, resource: str
) -> None:
    # Without the resource's limit, the whole time to its reset is all we know.
    ctx = Resilience(wall_clock=lambda: _WALL)
    headers = {
        f"anthropic-ratelimit-{resource}-remaining": "0",
        f"anthropic-ratelimit-{resource}-reset": "2026-01-01T00:00:03Z",
    }
    first = FakeUpstream([Step(headers=headers)])
    await call(first, ctx)
    second = FakeUpstream()
    await call(second, ctx)
    assert first.starts == [0.0]
    assert second.starts == [3.0]
    assert ctx.statistics().ratelimit_holds == 1


async def test_an_exhausted_bucket_holds_only_until_one_unit_has_refilled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The reset is when the bucket is full again: 50 requests refill over 3 s, so the first
    # one is back after 3 / 50 s, and holding longer would refuse work the upstream takes.
    ctx = Resilience(wall_clock=lambda: _WALL)
    headers = {
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": "2026-01-01T00:00:03Z",
        "anthropic-ratelimit-requests-limit": "50",
    }
    await call(FakeUpstream([Step(headers=headers)]), ctx)
    second = FakeUpstream()
    await call(second, ctx)
    assert second.starts == [0.06]


async def test_remaining_above_zero_holds_nothing(autojump_clock: trio.testing.MockClock) -> None:
    ctx = Resilience(wall_clock=lambda: _WALL)
    headers = {
        "Anthropic-RateLimit-Requests-Remaining": "1",
        "Anthropic-RateLimit-Requests-Reset": "2026-01-01T00:00:03Z",
    }
    await call(FakeUpstream([Step(headers=headers)]), ctx)
    second = FakeUpstream()
    await call(second, ctx)
    assert second.starts == [0.0]


async def test_ratelimit_headers_on_an_error_hold_new_calls_too(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # An error reaches us translated: OpenAI's x-ratelimit-* with a Go duration.
    def exhausted() -> ProxyError:
        return ProxyError(
            502,
            "upstream failed",
            headers={"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "1.5s"},
            upstream_status=500,
        )

    ctx = Resilience(rng=lambda: 0.0)
    failing = FakeUpstream([Step(duration=1.0, error=exhausted)])
    await call(failing, ctx)
    assert failing.starts == [0.0, 2.5]  # the retry waits for the reset, not just its backoff


def test_ratelimit_hold_reads_both_spellings() -> None:
    anthropic = {
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": "2026-01-01T00:00:02+00:00",
        "anthropic-ratelimit-output-tokens-remaining": "0",
        "anthropic-ratelimit-output-tokens-reset": "2026-01-01T00:00:07Z",
    }
    assert ratelimit_hold(anthropic, _WALL) == 7.0  # the latest reset wins
    assert ratelimit_hold({"x-ratelimit-remaining-requests": "0"}, _WALL) is None  # no reset
    assert (
        ratelimit_hold(
            {
                "anthropic-ratelimit-tokens-remaining": "0",
                "anthropic-ratelimit-tokens-reset": "not a date",
            },
            _WALL,
        )
        is None
    )
    past = {
        "anthropic-ratelimit-tokens-remaining": "0",
        "anthropic-ratelimit-tokens-reset": "2025-12-31T23:59:59Z",
    }
    assert ratelimit_hold(past, _WALL) == 0.0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0s", 0.0), ("20ms", 0.02), ("1.5s", 1.5), ("6m0s", 360.0), ("1h2m3.25s", 3723.25)],
)
def test_parse_go_duration(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "1.5", "-1s"])
def test_parse_go_duration_refuses_what_it_cannot_read(text: str) -> None:
    assert parse_go_duration(text) is None


# -- streams: retried until the first content event, never after ----------------------------


class FakeStream:
    """An upstream SSE stream: ``events`` yields the script, one event per ``gap`` seconds."""

    def __init__(self, script: list[StreamEvent], *, gap: float = 0.0) -> None:
        self.headers: Mapping[str, str] = {"request-id": "req_1"}
        self._script = script
        self._gap = gap
        self.closed = False

    async def events(self) -> AsyncGenerator[StreamEvent, None]:
        for event in self._script:
            await trio.sleep(self._gap)
            yield event

    async def aclose(self) -> None:
        self.closed = True


def stream_error(data: Mapping[str, Any], headers: Mapping[str, str]) -> ProxyError:
    status = {"overloaded_error": 529, "invalid_request_error": 400}[data["error"]["type"]]
    return upstream_error(status, data, headers)


_START: StreamEvent = ("message_start", {"type": "message_start"})
_PING: StreamEvent = ("ping", {"type": "ping"})
_BLOCK: StreamEvent = ("content_block_start", {"type": "content_block_start", "index": 0})
_DELTA: StreamEvent = ("content_block_delta", {"type": "content_block_delta", "index": 0})
_OVERLOADED: StreamEvent = (
    "error",
    {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
)


class FakeStreamingUpstream:
    def __init__(self, streams: list[FakeStream]) -> None:
        self.streams = streams
        self.opened: list[FakeStream] = []
        self.starts: list[float] = []

    async def open_stream(self) -> FakeStream:
        self.starts.append(trio.current_time())
        stream = self.streams[len(self.opened)]
        self.opened.append(stream)
        await trio.lowlevel.checkpoint()
        return stream


async def open_with_resilience(
    upstream: FakeStreamingUpstream, ctx: Resilience
) -> StreamStart[FakeStream]:
    return await ctx.call(
        partial(open_until_content, upstream.open_stream, error_for=stream_error),
        deadline=math.inf,
        headers_of=lambda start: start.headers,
    )


async def test_an_overload_as_the_first_stream_event_is_retried_transparently(
    autojump_clock: trio.testing.MockClock,
) -> None:
    failed = FakeStream([_START, _OVERLOADED], gap=0.5)
    good = FakeStream([_START, _PING, _BLOCK, _DELTA], gap=0.5)
    upstream = FakeStreamingUpstream([failed, good])
    ctx = Resilience(rng=scripted_rng([0.5]))

    start = await open_with_resilience(upstream, ctx)
    try:
        assert upstream.starts == [0.0, 1.25]  # failed at t=1, then 0.5 * 0.5 s of jitter
        assert failed.closed
        assert start.prelude == [_START, _PING, _BLOCK, _DELTA]  # up to the first delta
        assert trio.current_time() == 1.25 + 2.0
        assert [event async for event in start.rest] == []
    finally:
        await start.aclose()
    assert good.closed
    assert ctx.statistics().failures_by_signal["overloaded"] == 1


async def test_no_retry_after_the_first_content_event(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stream = FakeStream([_START, _BLOCK, _DELTA, _OVERLOADED, _DELTA])
    upstream = FakeStreamingUpstream([stream])
    ctx = Resilience(rng=_no_jitter)

    start = await open_with_resilience(upstream, ctx)
    async with trio.open_nursery():
        rest = [event async for event in start.rest]
    await start.aclose()
    # The overload after content is the caller's to relay as an error event: not retried.
    assert rest == [_OVERLOADED, _DELTA]
    assert upstream.starts == [0.0]
    assert (ctx.statistics().attempts, ctx.statistics().retries) == (1, 0)


async def test_an_overload_after_a_block_started_but_before_any_delta_is_retried(
    autojump_clock: trio.testing.MockClock,
) -> None:
    failed = FakeStream([_START, _BLOCK, _OVERLOADED])
    good = FakeStream([_START, _BLOCK, _DELTA])
    upstream = FakeStreamingUpstream([failed, good])
    ctx = Resilience(rng=scripted_rng([0.0]))

    start = await open_with_resilience(upstream, ctx)
    await start.aclose()
    assert failed.closed and len(upstream.starts) == 2
    assert start.prelude == [_START, _BLOCK, _DELTA]
    assert ctx.statistics().retries == 1


async def test_a_stream_that_fails_before_content_for_the_clients_fault_is_closed_and_raised(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bad = ("error", {"type": "error", "error": {"type": "invalid_request_error", "message": "no"}})
    stream = FakeStream([_START, bad])
    upstream = FakeStreamingUpstream([stream])
    with pytest.raises(ProxyError) as caught:
        await open_with_resilience(upstream, Resilience(rng=_no_jitter))
    assert caught.value.status == 400
    assert stream.closed
    assert upstream.starts == [0.0]


async def test_cancelling_a_stream_attempt_closes_the_stream(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stream = FakeStream([_START, _BLOCK], gap=2.0)
    upstream = FakeStreamingUpstream([stream])
    with trio.move_on_after(1.0):
        await open_with_resilience(upstream, Resilience())
    assert stream.closed


async def test_an_attempt_cut_off_by_the_deadline_counts_as_a_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A stalled upstream shows in the statistics (and to the adaptive limit); a client
    that leaves earlier says nothing about the upstream and is not counted."""
    ctx = Resilience(rng=_no_jitter)
    with trio.move_on_at(5.0):
        await call(FakeUpstream([Step(duration=60.0)]), ctx, deadline=5.0)
    with trio.move_on_at(trio.current_time() + 1.0):  # the client left after 1 s
        await call(FakeUpstream([Step(duration=60.0)]), ctx, deadline=trio.current_time() + 5.0)
    stats = ctx.statistics()
    assert stats.failures_by_signal["timeout"] == 1
    assert stats.attempts == 2


# -- cooldowns shared with other instances -----------------------------------------------


class FakeCluster:
    """A ``SharedResilience`` that records what it is told and answers retries from a list."""

    def __init__(
        self, retries: Iterable[bool] = (), adaptive: AdaptiveController | None = None
    ) -> None:
        self.told: list[tuple[str | None, float, str]] = []
        self.requests = 0
        self.asked: list[float] = []
        self._answers = iter(retries)
        self._adaptive = adaptive

    @property
    def adaptive(self) -> AdaptiveController | None:
        return self._adaptive

    def cooldown_opened(self, scope: str | None, seconds: float, reason: CooldownReason) -> None:
        self.told.append((scope, seconds, reason))

    def request_started(self) -> None:
        self.requests += 1

    async def spend_retry(self) -> bool:
        self.asked.append(trio.current_time())
        return next(self._answers)


async def test_every_cooldown_opened_here_is_told_to_the_shared_state(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = FakeCluster()
    ctx = Resilience(ResilienceConfig(max_retries=0), rng=_no_jitter)
    with ctx.sharing(cluster):
        for error, model in (
            (partial(overloaded, 2.0), "m1"),
            (partial(rate_limited, 3.0), "m2"),
        ):
            upstream = FakeUpstream([Step(error=error)])
            with pytest.raises(ProxyError):
                await ctx.call(upstream.attempt, deadline=math.inf, model=model)
    assert cluster.told == [(None, 2.0, "overloaded"), ("m2", 3.0, "rate_limited")]
    assert cluster.requests == 2
    # Once the block is left, nothing is told any more.
    with pytest.raises(ProxyError):
        await ctx.call(FakeUpstream([Step(error=partial(overloaded, 9.0))]).attempt, deadline=99)
    assert len(cluster.told) == 2 and cluster.requests == 2


async def test_a_cooldown_adopted_from_another_instance_holds_calls_and_is_not_told_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = FakeCluster()
    ctx = Resilience(rng=_no_jitter)
    with ctx.sharing(cluster):
        ctx.adopt_cooldown("m1", 2.0, "rate_limited")
        upstream = FakeUpstream()
        await ctx.call(upstream.attempt, deadline=math.inf, model="m1")
        await ctx.call(upstream.attempt, deadline=math.inf, model="m2")
    assert upstream.starts == [2.0, 2.0]  # m1 waited out the adopted hold; m2 was not held
    assert cluster.told == []


async def test_with_a_shared_budget_the_cluster_decides_each_retry(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = FakeCluster(retries=[True, False])
    ctx = Resilience(ResilienceConfig(max_retries=5, budget_min_retries=0), rng=lambda: 0.5)
    upstream = FakeUpstream(then=Step(error=partial(server_error, 500)))
    with ctx.sharing(cluster), pytest.raises(ProxyError):  # the local budget (0) is not asked
        await call(upstream, ctx)
    assert len(upstream.starts) == 2  # one retry granted, the next one denied
    assert len(cluster.asked) == 2
    stats = ctx.statistics()
    assert (stats.retries, stats.retries_denied_by_budget) == (1, 1)


async def test_while_shared_the_clusters_adaptive_limit_decides_and_the_local_one_returns(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = trio.CapacityLimiter(8)
    ctx = Resilience(ResilienceConfig(adaptive=True, max_retries=0), limiter=limiter)
    with contextlib.suppress(ProxyError):
        await call(FakeUpstream([Step(error=partial(overloaded, None))]), ctx)
    assert limiter.total_tokens == 7  # this process's own limit cut once
    cluster_limit = AdaptiveLimit(trio.CapacityLimiter(5))
    with ctx.sharing(FakeCluster(adaptive=cluster_limit)):
        # The local limiter is opened to the cap; the cluster's limit takes the overloads.
        assert limiter.total_tokens == 8
        with contextlib.suppress(ProxyError):
            await call(FakeUpstream([Step(error=partial(overloaded, None))]), ctx)
        assert ctx.statistics().current_limit == cluster_limit.limit == 4
        with pytest.raises(RuntimeError), ctx.sharing(FakeCluster()):  # one cluster at a time
            pass
    assert limiter.total_tokens == ctx.statistics().current_limit == 7
