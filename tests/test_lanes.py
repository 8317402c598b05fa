"""Priority lanes (issue 31): interactive requests go ahead of deferrable ones where requests
queue -- the admission gate's slots and the dispatcher's upstream tokens -- and deferrable
ones still get a bounded share, so they are slowed, never starved.

Every time below is exact (``autojump_clock``): an admitted request holds its slot, or a job
its token, for one second unless the test says otherwise.
"""

from __future__ import annotations

import itertools
import math

import pytest
import trio
import trio.testing

from trio_batcher.admission.dispatch import Dispatcher
from trio_batcher.admission.fair_queue import FairQueue, TenantShare
from trio_batcher.admission.gate import AdmissionGate, Shed
from trio_batcher.admission.lanes import LaneChooser, LanePolicy
from trio_batcher.admission.windows import WindowPolicy


class Run:
    """Requests against a gate: each holds its slot ``hold`` seconds once admitted."""

    def __init__(self, gate: AdmissionGate, hold: float = 1.0) -> None:
        self.gate = gate
        self.hold = hold
        self.admitted: list[str] = []
        self.at: dict[str, float] = {}
        self.shed: dict[str, str] = {}
        self.deferrable_expected = 10
        self.deferrable_done = trio.Event()

    async def one(self, name: str, *, deferrable: bool, tenant: TenantShare | None = None) -> None:
        try:
            slot = await self.gate.acquire(tenant=tenant, deferrable=deferrable)
        except Shed as shed:
            self.shed[name] = shed.reason
            return
        self.admitted.append(name)
        self.at[name] = trio.current_time()
        if sum(n.startswith("d") for n in self.admitted) == self.deferrable_expected:
            self.deferrable_done.set()
        with slot:
            await trio.sleep(self.hold)

    async def arrive(self, nursery: trio.Nursery, *names: str) -> None:
        """Start each request in turn; each has queued (or been admitted) before the next."""
        for name in names:
            deferrable = name.startswith("d")
            nursery.start_soon(lambda n=name, d=deferrable: self.one(n, deferrable=d))  # type: ignore[misc]
            await trio.testing.wait_all_tasks_blocked()


# -- the lane rule -----------------------------------------------------------------------------


def test_the_chooser_gives_the_deferrable_lane_its_share_while_both_wait() -> None:
    chooser = LaneChooser(0.2)
    picks = [chooser.take(True, True) for _ in range(20)]
    assert [p[0] for p in picks if p] == list("iiiidiiiidiiiidiiiid")
    chooser = LaneChooser(0.25)
    picks = [chooser.take(True, True) for _ in range(12)]
    assert [p[0] for p in picks if p] == list("iiidiiidiiid")
    # Alone, a lane takes everything, and the credit does not carry over: no banking.
    chooser = LaneChooser(0.5)
    assert chooser.take(True, True) == "interactive"
    assert chooser.take(False, True) == "deferrable"
    assert chooser.take(True, True) == "interactive"  # credit reset by the lone admission
    assert chooser.take(True, True) == "deferrable"
    assert chooser.take(False, False) is None


@pytest.mark.parametrize("share", [0.05, 0.1, 0.2, 1 / 3, 0.5])
def test_over_any_contended_stretch_the_deferrable_lane_gets_at_least_its_share(
    share: float,
) -> None:
    chooser = LaneChooser(share)
    deferred = 0
    for n in range(1, 400):
        deferred += chooser.take(True, True) == "deferrable"
        assert deferred >= math.floor(n * share - 1e-9)
        assert deferred <= math.ceil(n * share + 1e-9)


def test_a_lane_policy_refuses_a_share_that_could_starve_either_lane() -> None:
    for bad in (0.0, -0.1, 0.6, 1.0):
        with pytest.raises(ValueError, match="deferrable_share"):
            LanePolicy(deferrable_share=bad)
    assert LanePolicy(enabled=False).lane(True) == "interactive"
    assert LanePolicy().lane(True) == "deferrable"


def test_a_fair_queue_keeps_tenants_fair_order_within_each_lane() -> None:
    queue: FairQueue[str] = FairQueue(0.5)
    a, b = queue.tenant(TenantShare("a")), queue.tenant(TenantShare("b"))
    for item in ("da1", "da2", "da3"):
        queue.push(a, item, deferrable=True)
    queue.push(b, "db1", deferrable=True)
    queue.push(a, "ia1")
    queue.push(b, "ib1")
    order = []
    while (popped := queue.pop()) is not None:
        order.append(popped[1])
    # Interactive first but for the deferrable share (1 in 2 here); within each lane a and b
    # alternate, as one fair queue would have them.
    assert order == ["ia1", "da1", "ib1", "db1", "da2", "da3"]
    assert queue.waiting == 0 and queue.lane_waiting == [0, 0]


# -- the gate ---------------------------------------------------------------------------------


