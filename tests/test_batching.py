"""Admission windows and the dispatchers, under virtual time (autojump_clock) with fake jobs."""

from __future__ import annotations

import functools
import gc
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

from trio_batcher.admission.dispatch import Dispatcher, Ticket
from trio_batcher.admission.windows import FlushReason, WindowPolicy
from trio_batcher.errors import ProxyError


class FakeUpstream:
    """Jobs that sleep for a while and return their name, recording what the upstream saw."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}
        self.finished: dict[str, float] = {}
        self.cancelled: dict[str, float] = {}
        self.in_flight = 0
        self.max_in_flight = 0

    def job(
        self, name: str, duration: float = 1.0, *, error: Exception | None = None
    ) -> Callable[[], Awaitable[str]]:
        async def call() -> str:
            self.started[name] = trio.current_time()
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                await trio.sleep(duration)
            except trio.Cancelled:
                self.cancelled[name] = trio.current_time()
                raise
            finally:
                self.in_flight -= 1
            self.finished[name] = trio.current_time()
            if error is not None:
                raise error
            return name

        return call


class Outcomes:
    """Callers waiting on tickets: what each got, and when."""

    def __init__(self) -> None:
        self.got: dict[str, Any] = {}
        self.at: dict[str, float] = {}

    async def wait(self, name: str, ticket: Ticket[Any]) -> None:
        try:
            self.got[name] = await ticket.wait()
        except Exception as exc:
            self.got[name] = exc
        self.at[name] = trio.current_time()


def batcher(
    *,
    max_size: int = 10,
    max_wait: float = 0.25,
    max_concurrency: int = 10,
    window_timeout: float = 100.0,
    on_flush: Callable[[int, FlushReason], None] | None = None,
) -> Dispatcher:
    """A dispatcher with admission windows (``BATCH_ENABLED=1``)."""
    return Dispatcher(
        limiter=trio.CapacityLimiter(max_concurrency),
        windows=WindowPolicy(max_size=max_size, max_wait=max_wait, window_timeout=window_timeout),
        on_flush=on_flush,
    )


def assert_idle(dispatcher: Dispatcher) -> None:
    stats = dispatcher.statistics()
    assert stats.idle, stats
    assert stats.queued == stats.waiting_token == stats.running == 0
    assert stats.windows_open_size == stats.unresolved == stats.limiter_borrowed == 0


def is_error(value: object, status: int, code: str) -> bool:
    return isinstance(value, ProxyError) and value.status == status and value.code == code


# -- window flushes ------------------------------------------------------------------------


async def test_window_flushes_by_size_at_t0(autojump_clock: trio.testing.MockClock) -> None:
    up, b = FakeUpstream(), batcher(max_size=3, max_wait=5.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(b.run)
        tickets = [b.submit_nowait(up.job(n)) for n in "abc"]
        assert b.statistics().flushed_by_size == 1
        assert b.statistics().windows_open_size == 0
        assert [t.flushed_at for t in tickets] == [0, 0, 0]
        assert [await t.wait() for t in tickets] == ["a", "b", "c"]
        assert up.started == {"a": 0, "b": 0, "c": 0}
        b.close()
    stats = b.statistics()
    assert (stats.windows_flushed, stats.flushed_by_time, stats.flushed_by_drain) == (1, 0, 0)
    assert_idle(b)


async def test_window_flushes_at_exactly_max_wait_after_its_first_item(
    autojump_clock: trio.testing.MockClock,
) -> None:
    up, b = FakeUpstream(), batcher(max_size=10, max_wait=0.25)
    async with trio.open_nursery() as nursery:
        await nursery.start(b.run)
        first = b.submit_nowait(up.job("first"))
        await trio.sleep(0.125)
        second = b.submit_nowait(up.job("second"))
        assert b.statistics().windows_open_size == 2
        await first.wait()
        await second.wait()
        # The window's clock started with its FIRST item, not the second.
        assert up.started == {"first": 0.25, "second": 0.25}
        assert first.flushed_at == second.flushed_at == 0.25
        assert second.enqueued_at == 0.125
        # After the flush, the next arrival opens a fresh window with its own clock.
        await trio.sleep(0.125)
        late = b.submit_nowait(up.job("late"))
        arrived = trio.current_time()
        await late.wait()
        assert late.flushed_at == up.started["late"] == arrived + 0.25
        b.close()
    stats = b.statistics()
    assert (stats.flushed_by_time, stats.flushed_by_size, stats.windows_flushed) == (2, 0, 2)
    assert_idle(b)


async def test_cap_two_with_one_second_jobs_starts_at_0_0_1_1_2_2(
    autojump_clock: trio.testing.MockClock,
) -> None:
    up, b = FakeUpstream(), batcher(max_size=6, max_concurrency=2)
    names = [f"job{i}" for i in range(6)]
    async with trio.open_nursery() as nursery:
        await nursery.start(b.run)
        tickets = [b.submit_nowait(up.job(n, 1.0)) for n in names]
        assert [await t.wait() for t in tickets] == names
        assert trio.current_time() == 3
        b.close()
    assert [up.started[n] for n in names] == [0, 0, 1, 1, 2, 2]
    assert [t.started_at for t in tickets] == [0, 0, 1, 1, 2, 2]
    assert up.max_in_flight == 2
    assert_idle(b)


async def test_limiter_is_shared_across_windows(autojump_clock: trio.testing.MockClock) -> None:
    up, b = FakeUpstream(), batcher(max_size=2, max_concurrency=2)
    async with trio.open_nursery() as nursery:
        await nursery.start(b.run)
        first = [b.submit_nowait(up.job(n, 1.0)) for n in ("a", "b")]
        second = [b.submit_nowait(up.job(n, 1.0)) for n in ("c", "d")]
        for t in first + second:
            await t.wait()
        b.close()
    assert b.statistics().flushed_by_size == 2
    assert up.started == {"a": 0, "b": 0, "c": 1, "d": 1}
    assert up.max_in_flight == 2
    assert_idle(b)


async def test_limiter_total_tokens_can_be_raised_at_run_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    up, b = FakeUpstream(), batcher(max_size=4, max_concurrency=1)
    assert b.limiter is not None
    async with trio.open_nursery() as nursery:
        await nursery.start(b.run)
        tickets = [b.submit_nowait(up.job(n, 1.0)) for n in "abcd"]
        await trio.sleep(0.5)
        b.limiter.total_tokens = 3
        assert b.statistics().limiter_total == 3
        for t in tickets:
            await t.wait()
        b.close()
    assert up.started == {"a": 0, "b": 0.5, "c": 0.5, "d": 1}
    assert_idle(b)


async def test_on_flush_reports_each_flushed_window_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    flushes: list[tuple[int, FlushReason, float]] = []
    up = FakeUpstream()
    b = batcher(
        max_size=2,
        max_wait=0.25,
        max_concurrency=4,
        window_timeout=10,
        on_flush=lambda size, why: flushes.append((size, why, trio.current_time())),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(b.run)
        b.submit_nowait(up.job("a"))
        b.submit_nowait(up.job("b"))
        b.submit_nowait(up.job("c"))
        await trio.sleep(1)
        b.submit_nowait(up.job("d"))
        b.close()
    assert flushes == [(2, "size", 0), (1, "time", 0.25), (1, "drain", 1)]
    assert_idle(b)


# -- results and errors --------------------------------------------------------------------


async def test_results_reach_their_own_callers_when_jobs_finish_out_of_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    up, b = FakeUpstream(), batcher(max_size=3)
    out = Outcomes()
    async with trio.open_nursery() as nursery:
        await nursery.start(b.run)
        for name, duration in (("slow", 3.0), ("fast", 1.0), ("medium", 2.0)):
            nursery.start_soon(out.wait, name, b.submit_nowait(up.job(name, duration)))
        await trio.sleep(4)
        b.close()
    assert out.got == {"slow": "slow", "fast": "fast", "medium": "medium"}
    assert out.at == {"slow": 3, "fast": 1, "medium": 2}
    assert_idle(b)


async def test_a_failing_job_fails_only_its_own_caller(
    autojump_clock: trio.testing.MockClock,
) -> None:
    up, b = FakeUpstream(), batcher(max_size=3)
    boom = ValueError("upstream exploded")
    out = Outcomes()
    async with trio.open_nursery() as nursery:
        await nursery.start(b.run)
        for name, error in (("a", None), ("b", boom), ("c", None)):
            nursery.start_soon(out.wait, name, b.submit_nowait(up.job(name, 1.0, error=error)))
        await trio.sleep(2)
        b.close()
    assert out.got == {"a": "a", "b": boom, "c": "c"}
    stats = b.statistics()
    assert (stats.succeeded, stats.failed) == (2, 1)
    assert_idle(b)


async def test_submit_returns_the_result_and_reraises_the_jobs_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    up, b = FakeUpstream(), batcher(max_size=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(b.run)
        assert await b.submit(up.job("ok")) == "ok"
        with pytest.raises(KeyError):
            await b.submit(up.job("bad", error=KeyError("x")))
        b.close()
    assert_idle(b)


async def test_errors_a_job_raises_while_being_cancelled_stay_with_that_job(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A job whose own nursery mixes an error with the window's Cancelled fails alone."""
    up, b = FakeUpstream(), batcher(max_size=3, window_timeout=1.0)

    async def messy() -> str:
        async def cleanup_fails() -> None:
            try:
                await trio.sleep_forever()
            finally:
                raise ValueError("cleanup failed")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(cleanup_fails)
            nursery.start_soon(trio.sleep_forever)
        return "unreachable"

    out = Outcomes()
    async with trio.open_nursery() as nursery:
        await nursery.start(b.run)
        for name, job in (
            ("fast", up.job("fast", 0.5)),
            ("messy", messy),
            ("slow", up.job("slow", 5)),
        ):
            nursery.start_soon(out.wait, name, b.submit_nowait(job))
        await trio.sleep(2)
        b.close()
    assert out.got["fast"] == "fast"
    assert isinstance(out.got["messy"], ExceptionGroup)
    assert out.got["messy"].subgroup(ValueError) is not None
    assert is_error(out.got["slow"], 504, "window_timeout")
    assert out.at == {"fast": 0.5, "messy": 1, "slow": 1}
    assert_idle(b)


