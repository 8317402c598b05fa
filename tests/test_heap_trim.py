"""The periodic heap tidy (collect cycles, trim the heap): when it runs, and that it can be
turned off."""

from __future__ import annotations

import gc
import weakref

import pytest
import trio
import trio.testing

from trio_batcher import serving


def _counting(calls: list[tuple[float, int]]) -> object:
    def trim(pad: int) -> int:
        calls.append((trio.current_time(), pad))
        return 1

    return lambda: trim


async def test_the_heap_is_trimmed_every_interval(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[float, int]] = []
    monkeypatch.setattr(serving, "_malloc_trim", _counting(calls))
    with trio.move_on_after(95):
        await serving.tidy_heap_periodically(30.0)
    assert calls == [(30.0, 0), (60.0, 0), (90.0, 0)]


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
