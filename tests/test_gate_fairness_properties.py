"""Random arrivals, releases and cancellations at a gate with three tenants, against a model.

Each example is one ``trio.run`` under ``MockClock(autojump_threshold=0)``. The model is the
gate's specification written the slow, obvious way (exact fractions for virtual time and for
weighted queue lengths, a scan for the smallest tag and for the longest queue, lists for the
queues), so it checks the heap, its lazy deletion, the integer virtual time and the longest
queue drop at a full queue; after every step the two must agree on who is admitted, queued,
shed, pushed out or gone, and the invariants of the theory of operation must hold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trio_batcher.admission.fair_queue import FairQueue
from trio_batcher.admission.gate import AdmissionGate, Shed, Slot, TenantShare

CAPS = (None, 1, 2)  # the max_inflight share an arrival brings (as after a reload)

# ("arrive", tenant, cap index) | ("release"|"cancel"|"race", i, j) | ("push_race", tenant, i)
Step = tuple[str, int, int]

# Arrivals and releases dominate, so that several tenants stay backlogged for a while.
steps_strategy = st.lists(
    st.one_of(
        st.tuples(st.just("arrive"), st.integers(0, 2), st.sampled_from([0, 0, 0, 1, 2])),
        st.tuples(st.just("arrive"), st.integers(0, 2), st.just(0)),
        st.tuples(st.just("release"), st.integers(0, 30), st.just(0)),
        st.tuples(st.just("release"), st.just(0), st.just(0)),
        st.tuples(st.just("cancel"), st.integers(0, 30), st.just(0)),
        st.tuples(st.just("race"), st.integers(0, 30), st.integers(0, 30)),
        st.tuples(st.just("push_race"), st.integers(0, 2), st.integers(0, 30)),
    ),
    min_size=8,
    max_size=80,
)


@dataclass
class ModelTenant:
    share: TenantShare
    queue: list[int] = field(default_factory=list)  # request ids, oldest first
    active: int = 0
    tag: Fraction | None = None  # set while eligible with waiters

    def eligible(self) -> bool:
        cap = self.share.max_inflight
        return bool(self.queue) and (cap is None or self.active < cap)


class Model:
    def __init__(self, max_inflight: int, max_queue: int) -> None:
        self.max_inflight, self.max_queue = max_inflight, max_queue
        self.tenants: dict[str, ModelTenant] = {}
        self.tenant_of: dict[int, str] = {}
        self.status: dict[int, str] = {}
        self.vtime = Fraction(0)
        self.active = 0
        self.pushed_out: set[int] = set()

    def cost(self, tenant: ModelTenant) -> Fraction:
        return 1 / Fraction(tenant.share.weight)

    def refresh(self, tenant: ModelTenant) -> None:
        if not tenant.eligible():
            tenant.tag = None
        elif tenant.tag is None:
            tenant.tag = self.vtime + self.cost(tenant)

    def pick(self) -> int | None:
        candidates = [t for t in self.tenants.values() if t.tag is not None]
        if not candidates:
            return None
        tenant = min(candidates, key=lambda t: (t.tag, t.queue[0]))
        assert tenant.tag is not None
        self.vtime = tenant.tag
        request = tenant.queue.pop(0)
        tenant.active += 1
        tenant.tag = None
        if tenant.eligible():
            tenant.tag = self.vtime + self.cost(tenant)
        self.status[request] = "handed"
        return request

    def arrive(self, request: int, share: TenantShare) -> None:
        tenant = self.tenants.setdefault(share.name, ModelTenant(share))
        self.tenant_of[request] = share.name
        tenant.share = share
        self.refresh(tenant)
        while self.active < self.max_inflight and self.pick() is not None:
            self.active += 1
        cap = share.max_inflight
        waiting = sum(len(t.queue) for t in self.tenants.values())
        if (
            self.active < self.max_inflight
            and not tenant.queue
            and (cap is None or tenant.active < cap)
        ):
            self.active += 1
            tenant.active += 1
            self.status[request] = "admitted"
        elif share.max_queue is not None and len(tenant.queue) >= share.max_queue:
            self.status[request] = "tenant_queue_full"
        elif waiting >= self.max_queue and (victim := self.longest(tenant)) is None:
            self.status[request] = "queue_full"
        else:
            if waiting >= self.max_queue:
                assert victim is not None
                pushed = victim.queue.pop()  # its newest
                self.status[pushed] = "queue_full"
                self.pushed_out.add(pushed)
                self.refresh(victim)
            tenant.queue.append(request)
            self.status[request] = "waiting"
            self.refresh(tenant)

    def longest(self, newcomer: ModelTenant) -> ModelTenant | None:
        """The other tenant whose queue is longer than the newcomer's with it, per weight, if
        any (the longest; ties to the one whose newest arrived last)."""

        def length(tenant: ModelTenant, extra: int = 0) -> Fraction:
            return (len(tenant.queue) + extra) / Fraction(tenant.share.weight)

        others = [t for t in self.tenants.values() if t is not newcomer and t.queue]
        others = [t for t in others if length(t) > length(newcomer, 1)]
        return max(others, key=lambda t: (length(t), t.queue[-1]), default=None)

    def release(self, request: int) -> None:
        tenant = self.tenants[self.tenant_of[request]]
        tenant.active -= 1
        self.status[request] = "released"
        self.refresh(tenant)
        if self.pick() is None:
            self.active -= 1

    def cancel(self, request: int) -> None:
        tenant = self.tenants[self.tenant_of[request]]
        tenant.queue.remove(request)
        self.status[request] = "cancelled"
        self.refresh(tenant)

    def settle(self) -> None:
        """Handed slots are admissions, except a cancelled waiter's, which is passed on."""
        for request, status in list(self.status.items()):
            if status == "handed":
                self.status[request] = "admitted"


