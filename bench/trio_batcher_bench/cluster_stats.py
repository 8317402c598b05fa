"""The ``cluster`` scenario's arithmetic: the cap from the upstream's side, and the comparison.

Pure (no I/O, no clock), tested as data. The simulator's per-call traces give every upstream
call's exact ``[started_at, finished_at]`` (one clock, the simulator's); ``cap_audit`` walks
them as a step function and says whether the upstream ever had more than the cap in flight:
how many calls started above it (a *violation* is a call that found ``cap`` others already
running), for how long the level stayed above it, its peak, and the mean level (how hard
the cap bound: near ``cap``, the cap was the bottleneck). Ends sort before starts at the same
instant, so a call that starts the moment another ends is not an overlap.
``in_flight_buckets`` is the same step function cut into buckets for a plot.
``configuration_summary`` and ``compare`` turn the two configurations' measurements into the
report's figures and its side-by-side table.

The lease blocks (``trio_batcher/cluster/leases.py``): ``lease_keys`` names the hashes an
instance's block lives in, ``lease_residue`` reads what is left there once the proxies are
idle (an idle instance gives its whole block back within a renewal period, so anything that
stays is a *ghost lease*: slots no call uses that the others cannot have), ``drain_check``
and ``lease_checks`` judge it, and ``lease_sync_counts`` turns the ``lease_syncs`` counters
of ``/metrics`` into syncs over the phase and per second: what Redis sees of an instance.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from .figures import delta, round3
from .results import Check, PhaseResult

__all__ = [
    "cap_audit",
    "cluster_block",
    "command_delta",
    "compare",
    "configuration_summary",
    "drain_check",
    "in_flight_buckets",
    "lease_checks",
    "lease_keys",
    "lease_residue",
    "lease_sync_counts",
    "side_by_side",
]

Interval = tuple[float, float]


def _events(intervals: Iterable[Interval]) -> list[tuple[float, int]]:
    return sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])


def cap_audit(intervals: Sequence[Interval], cap: int) -> dict[str, Any]:
    """The upstream's in-flight level over ``intervals`` (seconds) against ``cap``.

    Returns ``calls``, ``peak``, ``violations`` (calls that started while ``cap`` or more
    were in flight), ``time_over_cap_ms``, ``mean_in_flight`` (over the span from the first
    start to the last end) and ``occupancy`` (``mean_in_flight / cap``).
    """
    level = peak = violations = 0
    over = busy = 0.0
    previous: float | None = None
    for t, change in _events(intervals):
        if previous is not None:
            busy += level * (t - previous)
            if level > cap:
                over += t - previous
        previous = t
        level += change
        if change > 0 and level > cap:
            violations += 1
        peak = max(peak, level)
    span = max(e for _, e in intervals) - min(s for s, _ in intervals) if intervals else 0.0
    mean = busy / span if span > 0 else None
    return {
        "calls": len(intervals),
        "peak": peak,
        "violations": violations,
        "time_over_cap_ms": round(over * 1000.0, 3),
        "mean_in_flight": round3(mean),
        "occupancy": None if mean is None or cap <= 0 else round(mean / cap, 4),
    }


def in_flight_buckets(
    intervals: Sequence[Interval], t0: float, bucket_s: float = 0.1
) -> dict[str, Any]:
    """The in-flight level in buckets of ``bucket_s`` from ``t0``: each bucket's maximum
    and its time-weighted mean, as ``{"columns": [t_ms, max, mean], "rows"}``."""
    rows: list[list[Any]] = []
    if not intervals:
        return {"columns": ["t_ms", "max", "mean"], "rows": rows}
    level = 0
    index = 0  # the bucket being filled: [t0 + index * bucket_s, ... + bucket_s)
    top, area, at = 0, 0.0, t0

    def close() -> None:
        nonlocal index, top, area, at
        rows.append([round(index * bucket_s * 1000.0, 1), top, round(area / bucket_s, 3)])
        index += 1
        top, area, at = level, 0.0, t0 + index * bucket_s

    for t, changes in itertools.groupby(_events(intervals), key=lambda e: e[0]):
        while t >= t0 + (index + 1) * bucket_s:
            area += level * (t0 + (index + 1) * bucket_s - at)
            close()
        area += level * (t - at)
        steps = [change for _, change in changes]
        level -= steps.count(-1)  # ends first: a level held for no time is no peak
        if t == at:
            top = level
        at = t
        level += steps.count(1)
        top = max(top, level)
    if area or top:
        area += level * (t0 + (index + 1) * bucket_s - at)
        close()
    return {"columns": ["t_ms", "max", "mean"], "rows": rows}


def cluster_block(block: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The ``cluster`` block of an instance's ``/metrics`` (``mode``, ``fallbacks``,
    ``leases_lost``...) as the report keeps it: without the instance's random id, which
    differs from run to run and means nothing to a reader."""
    if block is None:
        return None
    return {key: value for key, value in block.items() if key != "instance"}


