"""LeaseSemaphore against a real redis-server: the cap leased in blocks across instances,
rebalancing, crashes, wake-ups, and no round trip per request.

Two "instances" are two LeaseSemaphores with their own clients (own connections, own
pub/sub) in this process; two tests use a second Python process. Real Redis time is
involved, so the waits are real, tiny and bounded.
"""

from __future__ import annotations

import gc
import os
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import coredis
import pytest
import trio
import trio.testing
from redis_support import RedisServer, open_test_link, running_redis, unique_prefix

from trio_batcher.cluster import ClusterUnavailable, LeaseSemaphore

# See tests/test_cluster_connection.py: coredis leaks buffers of refused connections.
pytestmark = pytest.mark.filterwarnings("ignore:Unclosed <MemoryObject:ResourceWarning")


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    with running_redis() as server:
        yield server


@asynccontextmanager
async def instances(
    url: str, count: int, capacity: int, *, ttl_s: float = 3.0, crashed: int | None = None
) -> AsyncIterator[list[LeaseSemaphore]]:
    """``count`` semaphores named alike in one fresh prefix, each with its own client and
    its ``run()`` (listener + renewer) started -- except number ``crashed``'s: it stands for
    a process that died holding leases (nothing renews them)."""
    prefix = unique_prefix()
    async with AsyncExitStack() as stack:
        # The clients outlive the tasks that use them: entered first, closed last.
        links = [await stack.enter_async_context(open_test_link(url, prefix)) for _ in range(count)]
        nursery = await stack.enter_async_context(trio.open_nursery())
        sems = []
        for i, link in enumerate(links):
            sem = LeaseSemaphore(link, "upstream", capacity, ttl_s=ttl_s, instance_id=f"i{i}")
            if i != crashed:
                await nursery.start(sem.run)
            sems.append(sem)
        yield sems
        nursery.cancel_scope.cancel()
    gc.collect()


async def blocks(url: str, sem: LeaseSemaphore) -> dict[str, int]:
    """Every instance's block, as Redis holds it."""
    async with coredis.Redis.from_url(url, decode_responses=True) as raw:
        return {k: int(v) for k, v in (await raw.hgetall(sem._keys[0])).items()}