class Driver:
    def __init__(self, gate: AdmissionGate, nursery: trio.Nursery) -> None:
        self.gate, self.nursery = gate, nursery
        self.status: dict[int, str] = {}
        self.slots: dict[int, Slot] = {}
        self.scopes: dict[int, trio.CancelScope] = {}

    async def request(
        self, request: int, share: TenantShare, cancel_first: trio.CancelScope | None
    ) -> None:
        with self.scopes[request]:
            if cancel_first is not None:  # in this tick, just before this arrival
                cancel_first.cancel()
            try:
                self.slots[request] = await self.gate.acquire(tenant=share)
            except Shed as shed:
                self.status[request] = shed.reason
            else:
                self.status[request] = "admitted"
            return
        self.status[request] = "cancelled"

    def start(self, request: int, share: TenantShare, cancel_first: int | None = None) -> None:
        self.status[request] = "waiting"
        self.scopes[request] = trio.CancelScope()
        scope = None if cancel_first is None else self.scopes[cancel_first]
        self.nursery.start_soon(self.request, request, share, scope)


def check_invariants(gate: AdmissionGate, model: Model, shares: dict[str, TenantShare]) -> None:
    stats = gate.statistics()
    assert stats.active == model.active <= stats.max_inflight
    assert stats.waiting <= stats.max_queue
    for name, tenant in stats.by_tenant.items():
        if name not in model.tenants:
            continue
        mt = model.tenants[name]
        assert (tenant.active, tenant.waiting) == (mt.active, len(mt.queue))
        cap = shares[name].max_inflight
        if tenant.waiting and stats.active < stats.max_inflight:  # a free slot...
            assert cap is not None and tenant.active >= cap  # ...only if nobody could take it


async def scenario(
    max_inflight: int,
    max_queue: int,
    weights: list[float],
    queues: list[int | None],
    steps: list[Step],
) -> None:
    gate = AdmissionGate(max_inflight, max_queue, acquire_timeout=math.inf)
    model = Model(max_inflight, max_queue)
    shares = {
        f"t{i}": TenantShare(f"t{i}", weight=w, max_queue=q)
        for i, (w, q) in enumerate(zip(weights, queues, strict=True))
    }
    async with trio.open_nursery() as nursery:
        driver = Driver(gate, nursery)
        for number, (kind, i, j) in enumerate(steps):
            held = [r for r, s in driver.status.items() if s == "admitted" and r in driver.slots]
            held = [r for r in held if not driver.slots[r].released]
            waiting = [r for r, s in driver.status.items() if s == "waiting"]
            if kind == "arrive":
                base = shares[f"t{i}"]
                share = shares[base.name] = TenantShare(
                    base.name, base.weight, max_inflight=CAPS[j], max_queue=base.max_queue
                )
                model.arrive(number, share)
                driver.start(number, share)
            elif kind == "push_race" and waiting:
                # In one tick: a waiter is cancelled, then a newcomer arrives (maybe pushing it
                # out: it is still queued until it resumes, with Cancelled, never with a Shed).
                cancelled, share = waiting[j % len(waiting)], shares[f"t{i}"]
                driver.start(number, share, cancel_first=cancelled)
                model.arrive(number, share)
                if model.status[cancelled] == "handed":  # by the newcomer's new share
                    model.release(cancelled)
                elif model.status[cancelled] == "waiting":
                    model.cancel(cancelled)
                model.pushed_out.discard(cancelled)
                model.status[cancelled] = "cancelled"
            elif kind == "release" and held:
                request = held[i % len(held)]
                model.release(request)
                driver.slots[request].release()
            elif kind == "cancel" and waiting:
                request = waiting[i % len(waiting)]
                model.cancel(request)
                driver.scopes[request].cancel()
            elif kind == "race" and held and waiting:
                # In one tick: a waiter is cancelled, then a slot is released (maybe to it).
                cancelled, released = waiting[i % len(waiting)], held[j % len(held)]
                driver.scopes[cancelled].cancel()
                driver.slots[released].release()
                model.release(released)
                if model.status[cancelled] == "handed":
                    model.release(cancelled)
                    model.status[cancelled] = "cancelled"
                else:
                    model.cancel(cancelled)
            await trio.testing.wait_all_tasks_blocked()
            model.settle()
            expected = {r: s for r, s in model.status.items() if s != "released"}
            actual = {r: s for r, s in driver.status.items() if model.status[r] != "released"}
            assert actual == expected, (number, kind)
            check_invariants(gate, model, shares)
        gate.close()
    for request, slot in driver.slots.items():
        slot.release()
        assert driver.status[request] == "admitted"
    stats = gate.statistics()
    assert (stats.active, stats.waiting) == (0, 0)
    assert stats.admitted_total == len(driver.slots)
    assert sum(stats.shed_by_reason.values()) == sum(
        s in ("queue_full", "tenant_queue_full", "shutdown") for s in driver.status.values()
    )
    assert stats.pushed_out == len(model.pushed_out)
    for name, tenant in stats.by_tenant.items():
        assert tenant.pushed_out == sum(model.tenant_of[r] == name for r in model.pushed_out)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    max_inflight=st.integers(1, 3),
    max_queue=st.integers(0, 12),
    weights=st.lists(st.sampled_from([0.5, 1.0, 2.0, 3.0]), min_size=3, max_size=3),
    queues=st.lists(st.sampled_from([None, None, 0, 1, 3]), min_size=3, max_size=3),
    steps=steps_strategy,
)
def test_the_gate_follows_its_fair_order_model_under_random_traffic(
    max_inflight: int,
    max_queue: int,
    weights: list[float],
    queues: list[int | None],
    steps: list[Step],
) -> None:
    trio.run(
        scenario,
        max_inflight,
        max_queue,
        weights,
        queues,
        steps,
        clock=trio.testing.MockClock(autojump_threshold=0),
    )


