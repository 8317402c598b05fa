"""RedisLink against a real redis-server: deadlines, cancellation, outages, scripts, pub/sub."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Iterator

import coredis
import pytest
import trio
from redis_support import RedisServer, open_test_link, running_redis, unique_prefix

from trio_batcher.cluster import ClusterUnavailable, LuaScript, RedisLink

# Busy-waits ARGV[1] ms on the server's clock, then returns ARGV[2]: a slow command.
SLOW = LuaScript(
    "test_slow",
    """
local function ms() local t = redis.call('TIME') return t[1] * 1000 + math.floor(t[2] / 1000) end
local start = ms()
while ms() - start < tonumber(ARGV[1]) do end
return ARGV[2]
""",
)
ECHO = LuaScript("test_echo", "return ARGV[1]")
INCR = LuaScript("test_incr", "return redis.call('INCR', KEYS[1])")


# coredis 6.9: a connection whose connect is refused never closes its four anyio memory
# streams, which warn when collected. Harmless (garbage), but `filterwarnings = error`
# would turn each into a failure of whichever test the collector happens to run in.
COREDIS_REFUSED_CONNECTION_LEAK = "ignore:Unclosed <MemoryObject:ResourceWarning"
pytestmark = pytest.mark.filterwarnings(COREDIS_REFUSED_CONNECTION_LEAK)


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    with running_redis() as server:
        yield server


@pytest.fixture
async def link(redis_server: RedisServer) -> AsyncIterator[RedisLink]:
    async with open_test_link(redis_server.url, unique_prefix(), command_timeout_s=1.0) as link:
        yield link
    gc.collect()  # while this test's warning filter holds (see above)


async def test_keys_carry_the_prefix_as_one_hash_tag(link: RedisLink) -> None:
    async with open_test_link("redis://127.0.0.1:1/0", "blue") as other:
        assert other.key("sem", "upstream", "holders") == "{blue}:sem:upstream:holders"


async def test_a_cancelled_command_never_hands_its_reply_to_the_next_one(link: RedisLink) -> None:
    for round_ in range(5):
        with trio.move_on_after(0.005) as scope:
            await link.run(SLOW, [], [40, f"slow-{round_}"])
        assert scope.cancelled_caught
        # Queued on the same multiplexed connection behind the cancelled one: each command
        # gets its own reply, never the slow one's.
        replies: dict[int, str] = {}

        async def echo(i: int, replies: dict[int, str] = replies) -> None:
            replies[i] = await link.run(ECHO, [], [f"echo-{i}"])

        async with trio.open_nursery() as nursery:
            for i in range(3):
                nursery.start_soon(echo, i)
        assert replies == {i: f"echo-{i}" for i in range(3)}


async def test_a_command_cancelled_mid_flight_still_runs_on_the_server(link: RedisLink) -> None:
    key = link.key("counter")
    await link.run(INCR, [link.key("warm-up")], [])  # loaded: no NOSCRIPT round trip below
    with trio.move_on_after(0.005):
        await link.run(SLOW, [], [30, "x"])  # keeps the server busy for 30 ms
    with trio.move_on_after(0.005):
        await link.run(INCR, [key], [])  # sent, then cancelled while the server is busy
    # The server runs what it was sent: the next INCR sees the cancelled one's effect.
    assert await link.run(INCR, [key], []) == 2


async def test_a_script_flushed_from_the_server_is_loaded_again(
    link: RedisLink, redis_server: RedisServer
) -> None:
    key = link.key("n")
    assert await link.run(INCR, [key], []) == 1
    async with coredis.Redis.from_url(redis_server.url) as raw:
        await raw.script_flush()
    assert await link.run(INCR, [key], []) == 2  # NOSCRIPT, SCRIPT LOAD, once more: not twice


async def test_redis_stopped_fails_fast_with_cluster_unavailable_then_recovers(
    link: RedisLink, redis_server: RedisServer
) -> None:
    assert await link.run(ECHO, [], ["up"]) == "up"
    await redis_server.astop()
    for _ in range(3):
        started = trio.current_time()
        with pytest.raises(ClusterUnavailable):
            await link.run(ECHO, [], ["down"])
        # A refused connection is immediate; never longer than the per-command deadline
        # (plus what a busy machine may take to schedule the task again).
        assert trio.current_time() - started < link.command_timeout_s + 0.5
    await redis_server.astart()
    assert await _eventually(link, ECHO, "back") == "back"


async def test_a_hung_redis_times_out_at_the_deadline_then_recovers(
    link: RedisLink, redis_server: RedisServer
) -> None:
    assert await link.run(ECHO, [], ["up"]) == "up"
    redis_server.pause()
    try:
        started = trio.current_time()
        with pytest.raises(ClusterUnavailable, match="did not answer"):
            await link.run(ECHO, [], ["hung"])
        elapsed = trio.current_time() - started
        # At the deadline, not later: hung for good, it would never return by itself.
        assert link.command_timeout_s <= elapsed < link.command_timeout_s + 0.5
    finally:
        redis_server.resume()
    # The timed-out command's late reply is dropped; the next gets its own.
    assert await link.run(ECHO, [], ["resumed"]) == "resumed"


async def test_ping_measures_a_round_trip_and_fails_as_cluster_unavailable(
    link: RedisLink, redis_server: RedisServer
) -> None:
    assert 0 < await link.ping() < link.command_timeout_s
    await redis_server.astop()
    with pytest.raises(ClusterUnavailable):
        await link.ping()


async def test_listen_resubscribes_after_a_redis_restart(
    link: RedisLink, redis_server: RedisServer
) -> None:
    channel = link.key("chan")
    calls = 0
    counted = {n: trio.Event() for n in range(1, 5)}

    def on_message() -> None:
        nonlocal calls
        calls += 1
        if calls in counted:
            counted[calls].set()

    async with trio.open_nursery() as nursery:
        await nursery.start(link.listen, channel, on_message)
        assert calls == 1  # once on subscription: what was published before is unknown
        async with coredis.Redis.from_url(redis_server.url) as raw:
            assert await raw.publish(channel, "m") == 1
        with trio.fail_after(2):
            await counted[2].wait()
        await redis_server.astop()
        await redis_server.astart()
        async with coredis.Redis.from_url(redis_server.url) as raw:
            with trio.fail_after(5):  # the back-off tops out at 2 s
                while await raw.publish(channel, "again") == 0:  # noqa: ASYNC110 (Redis's state)
                    await trio.sleep(0.02)
        with trio.fail_after(2):
            await counted[4].wait()  # the resubscription's call and the message
        nursery.cancel_scope.cancel()


async def _eventually(link: RedisLink, script: LuaScript, value: str) -> object:
    """The first command after a restart may meet the dead connection; the next may not."""
    with trio.fail_after(2):
        while True:
            try:
                return await link.run(script, [], [value])
            except ClusterUnavailable:
                await trio.sleep(0.01)