async def test_two_instances_never_exceed_the_cap_and_reach_it_together(
    redis_server: RedisServer,
) -> None:
    cap, workers, rounds = 4, 12, 8
    in_flight = peak = 0
    grants = {0: 0, 1: 0}
    async with instances(redis_server.url, 2, cap) as sems:

        async def worker(n: int) -> None:
            nonlocal in_flight, peak
            sem = sems[n % 2]
            for r in range(rounds):
                async with sem.slot(f"w{n}-{r}"):
                    in_flight += 1
                    peak = max(peak, in_flight)
                    grants[n % 2] += 1
                    await trio.sleep(0.02)
                    in_flight -= 1

        async with trio.open_nursery() as nursery:
            for n in range(workers):
                nursery.start_soon(worker, n)
        assert [s.statistics().held for s in sems] == [0, 0]
        assert sum((await blocks(redis_server.url, sems[0])).values()) <= cap
    # Not 2 + 2 idle: both instances together reached the whole cap, past either's share.
    assert peak == cap
    assert grants == {0: workers // 2 * rounds, 1: workers // 2 * rounds}


async def test_slots_are_granted_without_a_round_trip_per_request(
    redis_server: RedisServer,
) -> None:
    async with instances(redis_server.url, 2, 8) as (a, b):
        for i in range(300):
            async with a.slot(f"a{i}"), b.slot(f"b{i}"):
                pass
        # A few syncs each to get a block and split the headroom, then every grant is
        # local (the renewals of a three-second lease do not come within this loop).
        print(f"syncs for 300 requests each: {a.statistics().syncs}, {b.statistics().syncs}")
        assert a.statistics().syncs <= 5
        assert b.statistics().syncs <= 5


async def test_two_busy_instances_share_a_binding_cap_about_evenly(
    redis_server: RedisServer,
) -> None:
    cap = 4
    grants = [0, 0]
    in_flight = peak = 0
    async with instances(redis_server.url, 2, cap, ttl_s=0.6) as sems:

        async def worker(n: int) -> None:
            nonlocal in_flight, peak
            while True:
                async with sems[n % 2].slot(f"w{n}"):
                    in_flight += 1
                    peak = max(peak, in_flight)
                    grants[n % 2] += 1
                    await trio.sleep(0.005)
                    in_flight -= 1

        async with trio.open_nursery() as nursery:
            for n in range(12):
                nursery.start_soon(worker, n)
            await trio.sleep(1.5)
            nursery.cancel_scope.cancel()
        print(f"grants {grants}; syncs {[s.statistics().syncs for s in sems]}")
    assert peak <= cap
    assert 0.35 < grants[0] / sum(grants) < 0.65


async def test_fifo_within_an_instance(redis_server: RedisServer) -> None:
    async with instances(redis_server.url, 1, 1) as (sem,):
        order: list[int] = []
        await sem.acquire("first")
        async with trio.open_nursery() as nursery:

            async def waiter(i: int) -> None:
                async with sem.slot(f"w{i}"):
                    order.append(i)

            for i in range(5):
                nursery.start_soon(waiter, i)
                await trio.testing.wait_all_tasks_blocked()
            assert sem.statistics().waiting == 5
            await sem.release("first")
        assert order == [0, 1, 2, 3, 4]


async def test_a_busy_instance_cannot_starve_a_quiet_one(redis_server: RedisServer) -> None:
    # A cap of 1 and two instances wanting it: the one slot goes by turns (the script's
    # order moves on every second), and the busy side's block comes back when its call
    # ends rather than going to its own next waiter.
    async with instances(redis_server.url, 2, 1, ttl_s=0.6) as (busy, quiet):

        async def hog(n: int) -> None:
            while True:
                async with busy.slot(f"hog{n}"):
                    await trio.sleep(0.002)

        async with trio.open_nursery() as nursery:
            for n in range(4):
                nursery.start_soon(hog, n)
            await trio.sleep(0.05)  # the busy instance always has a local waiter ready
            with trio.fail_after(3):
                async with quiet.slot("quiet"):
                    assert busy.statistics().held == 0
            nursery.cancel_scope.cancel()


async def test_a_crashed_holder_frees_its_slots_within_the_ttl(redis_server: RedisServer) -> None:
    ttl = 0.6
    async with instances(redis_server.url, 2, 2, ttl_s=ttl, crashed=0) as (crashed, survivor):
        await crashed.acquire("a")
        await crashed.acquire("b")
        started = trio.current_time()
        with trio.fail_after(ttl + 1):
            await survivor.acquire("x")
            await survivor.acquire("y")
        waited = trio.current_time() - started
        print(f"slots back after {waited * 1000:.0f} ms (ttl {ttl * 1000:.0f} ms)")
        assert waited < ttl + 0.3  # the expiry, then at most one safety-net poll
        assert await blocks(redis_server.url, survivor) == {"i1": 2}


async def test_a_live_holder_keeps_its_lease_past_the_ttl(redis_server: RedisServer) -> None:
    ttl = 0.3
    async with instances(redis_server.url, 2, 1, ttl_s=ttl) as (holder, other):
        await holder.acquire("long")
        with trio.move_on_after(3 * ttl) as scope:
            await other.acquire("blocked")
        assert scope.cancelled_caught  # renewed every ttl/3: never expired
        assert (await blocks(redis_server.url, holder))["i0"] == 1
        assert other.statistics().waiting == 0
        assert holder.statistics().leases_lost == 0


async def test_wake_on_release_is_a_message_not_a_poll(redis_server: RedisServer) -> None:
    async with instances(redis_server.url, 2, 1) as (a, b):
        latencies = []
        for i in range(5):
            await a.acquire(f"h{i}")
            got = trio.Event()
            woke_at = 0.0

            async def wait_for_slot(i: int = i, got: trio.Event = got) -> None:
                nonlocal woke_at
                await b.acquire(f"w{i}")
                woke_at = time.perf_counter()
                got.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait_for_slot)
                await trio.sleep(0.3)  # long enough for b's poll to back off to 160-250 ms
                released_at = time.perf_counter()
                await a.release(f"h{i}")
                await got.wait()
            latencies.append(woke_at - released_at)
            await b.release(f"w{i}")
        print(
            "wake-on-release ms: "
            + ", ".join(f"{x * 1000:.2f}" for x in latencies)
            + f" (median {statistics.median(latencies) * 1000:.2f})"
        )
        # a gives its slot back at once (b's message told it someone was short), and its
        # own message wakes b: a poll, backed off by then, takes 160-250 ms.
        assert statistics.median(latencies) < 0.1