# A small queue, arrivals most likely and mostly t0's, few tenant max_queue shares: the
# gate's queue is often full and lopsided, so arrivals go through the longest queue drop.
flooder = st.sampled_from([0, 0, 0, 1, 2])
crowded_steps = st.lists(
    st.one_of(
        st.tuples(st.just("arrive"), flooder, st.just(0)),
        st.tuples(st.just("arrive"), flooder, st.just(0)),
        st.tuples(st.just("arrive"), flooder, st.just(0)),
        st.tuples(st.just("arrive"), flooder, st.sampled_from([0, 0, 1, 2])),
        st.tuples(st.just("push_race"), st.integers(1, 2), st.integers(0, 30)),
        st.tuples(st.just("push_race"), st.integers(1, 2), st.just(-1)),  # the newest waiter
        st.tuples(st.just("release"), st.integers(0, 30), st.just(0)),
        st.tuples(st.just("cancel"), st.integers(0, 30), st.just(0)),
        st.tuples(st.just("race"), st.integers(0, 30), st.integers(0, 30)),
    ),
    min_size=30,
    max_size=80,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    max_inflight=st.integers(1, 2),
    max_queue=st.integers(2, 6),
    weights=st.lists(st.sampled_from([0.5, 1.0, 2.0, 3.0]), min_size=3, max_size=3),
    queues=st.lists(st.sampled_from([None, None, None, 2]), min_size=3, max_size=3),
    steps=crowded_steps,
)
def test_a_full_gate_pushes_out_the_newest_of_the_longest_queue_as_its_model_does(
    max_inflight: int,
    max_queue: int,
    weights: list[float],
    queues: list[int | None],
    steps: list[Step],
) -> None:
    trio.run(
        scenario,
        max_inflight,
        max_queue,
        weights,
        queues,
        steps,
        clock=trio.testing.MockClock(autojump_threshold=0),
    )


@settings(max_examples=200, deadline=None)
@given(
    weights=st.lists(
        st.floats(0.05, 20.0, allow_nan=False, allow_infinity=False), min_size=2, max_size=5
    ),
    backlog=st.integers(1, 60),
)
def test_backlogged_tenants_never_stray_from_their_weights_beyond_the_scfq_bound(
    weights: list[float], backlog: int
) -> None:
    queue: FairQueue[tuple[int, int]] = FairQueue()
    tenants = [queue.tenant(TenantShare(f"t{i}", weight=w)) for i, w in enumerate(weights)]
    for k in range(backlog):
        for i, tenant in enumerate(tenants):
            queue.push(tenant, (i, k))
    served = [0] * len(tenants)
    while (popped := queue.pop()) is not None:
        _, (i, k) = popped
        assert k == served[i]  # FIFO within the tenant
        served[i] += 1
        if all(n < backlog for n in served):  # every tenant still backlogged
            for a, wa in enumerate(weights):
                for b, wb in enumerate(weights):
                    assert abs(served[a] / wa - served[b] / wb) <= 1 / wa + 1 / wb + 1e-9
    assert served == [backlog] * len(tenants)
    assert queue.waiting == 0
