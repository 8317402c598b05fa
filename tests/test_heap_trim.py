"""The periodic heap trim: when it runs, and that it can be turned off."""

from __future__ import annotations

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
        await serving.trim_heap_periodically(30.0)
    assert calls == [(30.0, 0), (60.0, 0), (90.0, 0)]


async def test_an_interval_of_zero_turns_it_off(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[float, int]] = []
    monkeypatch.setattr(serving, "_malloc_trim", _counting(calls))
    await serving.trim_heap_periodically(0.0)  # returns at once
    assert (trio.current_time(), calls) == (0.0, [])


async def test_off_glibc_there_is_nothing_to_run(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(serving, "_malloc_trim", lambda: None)
    await serving.trim_heap_periodically(30.0)  # returns at once
    assert trio.current_time() == 0.0


def test_glibc_trim_is_found_and_callable_here() -> None:
    trim = serving._malloc_trim()
    assert trim is not None  # this machine (and CI) runs glibc
    assert trim(0) in (0, 1)