async def test_acquire_is_idempotent_per_holder_and_release_of_unknown_is_a_no_op(
    redis_server: RedisServer,
) -> None:
    async with instances(redis_server.url, 1, 2) as (sem,):
        await sem.acquire("same")
        await sem.acquire("same")  # takes nothing more
        assert sem.statistics().held == 1
        await sem.release("same")
        await sem.release("same")
        await sem.release("never-held")
        assert sem.statistics().held == 0
        assert sem.statistics().block <= 2


async def test_raising_the_capacity_wakes_a_waiter_and_lowering_it_lets_holders_finish(
    redis_server: RedisServer,
) -> None:
    async with instances(redis_server.url, 1, 1) as (sem,):
        await sem.acquire("a")
        async with trio.open_nursery() as nursery:
            got_b = trio.Event()

            async def take_b() -> None:
                await sem.acquire("b")
                got_b.set()

            nursery.start_soon(take_b)
            await trio.sleep(0.1)
            assert not got_b.is_set()
            sem.capacity = 2
            with trio.fail_after(0.05):  # one sync, not a poll
                await got_b.wait()
        sem.capacity = 1  # both keep their slots; no new one until they are down to 0
        assert sem.statistics().held == 2
        await sem.release("a")
        with trio.move_on_after(0.1) as scope:
            await sem.acquire("c")
        assert scope.cancelled_caught
        await sem.release("b")
        with trio.fail_after(0.05):
            await sem.acquire("c")
        with trio.fail_after(1):
            while await blocks(redis_server.url, sem) != {"i0": 1}:  # noqa: ASYNC110 (Redis)
                await trio.sleep(0.01)


async def test_cancelled_slot_and_cancelled_waiter_leave_nothing_behind(
    redis_server: RedisServer,
) -> None:
    async with instances(redis_server.url, 2, 1) as (a, b):
        with trio.move_on_after(0.05):
            async with a.slot("request"):
                await trio.sleep_forever()  # the client went away mid-call
        assert a.statistics().held == 0
        await a.acquire("hold")
        with trio.move_on_after(0.05):
            await b.acquire("waiting")
        assert (b.statistics().held, b.statistics().waiting) == (0, 0)
        await a.release("hold")
        assert (a.statistics().held, a.statistics().waiting) == (0, 0)
        # And the slot is b's for the asking: nothing of the cancelled waiter holds it.
        with trio.fail_after(2):
            await b.acquire("later")


async def test_a_sync_cancelled_mid_command_is_set_right_when_redis_answers() -> None:
    with running_redis() as server:
        async with instances(server.url, 1, 1) as (sem,):
            await sem.acquire("warm")  # scripts loaded, connection up
            await sem.release("warm")
            with trio.fail_after(2):  # the headroom it kept comes back by itself
                while await blocks(server.url, sem) != {"i0": 1}:  # noqa: ASYNC110 (Redis)
                    await trio.sleep(0.01)
            sem.capacity = 1
            server.pause()
            with trio.move_on_after(0.05):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(trio.to_thread.run_sync, _resume_after, server, 0.1)
                    await sem.renew()  # sent; Redis answers only after the cancel
            assert sem.statistics().held == 0
            with trio.fail_after(2):
                await sem.acquire("after")


def _resume_after(server: RedisServer, seconds: float) -> None:
    time.sleep(seconds)
    server.resume()


async def test_redis_down_serves_the_block_then_fails_fast_past_it() -> None:
    ttl = 0.6
    with running_redis() as server:
        async with instances(server.url, 1, 2, ttl_s=ttl) as (sem,):
            async with sem.slot("before"):
                pass
            await server.astop()
            # The block is leased until its TTL: served locally, Redis or not.
            await sem.acquire("one")
            await sem.acquire("two")
            started = trio.current_time()
            with pytest.raises(ClusterUnavailable), trio.fail_after(2):
                await sem.acquire("three")  # past the block: only Redis could grow it
            # The renewer's next attempt (within ttl/3) fails and the head tries itself.
            assert trio.current_time() - started < ttl / 3 + 2 * 0.5
            assert sem.statistics().waiting == 0
            await sem.release("one")
            await sem.release("two")
            await server.astart()
            with trio.fail_after(3):
                while True:
                    try:
                        await sem.acquire("after")
                        break
                    except ClusterUnavailable:
                        await trio.sleep(0.01)
            assert sem.statistics().held == 1


