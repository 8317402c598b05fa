"""Deterministic (autojump, fakes): the fallback arithmetic and state machine, the lease
renewal schedule and the waiting head's back-off poll. No Redis here."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from trio_batcher.cluster import (
    ClusterUnavailable,
    FallbackState,
    LeaseSemaphore,
    LuaScript,
    Mode,
    fallback_share,
)


@pytest.mark.parametrize(
    ("cap", "instances", "share"),
    [(8, 1, 8), (8, 2, 4), (8, 3, 2), (8, 8, 1), (8, 20, 1), (1, 4, 1), (8, 0, 0)],
)
def test_fallback_share_divides_the_cap_keeps_at_least_one_and_none_without_a_count(
    cap: int, instances: int, share: int
) -> None:
    assert fallback_share(cap, instances) == share


@given(st.integers(1, 1000), st.integers(1, 100))
def test_fallback_shares_never_add_up_past_the_cap_unless_each_is_one(
    cap: int, instances: int
) -> None:
    share = fallback_share(cap, instances)
    assert share >= 1
    assert share * instances <= cap or share == 1


async def test_failure_enters_fallback_once_and_a_probe_brings_shared_back(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    state = FallbackState(probe_interval_s=1.0)
    assert state.local_cap(8, 3) == 8
    outcome = iter([ClusterUnavailable("down"), ClusterUnavailable("down"), None])
    probed_at: list[float] = []

    async def probe() -> None:
        probed_at.append(trio.current_time())
        error = next(outcome)
        if error is not None:
            raise error

    with caplog.at_level(logging.INFO, logger="trio_batcher.cluster.fallback"):
        async with trio.open_nursery() as nursery:
            await nursery.start(state.run_probe, probe)
            await trio.sleep(0.5)
            state.report_failure(ClusterUnavailable("timed out"))
            state.report_failure(ClusterUnavailable("timed out again"))  # same outage
            assert state.mode is Mode.FALLBACK
            assert state.local_cap(8, 3) == 2
            await state.wait_mode(Mode.SHARED)
            assert trio.current_time() == 3.5
            nursery.cancel_scope.cancel()
    assert probed_at == [1.5, 2.5, 3.5]
    assert state.statistics().mode is Mode.SHARED
    assert state.statistics().since == 3.5
    assert state.statistics().fallbacks == 1
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]


class FakeLink:
    """Answers the lease scripts from a table; records each call's time and arguments."""

    command_timeout_s = 0.25

    def __init__(self, answer: Callable[[str, Sequence[Any]], Any]) -> None:
        self._answer = answer
        self.calls: list[tuple[float, str, list[Any]]] = []
        self.on_message: Callable[[], None] | None = None

    def key(self, *parts: str) -> str:
        return ":".join(("{fake}", *parts))

    async def run(
        self, script: LuaScript, keys: Sequence[str], args: Sequence[str | int | float]
    ) -> Any:
        self.calls.append((trio.current_time(), script.name, list(args)))
        await trio.sleep(0.001)  # a round trip
        return self._answer(script.name, args)

    async def listen(
        self,
        channel: str,
        on_message: Callable[[], None],
        *,
        ignore: str | None = None,
        max_backoff_s: float = 2.0,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        if channel.endswith(":released"):  # (not the adaptive limit's channel)
            self.on_message = on_message
        task_status.started()
        await trio.sleep_forever()


def reply(block: int, target: int, *, capacity: int = 8) -> list[int]:
    """A SYNC reply: block, target, capacity, epoch, alive, every block, the others',
    lost, in use, others short, others wanting."""
    return [block, target, capacity, 0, 1, block, 0, 0, block, 0, 0]


def granting(name: str, args: Sequence[Any]) -> Any:
    """Redis with room for everything: a block of what is wanted, at least 4."""
    assert name == "lease_sync"
    keep, want, idle = int(args[5]), int(args[7]), args[9] == "1"
    block = 0 if idle else max(keep, want, 4)
    return reply(block, block)


async def test_the_block_is_renewed_every_third_of_the_ttl_and_given_back_when_idle(
    autojump_clock: trio.testing.MockClock,
) -> None:
    link = FakeLink(granting)
    sem = LeaseSemaphore(link, "u", 4, ttl_s=3.0, instance_id="i")
    async with trio.open_nursery() as nursery:
        await nursery.start(sem.run)
        await sem.acquire("a")  # at 0.000, answered at 0.001
        for i in range(20):
            await sem.acquire(f"quick{i}")  # from the block: no round trip
            await sem.release(f"quick{i}")
        await trio.sleep(3.2 - trio.current_time())
        await sem.release("a")
        await trio.sleep(5.0)  # idle: the block went back at 4.0, nothing more to renew
        nursery.cancel_scope.cancel()
    # (time, keep, used, want, idle) of every sync.
    syncs = [(t, a[5], a[6], a[7], a[9]) for t, _, a in link.calls]
    assert syncs == [
        (0.0, 0, 0, 1, "0"),
        (1.0, 4, 1, 1, "0"),
        (2.0, 4, 1, 1, "0"),
        (3.0, 4, 1, 1, "0"),
        (4.0, 0, 0, 0, "1"),
    ]
    assert sem.statistics().block == 0


async def test_a_failed_renewal_is_counted_and_the_next_one_keeps_the_schedule(
    autojump_clock: trio.testing.MockClock,
) -> None:
    failures = iter([False, True, False, False])

    def flaky(name: str, args: Sequence[Any]) -> Any:
        if next(failures):
            raise ClusterUnavailable("down")
        return granting(name, args)

    link = FakeLink(flaky)
    sem = LeaseSemaphore(link, "u", 4, ttl_s=0.9, instance_id="i")
    async with trio.open_nursery() as nursery:
        await nursery.start(sem.run)
        await sem.acquire("a")
        await trio.sleep(1.0)
        nursery.cancel_scope.cancel()
    assert [round(t, 6) for t, _, _ in link.calls] == [0.0, 0.3, 0.6, 0.9]
    assert sem.statistics().renew_failures == 1
    assert sem.statistics().held == 1


async def test_a_short_head_backs_off_and_a_message_wakes_it_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    free_at = 0.5

    def full_until(name: str, args: Sequence[Any]) -> Any:
        keep, want = int(args[5]), int(args[7])
        if trio.current_time() >= free_at:
            return reply(want, want, capacity=2)
        return reply(keep, want, capacity=2)  # short of its target: the others' blocks

    link = FakeLink(full_until)
    sem = LeaseSemaphore(link, "u", 2, ttl_s=3.0, instance_id="i")
    async with trio.open_nursery() as nursery:
        await nursery.start(sem.run)
        await sem.acquire("first")  # short until 0.5: the safety-net poll
        attempts = [round(t, 6) for t, _, _ in link.calls]
        # 20 ms doubling to the 250 ms cap, each after a 1 ms round trip.
        assert attempts == [0.0, 0.021, 0.062, 0.143, 0.304, 0.555]
        link.calls.clear()
        free_at = float("inf")

        got_second = trio.Event()

        async def second() -> None:
            await sem.acquire("second")
            got_second.set()

        nursery.start_soon(second)
        await trio.sleep(0.1)
        free_at = trio.current_time()
        assert link.on_message is not None
        link.on_message()  # another instance gave back: no waiting for the poll
        with trio.fail_after(0.002):
            await got_second.wait()
        # granted at 0.556, slept 0.1, woken: one round trip (1 ms), not a poll (20 ms)
        assert trio.current_time() == pytest.approx(0.657)
        nursery.cancel_scope.cancel()
