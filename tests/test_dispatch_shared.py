"""The dispatcher with upstream slots shared between instances (``SharedSlots``).

A fake shared semaphore stands in for the Redis-backed one: what is tested here is the
dispatcher's side of the contract -- the local token first, then the shared slot, in
arrival order; both given back whatever happens; a refusal becoming the ticket's outcome.
"""

from __future__ import annotations

import itertools

import pytest
import trio
import trio.testing

from trio_batcher.admission.dispatch import Dispatcher
from trio_batcher.admission.windows import WindowPolicy
from trio_batcher.errors import ProxyError


class FakeShared:
    """One global cap for every dispatcher given the same instance."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.held: set[str] = set()
        self.released: list[str] = []
        self.order: list[str] = []
        self.peak = 0
        self.refuse = False
        self._ids = itertools.count()
        self._changed = trio.lowlevel.ParkingLot()

    def new_holder(self) -> str:
        return f"h{next(self._ids)}"

    async def acquire(self, holder: str, scope: str | None = None) -> None:
        if self.refuse:
            raise ProxyError(503, "no shared slots", code="shared_state_unavailable")
        self.order.append(holder)
        while len(self.held) >= self.capacity:
            await self._changed.park()
        self.held.add(holder)
        self.peak = max(self.peak, len(self.held))

    async def release(self, holder: str) -> None:
        await trio.lowlevel.checkpoint()
        self.released.append(holder)
        self.held.discard(holder)
        self._changed.unpark_all()


def batcher(shared: FakeShared, local: int = 4) -> Dispatcher:
    return Dispatcher(
        limiter=trio.CapacityLimiter(local),
        shared=shared,
        windows=WindowPolicy(max_size=8, max_wait=0.01, window_timeout=60),
    )


async def test_two_dispatchers_never_exceed_the_shared_cap_and_finish_everything(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shared = FakeShared(capacity=4)
    running = 0
    peak = 0

    async def job() -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await trio.sleep(1)
        running -= 1
        return 1

    a, b = batcher(shared), batcher(shared)
    async with trio.open_nursery() as nursery:
        await nursery.start(a.run)
        await nursery.start(b.run)
        tickets = [d.submit_nowait(job) for _ in range(20) for d in (a, b)]
        results = [await t.wait() for t in tickets]
        a.close()
        b.close()
    assert results == [1] * 40
    assert peak == shared.peak == 4  # the global cap, reached and never passed
    assert shared.held == set() and len(shared.released) == 40


async def test_shared_slots_are_asked_for_in_arrival_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shared = FakeShared(capacity=1)
    started: list[int] = []

    def job(n: int) -> object:
        async def run() -> None:
            started.append(n)
            await trio.sleep(1)

        return run

    d = batcher(shared, local=4)
    async with trio.open_nursery() as nursery:
        await nursery.start(d.run)
        tickets = [d.submit_nowait(job(n)) for n in range(6)]  # type: ignore[arg-type]
        for t in tickets:
            await t.wait()
        d.close()
    assert started == list(range(6))
    assert shared.order == sorted(shared.order, key=lambda h: int(h[1:]))


async def test_a_ticket_cancelled_while_waiting_for_a_shared_slot_gives_both_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shared = FakeShared(capacity=1)

    async def long() -> None:
        await trio.sleep(10)

    async def never() -> None:
        raise AssertionError("a cancelled ticket must not run")

    d = batcher(shared, local=4)
    async with trio.open_nursery() as nursery:
        await nursery.start(d.run)
        first = d.submit_nowait(long)
        await trio.sleep(1)
        waiting = d.submit_nowait(never)
        await trio.sleep(1)
        assert d.statistics().limiter_borrowed == 2  # both hold a local token
        waiting.cancel()
        await trio.sleep(0.1)
        assert d.statistics().limiter_borrowed == 1  # its token came back
        assert "h1" in shared.released  # and its half-taken shared slot was released
        await first.wait()
        d.close()
    assert shared.held == set()


@pytest.mark.parametrize("direct", [False, True])
async def test_a_refused_shared_slot_is_the_tickets_error_and_leaks_nothing(
    autojump_clock: trio.testing.MockClock, direct: bool
) -> None:
    shared = FakeShared(capacity=2)
    shared.refuse = True

    async def job() -> None:
        raise AssertionError("must not run without a shared slot")

    limiter = trio.CapacityLimiter(2)
    d = Dispatcher(limiter=limiter, shared=shared) if direct else batcher(shared, 2)
    async with trio.open_nursery() as nursery:
        await nursery.start(d.run)
        ticket = d.submit_nowait(job)
        with pytest.raises(ProxyError) as refused:
            await ticket.wait()
        d.close()
    assert refused.value.code == "shared_state_unavailable"
    assert d.statistics().limiter_borrowed == 0