# -- window timeout ------------------------------------------------------------------------


async def test_window_timeout_fails_exactly_the_pending_items_at_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    up, b = FakeUpstream(), batcher(max_size=4, max_concurrency=1, window_timeout=2.0)
    out = Outcomes()
    async with trio.open_nursery() as nursery:
        await nursery.start(b.run)
        # Window 1 flushes by size at t=0 with deadline t=2; one token: a 0-0.5, b 0.5-1.5,
        # c 1.5-(2.5), d would start at 2.5.
        for name, duration in (("a", 0.5), ("b", 1.0), ("c", 1.0), ("d", 1.0)):
            nursery.start_soon(out.wait, name, b.submit_nowait(up.job(name, duration)))
        # Window 2 opens at t=1 (time flush at 1.25, deadline 101.25): its own deadline only.
        await trio.sleep(1)
        nursery.start_soon(out.wait, "e", b.submit_nowait(up.job("e", 1.0)))
        await trio.sleep(5)
        b.close()
    assert out.got["a"] == "a" and out.got["b"] == "b"
    assert is_error(out.got["c"], 504, "window_timeout")
    assert is_error(out.got["d"], 504, "window_timeout")
    assert out.at == {"a": 0.5, "b": 1.5, "c": 2, "d": 2, "e": 3}
    assert up.cancelled == {"c": 2}  # the running call is abandoned at the deadline
    assert "d" not in up.started  # the one waiting for a token never reaches the upstream
    assert out.got["e"] == "e" and up.started["e"] == 2
    assert b.statistics().timed_out == 2
    assert_idle(b)


