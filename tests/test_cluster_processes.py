"""Two proxy processes sharing one Redis and one simulator: issue 16's live acceptance.

Real ``serve`` processes (the lab's ``trio_batcher_bench.processes.running_stack``, via
``cluster_process_support.two_proxies``), so each proxy is its own interpreter, Redis
connection and instance id, and ``kill -9`` is a real crash. The simulator's traces are the
judge of what reached the upstream and when (``upstream_calls``: its ``time.monotonic()``,
which this process shares); each proxy's ``/metrics`` ``cluster`` block says what that
instance believes (its mode, its leases). The tests check behaviour, never speed: what ran
at once, in what order, and which state each instance went through -- no latency, no mean.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from cluster_process_support import (
    CAP,
    InFlight,
    chat_body,
    cluster_env,
    http_client,
    in_flight_steps,
    post_chat,
    tagged,
    two_proxies,
    until,
    upstream_calls,
)
from redis_support import RedisServer, running_redis
from support import SIM_KEY, running_proxy

from trio_batcher import Settings
from trio_batcher_bench.processes import ProxyServer, SimServer, running_stack

pytestmark = pytest.mark.filterwarnings("ignore:Unclosed <MemoryObject:ResourceWarning")

TTL_S = 1.5


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A redis-server for one test alone: the outage test stops and restarts it."""
    with running_redis() as server:
        yield server


async def _cluster(proxy: ProxyServer) -> dict[str, Any]:
    """The proxy's ``/metrics`` ``cluster`` block (``SharedState.statistics``)."""
    block: dict[str, Any] = (await proxy.metrics())["cluster"]
    return block


async def _both_count_two_instances(a: ProxyServer, b: ProxyServer) -> None:
    """Until each instance has seen the other's heartbeat (every ``TTL_S / 3``): only then
    is its fallback share half the cap."""

    async def counted() -> bool:
        return all([(await _cluster(p))["instances_alive"] == 2 for p in (a, b)])

    with trio.fail_after(10):
        await until(counted)


async def _completed(sim: SimServer) -> int:
    completed: int = (await sim.stats())["completed"]
    return completed


async def _ran(sim: SimServer, calls: int) -> bool:
    """Whether the simulator has finished ``calls`` calls since its last reset."""
    return await _completed(sim) >= calls