def lease_keys(prefix: str, name: str = "upstream") -> dict[str, str]:
    """The Redis keys of semaphore ``name``'s blocks under ``REDIS_KEY_PREFIX`` ``prefix``,
    as the proxy names them (``RedisLink.key``): the prefix without its trailing colon, in
    braces, so every key of a cluster is in one hash slot."""
    tag = prefix.rstrip(":") or "trio-batcher"
    return {part: f"{{{tag}}}:sem:{name}:{part}" for part in ("blocks", "used", "wants", "expiry")}


def lease_residue(
    blocks: Mapping[str, str],
    used: Mapping[str, str],
    wants: Mapping[str, str],
    expiry_entries: int,
) -> dict[str, Any]:
    """What the instances hold in Redis (the ``HGETALL`` of each hash, by instance id, and
    the expiry zset's size), summed over the instances: instance ids are random and mean
    nothing to a reader. ``drained``: no block left and nothing counted as used -- what
    idle instances must come to, since each gives its block back after a renewal period
    in which nothing asked for a slot."""
    total_used = sum(int(float(v)) for v in used.values())
    return {
        "instances_holding": len(blocks),
        "slots_held": sum(int(float(v)) for v in blocks.values()),
        "used": total_used,
        "wants": sum(int(float(v)) for v in wants.values()),
        "expiry_entries": expiry_entries,
        "drained": not blocks and total_used == 0,
    }


def drain_check(name: str, drain: Mapping[str, Any]) -> Check:
    """No ghost lease: once the proxies were idle, the blocks in Redis drained within the
    bound (``drain`` as ``cluster._drain`` measures it: ``drained``, ``drain_s``,
    ``bound_s``, ``residue``)."""
    residue = drain["residue"]
    return Check(
        f"{name}: no ghost lease: the blocks in Redis drained once the proxies were idle",
        bool(drain["drained"]),
        f"blocks empty and used 0 within {drain['bound_s']:g} s",
        f"drained in {drain['drain_s']} s"
        if drain["drained"]
        else f"{residue['slots_held']} slots held by {residue['instances_holding']} "
        f"instance(s), {residue['used']} used, after {drain['drain_s']} s",
        "HGETALL of the blocks and used hashes, polled from the moment the proxies were idle",
    )


def lease_checks(name: str, clusters: Mapping[str, Mapping[str, Any] | None]) -> list[Check]:
    """No lease lost on any instance: its block was never found expired while it still held
    slots (``leases_lost`` of the ``/metrics`` cluster block, read after the drain)."""
    return [
        Check(
            f"{name}/{proxy}: no lease lost (leases_lost at the end)",
            block is not None and block.get("leases_lost") == 0,
            0,
            None if block is None else block.get("leases_lost"),
            "the /metrics cluster block after the drain" + ("" if block else ": missing"),
        )
        for proxy, block in clusters.items()
    ]


