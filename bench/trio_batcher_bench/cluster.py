"""The ``cluster`` scenario: one upstream cap, one proxy against two sharing it through Redis.

Theory of operation
-------------------
One simulator answers every call in ``REPLY_MS``, so a cap of ``CAP`` calls bounds the
upstream's throughput at ``CAP / REPLY_MS``, below what the machine could push through the
proxies: the cap binds. The same load -- ``REQUESTS`` requests from ``CLIENTS`` closed-loop
clients, the count shared by every client (``load.Quota``) -- goes to two configurations
in turn:

- ``single``: one proxy with ``BATCH_MAX_CONCURRENCY=CAP``, no Redis; every client on it;
- ``cluster``: two proxies (separate processes, ``a`` and ``b``), each with the same
  ``BATCH_MAX_CONCURRENCY=CAP`` and ``REDIS_URL`` pointing at one ``redis-server`` the
  bench started (``redis_server``), so the cap is one lease semaphore for both; half the
  clients on each.

While a phase runs, the simulator's call traces are collected every ``_TRACE_POLL_S``
(it keeps the newest ``_TRACES_HELD``; each trace is kept once, by request id), and
afterwards ``cluster_stats.cap_audit`` walks them: the upstream's exact in-flight level,
its peak and the calls that started above the cap (there must be none; the simulator's own
peak gauge must say the same). Each proxy's ``/metrics`` reconciles with its own clients,
the simulator received one call per request the proxies took on, and at the end each
instance's ``cluster`` block is read (mode, fallbacks, leases lost). CPU is measured per
process (``CpuMeter``), redis-server included, so the CPU the Redis round trips add is the
difference of the two configurations' proxy CPU per request.

Without ``redis-server`` the scenario says so and runs nothing.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, final

import trio

from .cluster_stats import (
    cap_audit,
    cluster_block,
    command_delta,
    compare,
    configuration_summary,
    in_flight_buckets,
    side_by_side,
)
from .cpu import CpuMeter, CpuUsage
from .harness import Bench, noise_notes, target_for, target_result
from .load import Quota, Run, Tally, closed_loop
from .processes import Stack, running_stack
from .redis_server import NO_REDIS, RedisServer, redis_binary, running_redis
from .results import Check, PhaseResult, ScenarioResult
from .stats import counts_of, phase_result, reconcile, upstream_delta
from .wire import Pool

__all__ = ["CAP", "THROUGHPUT_RATIO_MIN", "run_cluster"]

CAP: Final = 8
REPLY_MS: Final = 40
CLIENTS: Final = 300
REQUESTS: Final = 10_000
QUICK_CLIENTS: Final = 100
QUICK_REQUESTS: Final = 1_500
THROUGHPUT_RATIO_MIN: Final = 0.9
PROXY: Final[Mapping[str, str]] = {
    "BATCH_ENABLED": "1",
    "BATCH_MAX_CONCURRENCY": str(CAP),
}
INSTANCES: Final = ("a", "b")
_TRACE_POLL_S: Final = 1.0
_TRACES_HELD: Final = 1000  # simulator.stats.RECENT_TRACES
_BUCKET_S: Final = 0.1


@final
class TraceCollector:
    """Every upstream call's trace over a phase, kept once each by request id."""

    def __init__(self) -> None:
        self.traces: dict[str, tuple[float, float]] = {}

    def add(self, recent: list[dict[str, Any]]) -> None:
        for trace in recent:
            start, end = trace.get("started_at"), trace.get("finished_at")
            if isinstance(start, float) and isinstance(end, float):
                self.traces[str(trace["request_id"])] = (start, end)

    async def poll(self, stack: Stack) -> None:
        """Until cancelled: the simulator's newest traces every ``_TRACE_POLL_S`` (at the
        scenario's rate it holds several seconds of them)."""
        while True:
            await trio.sleep(_TRACE_POLL_S)
            self.add((await stack.sim.stats(_TRACES_HELD))["recent"])


@final
@dataclass
class Measured:
    phase: PhaseResult
    summary: dict[str, Any]
    in_flight: dict[str, Any]