# -- cancellation --------------------------------------------------------------------------


async def test_cancelled_while_queued_leaves_the_window_and_is_never_dispatched(
    autojump_clock: trio.testing.MockClock,
) -> None:
    up, b = FakeUpstream(), batcher(max_size=10, max_wait=1.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(b.run)
        gone = b.submit_nowait(up.job("gone"))
        stays = b.submit_nowait(up.job("stays"))
        await trio.sleep(0.5)
        gone.cancel()
        gone.cancel()  # idempotent
        assert gone.done and gone.state == "done"
        assert b.statistics().windows_open_size == 1
        assert b.statistics().queued == 1
        assert await stays.wait() == "stays"
        with pytest.raises(ProxyError) as info:
            await gone.wait()
        assert (info.value.status, info.value.code) == (499, "cancelled")
        b.close()
    assert up.started == {"stays": 1.0}
    assert b.statistics().items_dispatched == 1
    assert_idle(b)


async def test_a_window_left_by_everyone_is_abandoned_and_the_next_arrival_opens_a_fresh_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    up, b = FakeUpstream(), batcher(max_size=10, max_wait=1.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(b.run)
        gone = b.submit_nowait(up.job("gone"))
        await trio.sleep(0.25)
        gone.cancel()
        assert b.statistics().windows_open_size == 0
        await trio.sleep(0.25)
        fresh = b.submit_nowait(up.job("fresh"))
        assert await fresh.wait() == "fresh"
        b.close()
    assert up.started == {"fresh": 1.5}  # 0.5 + max_wait, not the abandoned window's 1.0
    stats = b.statistics()
    assert (stats.windows_flushed, stats.flushed_by_time, stats.cancelled) == (1, 1, 1)
    assert_idle(b)


async def test_cancelled_while_waiting_for_a_token_is_never_dispatched(
    autojump_clock: trio.testing.MockClock,
) -> None:
    up, b = FakeUpstream(), batcher(max_size=3, max_concurrency=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(b.run)
        first, second, third = (b.submit_nowait(up.job(n, 1.0)) for n in ("a", "b", "c"))
        await trio.sleep(0.5)
        assert second.state == "waiting_token"
        assert b.statistics().waiting_token == 2
        second.cancel()
        assert b.statistics().waiting_token == 1
        assert await first.wait() == "a"
        assert await third.wait() == "c"
        b.close()
    assert up.started == {"a": 0, "c": 1}
    assert_idle(b)


async def test_token_handed_over_in_the_same_tick_as_cancel_is_not_used(
    autojump_clock: trio.testing.MockClock,
) -> None:
    up, b = FakeUpstream(), batcher(max_size=2, max_concurrency=1)
    assert b.limiter is not None
    async with trio.open_nursery() as nursery:
        await nursery.start(b.run)
        holder = b.submit_nowait(up.job("holder", 1.0))
        waiter = b.submit_nowait(up.job("waiter", 1.0))
        await trio.sleep(0.5)
        # Raising the limit hands the waiting task a token synchronously; cancel() follows
        # before that task runs again, so it resumes holding a token for a cancelled ticket.
        b.limiter.total_tokens = 2
        waiter.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert b.statistics().limiter_borrowed == 1
        await holder.wait()
        b.close()
    assert up.started == {"holder": 0}
    assert_idle(b)


async def test_cancelling_a_running_item_cancels_only_that_upstream_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    up, b = FakeUpstream(), batcher(max_size=3)
    out = Outcomes()
    async with trio.open_nursery() as nursery:
        await nursery.start(b.run)
        tickets = {n: b.submit_nowait(up.job(n, 1.0)) for n in "abc"}
        for name, ticket in tickets.items():
            nursery.start_soon(out.wait, name, ticket)
        await trio.sleep(0.5)
        assert tickets["b"].state == "running"
        tickets["b"].cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert up.cancelled == {"b": 0.5}
        assert b.statistics().running == 2
        await trio.sleep(1)
        b.close()
    assert out.got["a"] == "a" and out.got["c"] == "c"
    assert is_error(out.got["b"], 499, "cancelled")
    assert up.finished == {"a": 1, "c": 1}
    assert_idle(b)


async def test_submit_cancelled_by_its_caller_cancels_the_upstream_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    up, b = FakeUpstream(), batcher(max_size=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(b.run)
        with trio.move_on_after(0.5):
            await b.submit(up.job("abandoned", 1.0))
        await trio.testing.wait_all_tasks_blocked()
        assert up.cancelled == {"abandoned": 0.5}
        assert_idle(b)
        b.close()


async def test_submit_cancelled_while_queued_never_reaches_the_upstream(
    autojump_clock: trio.testing.MockClock,
) -> None:
    up, b = FakeUpstream(), batcher(max_size=10, max_wait=1.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(b.run)
        with trio.move_on_after(0.5):
            await b.submit(up.job("abandoned", 1.0))
        await trio.sleep(1)
        b.close()
    assert up.started == {}
    assert b.statistics().windows_flushed == 0
    assert_idle(b)


# -- shutdown ------------------------------------------------------------------------------


async def test_close_stops_admitting_flushes_the_open_window_and_run_returns_after_drain(
    autojump_clock: trio.testing.MockClock,
) -> None:
    up, b = FakeUpstream(), batcher(max_size=10, max_wait=10.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(b.run)
        queued = [b.submit_nowait(up.job(n, 1.0)) for n in ("a", "b")]
        await trio.sleep(1)
        b.close()
        with pytest.raises(ProxyError) as info:
            b.submit_nowait(up.job("late"))
        assert (info.value.status, info.value.code) == (503, "shutdown")
        await b.wait_drained()
        assert trio.current_time() == 2
    assert [await t.wait() for t in queued] == ["a", "b"]
    assert up.started == {"a": 1, "b": 1}
    assert b.statistics().flushed_by_drain == 1
    assert b.statistics().closed
    assert_idle(b)


async def test_cancel_remaining_resolves_every_ticket_with_503_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    up, b = FakeUpstream(), batcher(max_size=2, max_wait=10.0, max_concurrency=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(b.run)
        running = b.submit_nowait(up.job("running", 5.0))
        waiting = b.submit_nowait(up.job("waiting", 5.0))
        queued = b.submit_nowait(up.job("queued", 5.0))
        await trio.sleep(0.5)
        assert (running.state, waiting.state, queued.state) == (
            "running",
            "waiting_token",
            "queued",
        )
        b.close()
        b.cancel_remaining()
        assert running.done and waiting.done and queued.done
        for ticket in (running, waiting, queued):
            with pytest.raises(ProxyError) as info:
                await ticket.wait()
            assert (info.value.status, info.value.code) == (503, "shutdown")
        await b.wait_drained()
        assert trio.current_time() == 0.5
    assert up.started == {"running": 0}
    assert up.cancelled == {"running": 0.5}
    assert b.statistics().shut_down == 3
    assert_idle(b)


async def test_run_cancelled_from_outside_resolves_queued_and_running_with_503(
    autojump_clock: trio.testing.MockClock,
) -> None:
    up, b = FakeUpstream(), batcher(max_size=2, max_wait=10.0, max_concurrency=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(b.run)
        tickets = [b.submit_nowait(up.job(n, 5.0)) for n in ("running", "waiting", "queued")]
        await trio.sleep(0.5)
        nursery.cancel_scope.cancel()
    for ticket in tickets:
        assert ticket.done
        with pytest.raises(ProxyError) as info:
            await ticket.wait()
        assert (info.value.status, info.value.code) == (503, "shutdown")
    with pytest.raises(ProxyError):
        b.submit_nowait(up.job("late"))
    assert up.started == {"running": 0}
    assert_idle(b)


async def test_submit_before_run_is_a_programming_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    b = batcher()
    with pytest.raises(RuntimeError):
        b.submit_nowait(FakeUpstream().job("early"))


async def test_admission_windows_need_a_limiter() -> None:
    with pytest.raises(ValueError, match="limiter"):
        Dispatcher(windows=WindowPolicy(max_size=1, max_wait=0, window_timeout=1))


# -- direct dispatch -----------------------------------------------------------------------


async def test_direct_dispatcher_starts_every_job_at_once_without_a_limiter(
    autojump_clock: trio.testing.MockClock,
) -> None:
    up, d = FakeUpstream(), Dispatcher()
    async with trio.open_nursery() as nursery:
        await nursery.start(d.run)
        tickets = [d.submit_nowait(up.job(n, 1.0)) for n in "abc"]
        assert [await t.wait() for t in tickets] == ["a", "b", "c"]
        d.close()
    assert up.started == {"a": 0, "b": 0, "c": 0}
    assert tickets[0].flushed_at == tickets[0].enqueued_at == 0
    stats = d.statistics()
    assert stats.limiter_total is None and stats.windows_flushed == 0
    assert_idle(d)


async def test_direct_dispatcher_with_a_limiter_queues_fifo_and_cancels_waiters(
    autojump_clock: trio.testing.MockClock,
) -> None:
    up, d = FakeUpstream(), Dispatcher(limiter=trio.CapacityLimiter(1))
    async with trio.open_nursery() as nursery:
        await nursery.start(d.run)
        tickets = [d.submit_nowait(up.job(n, 1.0)) for n in "abc"]
        await trio.sleep(0.5)
        tickets[1].cancel()
        await tickets[2].wait()
        d.close()
    assert up.started == {"a": 0, "c": 1}
    assert d.statistics().limiter_total == 1
    assert_idle(d)


async def test_direct_dispatcher_never_calls_a_job_cancelled_before_its_task_started(
    autojump_clock: trio.testing.MockClock,
) -> None:
    up, d = FakeUpstream(), Dispatcher()
    async with trio.open_nursery() as nursery:
        await nursery.start(d.run)
        ticket = d.submit_nowait(up.job("x"))
        assert ticket.state == "queued"
        ticket.cancel()
        await trio.testing.wait_all_tasks_blocked()
        d.close()
    assert up.started == {}
    assert_idle(d)


async def test_direct_call_runs_the_job_in_the_callers_own_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    dispatcher = Dispatcher()
    caller = trio.lowlevel.current_task()
    ran_in: list[trio.lowlevel.Task] = []

    async def job() -> str:
        ran_in.append(trio.lowlevel.current_task())
        assert dispatcher.statistics().running == 1
        await trio.sleep(1)
        return "ok"

    async with trio.open_nursery() as nursery:
        await nursery.start(dispatcher.run)
        assert await dispatcher.call(job) == "ok"
        assert ran_in == [caller] and trio.current_time() == 1
        stats = dispatcher.statistics()
        assert (stats.running, stats.succeeded, stats.items_dispatched) == (0, 1, 1)
        dispatcher.close()
        with pytest.raises(ProxyError) as refused:
            await dispatcher.call(job)
        assert refused.value.code == "shutdown"


async def test_cancel_remaining_reaches_inline_calls_with_503(
    autojump_clock: trio.testing.MockClock,
) -> None:
    dispatcher = Dispatcher()
    outcomes: list[object] = []

    async def stuck() -> None:
        await trio.sleep_forever()

    async def caller() -> None:
        try:
            await dispatcher.call(stuck)
        except ProxyError as exc:
            outcomes.append((exc.status, exc.code, trio.current_time()))

    async with trio.open_nursery() as nursery:
        await nursery.start(dispatcher.run)
        nursery.start_soon(caller)
        await trio.sleep(5)
        dispatcher.cancel_remaining()
    assert outcomes == [(503, "shutdown", 5)]
    assert dispatcher.statistics().idle


async def test_a_batcher_call_goes_through_its_window(
    autojump_clock: trio.testing.MockClock,
) -> None:
    windowed = batcher(max_size=10, max_wait=0.02, max_concurrency=2, window_timeout=60)
    started: list[float] = []

    async def job() -> None:
        started.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        await nursery.start(windowed.run)
        await windowed.call(job)
        windowed.close()
    assert started == [0.02]


@pytest.mark.parametrize("windows", [False, True])
async def test_a_running_job_is_held_by_its_own_frame_only(
    autojump_clock: trio.testing.MockClock, windows: bool
) -> None:
    # What a job's arguments hold (a stream's request body, for minutes) lives no longer
    # than the job's own frame keeps it: the ticket lets go of the job as it calls it.
    class Body:
        pass

    async def stream(body: Body | None) -> str:
        del body  # what a stream job does with its request once the stream is open
        await trio.sleep(10)
        return "done"

    body = Body()
    alive = weakref.ref(body)
    d = batcher(max_size=1) if windows else Dispatcher(limiter=trio.CapacityLimiter(1))
    async with trio.open_nursery() as nursery:
        await nursery.start(d.run)
        ticket = d.submit_nowait(functools.partial(stream, body))
        del body
        await trio.sleep(1)
        assert ticket.state == "running"
        gc.collect()
        assert alive() is None
        assert await ticket.wait() == "done"
        d.close()
    assert_idle(d)