def lease_sync_counts(
    before: Mapping[str, Mapping[str, Any] | None],
    after: Mapping[str, Mapping[str, Any] | None],
    seconds: float,
) -> dict[str, dict[str, Any]]:
    """Each instance's lease syncs (scripts it sent to Redis for its block) over a phase of
    ``seconds``, from the ``lease_syncs`` counters of its ``/metrics`` before and after."""
    counts: dict[str, dict[str, Any]] = {}
    for proxy, block in after.items():
        old = before.get(proxy)
        if block is None or old is None:
            counts[proxy] = {"syncs": None, "per_s": None}
            continue
        n = int(block.get("lease_syncs", 0)) - int(old.get("lease_syncs", 0))
        counts[proxy] = {"syncs": n, "per_s": round(n / seconds, 2) if seconds > 0 else None}
    return counts


def command_delta(
    before: Mapping[str, int], after: Mapping[str, int], requests: int
) -> dict[str, Any]:
    """What Redis did over a phase (``INFO commandstats`` before and after): commands per
    request, scripts (``evalsha``, the lease and budget round trips) per request, and the
    calls by command, most first. The bench's own ``INFO`` is left out."""
    calls = {
        name: n - before.get(name, 0)
        for name, n in after.items()
        if name != "info" and n - before.get(name, 0) > 0
    }
    total = sum(calls.values())
    scripts = calls.get("evalsha", 0) + calls.get("eval", 0)
    return {
        "commands_per_request": round(total / requests, 3) if requests else None,
        "scripts_per_request": round(scripts / requests, 3) if requests else None,
        "calls": dict(sorted(calls.items(), key=lambda kv: (-kv[1], kv[0]))),
    }


