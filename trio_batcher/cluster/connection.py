"""The one door to Redis: a coredis client, a key prefix and a deadline on every command.

Theory of operation
-------------------
``open_link(config)`` enters a coredis client (coredis 6 runs its connection tasks in a task
group of its own, so the client must be entered by the task that owns the lifetime, before
any child task uses it) and yields a ``RedisLink``. Every primitive in this package talks to
Redis only through ``RedisLink.run(script, keys, args)``, which:

- bounds the command with ``trio.fail_after(command_timeout_s)``;
- runs the script with EVALSHA, loading it (SCRIPT LOAD, then EVALSHA again) only on
  NOSCRIPT, which is the one error that proves the script did not run;
- never retries anything else: the client is built with ``NoRetryPolicy``, because a
  script that timed out may still have run, and running it twice would take two leases or
  count a retry twice;
- turns every failure (timeout, refused connection, a lost connection, a Redis error) into
  ``ClusterUnavailable``, the one exception callers map to their fallback;
- times every command that answered, into a ring of the last ``ROUND_TRIP_SAMPLES``
  (``round_trips()``: the p50/p99 of ``/metrics``), and counts the ones that failed. The
  time is what a caller waited, the trio scheduling of the reply included: that is what
  the admission path pays.

Cancellation. coredis multiplexes commands on a connection and matches replies to requests
in FIFO order; a request whose awaiting task was cancelled stays queued and its reply is read
and dropped when it arrives, so the next command on that connection gets its own reply
(``tests/test_cluster_connection.py`` proves it). A cancelled command must be *assumed
executed*: the callers undo it (release) or let the lease expiry cover it. Under load
coredis opens more connections than one, so commands of different tasks may reach Redis in
either order: nothing relies on an order between tasks (a release that overtakes a renewal
naming it is sent again, ``LeaseSemaphore.renew``).

Pub/sub. ``RedisLink.listen`` keeps one subscription alive for the lifetime of its task,
reconnecting with a bounded back-off. coredis' own pub/sub retry policy is switched off: with
it, a subscriber silently stayed unsubscribed after a Redis restart (PUBLISH counted 0
receivers for seconds). After every (re)subscription the callback runs once, since messages
published while unsubscribed are lost.
"""

from __future__ import annotations

import hashlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, final

import coredis
import coredis.exceptions
import trio
from coredis.retry import NoRetryPolicy

from ..observatory.latency import summary_ms

__all__ = ["ClusterConfig", "ClusterUnavailable", "Link", "LuaScript", "RedisLink", "open_link"]

logger = logging.getLogger(__name__)

# Enough recent commands for a p99 (an instance under load runs several per request).
ROUND_TRIP_SAMPLES = 2048

# Every script that needs "now" starts with this: the Redis server's clock, in milliseconds,
# so no host's clock skew ever reaches an expiry.
LUA_NOW_MS = """
local __t = redis.call('TIME')
local now = tonumber(__t[1]) * 1000 + math.floor(tonumber(__t[2]) / 1000)
"""


class ClusterUnavailable(Exception):
    """Redis did not answer within the per-command deadline, refused or lost the connection,
    or answered with an error. The command may or may not have run."""


@final
@dataclass(frozen=True)
class ClusterConfig:
    """Where the shared state lives.

    Args:
      url: ``redis://host:port/db`` (``rediss://`` for TLS, ``unix://`` for a socket).
      prefix: starts every key and channel, so several clusters can share one Redis. It is
        wrapped in a Redis Cluster hash tag (``{prefix}:...``): all of one cluster's keys
        hash to one slot, which multi-key scripts need there.
      command_timeout_s: the deadline of each command, connecting included.
    """

    url: str
    prefix: str = "trio-batcher"
    command_timeout_s: float = 0.25


@final
@dataclass(frozen=True)
class LuaScript:
    """A Lua script's source, its SHA1 (what EVALSHA needs) and a name for error messages."""

    name: str
    source: str
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.source.encode()).hexdigest())


class Link(Protocol):
    """What the primitives need from Redis; ``RedisLink`` is the real one, tests pass fakes."""

    command_timeout_s: float

    def key(self, *parts: str) -> str: ...

    async def run(
        self, script: LuaScript, keys: Sequence[str], args: Sequence[str | int | float]
    ) -> Any: ...

    async def listen(
        self,
        channel: str,
        on_message: Callable[[], None],
        *,
        ignore: str | None = ...,
        max_backoff_s: float = ...,
        task_status: trio.TaskStatus[None] = ...,
    ) -> None: ...


