"""The admission gate between tenants: weighted fair order, FIFO within a tenant, own shares.

Every order below is exact: under ``autojump_clock`` each admitted request holds its slot for
one second, so the n-th admission happens at t = n - 1 and a test reads the whole sequence.
"""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing

from trio_batcher.admission.gate import (
    DEFAULT_TENANT,
    AdmissionGate,
    Shed,
    Slot,
    TenantShare,
)


class Requests:
    """Acquirers named ``<tenant><n>`` (``"a1"``) that record when they were admitted or shed.

    An admitted request holds its slot ``hold`` seconds (forever for ``math.inf``: then the
    test releases ``slots[name]`` itself).
    """

    def __init__(self, gate: AdmissionGate, shares: dict[str, TenantShare], hold: float = 1.0):
        self.gate = gate
        self.shares = shares
        self.hold = hold
        self.admitted: list[str] = []
        self.at: dict[str, float] = {}
        self.shed: dict[str, tuple[str, float]] = {}
        self.slots: dict[str, Slot] = {}
        self.scopes: dict[str, trio.CancelScope] = {}

    async def request(self, name: str) -> None:
        with self.scopes.setdefault(name, trio.CancelScope()):
            try:
                slot = await self.gate.acquire(tenant=self.shares[name[0]])
            except Shed as shed:
                assert shed.tenant == self.shares[name[0]].name
                self.shed[name] = (shed.reason, trio.current_time())
                return
            self.admitted.append(name)
            self.at[name] = trio.current_time()
            self.slots[name] = slot
            if self.hold < math.inf:
                with slot:
                    await trio.sleep(self.hold)

    async def arrive(self, nursery: trio.Nursery, *names: str) -> None:
        """Start the requests one after the other, each parked before the next arrives."""
        for name in names:
            nursery.start_soon(self.request, name)
            await trio.testing.wait_all_tasks_blocked()


def names(tenant: str, count: int) -> list[str]:
    return [f"{tenant}{i}" for i in range(1, count + 1)]


def assert_consistent(gate: AdmissionGate, *, active: int = 0, waiting: int = 0) -> None:
    stats = gate.statistics()
    assert (stats.active, stats.waiting) == (active, waiting), stats
    assert sum(t.active for t in stats.by_tenant.values()) == active
    assert sum(t.waiting for t in stats.by_tenant.values()) == waiting


async def backlogged_order(shares: dict[str, TenantShare], arrivals: list[str]) -> list[str]:
    """Queue ``arrivals`` behind one held slot, then let them through one at a time."""
    gate = AdmissionGate(max_inflight=1, max_queue=100, acquire_timeout=100.0)
    run = Requests(gate, shares)
    held = gate.acquire_nowait()
    async with trio.open_nursery() as nursery:
        await run.arrive(nursery, *arrivals)
        assert_consistent(gate, active=1, waiting=len(arrivals))
        held.release()
    assert [run.at[name] for name in run.admitted] == list(range(len(arrivals)))
    assert_consistent(gate)
    return run.admitted


EQUAL = {"a": TenantShare("a"), "b": TenantShare("b")}
THREE_TO_ONE = {"a": TenantShare("a", weight=3), "b": TenantShare("b", weight=1)}


async def test_equal_weights_alternate_exactly(autojump_clock: trio.testing.MockClock) -> None:
    order = await backlogged_order(EQUAL, names("a", 4) + names("b", 4))
    assert order == ["a1", "b1", "a2", "b2", "a3", "b3", "a4", "b4"]


async def test_weights_three_to_one_admit_three_to_one_exactly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    order = await backlogged_order(THREE_TO_ONE, names("a", 9) + names("b", 3))
    assert "".join(name[0] for name in order) == "aaab" * 3
    assert order[:4] == ["a1", "a2", "a3", "b1"]