def configuration_summary(
    phase: PhaseResult,
    audit: Mapping[str, Any],
    *,
    instances: Mapping[str, int],
    cpu_s: Mapping[str, float | None],
    redis_cpu_s: float | None,
    clusters: Mapping[str, Mapping[str, Any] | None] | None,
    errors_by_status: Mapping[str, int],
    redis_commands: Mapping[str, Any] | None = None,
    lease_syncs: Mapping[str, Mapping[str, Any]] | None = None,
    drain: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One configuration's figures: throughput, the upstream against the cap, errors, CPU.

    Args:
      instances: requests each proxy answered, by proxy name.
      cpu_s: each proxy's CPU seconds over the phase.
      redis_cpu_s: redis-server's CPU seconds (``None`` without Redis).
      clusters: each proxy's ``cluster`` block at the end (``None`` without Redis).
      redis_commands: ``command_delta`` over the phase (``None`` without Redis).
      lease_syncs: ``lease_sync_counts`` over the phase (``None`` without Redis).
      drain: how the blocks drained after the phase (``None`` without Redis).
    """
    answered = sum(instances.values())
    cpu_per = {
        name: None if (s := cpu_s.get(name)) is None or not n else round(s / n * 1000.0, 3)
        for name, n in instances.items()
    }
    timing = phase.proxy_timing_ms or {}
    queue = timing.get("queue")
    return {
        "instances": len(instances),
        "shared_state": clusters is not None,
        "clients": phase.concurrency,
        "requests": phase.counts.sent,
        "ok": phase.counts.ok,
        "requests_by_instance": dict(instances),
        "throughput_per_s": phase.rates.goodput,
        "latency_p50_ms": phase.latency_ms.p50,
        "latency_p99_ms": phase.latency_ms.p99,
        "queue_p50_ms": None if queue is None else queue.p50,
        "client_errors_by_status": dict(sorted(errors_by_status.items())),
        "upstream_requests": phase.upstream.requests,
        "upstream_max_in_flight": phase.upstream.max_in_flight,
        "upstream_mean_in_flight": audit["mean_in_flight"],
        "upstream_occupancy": audit["occupancy"],
        "cap_violations": audit["violations"],
        "time_over_cap_ms": audit["time_over_cap_ms"],
        "traces_audited": audit["calls"],
        "proxy_cpu_ms_per_request": phase.cpu.proxy_ms_per_request,
        "proxy_cpu_ms_per_request_by_instance": cpu_per,
        "redis_cpu_ms_per_request": (
            None if redis_cpu_s is None or not answered else round(redis_cpu_s / answered * 1e3, 3)
        ),
        "redis_commands": None if redis_commands is None else dict(redis_commands),
        "lease_syncs": None if lease_syncs is None else dict(lease_syncs),
        "lease_drain": None if drain is None else dict(drain),
        "cluster": None if clusters is None else dict(clusters),
    }


def compare(single: Mapping[str, Any], cluster: Mapping[str, Any]) -> dict[str, Any]:
    """What sharing the cap through Redis changed: throughput ratio, the CPU it added per
    request (the proxies', and with redis-server's own) and the proxies' CPU per request as
    a ratio (cluster / single: issue 30's acceptance is at most 1.3)."""
    single_cpu, cluster_cpu = (
        single["proxy_cpu_ms_per_request"],
        cluster["proxy_cpu_ms_per_request"],
    )
    added = delta(single_cpu, cluster_cpu)
    redis = cluster["redis_cpu_ms_per_request"]
    single_tput, cluster_tput = single["throughput_per_s"], cluster["throughput_per_s"]
    return {
        "throughput_ratio": (
            round(cluster_tput / single_tput, 4) if single_tput and cluster_tput else None
        ),
        "proxy_cpu_added_ms_per_request": round3(added),
        "cpu_added_with_redis_ms_per_request": (
            None if added is None or redis is None else round(added + redis, 3)
        ),
        "proxy_cpu_ratio": (
            round(cluster_cpu / single_cpu, 4) if single_cpu and cluster_cpu is not None else None
        ),
    }


_ROWS: Final = (
    ("proxy instances", "instances"),
    ("shared state (Redis)", "shared_state"),
    ("clients", "clients"),
    ("requests", "requests"),
    ("requests by instance", "requests_by_instance"),
    ("throughput/s", "throughput_per_s"),
    ("p50 / p99 (ms)", ("latency_p50_ms", "latency_p99_ms")),
    ("queue p50 (ms, Server-Timing)", "queue_p50_ms"),
    ("client errors by status", "client_errors_by_status"),
    ("upstream max in flight", "upstream_max_in_flight"),
    ("upstream mean in flight", "upstream_mean_in_flight"),
    ("cap violations (calls started above the cap)", "cap_violations"),
    ("proxy CPU per request (ms)", "proxy_cpu_ms_per_request"),
    ("redis-server CPU per request (ms)", "redis_cpu_ms_per_request"),
    ("Redis commands per request (scripts)", ("redis_commands", "commands_per_request")),
    ("lease syncs by instance (per s)", ("lease_syncs", "per_s")),
    ("blocks drained after idle (s)", ("lease_drain", "drain_s")),
)


def _cell(summary: Mapping[str, Any], key: str | tuple[str, str]) -> Any:
    if isinstance(key, str):
        return summary.get(key)
    if key[0] == "redis_commands":
        commands = summary.get("redis_commands")
        if commands is None:
            return None
        return f"{commands['commands_per_request']} ({commands['scripts_per_request']})"
    if key[0] == "lease_syncs":
        syncs = summary.get("lease_syncs")
        if syncs is None:
            return None
        return ", ".join(f"{p}: {s['syncs']} ({s['per_s']})" for p, s in syncs.items())
    if key[0] == "lease_drain":
        drain = summary.get("lease_drain")
        if drain is None:
            return None
        return drain["drain_s"] if drain["drained"] else f"not within {drain['bound_s']:g}"
    a, b = (summary.get(k) for k in key)
    return f"{_fmt(a)} / {_fmt(b)}"


def side_by_side(
    cap: int,
    single: Mapping[str, Any],
    cluster: Mapping[str, Any],
    unbound: tuple[int, Mapping[str, Any], Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The configurations as one table (``{"columns", "rows"}``, as the report renders it):
    the pair with the cap binding, and with ``unbound`` (its cap, single, cluster) the pair
    whose cap does not bind beside it."""
    columns = ["", f"1 instance, cap {cap}", f"2 instances + Redis, cap {cap}"]
    configs = [single, cluster]
    if unbound is not None:
        free_cap, free_single, free_cluster = unbound
        columns += [f"1 instance, cap {free_cap}", f"2 instances + Redis, cap {free_cap}"]
        configs += [free_single, free_cluster]
    return {
        "columns": columns,
        "rows": [[label, *(_cell(c, key) for c in configs)] for label, key in _ROWS],
    }


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:,.1f}"