def _split(clients: int, parts: int) -> list[int]:
    return [clients // parts + (1 if i < clients % parts else 0) for i in range(parts)]


def _merged_usage(usage: CpuUsage, proxies: list[str]) -> CpuUsage:
    """``usage`` with the proxies' CPU added up under ``proxy``, as ``phase_result`` reads it."""
    seconds, util = dict(usage.seconds), dict(usage.util)
    for table in (seconds, util):
        parts = [table.get(f"proxy-{p}") for p in proxies]
        table["proxy"] = None if any(v is None for v in parts) else sum(v or 0.0 for v in parts)
    return CpuUsage(usage.wall_s, seconds, util, usage.machine_util, usage.other_util)


async def _measure(
    bench: Bench,
    scenario: ScenarioResult,
    stack: Stack,
    name: str,
    proxies: list[str],
    *,
    clients: int,
    requests: int | None,
    redis: RedisServer | None,
) -> Measured:
    """One configuration: warm-up, then the load split over ``proxies``, then the checks."""
    opts = bench.options
    servers = [stack.proxies[p] for p in proxies]
    targets = [target_for("proxy", s.url) for s in servers]
    pools = [Pool(t.host, t.port) for t in targets]
    shares = _split(clients, len(proxies))
    seconds = opts.duration if requests is None else None
    try:
        async with trio.open_nursery() as nursery:
            for pool, target, n in zip(pools, targets, shares, strict=True):
                nursery.start_soon(bench.warmup, pool, target, n, opts.warmup_s)
        for server in servers:
            await server.wait_idle()
        await bench.sim_idle(stack)
        await stack.sim.reset()
        sim_before = await stack.sim.stats()
        before = [await s.metrics() for s in servers]
        commands_before = await redis.commandstats() if redis is not None else {}
        pids = {"simulator": stack.sim.pid, "client": os.getpid()}
        pids |= {f"proxy-{p}": s.pid for p, s in zip(proxies, servers, strict=True)}
        if redis is not None and redis.pid is not None:
            pids["redis"] = redis.pid
        meter = CpuMeter(pids)
        quota = Quota(requests) if requests is not None else None
        tally, traces = Tally(), TraceCollector()
        by_proxy: dict[str, Run] = {}

        async def drive(pool: Pool, index: int) -> None:
            by_proxy[proxies[index]] = await closed_loop(
                pool, targets[index], workers=shares[index], duration=seconds, quota=quota,
                tally=tally,
            )  # fmt: skip

        expected_s = seconds or (requests or 0) * REPLY_MS / 1000.0 / CAP
        label = f"{name}: {clients} clients over {len(proxies)} instance(s), cap {CAP}"
        async with bench.display.phase(label, expected_s, tally):
            meter.start()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(traces.poll, stack)
                async with trio.open_nursery() as loads:
                    for index, pool in enumerate(pools):
                        loads.start_soon(drive, pool, index)
                nursery.cancel_scope.cancel()
            usage = meter.stop()
    finally:
        for pool in pools:
            await pool.aclose()
    after = [await s.wait_idle() for s in servers]
    runs = list(by_proxy.values())
    outcomes = [o for run in runs for o in run.outcomes]
    commands = None
    if redis is not None:
        commands = command_delta(commands_before, await redis.commandstats(), len(outcomes))
    sim_after = await bench.sim_idle(stack, _TRACES_HELD)
    traces.add(sim_after["recent"])
    run = Run(
        outcomes,
        min(r.started for r in runs),
        max(r.finished for r in runs),
        offered=sum(r.offered for r in runs),
        mode="closed",
        concurrency=clients,
    )
    result = phase_result(
        name,
        run,
        via="proxy",
        proxy="+".join(proxies),
        stream=False,
        upstream=upstream_delta(sim_before, sim_after),
        cpu=_merged_usage(usage, proxies),
    )
    scenario.phases.append(result)
    scenario.notes += noise_notes(result)
    intervals = sorted(traces.traces.values())
    audit = cap_audit(intervals, CAP)
    answered = {p: len(by_proxy[p].outcomes) for p in proxies}
    errors = Counter(str(o.status) for o in outcomes if o.kind != "ok")
    clusters = None
    if redis is not None:
        clusters = {p: cluster_block(m.get("cluster")) for p, m in zip(proxies, after, strict=True)}
    summary = configuration_summary(
        result,
        audit,
        instances=answered,
        cpu_s={p: usage.seconds.get(f"proxy-{p}") for p in proxies},
        redis_cpu_s=usage.seconds.get("redis"),
        clusters=clusters,
        errors_by_status=errors,
        redis_commands=commands,
    )
    scenario.checks += _checks(name, proxies, by_proxy, before, after, result, audit, clusters)
    t0 = intervals[0][0] if intervals else 0.0
    return Measured(result, summary, in_flight_buckets(intervals, t0, _BUCKET_S))


def _checks(
    name: str,
    proxies: list[str],
    runs: Mapping[str, Run],
    before: list[dict[str, Any]],
    after: list[dict[str, Any]],
    result: PhaseResult,
    audit: Mapping[str, Any],
    clusters: Mapping[str, Mapping[str, Any] | None] | None,
) -> list[Check]:
    checks: list[Check] = []
    took_on = 0
    for proxy, old, new in zip(proxies, before, after, strict=True):
        label = name if len(proxies) == 1 else f"{name}/{proxy}"
        checks += reconcile(label, counts_of(runs[proxy]), old, new, stream=False)
        took_on += int(new["requests"]["total"]) - int(old["requests"]["total"])
    checks += [
        Check(
            f"{name}: every request the proxies took on reached the upstream once",
            result.upstream.requests == took_on,
            took_on,
            result.upstream.requests,
            "the proxies' requests.total deltas, added up (expected) vs simulator requests",
        ),
        Check(
            f"{name}: no client error",
            result.counts.error == 0 and result.counts.shed == 0,
            0,
            result.counts.error + result.counts.shed,
            f"by code: {result.counts.errors_by_code}",
        ),
        Check(
            f"{name}: the upstream never had more than the cap in flight (simulator's peak)",
            result.upstream.max_in_flight <= CAP,
            f"<= {CAP}",
            result.upstream.max_in_flight,
            "/_sim/stats max_in_flight over the phase",
        ),
        Check(
            f"{name}: no upstream call started above the cap (every call's trace)",
            audit["violations"] == 0 and audit["peak"] <= CAP,
            0,
            audit["violations"],
            f"peak {audit['peak']} over {audit['calls']} calls, "
            f"{audit['time_over_cap_ms']} ms above the cap",
        ),
        Check(
            f"{name}: every upstream call's trace was audited",
            audit["calls"] == result.upstream.requests,
            result.upstream.requests,
            audit["calls"],
            "traces collected from /_sim/stats (expected: one per simulator request)",
        ),
    ]
    for proxy, block in (clusters or {}).items():
        checks.append(
            Check(
                f"{name}/{proxy}: the shared state is in shared mode at the end",
                block is not None and block["mode"] == "shared",
                "shared",
                None if block is None else block["mode"],
                "the /metrics cluster block" + ("" if block else ": missing"),
            )
        )
    return checks


async def run_cluster(bench: Bench, scenario: ScenarioResult) -> None:
    opts = bench.options
    clients = opts.concurrency or (QUICK_CLIENTS if opts.quick else CLIENTS)
    requests = None if opts.duration is not None else (QUICK_REQUESTS if opts.quick else REQUESTS)
    sim_args = ["--ttft-ms", str(REPLY_MS), "--tokens-per-s", "0"]
    scenario.config = {
        "simulator": sim_args,
        "proxy": dict(PROXY),
        "cap": CAP,
        "reply_ms": REPLY_MS,
        "clients": clients,
        "requests": requests,
        "duration_s": opts.duration,
        "upstream_capacity_per_s": CAP * 1000 / REPLY_MS,
    }
    binary = redis_binary()
    if binary is None:
        scenario.notes.append(f"Skipped: {NO_REDIS}.")
        scenario.summary = {"skipped": NO_REDIS}
        bench.display.line(f"  skipped: {NO_REDIS}")
        return
    log_dir = opts.log_dir / "cluster"
    async with running_redis(binary, log_dir) as redis:
        shared = {**PROXY, "REDIS_URL": redis.url}
        proxies = {"single": dict(PROXY), **{p: shared for p in INSTANCES}}
        async with running_stack(sim_args, proxies, log_dir) as stack:
            single = await _measure(
                bench, scenario, stack, "single", ["single"], clients=clients,
                requests=requests, redis=None,
            )  # fmt: skip
            cluster = await _measure(
                bench, scenario, stack, "cluster", list(INSTANCES), clients=clients,
                requests=requests, redis=redis,
            )  # fmt: skip
    deltas = compare(single.summary, cluster.summary)
    scenario.summary = {
        "cap": CAP,
        "reply_ms": REPLY_MS,
        "upstream_capacity_per_s": CAP * 1000 / REPLY_MS,
        "clients": clients,
        "single": single.summary,
        "cluster": cluster.summary,
        **deltas,
        "side_by_side": side_by_side(CAP, single.summary, cluster.summary),
    }
    scenario.traces["in_flight"] = {
        "bucket_ms": _BUCKET_S * 1000,
        "note": "the upstream's calls in flight (exact, from the simulator's traces): the "
        "maximum and time-weighted mean of each bucket, from the phase's first call",
        "single": single.in_flight,
        "cluster": cluster.in_flight,
    }
    ratio = deltas["throughput_ratio"]
    scenario.targets.append(
        target_result(
            "throughput of 2 instances sharing the cap vs 1 instance",
            f">= {THROUGHPUT_RATIO_MIN:.0%}",
            None if ratio is None else ratio * 100,
            "%",
            lambda v: v >= THROUGHPUT_RATIO_MIN * 100,
        )
    )
    for config in (single.summary, cluster.summary):
        queue = config["queue_p50_ms"]
        if queue is None or queue < REPLY_MS:
            scenario.notes.append(
                f"{'cluster' if config['shared_state'] else 'single'}: the median request "
                f"waited {queue} ms for admission and an upstream slot, less than one upstream "
                "call: the cap hardly bound, so the machine, not the cap, set the throughput."
            )