@final
class RedisLink:
    """A coredis client, a key prefix and a per-command deadline; see the module docstring.

    Build it with ``open_link``; ``RedisLink(client, ...)`` is for a client entered elsewhere.
    """

    def __init__(
        self, client: coredis.Redis[str], *, prefix: str, command_timeout_s: float
    ) -> None:
        self._client = client
        self._prefix = prefix
        self.command_timeout_s = command_timeout_s
        self._round_trips: deque[float] = deque(maxlen=ROUND_TRIP_SAMPLES)
        self._commands = 0
        self._failures = 0

    def key(self, *parts: str) -> str:
        """``{prefix}:part:part``: a key (or channel) of this cluster."""
        return ":".join((f"{{{self._prefix}}}", *parts))

    async def run(
        self, script: LuaScript, keys: Sequence[str], args: Sequence[str | int | float]
    ) -> Any:
        """Run ``script`` once, within the per-command deadline.

        Raises:
          ClusterUnavailable: on a timeout or any Redis or connection error; the script may
            have run.
        """
        started = trio.current_time()
        self._commands += 1
        try:
            with trio.fail_after(self.command_timeout_s):
                try:
                    reply = await self._client.evalsha(script.sha, keys=keys, args=args)
                except coredis.exceptions.NoScriptError:
                    # The script did not run: loading it and asking again cannot run it twice.
                    await self._client.script_load(script.source)
                    reply = await self._client.evalsha(script.sha, keys=keys, args=args)
        except trio.TooSlowError as exc:
            self._failures += 1
            raise ClusterUnavailable(
                f"Redis did not answer {script.name} within {self.command_timeout_s} s"
            ) from exc
        except (coredis.exceptions.RedisError, TimeoutError, OSError) as exc:
            self._failures += 1
            raise ClusterUnavailable(f"Redis failed {script.name}: {exc!r}") from exc
        self._round_trips.append(trio.current_time() - started)
        return reply

    def round_trips(self) -> dict[str, Any]:
        """Commands sent and failed, and the round trip of the recent ones that answered
        (milliseconds: p50, p95, p99, max, sample_count)."""
        return {
            "commands": self._commands,
            "failures": self._failures,
            **summary_ms(sorted(self._round_trips)),
        }

    async def ping(self) -> float:
        """One PING round trip, in seconds: the fallback state's probe.

        Raises:
          ClusterUnavailable: as ``run``.
        """
        started = trio.current_time()
        try:
            with trio.fail_after(self.command_timeout_s):
                await self._client.ping()
        except trio.TooSlowError as exc:
            raise ClusterUnavailable(
                f"Redis did not answer PING within {self.command_timeout_s} s"
            ) from exc
        except (coredis.exceptions.RedisError, TimeoutError, OSError) as exc:
            raise ClusterUnavailable(f"Redis failed PING: {exc!r}") from exc
        return trio.current_time() - started

    async def listen(
        self,
        channel: str,
        on_message: Callable[[], None],
        *,
        ignore: str | None = None,
        max_backoff_s: float = 2.0,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Call ``on_message()`` for every message on ``channel`` but those whose data is
        ``ignore`` (a subscriber's own announcements, say), until cancelled.

        Also calls it once after every (re)subscription, since what was published while
        unsubscribed is lost. Reports started after the first attempt to subscribe, whether
        it succeeded or not (a Redis that is down at start-up must not block start-up).
        Connection failures are logged at DEBUG and retried after a back-off doubling from
        50 ms to ``max_backoff_s``; they never end the task.
        """
        started = False
        backoff = 0.05
        while True:
            try:
                async with self._client.pubsub(
                    channels=[channel],
                    ignore_subscribe_messages=True,
                    retry_policy=None,
                    subscription_timeout=self.command_timeout_s,
                ) as subscription:
                    backoff = 0.05
                    on_message()
                    if not started:
                        started = True
                        task_status.started()
                    async for message in subscription:
                        if ignore is None or message.get("data") != ignore:
                            on_message()
            except* Exception as group:
                # coredis raises groups of ConnectionError / TimeoutError when the connection
                # is lost, and a ClosedResourceError when cancelled with a dead connection;
                # `except*` lets a Cancelled in the same group propagate.
                logger.debug("pub/sub on %s lost: %r", channel, group.exceptions)
            if not started:
                started = True
                task_status.started()
            await trio.sleep(backoff)
            backoff = min(backoff * 2, max_backoff_s)


@asynccontextmanager
async def open_link(config: ClusterConfig) -> AsyncIterator[RedisLink]:
    """Enter a coredis client for ``config`` and yield its ``RedisLink``.

    Nothing is sent on entry: a Redis that is down at start-up shows up as
    ``ClusterUnavailable`` on the first command, not as a failure to start.
    """
    client: coredis.Redis[str] = coredis.Redis.from_url(
        config.url,
        decode_responses=True,
        retry_policy=NoRetryPolicy(),
        connect_timeout=config.command_timeout_s,
    )
    async with client:
        yield RedisLink(client, prefix=config.prefix, command_timeout_s=config.command_timeout_s)