async def test_a_saturated_gate_admits_interactive_waiters_ahead_of_deferrable_ones(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = AdmissionGate(max_inflight=1, max_queue=64, acquire_timeout=100.0)
    run = Run(gate)
    async with trio.open_nursery() as nursery:
        await run.arrive(nursery, "x", "d1", "d2", "d3", "d4", "i1", "i2")
        lanes = gate.statistics().lanes
        assert (lanes["interactive"].waiting, lanes["deferrable"].waiting) == (2, 4)
    # x held the slot; the interactive waiters, who came last, go first.
    assert run.admitted == ["x", "i1", "i2", "d1", "d2", "d3", "d4"]
    assert run.at["i1"] == 1 and run.at["i2"] == 2
    lanes = gate.statistics().lanes
    assert (lanes["interactive"].admitted_total, lanes["deferrable"].admitted_total) == (3, 4)


async def test_deferrable_work_gets_its_share_while_interactive_work_floods(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Two slots, 10 deferrable requests queued, then interactive requests keep coming:
    # always 6 queued. The deferrable lane still gets one hand-off in five (0.2), and every
    # deferrable request completes.
    gate = AdmissionGate(max_inflight=2, max_queue=64, acquire_timeout=math.inf)
    run = Run(gate)
    done = trio.Event()

    async def flood(nursery: trio.Nursery) -> None:
        n = 0
        while not done.is_set():
            while gate.statistics().lanes["interactive"].waiting < 6:
                n += 1
                await run.arrive(nursery, f"i{n}")
            await trio.sleep(0.5)

    async with trio.open_nursery() as nursery:
        await run.arrive(nursery, "x1", "x2", *(f"d{k}" for k in range(1, 11)))
        nursery.start_soon(flood, nursery)
        with trio.fail_after(100):
            await run.deferrable_done.wait()
        done.set()
    from_queue = run.admitted[2:]
    first_50 = from_queue[:50]
    assert sum(name.startswith("d") for name in first_50) == 10  # 50 * 0.2
    # Never more than four interactive admissions in a row while deferrable work waited.
    # Every fifth hand-off is deferrable: two hand-offs a second from t = 1, so a deferrable
    # admission at most three seconds after the last (five hand-offs, rounded up to whole
    # seconds). Times, not list positions: tasks woken in one tick resume in any order.
    times = [1.0] + [run.at[f"d{k}"] for k in range(1, 11)]
    assert all(later - earlier <= 3 for earlier, later in itertools.pairwise(times))
    # Five admissions per deferrable one, two slots, one second each: d10 at about t = 25.
    assert run.at["d10"] <= 26


async def test_deferrable_admission_keeps_tenants_fair_order_and_their_shares(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = AdmissionGate(max_inflight=2, max_queue=64, acquire_timeout=100.0)
    run = Run(gate)
    a = TenantShare("a", max_inflight=1)
    b = TenantShare("b")
    async with trio.open_nursery() as nursery:
        await run.arrive(nursery, "x")  # holds one slot until t = 1
        await trio.sleep(0.5)
        nursery.start_soon(lambda: run.one("ia1", deferrable=False, tenant=a))
        await trio.testing.wait_all_tasks_blocked()  # ia1 takes the free slot: a at its share
        nursery.start_soon(lambda: run.one("ia2", deferrable=False, tenant=a))
        await trio.testing.wait_all_tasks_blocked()
        for name in ("db1", "db2"):
            nursery.start_soon(lambda n=name: run.one(n, deferrable=True, tenant=b))  # type: ignore[misc]
            await trio.testing.wait_all_tasks_blocked()
    # When x's slot frees, a is at its share (in either lane): b's deferrable waiter takes it
    # although a's interactive one waits; a's next comes when a's own slot frees, ahead of
    # b's next deferrable one.
    assert run.admitted == ["x", "ia1", "db1", "ia2", "db2"]
    assert run.at == {"x": 0, "ia1": 0.5, "db1": 1, "ia2": 1.5, "db2": 2}


async def test_a_full_queue_sheds_deferrable_waiters_before_interactive_ones(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = AdmissionGate(max_inflight=1, max_queue=3, acquire_timeout=100.0)
    run = Run(gate)
    async with trio.open_nursery() as nursery:
        await run.arrive(nursery, "x", "d1", "d2", "d3")
        await run.arrive(nursery, "i1")  # pushes out d3, the newest deferrable waiter
        assert run.shed == {"d3": "queue_full"}
        await run.arrive(nursery, "i2", "i3")  # d2, then d1
        assert run.shed == {"d3": "queue_full", "d2": "queue_full", "d1": "queue_full"}
        await run.arrive(nursery, "d4")  # a deferrable newcomer never pushes out i1..i3
        assert run.shed["d4"] == "queue_full"
        await run.arrive(nursery, "i4")  # only interactive waiters: shed at the door, as before
        assert run.shed["i4"] == "queue_full"
    assert run.admitted == ["x", "i1", "i2", "i3"]
    lanes = gate.statistics().lanes
    assert (lanes["interactive"].shed_total, lanes["deferrable"].shed_total) == (1, 4)


async def test_with_lanes_off_deferrable_requests_queue_in_arrival_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = AdmissionGate(
        max_inflight=1, max_queue=64, acquire_timeout=100.0, lanes=LanePolicy(enabled=False)
    )
    run = Run(gate)
    async with trio.open_nursery() as nursery:
        await run.arrive(nursery, "x", "d1", "d2", "i1", "d3", "i2")
    assert run.admitted == ["x", "d1", "d2", "i1", "d3", "i2"]
    lanes = gate.statistics().lanes
    assert lanes["deferrable"].admitted_total == 0 and lanes["interactive"].admitted_total == 6


# -- the upstream cap (dispatcher) ------------------------------------------------------------


class Jobs:
    """Jobs that record when they start and hold their token ``hold`` seconds."""

    def __init__(self, hold: float = 1.0) -> None:
        self.hold = hold
        self.started: list[str] = []
        self.at: dict[str, float] = {}

    def job(self, name: str) -> object:
        async def run() -> str:
            self.started.append(name)
            self.at[name] = trio.current_time()
            await trio.sleep(self.hold)
            return name

        return run


async def _submit_all(
    dispatcher: Dispatcher, jobs: Jobs, names: list[str], nursery: trio.Nursery
) -> None:
    for name in names:
        nursery.start_soon(
            lambda n=name: dispatcher.submit(jobs.job(n), deferrable=n.startswith("d"))  # type: ignore[arg-type,misc]
        )
        await trio.testing.wait_all_tasks_blocked()


async def test_the_upstream_cap_hands_tokens_to_interactive_jobs_first(
    autojump_clock: trio.testing.MockClock,
) -> None:
    dispatcher = Dispatcher(limiter=trio.CapacityLimiter(1))
    jobs = Jobs()
    async with trio.open_nursery() as outer:
        await outer.start(dispatcher.run)
        async with trio.open_nursery() as nursery:
            # d1 waits in the limiter (no interactive job waits); i1's arrival makes it step
            # back, so the token x frees goes to i1.
            await _submit_all(dispatcher, jobs, ["x", "d1", "d2", "i1", "i2"], nursery)
        dispatcher.close()
    assert jobs.started == ["x", "i1", "i2", "d1", "d2"]
    assert jobs.at == {"x": 0, "i1": 1, "i2": 2, "d1": 3, "d2": 4}
    assert dispatcher.statistics().succeeded == 5


async def test_the_upstream_cap_gives_deferrable_jobs_their_share_under_an_interactive_flood(
    autojump_clock: trio.testing.MockClock,
) -> None:
    dispatcher = Dispatcher(limiter=trio.CapacityLimiter(2), lanes=LanePolicy(True, 0.25))
    jobs = Jobs()
    names = ["x1", "x2", *(f"d{k}" for k in range(1, 5)), *(f"i{k}" for k in range(1, 21))]
    async with trio.open_nursery() as outer:
        await outer.start(dispatcher.run)
        async with trio.open_nursery() as nursery:
            await _submit_all(dispatcher, jobs, names, nursery)
        dispatcher.close()
    queued = jobs.started[2:]
    # One token in four to the deferrable lane while both wait: i i i d i i i d ...
    assert [name[0] for name in queued[:16]] == list("iiidiiidiiidiiid")
    assert set(jobs.started) == set(names)


async def test_a_window_with_both_lanes_hands_its_interactive_tickets_their_tokens_first(
    autojump_clock: trio.testing.MockClock,
) -> None:
    dispatcher = Dispatcher(
        limiter=trio.CapacityLimiter(1),
        windows=WindowPolicy(max_size=4, max_wait=0.1, window_timeout=100.0),
    )
    jobs = Jobs()
    async with trio.open_nursery() as outer:
        await outer.start(dispatcher.run)
        async with trio.open_nursery() as nursery:
            await _submit_all(dispatcher, jobs, ["d1", "d2", "i1", "i2"], nursery)
        dispatcher.close()
    assert jobs.started == ["i1", "i2", "d1", "d2"]
    stats = dispatcher.statistics()
    assert (stats.windows_flushed, stats.succeeded) == (1, 4)


async def test_with_only_interactive_jobs_the_token_order_is_arrival_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    dispatcher = Dispatcher(limiter=trio.CapacityLimiter(1))
    jobs = Jobs()
    async with trio.open_nursery() as outer:
        await outer.start(dispatcher.run)
        async with trio.open_nursery() as nursery:
            await _submit_all(dispatcher, jobs, ["x", "i1", "i2", "i3"], nursery)
        dispatcher.close()
    assert jobs.started == ["x", "i1", "i2", "i3"]