async def test_ties_in_virtual_time_go_to_the_earlier_arrival(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # b's requests arrived first, so b wins every tie (its tags 1, 2, 3 against a's thirds).
    order = await backlogged_order(THREE_TO_ONE, names("b", 3) + names("a", 9))
    assert "".join(name[0] for name in order) == "aabaaabaaaba"


async def test_fractional_weights_keep_their_ratio(autojump_clock: trio.testing.MockClock) -> None:
    shares = {"a": TenantShare("a", weight=0.5), "b": TenantShare("b", weight=1.5)}
    order = await backlogged_order(shares, names("a", 3) + names("b", 9))
    assert "".join(name[0] for name in order) == "bbab" * 3


async def test_each_tenant_is_served_in_its_own_arrival_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shares = {**THREE_TO_ONE, "c": TenantShare("c", weight=2)}
    arrivals = [f"{t}{i}" for i in range(1, 7) for t in "abc"]  # interleaved: a1 b1 c1 a2 ...
    order = await backlogged_order(shares, arrivals)
    for tenant in "abc":
        assert [n for n in order if n[0] == tenant] == names(tenant, 6)
    # The first twelve, while all three stay backlogged: 3:1:2, then b and c drain.
    first = "".join(name[0] for name in order[:12])
    assert (first.count("a"), first.count("b"), first.count("c")) == (6, 2, 4)


async def test_a_tenant_that_idled_banks_no_credit_and_gets_no_burst(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = AdmissionGate(max_inflight=1, max_queue=100, acquire_timeout=100.0)
    run = Requests(gate, EQUAL)
    held = gate.acquire_nowait()
    async with trio.open_nursery() as nursery:
        await run.arrive(nursery, *names("a", 10), "b1")
        held.release()
        await trio.sleep(5.5)  # b idles while a alone is admitted at t = 2, 3, 4, 5
        assert run.admitted == ["a1", "b1", "a2", "a3", "a4", "a5"]
        await run.arrive(nursery, "b2", "b3", "b4")
    # b comes back at the current virtual time: it alternates with a, no catch-up burst.
    assert run.admitted[6:] == ["a6", "b2", "a7", "b3", "a8", "b4", "a9", "a10"]
    assert run.at["b2"] == 7
    assert_consistent(gate)


async def test_a_newcomer_of_an_idle_tenant_queues_and_takes_its_turn_in_virtual_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shares = {**EQUAL, "c": TenantShare("c")}
    gate = AdmissionGate(max_inflight=1, max_queue=100, acquire_timeout=100.0)
    run = Requests(gate, shares)
    held = gate.acquire_nowait()
    async with trio.open_nursery() as nursery:
        await run.arrive(nursery, *names("a", 5), *names("b", 5))
        held.release()
        await trio.sleep(2.5)
        assert run.admitted == ["a1", "b1", "a2"]
        with pytest.raises(Shed):
            gate.acquire_nowait(tenant=shares["c"])  # no free slot: it cannot jump the queue
        await run.arrive(nursery, "c1")
    # c1 enters at the current virtual time (2) plus its cost: tag 3, like a3 and b3, who
    # arrived earlier and win the tie. So it waits floor(w_j / w_c) + 1 = 2 admissions of b
    # (b2's tag 2 and b3's) and one of a (a3's).
    assert run.admitted[3:7] == ["b2", "a3", "b3", "c1"]
    assert_consistent(gate)


async def test_a_tenant_at_its_max_inflight_share_waits_while_others_take_the_slots(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shares = {"a": TenantShare("a", max_inflight=1), "b": TenantShare("b"), "c": TenantShare("c")}
    gate = AdmissionGate(max_inflight=3, max_queue=100, acquire_timeout=100.0)
    run = Requests(gate, shares, hold=math.inf)
    async with trio.open_nursery() as nursery:
        await run.arrive(nursery, "a1", "b1", "a2", "a3", "b2")
        # a2 and a3 wait while a slot is free (a is at its share); b2 takes that slot at once.
        assert run.admitted == ["a1", "b1", "b2"]
        stats = gate.statistics()
        assert (stats.active, stats.waiting) == (3, 2)
        assert stats.by_tenant["a"].active == 1 and stats.by_tenant["a"].waiting == 2
        with pytest.raises(Shed) as info:
            gate.acquire_nowait(tenant=shares["a"])
        assert info.value.reason == "tenant_queue_full"

        await run.arrive(nursery, "b3", "c1")
        run.slots["b1"].release()  # a's waiters are older, but a is not eligible: b3 gets it
        await trio.testing.wait_all_tasks_blocked()
        assert run.admitted[-1] == "b3"
        run.slots["b2"].release()
        await trio.testing.wait_all_tasks_blocked()
        assert run.admitted[-1] == "c1"
        run.slots["b3"].release()  # nobody eligible waits: the slot is free
        await trio.testing.wait_all_tasks_blocked()
        assert_consistent(gate, active=2, waiting=2)
        run.slots["a1"].release()  # a drops below its share: its oldest waiter is next
        await trio.testing.wait_all_tasks_blocked()
        assert run.admitted[-1] == "a2"
        assert gate.statistics().by_tenant["a"].active == 1
        run.slots["a2"].release()
        await trio.testing.wait_all_tasks_blocked()
        for name in ("a3", "c1"):
            run.slots[name].release()
    assert run.admitted == ["a1", "b1", "b2", "b3", "c1", "a2", "a3"]
    assert_consistent(gate)


async def test_tenant_queue_full_sheds_only_that_tenant_and_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shares = {"a": TenantShare("a", max_queue=2), "b": TenantShare("b")}
    gate = AdmissionGate(max_inflight=1, max_queue=4, acquire_timeout=100.0)
    run = Requests(gate, shares)
    held = gate.acquire_nowait()
    async with trio.open_nursery() as nursery:
        await run.arrive(nursery, "a1", "a2")
        coro = gate.acquire(tenant=shares["a"])
        with pytest.raises(Shed) as info:  # on the coroutine's first step: no checkpoint
            coro.send(None)
        coro.close()
        assert (info.value.reason, info.value.tenant) == ("tenant_queue_full", "a")
        await run.arrive(nursery, "a3", "b1", "b2", "b3")  # b fills the gate's own queue
        assert run.shed == {"a3": ("tenant_queue_full", 0), "b3": ("queue_full", 0)}
        held.release()
    assert run.admitted == ["a1", "b1", "a2", "b2"]
    stats = gate.statistics()
    assert dict(stats.shed_by_reason) == {
        "queue_full": 1,
        "tenant_queue_full": 2,
        "queue_timeout": 0,
        "shutdown": 0,
    }
    assert stats.by_tenant["a"].shed_by_reason["tenant_queue_full"] == 2
    assert dict(stats.by_tenant["b"].shed_by_reason) == {
        "queue_full": 1,
        "tenant_queue_full": 0,
        "queue_timeout": 0,
        "shutdown": 0,
    }
    assert (stats.by_tenant["a"].admitted_total, stats.by_tenant["b"].admitted_total) == (2, 2)
    assert stats.admitted_total == 5  # the held slot: the default tenant's
    assert stats.by_tenant[DEFAULT_TENANT.name].admitted_total == 1
    assert_consistent(gate)


async def test_cancelled_waiters_in_both_tenants_leave_no_trace_in_the_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = AdmissionGate(max_inflight=1, max_queue=100, acquire_timeout=100.0)
    run = Requests(gate, EQUAL)
    held = gate.acquire_nowait()
    async with trio.open_nursery() as nursery:
        await run.arrive(nursery, "a1", "a2", "a3", "b1", "b2", "b3")
        run.scopes["a2"].cancel()  # mid-queue in a
        run.scopes["b1"].cancel()  # the head of b: b2 inherits its place in the order
        await trio.testing.wait_all_tasks_blocked()
        assert_consistent(gate, active=1, waiting=4)
        held.release()
    assert run.admitted == ["a1", "b2", "a3", "b3"]
    assert run.shed == {}
    assert_consistent(gate)


async def test_a_slot_handed_to_a_tenant_as_its_waiter_is_cancelled_goes_to_the_next_tenant(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = AdmissionGate(max_inflight=1, max_queue=100, acquire_timeout=100.0)
    run = Requests(gate, EQUAL, hold=math.inf)
    held = gate.acquire_nowait()
    async with trio.open_nursery() as nursery:
        await run.arrive(nursery, "a1", "b1")
        run.scopes["a1"].cancel()
        held.release()  # handed to a1 in the same tick: a1 passes it on in fair order
        await trio.testing.wait_all_tasks_blocked()
        assert run.admitted == ["b1"]
        stats = gate.statistics()
        assert (stats.by_tenant["a"].active, stats.by_tenant["b"].active) == (0, 1)
        assert stats.by_tenant["a"].admitted_total == 0
        run.slots["b1"].release()
    assert_consistent(gate)


async def test_a_waiter_that_times_out_does_not_disturb_the_other_tenant(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = AdmissionGate(max_inflight=1, max_queue=100, acquire_timeout=2.0)
    run = Requests(gate, EQUAL, hold=0.25)
    held = gate.acquire_nowait()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run.request, "a1")
        await trio.sleep(1)
        await run.arrive(nursery, "b1", "b2")
        await trio.sleep(1.5)
        held.release()
    assert run.shed == {"a1": ("queue_timeout", 2.0)}
    assert run.admitted == ["b1", "b2"]
    assert (run.at["b1"], run.at["b2"]) == (2.5, 2.75)
    stats = gate.statistics()
    assert stats.by_tenant["a"].shed_by_reason["queue_timeout"] == 1
    assert stats.by_tenant["b"].shed_by_reason["queue_timeout"] == 0
    assert_consistent(gate)


async def test_close_sheds_the_waiters_of_every_tenant_with_shutdown(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = AdmissionGate(max_inflight=1, max_queue=100, acquire_timeout=100.0)
    run = Requests(gate, THREE_TO_ONE)
    held = gate.acquire_nowait()
    async with trio.open_nursery() as nursery:
        await run.arrive(nursery, "a1", "b1", "a2")
        await trio.sleep(1)
        gate.close()
    assert run.shed == {name: ("shutdown", 1) for name in ("a1", "b1", "a2")}
    with pytest.raises(Shed) as info:
        await gate.acquire(tenant=EQUAL["b"])
    assert (info.value.reason, info.value.tenant) == ("shutdown", "b")
    stats = gate.statistics()
    assert stats.shed_by_reason["shutdown"] == 4
    assert stats.by_tenant["a"].shed_by_reason["shutdown"] == 2
    assert stats.by_tenant["b"].shed_by_reason["shutdown"] == 2
    assert_consistent(gate, active=1)
    held.release()
    await gate.wait_idle()
    assert_consistent(gate)


async def test_a_raised_max_inflight_share_admits_the_tenants_waiters_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = AdmissionGate(max_inflight=3, max_queue=100, acquire_timeout=100.0)
    run = Requests(gate, {"a": TenantShare("a", max_inflight=1)}, hold=math.inf)
    async with trio.open_nursery() as nursery:
        await run.arrive(nursery, "a1", "a2", "a3")
        assert_consistent(gate, active=1, waiting=2)
        run.shares["a"] = TenantShare("a", max_inflight=2)  # as after a reload of the config
        await run.arrive(nursery, "a4")  # its acquire brings the new share: a2 takes a slot
        assert run.admitted == ["a1", "a2"]
        assert_consistent(gate, active=2, waiting=2)
        assert gate.statistics().by_tenant["a"].max_inflight == 2
        for name in ("a1", "a2", "a3", "a4"):
            run.slots[name].release()
            await trio.testing.wait_all_tasks_blocked()
    assert run.admitted == ["a1", "a2", "a3", "a4"]
    assert_consistent(gate)


async def test_without_a_tenant_the_gate_is_one_fifo_queue_and_reports_as_before(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = AdmissionGate(max_inflight=1, max_queue=1, acquire_timeout=1.0)
    held = await gate.acquire()
    assert held.tenant == DEFAULT_TENANT.name
    with pytest.raises(Shed) as info:
        gate.acquire_nowait()
    assert (info.value.reason, info.value.tenant) == ("queue_full", None)
    stats = gate.statistics()
    assert list(stats.shed_by_reason) == ["queue_full", "queue_timeout", "shutdown"]
    assert list(stats.by_tenant) == [DEFAULT_TENANT.name]
    assert stats.by_tenant[DEFAULT_TENANT.name].active == 1
    # Naming the default tenant is the same as naming none: one queue, FIFO.
    run = Requests(gate, {"(": DEFAULT_TENANT}, hold=0)
    async with trio.open_nursery() as nursery:
        await run.arrive(nursery, "(1")
        with pytest.raises(Shed) as info:
            await gate.acquire()  # no tenant: the same queue, which is full
        assert info.value.reason == "queue_full"
        held.release()
    assert run.admitted == ["(1"]
    stats = gate.statistics()
    assert dict(stats.shed_by_reason) == {"queue_full": 2, "queue_timeout": 0, "shutdown": 0}
    assert list(stats.by_tenant) == [DEFAULT_TENANT.name]
    assert stats.admitted_total == 2


def test_a_tenant_share_refuses_meaningless_limits() -> None:
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="weight"):
            TenantShare("a", weight=bad)
    with pytest.raises(ValueError, match="max_inflight"):
        TenantShare("a", max_inflight=0)
    with pytest.raises(ValueError, match="max_queue"):
        TenantShare("a", max_queue=-1)
    assert TenantShare("a", weight=1e-300).weight == 1e-300  # any finite weight > 0 works


async def test_a_disabled_gate_admits_every_tenant_and_still_counts_them(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = AdmissionGate(max_inflight=0, max_queue=0, acquire_timeout=math.inf)
    share = TenantShare("a", max_inflight=1, max_queue=0)
    slots = [await gate.acquire(tenant=share) for _ in range(3)]
    slots.append(gate.acquire_nowait(tenant=share))
    assert gate.statistics().by_tenant["a"].active == 4
    for slot in slots:
        slot.release()
    assert_consistent(gate)
