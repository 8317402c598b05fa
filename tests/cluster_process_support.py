"""Two proxy processes sharing one Redis and one simulator, and what the simulator saw of them.

``two_proxies`` starts the stack of ``tests/test_cluster_processes.py``: one simulator and
two ``serve`` processes (the lab's ``trio_batcher_bench.processes.running_stack``) with the
upstream cap shared through one Redis, under a key prefix of their own.

The simulator's view is the judge of "how many upstream calls ran at once": its traces
(``/_sim/stats?recent=N``) give each call's start and end on the simulator's
``time.monotonic()``, which is the machine's, so the test process can compare them with its
own clock. A trace does not say which proxy made the call, so each proxy's callers ask for a
reply length of their own (``[[sim:tokens=N]]``, ``tagged``): the trace's ``output_tokens``
names the caller. ``in_flight_steps`` replays the traces into the number of calls in flight
after every start and end, in total and per caller.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx2
import trio
from redis_support import unique_prefix

from trio_batcher.simulator.stats import RECENT_TRACES
from trio_batcher_bench.processes import ProxyServer, SimServer, Stack, running_stack

__all__ = [
    "CAP",
    "Call",
    "InFlight",
    "chat_body",
    "cluster_env",
    "http_client",
    "in_flight_steps",
    "post_chat",
    "tagged",
    "two_proxies",
    "until",
    "upstream_calls",
]

CAP: Final = 8
# Each proxy's callers ask for a reply length of their own, so a trace names its caller.
REPLY_TOKENS: Final = {"a": 5, "b": 7}
_CALLER_BY_TOKENS: Final = {tokens: name for name, tokens in REPLY_TOKENS.items()}


def cluster_env(redis_url: str, **changes: str) -> dict[str, str]:
    """A cluster proxy's settings: batching on, the cap ``CAP`` shared through ``redis_url``
    under a fresh key prefix, no retries (a test's fault must reach its client).

    Redis commands get 2 s rather than the default 0.5 s: on a busy CI machine a proxy
    starved of CPU for half a second would fall back with Redis answering all along, and
    only the outage test (which sets its own) is about falling back.
    """
    return {
        "BATCH_ENABLED": "1",
        "BATCH_MAX_CONCURRENCY": str(CAP),
        "BATCH_MAX_WAIT_MS": "1",
        "REDIS_URL": redis_url,
        "REDIS_KEY_PREFIX": unique_prefix(),
        "REDIS_TIMEOUT_S": "2",
        "UPSTREAM_MAX_RETRIES": "0",
        **changes,
    }


@asynccontextmanager
async def two_proxies(
    redis_url: str, log_dir: Path, sim_args: list[str], **changes: str
) -> AsyncIterator[tuple[ProxyServer, ProxyServer, SimServer]]:
    """Proxies ``a`` and ``b`` (``cluster_env`` plus ``changes``, one prefix for both) in
    front of one simulator (``simulate`` plus ``sim_args``); all stopped on exit."""
    env = cluster_env(redis_url, **changes)
    async with running_stack(sim_args, {"a": env, "b": env}, log_dir) as stack:
        yield _pair(stack)


def _pair(stack: Stack) -> tuple[ProxyServer, ProxyServer, SimServer]:
    return stack.proxies["a"], stack.proxies["b"], stack.sim


def http_client() -> httpx2.AsyncClient:
    limits = httpx2.Limits(max_connections=500, max_keepalive_connections=500)
    return httpx2.AsyncClient(timeout=30, limits=limits, trust_env=False)


def tagged(caller: str, text: str) -> str:
    """``text`` asking for ``caller``'s reply length (see the module docstring)."""
    return f"[[sim:tokens={REPLY_TOKENS[caller]}]] {text}"


def chat_body(text: str) -> dict[str, Any]:
    return {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": text}]}


async def post_chat(http: httpx2.AsyncClient, proxy: ProxyServer, text: str) -> httpx2.Response:
    return await http.post(f"{proxy.url}/v1/chat/completions", json=chat_body(text))


async def until(predicate: Callable[[], Awaitable[bool]], *, interval: float = 0.02) -> float:
    """Seconds until ``predicate()`` holds; put a deadline around the call."""
    started = time.monotonic()
    while not await predicate():  # noqa: ASYNC110 (another process's state)
        await trio.sleep(interval)
    return time.monotonic() - started


@dataclass(frozen=True, slots=True)
class Call:
    """One upstream call as the simulator saw it (``time.monotonic()`` seconds).

    ``caller`` is ``"a"`` or ``"b"`` for a call ``tagged`` by that proxy's client, ``None``
    for an untagged one (or one answered without a reply, such as an injected error).
    ``outcome`` is the simulator's: ``completed``, ``error`` or ``abandoned``.
    """

    caller: str | None
    started_at: float
    finished_at: float
    status: int | None
    outcome: str | None
    fault: str | None


async def upstream_calls(sim: SimServer) -> list[Call]:
    """Every call the simulator finished since its last reset, oldest first.

    Raises:
      AssertionError: the simulator's trace buffer is full, so older calls may be missing.
    """
    traces = (await sim.stats(recent=RECENT_TRACES))["recent"]
    assert len(traces) < RECENT_TRACES, f"more than {RECENT_TRACES} calls: the view is partial"
    calls = [
        Call(
            caller=_CALLER_BY_TOKENS.get(trace["output_tokens"]),
            started_at=trace["started_at"],
            finished_at=trace["finished_at"],
            status=trace["status"],
            outcome=trace["outcome"],
            fault=trace["fault"],
        )
        for trace in traces
    ]
    return sorted(calls, key=lambda call: call.started_at)


@dataclass(frozen=True, slots=True)
class InFlight:
    """The calls in flight at the simulator from ``at`` until the next step."""

    at: float
    total: int
    by_caller: Mapping[str | None, int]


def in_flight_steps(calls: list[Call]) -> list[InFlight]:
    """The number of calls in flight after each start and each end, in time order.

    An end and a start at the same instant count the end first, so two calls that only
    touch are never counted together.
    """
    events: list[tuple[float, int, str | None]] = []
    for call in calls:
        events.append((call.started_at, 1, call.caller))
        events.append((call.finished_at, -1, call.caller))
    events.sort(key=lambda event: (event[0], event[1]))
    by_caller: Counter[str | None] = Counter()
    steps = []
    for at, change, caller in events:
        by_caller[caller] += change
        steps.append(InFlight(at, sum(by_caller.values()), dict(by_caller)))
    return steps
