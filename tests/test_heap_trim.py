"""The periodic heap tidy (collect cycles, trim the heap): when it runs -- every interval, or
with the app's request counts each interval in which a quarter as many requests finished
as are open, and at least every 16th -- and that it can be turned off."""

from __future__ import annotations

import gc
import weakref

import pytest
import trio
import trio.testing

from trio_batcher.serving import server as serving


def _counting(calls: list[tuple[float, int]]) -> object:
    def trim(pad: int) -> int:
        calls.append((trio.current_time(), pad))
        return 1

    return lambda: trim


def _activity(readings: list[tuple[int, int]]) -> object:
    """``(finished, open)`` as each of ``readings`` in turn, then as the last for ever."""
    left = list(readings)
    return lambda: left.pop(0) if len(left) > 1 else left[0]


async def test_the_heap_is_tidied_every_interval_without_a_schedule(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[float, int]] = []
    monkeypatch.setattr(serving, "_malloc_trim", _counting(calls))
    with trio.move_on_after(95):
        await serving.tidy_heap_periodically(30.0)
    assert calls == [(30.0, 0), (60.0, 0), (90.0, 0)]


async def test_an_interval_is_collected_when_a_quarter_as_many_requests_finished_as_are_open(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[float, int]] = []
    monkeypatch.setattr(serving.gc, "collect", lambda: calls.append((trio.current_time(), 0)))
    trims: list[tuple[float, int]] = []
    monkeypatch.setattr(serving, "_malloc_trim", _counting(trims))
    # (finished so far, open now) at each tick: 30 s: 100 finished, 40 open (due); 60 s: 10
    # more finished with 1,000 open (not worth walking them); 90 s: 260 more (due); 120 s:
    # none finished (nothing to free); 150 s: one finished, none open (due: a small heap).
    readings = [(100, 40), (110, 1000), (370, 1000), (370, 1000), (371, 0)]
    activity = _activity(readings)
    with trio.move_on_after(155):
        await serving.tidy_heap_periodically(30.0, activity)  # type: ignore[arg-type]
    assert calls == [(30.0, 0), (90.0, 0), (150.0, 0)]
    # The trim is cheap and runs every interval: a request's freed buffers are worth it.
    assert [t for t, _ in trims] == [30.0, 60.0, 90.0, 120.0, 150.0]


async def test_long_open_streams_are_still_collected_every_sixteenth_interval(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A thousand streams open for minutes and nothing finishing: a full collection would
    # pause every one of them for nothing, so it runs every 8 minutes, not every 30 s.
    calls: list[tuple[float, int]] = []
    monkeypatch.setattr(serving.gc, "collect", lambda: calls.append((trio.current_time(), 0)))
    monkeypatch.setattr(serving, "_malloc_trim", lambda: None)
    with trio.move_on_after(1000):
        await serving.tidy_heap_periodically(30.0, lambda: (5, 1000))
    assert calls == [(480.0, 0), (960.0, 0)]


def test_the_schedule_as_data() -> None:
    schedule = serving.TidySchedule()
    assert [schedule.due(f, o) for f, o in ((0, 0), (24, 100), (25, 100), (25, 0))] == [
        False,
        False,
        True,
        False,  # nothing finished since the last tidy
    ]
    assert schedule.skipped == 1  # the tidy at 25 started the count again
    schedule = serving.TidySchedule()
    due = [schedule.due(0, 10) for _ in range(serving.TIDY_MAX_SKIPS + 1)]
    assert due == [False] * serving.TIDY_MAX_SKIPS + [True]


async def test_an_interval_of_zero_turns_it_off(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[float, int]] = []
    monkeypatch.setattr(serving, "_malloc_trim", _counting(calls))
    await serving.tidy_heap_periodically(0.0)  # returns at once
    assert (trio.current_time(), calls) == (0.0, [])


async def test_garbage_in_reference_cycles_is_collected_every_interval(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Off glibc too: only the trim needs glibc.
    monkeypatch.setattr(serving, "_malloc_trim", lambda: None)

    class Connection:
        peer: object = None

    def dead_cycle() -> weakref.ref[Connection]:
        a, b = Connection(), Connection()
        a.peer, b.peer = b, a
        return weakref.ref(a)

    gc.disable()  # only the tidy may collect it
    try:
        early, late = dead_cycle(), dead_cycle()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serving.tidy_heap_periodically, 30.0)
            await trio.sleep(29)
            assert early() is not None
            await trio.sleep(2)
            assert early() is None
            late = dead_cycle()
            await trio.sleep(30)
            assert late() is None
            nursery.cancel_scope.cancel()
    finally:
        gc.enable()


def test_glibc_trim_is_found_and_callable_here() -> None:
    trim = serving._malloc_trim()
    assert trim is not None  # this machine (and CI) runs glibc
    assert trim(0) in (0, 1)