async def test_a_slot_released_during_a_renewal_is_given_back_not_kept(
    redis_server: RedisServer,
) -> None:
    async with instances(redis_server.url, 2, 2) as (a, b):
        await a.acquire("done")
        await a.acquire("running")
        assert await blocks(redis_server.url, a) == {"i0": 2}
        link = a._link
        real_run = link.run

        async def release_during_the_sync(script: Any, keys: Any, args: Any) -> Any:
            link.run = real_run  # type: ignore[method-assign]
            reply = await real_run(script, keys, args)  # sent counting "done" in use
            await a.release("done")
            return reply

        link.run = release_during_the_sync  # type: ignore[method-assign]
        await a.renew()
        # "done" ended while its use was being reported: the slot is b's for the asking.
        with trio.fail_after(2):
            await b.acquire("next")
        assert (await blocks(redis_server.url, a))["i0"] == 1
        assert a.statistics().leases_lost == 0


PEER = """
import sys, time, trio
sys.path.insert(0, {tests!r})
from redis_support import open_test_link
from trio_batcher.cluster import LeaseSemaphore

async def main(url, prefix, mode):
    async with open_test_link(url, prefix) as link, trio.open_nursery() as nursery:
        sem = LeaseSemaphore(link, "upstream", 3, ttl_s=0.6, instance_id="peer")
        await nursery.start(sem.run)
        if mode == "hold":
            for i in range(3):
                await sem.acquire(f"held{{i}}")
            print("holding", flush=True)
            await trio.sleep_forever()
        for r in range(40):
            async with sem.slot(f"r{{r}}"):
                start = time.monotonic()
                await trio.sleep(0.003)
                print(start, time.monotonic(), flush=True)
        nursery.cancel_scope.cancel()

trio.run(main, *sys.argv[1:4])
"""


def _peer(url: str, prefix: str, mode: str) -> subprocess.Popen[str]:
    code = textwrap.dedent(PEER.format(tests=str(Path(__file__).parent)))
    return subprocess.Popen(
        [sys.executable, "-c", code, url, prefix, mode],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
    )


async def test_a_second_process_shares_the_cap(redis_server: RedisServer) -> None:
    prefix = unique_prefix()
    peer = _peer(redis_server.url, prefix, "loop")
    intervals: list[tuple[float, float]] = []
    async with open_test_link(redis_server.url, prefix) as link, trio.open_nursery() as nursery:
        sem = LeaseSemaphore(link, "upstream", 3, ttl_s=0.6, instance_id="local")
        await nursery.start(sem.run)

        async def worker(n: int) -> None:
            for r in range(20):
                async with sem.slot(f"{n}-{r}"):
                    start = time.monotonic()  # CLOCK_MONOTONIC: one clock for both processes
                    await trio.sleep(0.003)
                    intervals.append((start, time.monotonic()))

        async with trio.open_nursery() as workers:
            for n in range(3):
                workers.start_soon(worker, n)
        out, _ = await trio.to_thread.run_sync(peer.communicate, 30)
        nursery.cancel_scope.cancel()
    assert peer.returncode == 0
    peer_intervals = [tuple(map(float, line.split())) for line in out.splitlines()]
    assert len(peer_intervals) == 40
    events = sorted(
        [(s, 1) for s, _ in intervals + peer_intervals]  # type: ignore[misc]
        + [(e, -1) for _, e in intervals + peer_intervals]  # type: ignore[misc]
    )
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    assert peak <= 3


async def test_a_killed_process_gives_its_slots_back_within_the_ttl(
    redis_server: RedisServer,
) -> None:
    prefix = unique_prefix()
    peer = _peer(redis_server.url, prefix, "hold")
    try:
        assert peer.stdout is not None
        line = await trio.to_thread.run_sync(peer.stdout.readline)
        assert line.strip() == "holding"
        os.kill(peer.pid, signal.SIGKILL)
        killed_at = trio.current_time()
        async with open_test_link(redis_server.url, prefix) as link, trio.open_nursery() as n:
            sem = LeaseSemaphore(link, "upstream", 3, ttl_s=0.6, instance_id="survivor")
            await n.start(sem.run)
            with trio.fail_after(2):
                for i in range(3):
                    await sem.acquire(f"s{i}")
            assert trio.current_time() - killed_at < 0.6 + 0.3
            n.cancel_scope.cancel()
    finally:
        peer.kill()
        peer.wait()
        assert peer.stdout is not None
        peer.stdout.close()
