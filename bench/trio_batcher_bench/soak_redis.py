"""The soak's shared state: the proxy on a bench-started Redis, restarted once mid-run.

With ``redis-server`` on ``PATH`` the soak's proxy runs with ``REDIS_URL`` (the upstream cap
is then a Redis lease semaphore, the cooldowns and the retry budget are shared), and once,
near the middle of the run, ``restart_redis`` stops Redis (SIGTERM), waits ``OUTAGE_S``,
and starts it again on the same port, empty. Meanwhile it polls the proxy's ``/metrics``
``cluster`` block every ``POLL_S`` and notes when the proxy went to fallback and when it
came back to shared mode.

When: ``restart_at`` picks the moment nearest the middle whose outage window (``LEAD_S``
before the stop to ``SETTLE_S`` after the start) overlaps none of the ``quiet_spans`` --
bursts, the simulator's overload windows and the scheduled 529s, each widened by the 503s
they may cause -- so any 5xx in the window would have to be the outage's (or its own
fault's). A run too short for such a window has no restart (the summary says so).

The checks (``redis_checks``, pure): Redis was restarted; the proxy went to fallback and
came back to shared (``/metrics`` ``cluster``: seen by the poll, ``fallbacks`` counted,
``shared`` at the end); and no client got a 5xx during the outage that its own fault does
not explain. The upstream cap and every other soak check hold as without Redis
(``soak_checks``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, final

import trio

from .processes import ProxyServer
from .redis_server import RedisServer
from .results import Check
from .soak_ledger import FiveXX, Result
from .soak_watch import host_port
from .wire import Pool, encode_request, get_json

__all__ = [
    "MODE_COLUMNS",
    "OUTAGE_S",
    "Outage",
    "quiet_spans",
    "redis_checks",
    "restart_at",
    "restart_redis",
    "task_slack",
]

OUTAGE_S: Final = 3.0  # Redis is down this long
LEAD_S: Final = 1.0  # the window starts this long before the stop
SETTLE_S: Final = 4.0  # ... and ends this long after the start (the probe runs every 1 s)
END_MARGIN_S: Final = 5.0  # no restart this close to the end of the load
POLL_S: Final = 0.1
RECOVER_TIMEOUT_S: Final = 20.0
MODE_COLUMNS: Final = ["t_s", "mode", "fallbacks", "instances_alive"]
# coredis (6.9) runs three trio tasks per connection. After a Redis restart it may keep
# more connections than before (several commands reconnecting at once), each idle in its
# pool with its tasks: not a request's tasks, so the soak's task check allows for them.
TASKS_PER_CONNECTION: Final = 3

Span = tuple[float, float]


def quiet_spans(
    seconds: float,
    *,
    bursts: Span,
    burst_every_s: float,
    overload_every_s: float,
    overload_for_s: float,
    scheduled_529: Span,
    slack_s: float,
) -> list[Span]:
    """The spans a Redis outage must avoid over a run of ``seconds``.

    Args:
      bursts: (s before, s after) each burst's start (bursts start half a period in).
      overload_every_s, overload_for_s: the simulator's 529 windows, from the run's start.
      scheduled_529: (period, offset) of the scheduled 529 with ``retry-after``.
      slack_s: how long after a 529 the 503s it causes may come.
    """
    spans: list[Span] = []
    before, after = bursts
    t = burst_every_s / 2
    while burst_every_s > 0 and t < seconds:
        spans.append((t - before, t + after))
        t += burst_every_s
    k = 0
    while overload_every_s > 0 and (t := k * overload_every_s) < seconds:
        spans.append((t - 1.0, t + overload_for_s + slack_s))
        k += 1
    period, offset = scheduled_529
    t = offset
    while period > 0 and t < seconds:
        spans.append((t - 1.0, t + slack_s))
        t += period
    return sorted(spans)


def restart_at(seconds: float, busy: Iterable[Span], step_s: float = 0.5) -> float | None:
    """The stop time nearest the middle of the run whose window ``[t - LEAD_S, t + OUTAGE_S
    + SETTLE_S]`` overlaps no ``busy`` span and ends ``END_MARGIN_S`` before the load does;
    ``None`` when there is none."""
    spans = list(busy)
    low, high = LEAD_S, seconds - OUTAGE_S - SETTLE_S - END_MARGIN_S
    if high < low:
        return None
    middle = seconds / 2
    steps = math.ceil(max(middle - low, high - middle) / step_s)
    for i in range(steps + 1):
        for t in (middle - i * step_s, middle + i * step_s):
            if low <= t <= high and not any(
                a < t + OUTAGE_S + SETTLE_S and t - LEAD_S < b for a, b in spans
            ):
                return t
    return None


@final
@dataclass
class Outage:
    """One Redis restart, as it happened (seconds from the start of the load)."""

    planned_at: float
    mode_before: str | None = None  # the cluster block just before the stop
    fallbacks_before: int | None = None
    stopped_at: float | None = None
    started_at: float | None = None
    fallback_at: float | None = None  # first poll after the stop that said fallback
    shared_at: float | None = None  # first poll after the start that said shared
    fallbacks_during: int | None = None  # the block's count when it first said fallback
    modes: list[list[Any]] = field(default_factory=list)
    finished: list[tuple[float, str]] = field(default_factory=list)  # (at, kind) nearby

    def observe(self, at: float, result: Result) -> None:
        """Note a request that ended at ``at``, if it ended near the outage."""
        if self.planned_at - LEAD_S <= at <= self.planned_at + RECOVER_TIMEOUT_S + OUTAGE_S:
            self.finished.append((at, result.kind))

    def went_to_fallback(self) -> bool:
        """The stop took the proxy from shared to fallback: a new fallback was counted (or
        it was in fallback already, from a slow Redis, when the stop came)."""
        if self.fallback_at is None:
            return False
        if self.mode_before == "fallback":
            return True
        before, during = self.fallbacks_before, self.fallbacks_during
        return before is not None and during is not None and during > before

    def window(self) -> Span | None:
        """From the stop until the proxy was back in shared mode (or Redis back, if the
        proxy never said so) plus 2 s; ``None`` before the stop."""
        if self.stopped_at is None:
            return None
        back = self.shared_at if self.shared_at is not None else self.started_at
        return self.stopped_at, (back if back is not None else self.stopped_at + OUTAGE_S) + 2.0

    def as_json(self) -> dict[str, Any]:
        window = self.window()
        during = Counter(
            kind for at, kind in self.finished if window and window[0] <= at <= window[1]
        )

        def r(value: float | None) -> float | None:
            return None if value is None else round(value, 2)

        def since(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else round(b - a, 2)

        return {
            "planned_at_s": r(self.planned_at),
            "mode_before_stop": self.mode_before,
            "stopped_at_s": r(self.stopped_at),
            "started_at_s": r(self.started_at),
            "down_s": since(self.stopped_at, self.started_at),
            "fallback_after_stop_s": since(self.stopped_at, self.fallback_at),
            "shared_after_start_s": since(self.started_at, self.shared_at),
            "window_s": None if window is None else [r(window[0]), r(window[1])],
            "outcomes_in_window": dict(sorted(during.items())),
        }


async def restart_redis(
    redis: RedisServer, server: ProxyServer, outage: Outage, start: float
) -> None:
    """At ``start + outage.planned_at``: stop Redis, wait ``OUTAGE_S``, start it again on
    the same port, and wait until the proxy says it is back in shared mode (at most
    ``RECOVER_TIMEOUT_S``), polling its ``cluster`` block all along."""
    host, port = host_port(server.url)
    pool = Pool(host, port)
    request = encode_request("GET", host, port, "/metrics", [], b"")
    back = trio.Event()

    async def watch() -> None:
        while True:
            snapshot: Any = await get_json(pool, request)
            block = snapshot.get("cluster") or {}
            t = trio.current_time() - start
            mode = block.get("mode")
            outage.modes.append(
                [round(t, 2), mode, block.get("fallbacks"), block.get("instances_alive")]
            )
            if mode == "fallback" and outage.fallback_at is None:
                outage.fallback_at, outage.fallbacks_during = t, block.get("fallbacks")
            if mode == "shared" and outage.started_at is not None:
                outage.shared_at = t
                back.set()
                return
            await trio.sleep(POLL_S)

    # The state before the stop is read ahead of it, within LEAD_S: a busy proxy answering
    # late must not move the stop out of the window chosen for it.
    await trio.sleep_until(start + outage.planned_at - LEAD_S)
    try:
        with trio.move_on_at(start + outage.planned_at):
            snapshot: Any = await get_json(pool, request)
            block = snapshot.get("cluster") or {}
            outage.mode_before, outage.fallbacks_before = block.get("mode"), block.get("fallbacks")
        await trio.sleep_until(start + outage.planned_at)
        async with trio.open_nursery() as nursery:
            outage.stopped_at = trio.current_time() - start
            await redis.stop()
            nursery.start_soon(watch)
            await trio.sleep(OUTAGE_S)
            await redis.start()
            outage.started_at = trio.current_time() - start
            with trio.move_on_after(RECOVER_TIMEOUT_S):
                await back.wait()
            nursery.cancel_scope.cancel()
    finally:
        await pool.aclose()


def task_slack(connections_before: int | None, connections_after: int | None) -> tuple[int, str]:
    """The trio tasks the proxy may hold at the end beyond its baseline for the Redis
    connections it opened meanwhile (``end_checks(task_slack=...)``), and why."""
    if connections_before is None or connections_after is None:
        return 0, ""
    extra = connections_after - connections_before
    if extra <= 0:
        return 0, ""
    return extra * TASKS_PER_CONNECTION, (
        f"the Redis client holds {extra} connection(s) more than at the baseline "
        f"({connections_before} → {connections_after}), {TASKS_PER_CONNECTION} tasks each"
    )


def redis_checks(
    outage: Outage | None,
    five_xx: Sequence[FiveXX],
    may_5xx: frozenset[str],
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
) -> list[Check]:
    """The restart's checks (see the module docstring); ``before`` and ``after`` are the
    proxy's ``cluster`` blocks around the load. Without a restart, only: shared at the
    end."""
    mode = None if after is None else after.get("mode")
    fallbacks = 0 if before is None or after is None else after["fallbacks"] - before["fallbacks"]
    shared_end = Check(
        "soak: the proxy's shared state is in shared mode at the end (/metrics cluster)",
        mode == "shared",
        "shared",
        mode,
        f"fallbacks over the run: {fallbacks}",
    )
    if outage is None:
        return [shared_end]
    window = outage.window()
    caused = [
        f
        for f in five_xx
        if window is not None and window[0] <= f.at <= window[1] and f.fault not in may_5xx
    ]
    return [
        Check(
            "soak: Redis was stopped and started again on its port mid-run",
            outage.stopped_at is not None and outage.started_at is not None,
            "stopped and started",
            outage.as_json()["down_s"],
            "seconds down",
        ),
        Check(
            "soak: the proxy went to fallback while Redis was down (/metrics cluster)",
            outage.went_to_fallback(),
            "shared before the stop, then fallback with one more fallback counted",
            f"{outage.mode_before} ({outage.fallbacks_before}) before the stop, "
            f"{'fallback' if outage.fallback_at is not None else 'no fallback'} "
            f"({outage.fallbacks_during}) after",
            f"fallbacks over the run: {fallbacks} (a Redis slower than REDIS_TIMEOUT_S "
            "under load counts too)",
        ),
        Check(
            "soak: the proxy came back to shared mode after Redis restarted",
            outage.shared_at is not None,
            "mode shared after the start",
            None if outage.shared_at is None else "shared",
            f"{outage.as_json()['shared_after_start_s']} s after Redis answered again",
        ),
        shared_end,
        Check(
            "soak: no client 5xx caused by the Redis outage",
            window is not None and not caused,
            0,
            len(caused),
            f"5xx ending in {outage.as_json()['window_s']} s whose request carried no fault "
            f"that explains it: {[(round(f.at, 2), f.status, f.reason) for f in caused[:5]]}",
        ),
    ]
