"""A full admission gate sheds the newest waiter of the longest queue (per weight), not a
quiet tenant's newcomer: the flooding tenant absorbs the shedding.

Every time below is exact (``autojump_clock``); an admitted request holds its slot one second.
"""

from __future__ import annotations

import math
import statistics

import trio
import trio.testing
from test_gate_fairness import EQUAL, Requests, assert_consistent, names

from trio_batcher.admission.gate import DEFAULT_TENANT, AdmissionGate, Shed, TenantShare

REASONS_NONE = {"queue_full": 0, "tenant_queue_full": 0, "queue_timeout": 0, "shutdown": 0}


async def test_a_newcomer_of_a_shorter_queue_pushes_out_the_newest_waiter_of_the_longest(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = AdmissionGate(max_inflight=1, max_queue=4, acquire_timeout=100.0)
    run = Requests(gate, EQUAL)
    held = gate.acquire_nowait()
    async with trio.open_nursery() as nursery:
        await run.arrive(nursery, *names("a", 4))
        assert_consistent(gate, active=1, waiting=4)
        await trio.sleep(1)
        await run.arrive(nursery, "b1")  # a's queue is the longest: a4, its newest, makes room
        assert run.shed == {"a4": ("queue_full", 1)}
        assert_consistent(gate, active=1, waiting=4)
        await run.arrive(nursery, "b2")  # b's queue with b2 is 2, a's 3: a3 goes too
        # b's queue with b3 would be 3, a's is 2; a's with a5 would be 3: the newcomers are shed.
        await run.arrive(nursery, "b3", "a5")
        assert run.shed == {name: ("queue_full", 1) for name in ("a4", "a3", "b3", "a5")}
        stats = gate.statistics()
        assert (stats.by_tenant["a"].waiting, stats.by_tenant["b"].waiting) == (2, 2)
        held.release()
    # b1 and b2 take their turns in fair order as if a3 and a4 had never been there.
    assert run.admitted == ["a1", "b1", "a2", "b2"]
    assert [run.at[name] for name in run.admitted] == [1, 2, 3, 4]
    stats = gate.statistics()
    assert dict(stats.shed_by_reason) == {**REASONS_NONE, "queue_full": 4}
    assert dict(stats.by_tenant["a"].shed_by_reason) == {**REASONS_NONE, "queue_full": 3}
    assert dict(stats.by_tenant["b"].shed_by_reason) == {**REASONS_NONE, "queue_full": 1}
    assert (stats.pushed_out, stats.by_tenant["a"].pushed_out) == (2, 2)
    assert stats.by_tenant["b"].pushed_out == 0
    assert_consistent(gate)


async def test_a_quiet_tenant_is_never_shed_while_another_floods(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Issue 17's acceptance, in virtual time: through 8 slots, a sends 300 requests in 3 s
    # (100/s against 8/s of capacity) while b sends 20, one every 0.5 s (its fair share is 4/s).
    gate = AdmissionGate(max_inflight=8, max_queue=16, acquire_timeout=100.0)
    run = Requests(gate, EQUAL)
    sent: dict[str, float] = {}

    async def send(nursery: trio.Nursery, requests: list[str], every: float) -> None:
        for name in requests:
            sent[name] = trio.current_time()
            nursery.start_soon(run.request, name)
            await trio.sleep(every)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send, nursery, names("a", 300), 0.01)
        nursery.start_soon(send, nursery, names("b", 20), 0.5)
    b = names("b", 20)
    assert not any(name in run.shed for name in b)
    assert [name for name in run.admitted if name[0] == "b"] == b  # all of b, in its order
    # b's latency (wait + the 1 s it holds its slot) against 1 s unloaded: within 2x at p50,
    # and no b waits past the next wave of releases (a fills every slot each second).
    latencies = [run.at[name] + 1 - sent[name] for name in b]
    assert statistics.median(latencies) <= 2 * 1.0
    assert max(run.at[name] - sent[name] for name in b) <= 0.5
    # a absorbs every shed, all with a full queue, most of them pushed out while waiting.
    a_shed = [reason for name, (reason, _) in run.shed.items() if name[0] == "a"]
    stats = gate.statistics()
    assert len(a_shed) == 300 - sum(name[0] == "a" for name in run.admitted) > 0
    assert set(a_shed) == {"queue_full"}
    assert stats.by_tenant["a"].shed_by_reason["queue_full"] == len(a_shed)
    assert 0 < stats.by_tenant["a"].pushed_out == stats.pushed_out
    assert dict(stats.by_tenant["b"].shed_by_reason) == REASONS_NONE
    assert_consistent(gate)


async def test_weights_set_the_share_of_the_queue_a_tenant_keeps_before_it_is_pushed_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shares = {
        "a": TenantShare("a", weight=3),
        "b": TenantShare("b", weight=1),
        "c": TenantShare("c", weight=1),
    }
    gate = AdmissionGate(max_inflight=1, max_queue=8, acquire_timeout=100.0)
    run = Requests(gate, shares)
    held = gate.acquire_nowait()
    async with trio.open_nursery() as nursery:
        await run.arrive(nursery, *names("a", 8))
        # Per weight, a's queue is 8/3, then 7/3: longer than b's 1 and 2 with b1, b2.
        await run.arrive(nursery, "b1", "b2")
        assert run.shed == {"a8": ("queue_full", 0), "a7": ("queue_full", 0)}
        # Now a holds 6 = three times b's 2: each is one of the longest with its newcomer.
        await run.arrive(nursery, "b3", "a9")
        assert set(run.shed) == {"a8", "a7", "b3", "a9"}
        # c ties them (6/3 = 2/1): the one whose newest came last, b, loses b2.
        await run.arrive(nursery, "c1")
        assert run.shed["b2"] == ("queue_full", 0)
        assert_consistent(gate, active=1, waiting=8)
        held.release()
    assert run.admitted == ["a1", "a2", "a3", "b1", "c1", "a4", "a5", "a6"]
    stats = gate.statistics()
    assert (stats.by_tenant["a"].pushed_out, stats.by_tenant["b"].pushed_out) == (2, 1)
    assert stats.by_tenant["c"].pushed_out == 0
    assert_consistent(gate)


async def test_a_waiter_cancelled_in_the_tick_it_is_pushed_out_leaves_cancelled_not_shed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = AdmissionGate(max_inflight=1, max_queue=4, acquire_timeout=100.0)
    run = Requests(gate, EQUAL)
    held = gate.acquire_nowait()

    async def cancel_then_request(cancelled: str, name: str) -> None:
        # One step of one task: trio schedules ``cancelled`` to resume with Cancelled, but
        # it is still queued when ``name`` arrives and pushes it out.
        run.scopes[cancelled].cancel()
        await run.request(name)

    async with trio.open_nursery() as nursery:
        await run.arrive(nursery, *names("a", 4))
        nursery.start_soon(cancel_then_request, "a4", "b1")
        await trio.testing.wait_all_tasks_blocked()
        assert run.shed == {}  # a4 left with Cancelled: not shed, and not counted as shed
        stats = gate.statistics()
        assert dict(stats.by_tenant["a"].shed_by_reason) == REASONS_NONE
        assert stats.pushed_out == 0
        assert_consistent(gate, active=1, waiting=4)
        # A waiter cancelled in the tick still counts in its queue: the gate cannot see that
        # it is leaving, so a2's cancellation does not spare a3, a's newest now.
        nursery.start_soon(cancel_then_request, "a2", "b2")
        await trio.testing.wait_all_tasks_blocked()
        assert run.shed == {"a3": ("queue_full", 0)}
        assert_consistent(gate, active=1, waiting=3)
        held.release()
    assert run.admitted == ["a1", "b1", "b2"]
    assert gate.statistics().by_tenant["a"].pushed_out == 1
    assert_consistent(gate)


async def test_a_waiter_handed_a_slot_is_never_pushed_out_the_next_longest_queue_is(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shares = {
        "a": TenantShare("a", weight=0.25),  # one waiter is a queue of 4 per weight
        "b": TenantShare("b", max_inflight=1),
        "c": TenantShare("c"),
        "d": TenantShare("d"),
    }
    gate = AdmissionGate(max_inflight=2, max_queue=3, acquire_timeout=100.0)
    run = Requests(gate, shares, hold=math.inf)
    b0 = gate.acquire_nowait(tenant=shares["b"])  # b at its share: its waiters cannot move
    held = gate.acquire_nowait()

    async def hand_off_then_refill() -> None:
        held.release()  # a1 is handed the slot: the only eligible waiter, a's newest
        nursery.start_soon(run.request, "d1")  # next, while a1 may not have resumed yet
        await run.request("c1")  # takes a1's place in the queue: full again

    async with trio.open_nursery() as nursery:
        await run.arrive(nursery, "a1", "b1", "b2")
        nursery.start_soon(hand_off_then_refill)
        await trio.testing.wait_all_tasks_blocked()
        # a1 held the longest queue, but it was handed a slot: b's newest goes instead.
        assert run.admitted == ["a1"]
        assert run.shed == {"b2": ("queue_full", 0)}
        assert_consistent(gate, active=2, waiting=3)
        for slot in (b0, run.slots["a1"]):
            slot.release()
            await trio.testing.wait_all_tasks_blocked()
        for name in ("b1", "c1", "d1"):
            run.slots[name].release()
            await trio.testing.wait_all_tasks_blocked()
    # b0's release re-admits b: b1 arrived before c1 and d1, who tie with it in virtual time.
    assert run.admitted == ["a1", "b1", "c1", "d1"]
    assert_consistent(gate)


async def test_a_newcomer_already_cancelled_pushes_nobody_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = AdmissionGate(max_inflight=1, max_queue=2, acquire_timeout=100.0)
    run = Requests(gate, EQUAL)
    held = gate.acquire_nowait()
    async with trio.open_nursery() as nursery:
        await run.arrive(nursery, "a1", "a2")
        with trio.CancelScope() as scope:
            scope.cancel()
            await gate.acquire(tenant=EQUAL["b"])
        assert scope.cancelled_caught
        assert run.shed == {}
        assert_consistent(gate, active=1, waiting=2)
        held.release()
    assert run.admitted == ["a1", "a2"]
    assert gate.statistics().pushed_out == 0


async def test_waiters_that_named_no_tenant_are_pushed_out_like_any_tenant(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = AdmissionGate(max_inflight=1, max_queue=2, acquire_timeout=100.0)
    held = gate.acquire_nowait()
    outcomes: dict[str, tuple[str, str | None]] = {}

    async def request(name: str, tenant: TenantShare | None) -> None:
        try:
            with await gate.acquire(tenant=tenant) as slot:
                outcomes[name] = ("admitted", slot.tenant)
        except Shed as shed:
            outcomes[name] = (shed.reason, shed.tenant)

    async with trio.open_nursery() as nursery:
        for name in ("x1", "x2", "x3"):
            nursery.start_soon(request, name, None)
            await trio.testing.wait_all_tasks_blocked()
        assert outcomes == {"x3": ("queue_full", None)}  # its own queue is the longest
        nursery.start_soon(request, "a1", EQUAL["a"])
        await trio.testing.wait_all_tasks_blocked()
        assert outcomes["x2"] == ("queue_full", None)  # pushed out; its Shed names no tenant
        held.release()
    assert outcomes["x1"] == ("admitted", DEFAULT_TENANT.name)
    assert outcomes["a1"] == ("admitted", "a")
    stats = gate.statistics()
    assert stats.by_tenant[DEFAULT_TENANT.name].shed_by_reason["queue_full"] == 2
    assert (stats.pushed_out, stats.by_tenant[DEFAULT_TENANT.name].pushed_out) == (1, 1)
    assert_consistent(gate)