async def test_two_proxies_fill_the_cap_together_and_never_pass_it(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """Requests at once through both proxies: the upstream sees the cap reached and never
    passed, and each proxy alone more than half of it (shared, not split 4 + 4)."""
    per_proxy = 200  # the 400 at once; each costs ~15 ms of CPU across the processes
    async with (
        two_proxies(redis_server.url, tmp_path / "logs", ["--ttft-ms", "100"]) as (a, b, sim),
        http_client() as http,
    ):
        statuses: list[int] = []

        async def one(proxy: ProxyServer, caller: str, i: int) -> None:
            reply = await post_chat(http, proxy, tagged(caller, f"hello {i}"))
            statuses.append(reply.status_code)

        async with trio.open_nursery() as nursery:
            for i in range(per_proxy):
                nursery.start_soon(one, a, "a", i)

            # b's half joins once a's has filled the cap and run it through twice, so both
            # ends of the flood have one proxy alone with work: a at the start, b at the
            # end (the slots go to the instances in turn while both wait).
            with trio.fail_after(10):
                await until(lambda: _ran(sim, 2 * CAP))
            for i in range(per_proxy):
                nursery.start_soon(one, b, "b", i)
        stats = await sim.stats()
        calls = await upstream_calls(sim)
        after = [await _cluster(p) for p in (a, b)]

    assert statuses == [200] * (2 * per_proxy)
    assert len(calls) == 2 * per_proxy
    assert stats["max_in_flight"] == CAP  # reached, never passed
    steps = in_flight_steps(calls)
    assert max(step.total for step in steps) == CAP  # the traces agree with the gauge
    # Shared, not cut in halves: each instance alone ran more than half the cap at some
    # point (a fixed split would hold each to CAP // 2 however idle the other was).
    for caller in ("a", "b"):
        most = max(step.by_caller.get(caller, 0) for step in steps)
        assert CAP // 2 < most <= CAP, (caller, most)
    for cluster in after:
        assert cluster["mode"] == "shared" and cluster["held_here"] == 0
        assert cluster["fallbacks"] == 0


HOLD_S = 2.0
# The hold ends on Redis's clock, told in whole milliseconds: B may see it end a few
# milliseconds before A's two seconds, never more.
ROUNDING_S = 0.01


async def test_a_429_answered_to_one_proxy_holds_the_others_next_calls(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """A 429 with ``retry-after: 2`` answered to a: b's next calls reach the upstream only
    once those 2 s (counted from the simulator's answer) are over, and succeed."""
    async with (
        two_proxies(redis_server.url, tmp_path / "logs", ["--ttft-ms", "20"]) as (a, b, sim),
        http_client() as http,
    ):
        refused = await post_chat(
            http, a, f"[[sim:status=429,retry_after={HOLD_S:g}]] slow down, please"
        )
        assert refused.status_code == 429

        async def published() -> bool:
            return bool((await _cluster(a))["cooldowns_published"] == 1)

        with trio.fail_after(5):  # a tells Redis in its own time; b must ask after that
            await until(published, interval=0.005)
        asked_b_at = time.monotonic()
        replies: list[httpx2.Response] = []

        async def one(i: int) -> None:
            replies.append(await post_chat(http, b, tagged("b", f"after the 429, {i}")))

        with trio.fail_after(15):
            async with trio.open_nursery() as nursery:
                for i in range(CAP):
                    nursery.start_soon(one, i)
        calls = await upstream_calls(sim)

    [limited] = [call for call in calls if call.status == 429]
    hold_ends = limited.finished_at + HOLD_S  # a saw the 429 after the simulator sent it
    # b was asked while the hold was on; otherwise this test would prove nothing.
    assert asked_b_at < hold_ends - 1.0, f"b asked {hold_ends - asked_b_at:.2f} s before the end"
    assert [reply.status_code for reply in replies] == [200] * CAP  # held, not refused
    b_calls = [call for call in calls if call.caller == "b"]
    assert len(b_calls) == CAP
    earliest = min(call.started_at for call in b_calls)
    assert earliest >= hold_ends - ROUNDING_S, (
        f"b called upstream {hold_ends - earliest:.3f} s before a's hold ended"
    )


async def test_a_killed_instance_frees_its_slots_within_the_lease_ttl(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """``kill -9`` of a while it holds the whole cap: b, waiting, holds the whole cap
    within the lease TTL (no release was sent; only the expiry frees a's leases)."""
    async with (
        two_proxies(
            redis_server.url, tmp_path / "logs", ["--ttft-ms", "50"], REDIS_LEASE_TTL_S=str(TTL_S)
        ) as (a, b, _sim),
        httpx2.AsyncClient(timeout=30, limits=httpx2.Limits(max_connections=100)) as http,
    ):

        async def post(proxy: ProxyServer, text: str) -> None:
            with contextlib.suppress(httpx2.HTTPError):  # a's clients lose their proxy
                await post_chat(http, proxy, text)

        async with trio.open_nursery() as nursery:
            for i in range(CAP):  # a takes the whole cap with calls that never end
                nursery.start_soon(post, a, f"[[sim:hang=1]] held {i}")

            async def a_holds_all() -> bool:
                return bool((await _cluster(a))["held_here"] == CAP)

            with trio.fail_after(10):
                await until(a_holds_all)
            # b's calls queue for the cap: none can start while a holds it
            for i in range(CAP):
                nursery.start_soon(post, b, f"[[sim:ttft_ms=3000]] waiting {i}")

            async def b_waits() -> bool:
                return bool((await _cluster(b))["waiting_here"] >= 1)

            with trio.fail_after(10):
                await until(b_waits)
            assert (await _cluster(b))["held_here"] == 0
            os.kill(a.pid, signal.SIGKILL)

            async def b_holds_all() -> bool:
                return bool((await _cluster(b))["held_here"] == CAP)

            with trio.fail_after(TTL_S + 8):
                took = await until(b_holds_all)
            print(f"b held the whole cap {took:.2f} s after the kill (lease TTL {TTL_S} s)")
            assert took <= TTL_S + 1.5, took  # the dead instance's block expired
            nursery.cancel_scope.cancel()


OUTAGE_CALL_MS = 200  # long enough that calls run across each change of mode


async def test_redis_stopped_mid_run_costs_no_5xx_keeps_the_cap_and_sharing_resumes(
    own_redis: RedisServer, tmp_path: Path
) -> None:
    """Redis stopped under continuous load through both proxies, then restarted on its
    port: no client sees a 5xx, both fall back and return to shared, a alone then uses more
    than its share again, and the upstream never sees more than the cap -- before, across
    and after both changes of mode."""
    clients_per_proxy = 12  # 24 callers for 8 slots: both proxies always have work waiting
    async with (
        two_proxies(
            own_redis.url,
            tmp_path / "logs",
            ["--ttft-ms", str(OUTAGE_CALL_MS)],
            REDIS_LEASE_TTL_S=str(TTL_S),
            REDIS_TIMEOUT_S="0.5",  # the default; a refused connection fails at once anyway
        ) as (a, b, sim),
        http_client() as http,
    ):
        await _both_count_two_instances(a, b)
        await sim.reset()
        statuses: list[int] = []
        failures: list[str] = []

        async def client(proxy: ProxyServer, caller: str, i: int, stop: trio.Event) -> None:
            n = 0
            while not stop.is_set():
                try:
                    reply = await post_chat(http, proxy, tagged(caller, f"client {i}, {n}"))
                except httpx2.HTTPError as exc:
                    failures.append(repr(exc))
                else:
                    statuses.append(reply.status_code)
                n += 1

        async def load_for(seconds: float) -> None:
            """At least ``seconds``, and until the cap has turned over twice more."""
            done = await _completed(sim)
            await trio.sleep(seconds)
            with trio.fail_after(10):
                await until(lambda: _ran(sim, done + 2 * CAP))

        async def both(mode: str) -> bool:
            return all([(await _cluster(p))["mode"] == mode for p in (a, b)])

        stop_a, stop_b = trio.Event(), trio.Event()
        async with trio.open_nursery() as nursery:
            for i in range(clients_per_proxy):
                nursery.start_soon(client, a, "a", i, stop_a)
            async with trio.open_nursery() as b_clients:
                for i in range(clients_per_proxy):
                    b_clients.start_soon(client, b, "b", i, stop_b)
                await load_for(0.3)  # shared, under load
                stopped_at = time.monotonic()
                await own_redis.astop()
                with trio.fail_after(10):
                    await until(lambda: both("fallback"))
                await load_for(1.0)  # through the outage
                restarted_at = time.monotonic()
                await own_redis.astart()
                with trio.fail_after(10):  # a probe a second finds Redis again
                    await until(lambda: both("shared"))
                await _both_count_two_instances(a, b)  # re-registered in the new Redis
                await load_for(0.3)
                stop_b.set()
            alone_at = time.monotonic()  # b's last call is over: a alone, shared again

            async def a_beyond_its_share() -> bool:
                return bool((await _cluster(a))["held_here"] > CAP // 2)

            # Once the rejoin period is over (about two probe intervals, in which each
            # instance keeps to its share while the others find Redis), a alone may use
            # more than its share again.
            with trio.fail_after(10):
                await until(a_beyond_its_share)
            await load_for(0.0)
            stop_a.set()
        stats = await sim.stats()
        calls = await upstream_calls(sim)
        after = [await _cluster(p) for p in (a, b)]

    assert not failures, failures[:5]
    assert [s for s in statuses if s >= 500] == []  # no client saw the outage
    assert statuses.count(200) == len(statuses)
    for cluster in after:
        assert cluster["fallbacks"] >= 1 and cluster["mode"] == "shared"
    steps = in_flight_steps(calls)
    # Shared again: a alone used more than its fallback share (CAP // 2) upstream.
    alone = max(s.by_caller.get("a", 0) for s in steps if s.at >= alone_at)
    assert CAP // 2 < alone <= CAP, alone
    peaks = _peaks_over_cap(steps)
    assert stats["max_in_flight"] <= CAP and not peaks, (
        f"the cap {CAP} was passed: {stats['max_in_flight']} upstream calls at once at most; "
        + _describe(peaks, {"stop": stopped_at, "restart": restarted_at})
    )


def _peaks_over_cap(steps: list[InFlight]) -> list[InFlight]:
    """The highest step of each run of steps above ``CAP``, in time order."""
    peaks: list[InFlight] = []
    above = False
    for step in steps:
        if step.total > CAP:
            if not above or step.total > peaks[-1].total:
                if above:
                    peaks.pop()
                peaks.append(step)
            above = True
        else:
            above = False
    return peaks


def _describe(peaks: list[InFlight], marks: dict[str, float]) -> str:
    """``"10 (a: 6, b: 4) at +0.06 s from the stop, -1.05 s from the restart; ..."``."""
    described = []
    for peak in peaks:
        callers = ", ".join(
            f"{caller}: {n}" for caller, n in sorted(peak.by_caller.items(), key=str) if n
        )
        when = ", ".join(f"{peak.at - at:+.2f} s from the {name}" for name, at in marks.items())
        described.append(f"{peak.total} ({callers}) at {when}")
    return "; ".join(described)


START_CAP = 4


async def test_a_gateway_started_while_redis_is_down_never_takes_the_cap(
    own_redis: RedisServer, tmp_path: Path
) -> None:
    """Two gateways, cap 4: ``a`` (a process) runs with Redis and fills the cap; Redis
    stops; ``b`` starts while it is down (in this process) and is loaded too; Redis comes
    back. The calls in flight at the upstream, sampled there every 25 ms and replayed from
    its traces, never exceed 4; ``b`` calls nothing before Redis answers, and serves after."""
    # The default lease TTL (5 s): ``b`` runs in this process beside 16 clients and the
    # sampler, and a stall of its loop past a short TTL would lose it a lease (a separate
    # mechanism, ``leases_lost``, not what this test is about).
    env = cluster_env(own_redis.url, BATCH_MAX_CONCURRENCY=str(START_CAP), REDIS_TIMEOUT_S="0.5")
    async with (
        running_stack(["--ttft-ms", "300"], {"a": env}, tmp_path / "logs") as stack,
        http_client() as http,
    ):
        a, sim = stack.proxies["a"], stack.sim
        with trio.fail_after(10):
            await until(lambda: _mode_is(a, "shared"))
        await sim.reset()
        sampled: list[int] = []
        statuses: dict[str, list[int]] = {"a": [], "b": []}

        async def sample() -> None:
            while True:
                sampled.append(int((await sim.stats())["in_flight"]))
                await trio.sleep(0.025)

        async def client(url: str, caller: str, i: int, stop: trio.Event) -> None:
            n = 0
            while not stop.is_set():  # a request is finished, never cut: see below
                body = chat_body(tagged(caller, f"client {i}, {n}"))
                reply = await http.post(f"{url}/v1/chat/completions", json=body)
                statuses[caller].append(reply.status_code)
                n += 1

        # Clients stop between requests rather than being cancelled: a proxy frees the slot
        # of a call whose client left at once, before the upstream notices the call end.
        stop = trio.Event()
        async with trio.open_nursery() as sampler:
            sampler.start_soon(sample)
            async with trio.open_nursery() as a_clients:
                for i in range(8):
                    a_clients.start_soon(client, a.url, "a", i, stop)
                with trio.fail_after(10):
                    await until(lambda: _in_flight_is(sim, START_CAP))
                stopped_at = time.monotonic()
                await own_redis.astop()
                with trio.fail_after(10):
                    await until(lambda: _mode_is(a, "fallback"))
                b_settings = Settings(
                    anthropic_base_url=sim.url,
                    anthropic_api_key=SIM_KEY,
                    metrics_enabled=True,
                    batch_enabled=True,
                    batch_max_concurrency=START_CAP,
                    batch_max_wait_ms=1,
                    upstream_max_retries=0,
                    redis_url=own_redis.url,
                    redis_key_prefix=env["REDIS_KEY_PREFIX"],
                    redis_timeout_s=0.5,
                    data_dir=str(tmp_path / "b-data"),
                )
                async with running_proxy(b_settings) as b_url:
                    b_cluster = (await http.get(f"{b_url}/metrics")).json()["cluster"]
                    assert b_cluster["mode"] == "fallback"
                    assert b_cluster["instances_alive"] is None  # never counted
                    async with trio.open_nursery() as b_clients:
                        for i in range(8):
                            b_clients.start_soon(client, b_url, "b", i, stop)
                        await trio.sleep(4)  # the outage, both loaded
                        b_during = [c for c in await upstream_calls(sim) if c.caller == "b"]
                        restarted_at = time.monotonic()
                        await own_redis.astart()
                        with trio.fail_after(15):  # a probe a second finds Redis again
                            await until(lambda: _mode_is(a, "shared"))
                            await until(lambda: _url_mode_is(http, b_url, "shared"))
                        await trio.sleep(4)  # shared again: both rejoined, b takes leases
                        stop.set()
                    b_lost = (await http.get(f"{b_url}/metrics")).json()["cluster"]["leases_lost"]
            lost = {"a": (await _cluster(a))["leases_lost"], "b": b_lost}
            sampler.cancel_scope.cancel()
        calls = await upstream_calls(sim)

    assert b_during == []  # no share before it has ever counted the instances
    assert any(c.caller == "b" for c in calls), "b never served after Redis came back"
    assert all(s < 500 for s in statuses["a"] + statuses["b"])
    assert len(sampled) > 200 and max(sampled) <= START_CAP, max(sampled)
    steps = in_flight_steps(calls)
    over = [s for s in steps if s.total > START_CAP]
    assert not over, (
        _describe(over[:5], {"stop": stopped_at, "restart": restarted_at})
        + f"; leases lost: {lost}"
    )


async def _mode_is(proxy: ProxyServer, mode: str) -> bool:
    return bool((await _cluster(proxy))["mode"] == mode)


async def _url_mode_is(http: httpx2.AsyncClient, url: str, mode: str) -> bool:
    return bool((await http.get(f"{url}/metrics")).json()["cluster"]["mode"] == mode)


async def _in_flight_is(sim: SimServer, n: int) -> bool:
    return bool((await sim.stats())["in_flight"] == n)
