"""The ``soak`` scenario: minutes of mixed, faulty, impatient traffic, and books that balance.

Theory of operation
-------------------
One simulator and one proxy, as separate processes like every scenario. The proxy runs as
production would under pressure: admission windows on (``BATCH_ENABLED=1``, 32 calls at
most upstream), the gate on (``MAX_INFLIGHT``, ``MAX_QUEUE``, ``ACQUIRE_TIMEOUT_S``), a
short ``REQUEST_TIMEOUT_S`` so a hung upstream call ends in seconds, retries and
coordinated backoff at their defaults, and the default latency window (a larger one would
grow for its first N requests and pass for a leak). The simulator answers in ~35 ms and
opens a 529 overload window of ``OVERLOAD_FOR_S`` every ``OVERLOAD_EVERY_S``.

The load is one open loop (``soak_plan``): ``RATE`` arrivals per second over every door
(OpenAI Chat, OpenAI Responses, Anthropic Messages), bursts of ``BURST_SIZE`` inside
``BURST_SPREAD_S`` every ``BURST_EVERY_S`` (far above the gate's capacity), faults and
leaving clients mixed in; each request is followed to its end (``soak_client``) and
counted once in a ``soak_ledger.Ledger``. Beside it, once a second, a
sampler records the proxy's RSS (psutil), its ``/metrics`` gauges and request count, and
the simulator's 529 count (to know when the upstream was overloaded).

The proxy's ``DATA_DIR`` is a temporary directory (``processes.running_stack``), so the
Responses it stores never reach the user's data directory.

With ``redis-server`` on ``PATH``, the proxy shares its state through a Redis the bench
starts (``REDIS_URL``), and that Redis is restarted once mid-run (``soak_redis``): the
proxy must go to fallback and come back, with no 5xx of the outage's and the cap held.

Before the load: a warm-up nobody counts, then the baseline -- ``/metrics``, the
simulator's stats (reset, so its peak in-flight gauge and its overload schedule start
with the run), the proxy's live trio tasks with no client connected and the responses it
has stored. After: every client connection closed, both servers idle, and the checks
(``soak_checks``): the books reconcile with ``/metrics`` (door by door) and the simulator;
the responses stored match the requests that asked to be; the upstream cap held; gauges,
gate and trio tasks are back where they started; every 5xx a client saw has a fault behind
it; and -- in a full run -- the RSS slope after the warm-up is within target over enough
requests.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from typing import Any, Final

import trio

from .cluster_stats import cluster_block
from .cpu import CpuMeter
from .harness import Bench, target_result
from .load import Tally
from .processes import Stack, running_stack
from .redis_server import NO_REDIS, RedisServer, redis_binary, running_redis
from .results import ScenarioResult
from .soak_checks import (
    ambiguity,
    end_checks,
    reason_delta,
    reconcile,
    status_delta,
    store_check,
    upstream_checks,
    upstream_delta,
)
from .soak_client import FreshPool, soak_call
from .soak_ledger import OVERLOAD_SLACK_S, Ledger, Result, five_xx_summary, overload_periods
from .soak_memory import (
    COLUMNS,
    SLOPE_MIN_REQUESTS,
    SLOPE_TARGET_BYTES,
    MemorySample,
    downsample,
    memory_summary,
    slope_check,
)
from .soak_plan import BURST_QUIET_S, SCHEDULED, Arrival, Mix, Planned, arrivals
from .soak_plan import faults_that_may_5xx as may_5xx
from .soak_redis import (
    MODE_COLUMNS,
    Outage,
    quiet_spans,
    redis_checks,
    restart_at,
    restart_redis,
    task_slack,
)
from .soak_watch import (
    TRAFFIC_COLUMNS,
    count,
    handled,
    host_port,
    sample,
    settled_metrics,
    settled_tasks,
    stored_responses,
)

__all__ = ["run_soak"]

RATE: Final = 200.0
BURST_EVERY_S: Final = 15.0
BURST_SIZE: Final = 250
BURST_SPREAD_S: Final = 0.1
OVERLOAD_EVERY_S: Final = 45
OVERLOAD_FOR_S: Final = 2
UPSTREAM_CAP: Final = 32
SIM_ARGS: Final = (
    "--ttft-ms", "15", "--tokens-per-s", "600", "--seed", "14",
    "--overload-every-s", str(OVERLOAD_EVERY_S), "--overload-for-s", str(OVERLOAD_FOR_S),
)  # fmt: skip
PROXY: Final[Mapping[str, str]] = {
    "BATCH_ENABLED": "1",
    "BATCH_MAX_SIZE": "32",
    "BATCH_MAX_WAIT_MS": "10",
    "BATCH_MAX_CONCURRENCY": str(UPSTREAM_CAP),
    "MAX_INFLIGHT": "64",
    "MAX_QUEUE": "64",
    "ACQUIRE_TIMEOUT_S": "2",
    "REQUEST_TIMEOUT_S": "8",
    "METRICS_LATENCY_WINDOW": "1024",
}
WARMUP_S: Final = 3.0
PREFILL_S: Final = 1.5  # connections for a burst are opened this long before it
MAX_IN_FLIGHT: Final = 3000
MAX_LAG_S: Final = 1.0
_TALLY: Final = {"ok": "ok", "shed": "shed", "cooldown": "shed", "left": "aborted"}


def fit_from_s(seconds: float) -> float:
    """Where the RSS fit starts: after a quarter of the run, at most a minute in."""
    return min(60.0, seconds / 4)


def _outage(seconds: float) -> Outage | None:
    """The Redis restart, planned clear of the bursts and the 529s (``soak_redis``)."""
    busy = quiet_spans(
        seconds,
        bursts=(PREFILL_S, BURST_QUIET_S[1]),
        burst_every_s=BURST_EVERY_S,
        overload_every_s=OVERLOAD_EVERY_S,
        overload_for_s=OVERLOAD_FOR_S,
        scheduled_529=SCHEDULED["overloaded"][:2],
        slack_s=OVERLOAD_SLACK_S,
    )
    at = restart_at(seconds, busy)
    return None if at is None else Outage(at)


async def run_soak(bench: Bench, scenario: ScenarioResult) -> None:
    opts = bench.options
    seconds = opts.soak_s
    binary = redis_binary()
    outage = _outage(seconds) if binary is not None else None
    scenario.config = {
        "simulator": list(SIM_ARGS),
        "proxy": dict(PROXY),
        "minutes": round(seconds / 60, 3),
        "rate_per_s": RATE,
        "bursts": {"every_s": BURST_EVERY_S, "size": BURST_SIZE, "spread_s": BURST_SPREAD_S},
        "overload_windows": {"every_s": OVERLOAD_EVERY_S, "for_s": OVERLOAD_FOR_S},
        "redis": None
        if binary is None
        else {"restart_at_s": None if outage is None else outage.planned_at},
    }
    if binary is None:
        scenario.notes.append(f"Without shared state: {NO_REDIS}.")
    elif outage is None:
        scenario.notes.append(
            "The run is too short for a Redis restart clear of the bursts and the 529s; "
            "the proxy shared its state through Redis without one."
        )
    async with AsyncExitStack() as servers:
        redis: RedisServer | None = None
        proxy = dict(PROXY)
        if binary is not None:
            redis = await servers.enter_async_context(running_redis(binary, opts.log_dir / "soak"))
            proxy["REDIS_URL"] = redis.url
        stack = await servers.enter_async_context(
            running_stack(list(SIM_ARGS), {"soak": proxy}, opts.log_dir / "soak")
        )
        server = stack.proxies["soak"]
        host, port = host_port(server.url)
        await _warm_up(stack, host, port)
        baseline_tasks = await settled_tasks(server)
        connections = await redis.clients() if redis is not None else None
        stored_before = await stored_responses(server)
        await stack.sim.reset()  # the peak gauge and the overload schedule start with the run
        sim_before = await stack.sim.stats()
        before = await server.metrics()
        ledger = Ledger()
        samples: list[MemorySample] = []
        sim_529: list[tuple[float, int]] = []
        traffic: list[list[Any]] = []
        tally = Tally()
        meter = CpuMeter({"proxy": server.pid, "simulator": stack.sim.pid, "client": os.getpid()})
        pool = FreshPool(host, port)
        label = (
            f"soak: {seconds / 60:g} min open loop {RATE:g}/s over 3 doors + bursts, faults, "
            "leaving clients"
        )
        try:
            async with bench.display.phase(label, seconds, tally):
                meter.start()
                async with trio.open_nursery() as nursery:
                    start = trio.current_time() + 0.05
                    base = handled(before)
                    nursery.start_soon(
                        sample, server, stack.sim, pool, samples, sim_529, start, base
                    )
                    nursery.start_soon(count, tally, traffic, start)
                    if redis is not None and outage is not None:
                        nursery.start_soon(restart_redis, redis, server, outage, start)
                    mix = Mix(host, port, burst_every_s=BURST_EVERY_S)
                    observe = outage.observe if outage is not None else None
                    await _traffic(pool, mix, ledger, tally, seconds, start, observe)
                    nursery.cancel_scope.cancel()
                usage = meter.stop()
        finally:
            await pool.aclose()
        after = await settled_metrics(
            server, handled(before) + ledger.sent - ledger.kinds["failed"]
        )
        sim_after = await bench.sim_idle(stack)
        slack = task_slack(connections, await redis.clients() if redis is not None else None)
        at_most = None if baseline_tasks is None else baseline_tasks + slack[0]
        end_tasks = await settled_tasks(server, at_most=at_most)
        stored = await stored_responses(server) - stored_before
    memory = memory_summary(samples, fit_from_s(seconds))
    ambiguous = ambiguity(ledger, before, after)
    overload = overload_periods(sim_529)
    five = five_xx_summary(ledger, overload)
    checks = reconcile(ledger, before, after)
    sim_requests = int(sim_after["requests_total"]) - int(sim_before["requests_total"])
    checks += upstream_checks(ledger, sim_requests, before, after)
    checks.append(store_check(ledger, stored))
    checks += end_checks(
        after, sim_after, baseline_tasks, end_tasks, five, cap=UPSTREAM_CAP, task_slack=slack
    )
    if redis is not None:
        checks += redis_checks(
            outage, ledger.five_xx, may_5xx(), before.get("cluster"), after.get("cluster")
        )
    if not opts.quick:
        checks.append(slope_check(memory))
    scenario.checks += checks
    scenario.summary = {
        "seconds": round(seconds, 1),
        "requests": ledger.as_json(),
        "requests_per_s": round(ledger.sent / seconds, 1) if seconds else None,
        "responses_stored": stored,
        "memory": memory,
        "trio_tasks": {
            "baseline": baseline_tasks,
            "end": end_tasks,
            "max": max((s.trio_tasks or 0 for s in samples), default=None),
        },
        "upstream": {
            "cap": UPSTREAM_CAP,
            "max_in_flight": int(sim_after["max_in_flight"]),
            "requests": sim_requests,
            "by_status": status_delta(sim_before, sim_after),
        },
        "proxy": {
            "requests_by_status": status_delta(before["requests"], after["requests"]),
            "rejected_by_reason": reason_delta(before, after),
            "upstream": upstream_delta(before, after),
            # The garbage collector's pauses over the whole run (the periodic full
            # collection that keeps memory flat included): what flat memory costs.
            "gc": after.get("gc"),
        },
        "five_xx": five,
        "redis": None
        if redis is None
        else {
            "restart": None if outage is None else outage.as_json(),
            "cluster_before": cluster_block(before.get("cluster")),
            "cluster_after": cluster_block(after.get("cluster")),
        },
        "ambiguity": ambiguous,
        "overload_periods_s": [[round(a, 1), round(b, 1)] for a, b in overload],
        "cpu_cores": {k: None if v is None else round(v, 3) for k, v in usage.util.items()}
        | {"other": None if usage.other_util is None else round(usage.other_util, 3)},
    }
    scenario.traces["rss"] = {
        "columns": COLUMNS,
        "rows": downsample([s.row() for s in samples]),
        "fit_line": memory["fit_line"],
        "fit_from_s": memory["warmup_s"],
    }
    scenario.traces["traffic"] = {
        "columns": TRAFFIC_COLUMNS,
        "rows": downsample(traffic),
        "note": "cumulative client-side counts since the start, once a second",
    }
    if outage is not None:
        scenario.traces["redis_modes"] = {
            "columns": MODE_COLUMNS,
            "rows": outage.modes,
            "note": "the proxy's /metrics cluster block, polled every 0.1 s around the restart",
        }
    scenario.targets.append(
        target_result(
            f"proxy RSS slope after warm-up (over >= {SLOPE_MIN_REQUESTS:,} requests)",
            f"<= {SLOPE_TARGET_BYTES:g} bytes/request",
            memory["slope_bytes_per_request"],
            "bytes/request",
            lambda v: v <= SLOPE_TARGET_BYTES and memory["requests_in_fit"] >= SLOPE_MIN_REQUESTS,
        )
    )
    if opts.quick:
        scenario.notes.append(
            f"--quick: the RSS slope is reported, not checked (it needs >= "
            f"{SLOPE_MIN_REQUESTS:,} requests after the warm-up; this run had "
            f"{memory['requests_in_fit']:,})."
        )


async def _warm_up(stack: Stack, host: str, port: int) -> None:
    """``WARMUP_S`` of the mix without faults or leaves (burst-flagged arrivals carry
    none), so connections, caches and the latency window are warm before the baseline."""
    pool = FreshPool(host, port)
    mix = Mix(host, port, seed=0)
    try:
        async with trio.open_nursery() as nursery:
            start = trio.current_time()
            for arrival in arrivals(WARMUP_S, RATE, 0, 0, 0):
                await trio.sleep_until(start + arrival.at)
                nursery.start_soon(soak_call, pool, mix.plan(Arrival(arrival.at, True)))
    finally:
        await pool.aclose()
    await stack.proxies["soak"].wait_idle()


async def _traffic(
    pool: FreshPool,
    mix: Mix,
    ledger: Ledger,
    tally: Tally,
    seconds: float,
    start: float,
    observe: Callable[[float, Result], None] | None = None,
) -> None:
    """The open loop: every arrival planned, sent unless the driver is too far behind (or
    at its own bound), followed to its end and counted once (and shown to ``observe``)."""
    in_flight = 0

    async def one(planned: Planned) -> None:
        nonlocal in_flight
        try:
            result = await soak_call(pool, planned)
        finally:
            in_flight -= 1
            tally.in_flight -= 1
        leave = None if planned.leave is None else planned.leave.stage
        at = trio.current_time() - start
        ledger.add(
            result,
            api=planned.api,
            stream=planned.stream,
            fault=planned.fault,
            at=at,
            planned_leave=leave,
            store=planned.store,
        )
        if observe is not None:
            observe(at, result)
        name = _TALLY.get(result.kind, "error")
        setattr(tally, name, getattr(tally, name) + 1)

    async def prefill() -> None:
        burst = start + BURST_EVERY_S / 2
        while burst < start + seconds:
            await trio.sleep_until(burst - PREFILL_S)
            with trio.move_on_at(burst):
                await pool.prefill(BURST_SIZE)
            burst += BURST_EVERY_S

    async with trio.open_nursery() as requests, trio.open_nursery() as helper:
        helper.start_soon(prefill)
        for arrival in arrivals(seconds, RATE, BURST_EVERY_S, BURST_SIZE, BURST_SPREAD_S):
            intended = start + arrival.at
            await trio.sleep_until(intended)
            planned = mix.plan(arrival)
            ledger.offered += 1
            tally.offered += 1
            if trio.current_time() - intended > MAX_LAG_S:
                ledger.unsent_late += 1
                tally.unsent += 1
                continue
            if in_flight >= MAX_IN_FLIGHT:
                ledger.unsent_bound += 1
                tally.unsent += 1
                continue
            in_flight += 1
            tally.in_flight += 1
            tally.sent += 1
            requests.start_soon(one, planned)
        helper.cancel_scope.cancel()  # the prefiller only: requests run to their end
