"""Random traffic at a dispatcher with admission windows (alone, and behind the admission gate) under virtual time.

Each example is one ``trio.run`` under ``MockClock(autojump_threshold=0)``: callers arrive at
random times, some leave at random times, jobs take random durations and some fail, and
sometimes the dispatcher is shut down mid-way. Whatever happens, the invariants below hold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trio_batcher.admission.dispatch import Dispatcher, Ticket
from trio_batcher.admission.gate import AdmissionGate, Shed
from trio_batcher.admission.windows import FlushReason, WindowPolicy
from trio_batcher.errors import ProxyError

# Coarse time grids make simultaneous events (the interesting races) common.
TIMES = st.sampled_from([0.0, 0.125, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0])
DURATIONS = st.sampled_from([0.0, 0.125, 0.25, 0.5, 1.0, 2.0, 3.0])


class JobFailed(Exception):
    pass


@dataclass(frozen=True)
class Caller:
    arrive: float
    duration: float
    fails: bool
    leaves_after: float | None  # the caller gives up this long after arriving
    via_submit: bool  # Dispatcher.submit (cancel-safe helper) rather than submit_nowait + wait


@dataclass(frozen=True)
class Config:
    max_size: int
    max_wait: float
    cap: int
    window_timeout: float
    shutdown: tuple[float, float] | None  # (close at, cancel_remaining this much later)


@dataclass(frozen=True)
class GateConfig:
    max_inflight: int
    max_queue: int
    acquire_timeout: float


callers_strategy = st.lists(
    st.builds(
        Caller,
        arrive=TIMES,
        duration=DURATIONS,
        fails=st.booleans(),
        leaves_after=st.none() | TIMES,
        via_submit=st.booleans(),
    ),
    max_size=20,
)
config_strategy = st.builds(
    Config,
    max_size=st.integers(1, 5),
    max_wait=st.sampled_from([0.0, 0.25, 0.5, 1.0]),
    cap=st.integers(1, 4),
    window_timeout=st.sampled_from([0.5, 1.0, 2.5, math.inf]),
    shutdown=st.none() | st.tuples(TIMES, st.sampled_from([0.0, 0.5, 2.0])),
)
gate_strategy = st.builds(
    GateConfig,
    max_inflight=st.integers(0, 4),
    max_queue=st.integers(0, 4),
    acquire_timeout=st.sampled_from([0.0, 0.5, 1.0, math.inf]),
)


@dataclass
class World:
    """What the fake upstream and the callers observed."""

    outcomes: dict[int, list[tuple[Any, ...]]] = field(default_factory=dict)
    tickets: dict[int, Ticket[int]] = field(default_factory=dict)
    state_when_left: dict[int, str] = field(default_factory=dict)
    started: dict[int, float] = field(default_factory=dict)
    submitted_order: list[int] = field(default_factory=list)
    flushes: list[tuple[int, FlushReason]] = field(default_factory=list)
    running: int = 0
    max_running: int = 0
    holding_slots: int = 0
    max_holding_slots: int = 0


async def scenario(
    config: Config, callers: list[Caller], gate_config: GateConfig | None, world: World
) -> Dispatcher:
    batcher = Dispatcher(
        limiter=trio.CapacityLimiter(config.cap),
        windows=WindowPolicy(
            max_size=config.max_size,
            max_wait=config.max_wait,
            window_timeout=config.window_timeout,
        ),
        on_flush=lambda size, reason: world.flushes.append((size, reason)),
    )
    gate = (
        AdmissionGate(gate_config.max_inflight, gate_config.max_queue, gate_config.acquire_timeout)
        if gate_config is not None
        else None
    )

    def audit() -> None:
        """Gauges agree with what the fake upstream sees, at every event of the scenario."""
        stats = batcher.statistics()
        assert stats.queued == stats.windows_open_size < config.max_size, stats
        assert stats.running == world.running, (stats, world.running)
        assert stats.running <= stats.limiter_borrowed <= config.cap, stats
        assert stats.queued + stats.waiting_token <= stats.unresolved, stats
        if gate is not None and gate_config is not None:
            gate_stats = gate.statistics()
            assert gate_stats.waiting <= gate_config.max_queue, gate_stats
            if gate_config.max_inflight:
                assert gate_stats.active <= gate_config.max_inflight, gate_stats
                # Work-conserving: nobody waits while a slot is free.
                if gate_stats.waiting:
                    assert gate_stats.active == gate_config.max_inflight, gate_stats

    def job(i: int, caller: Caller) -> Any:
        async def call() -> int:
            world.started[i] = trio.current_time()
            world.running += 1
            world.max_running = max(world.max_running, world.running)
            audit()
            try:
                await trio.sleep(caller.duration)
            finally:
                audit()
                world.running -= 1
            if caller.fails:
                raise JobFailed(i)
            return i

        return call

    def record(i: int, *outcome: Any) -> None:
        world.outcomes.setdefault(i, []).append(outcome)

    async def upstream_call(i: int, caller: Caller) -> None:
        try:
            if caller.via_submit:
                world.submitted_order.append(i)
                value = await batcher.submit(job(i, caller))
            else:
                ticket = batcher.submit_nowait(job(i, caller))
                world.submitted_order.append(i)
                world.tickets[i] = ticket
                try:
                    value = await ticket.wait()
                except trio.Cancelled:
                    world.state_when_left[i] = ticket.state
                    ticket.cancel()
                    raise
            record(i, "ok", value)
        except JobFailed as exc:
            record(i, "failed", exc.args[0])
        except ProxyError as exc:
            record(i, "proxy", exc.status, exc.code)

    async def one_caller(i: int, caller: Caller) -> None:
        await trio.sleep_until(caller.arrive)
        audit()
        leave_at = math.inf if caller.leaves_after is None else caller.arrive + caller.leaves_after
        with trio.move_on_at(leave_at) as left:
            if gate is None:
                await upstream_call(i, caller)
                return
            try:
                slot = await gate.acquire()
            except Shed as shed:
                record(i, "shed", shed.reason)
                return
            world.holding_slots += 1
            world.max_holding_slots = max(world.max_holding_slots, world.holding_slots)
            try:
                await upstream_call(i, caller)
            finally:
                world.holding_slots -= 1
                slot.release()
        if left.cancelled_caught:
            record(i, "left")
        audit()

    async def shutdown(close_at: float, grace: float) -> None:
        await trio.sleep_until(close_at)
        if gate is not None:
            gate.close()
        batcher.close()
        await trio.sleep(grace)
        batcher.cancel_remaining()

    # A hang would otherwise hang the test run: autojump only jumps to existing deadlines.
    with trio.fail_after(10_000):
        async with trio.open_nursery() as nursery:
            await nursery.start(batcher.run)
            async with trio.open_nursery() as crowd:
                for i, caller in enumerate(callers):
                    crowd.start_soon(one_caller, i, caller)
                if config.shutdown is not None:
                    crowd.start_soon(shutdown, *config.shutdown)
            batcher.close()
        await batcher.wait_drained()
        if gate is not None:
            await gate.wait_idle()
            stats = gate.statistics()
            assert (stats.active, stats.waiting) == (0, 0), stats
            shed = sum(stats.shed_by_reason.values())
            shed_seen = sum(1 for o in world.outcomes.values() if o[0][0] == "shed")
            assert shed == shed_seen
            if gate_config is not None and gate_config.max_inflight:
                assert world.max_holding_slots <= gate_config.max_inflight
    return batcher


def check(config: Config, callers: list[Caller], world: World, batcher: Dispatcher) -> None:
    # Every caller got exactly one outcome.
    assert sorted(world.outcomes) == list(range(len(callers)))
    assert all(len(o) == 1 for o in world.outcomes.values()), world.outcomes
    # Results and errors reach their own caller.
    for i, [outcome] in world.outcomes.items():
        if outcome[0] in ("ok", "failed"):
            assert outcome[1] == i
            assert callers[i].fails == (outcome[0] == "failed")
            assert i in world.started
    # 503s come only from a shutdown; 504s only from a finite window timeout.
    errors = {o[2] for [o] in world.outcomes.values() if o[0] == "proxy"}
    if config.shutdown is None:
        assert "shutdown" not in errors
    if config.window_timeout == math.inf:
        assert "window_timeout" not in errors
    # A caller that left while queued or waiting for a token never reached the upstream.
    for i, state in world.state_when_left.items():
        if state in ("queued", "waiting_token"):
            assert i not in world.started, (i, state)
    # The upstream never saw more than the cap; jobs started in submission order.
    assert world.max_running <= config.cap
    starts = [world.started[i] for i in world.submitted_order if i in world.started]
    assert starts == sorted(starts)
    # Windows respect max_size; tickets flush within max_wait of arriving; a 504 lands at
    # exactly its window's deadline.
    assert all(1 <= size <= config.max_size for size, _ in world.flushes)
    for ticket in world.tickets.values():
        assert ticket.done
        if ticket.flushed_at is not None:
            assert ticket.enqueued_at <= ticket.flushed_at <= ticket.enqueued_at + config.max_wait
        if ticket.resolution == "timed_out":
            assert ticket.flushed_at is not None
            assert ticket.finished_at == ticket.flushed_at + config.window_timeout
        if ticket.started_at is not None:
            assert ticket.flushed_at is not None and ticket.started_at >= ticket.flushed_at
    # Everything is back to idle.
    stats = batcher.statistics()
    assert stats.idle, stats
    assert (stats.queued, stats.waiting_token, stats.running, stats.unresolved) == (0, 0, 0, 0)
    assert stats.windows_open_size == 0
    assert batcher.limiter is not None and batcher.limiter.borrowed_tokens == 0
    assert stats.items_dispatched == len(world.started)
    resolved = stats.succeeded + stats.failed + stats.cancelled + stats.timed_out + stats.shut_down
    assert resolved == stats.items_submitted
    assert stats.windows_flushed == len(world.flushes)
    assert sum(size for size, _ in world.flushes) <= stats.items_submitted


def run_example(config: Config, callers: list[Caller], gate_config: GateConfig | None) -> None:
    world = World()
    batcher = trio.run(
        scenario,
        config,
        callers,
        gate_config,
        world,
        clock=trio.testing.MockClock(autojump_threshold=0),
    )
    check(config, callers, world, batcher)


PROPERTY_SETTINGS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@PROPERTY_SETTINGS
@given(config=config_strategy, callers=callers_strategy)
def test_batcher_keeps_its_invariants_under_random_traffic(
    config: Config, callers: list[Caller]
) -> None:
    run_example(config, callers, None)


@PROPERTY_SETTINGS
@given(config=config_strategy, callers=callers_strategy, gate_config=gate_strategy)
def test_gate_and_batcher_keep_their_invariants_under_random_traffic(
    config: Config, callers: list[Caller], gate_config: GateConfig
) -> None:
    run_example(config, callers, gate_config)
