"""Pure arithmetic over what the drivers recorded: summaries, timelines, reconciliation.

No I/O and no clock, so it is tested as data. Percentiles are nearest-rank, the same
method as the proxy's ``/metrics`` (``trio_batcher.observatory.metrics.percentile``).
"""

from __future__ import annotations

import contextlib
import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from trio_batcher.observatory.metrics import percentile

from .cpu import CpuUsage
from .load import Outcome, Run
from .results import (
    Check,
    Counts,
    Cpu,
    EventStats,
    PhaseResult,
    Rates,
    Summary,
    TimelinePoint,
    Upstream,
)

__all__ = [
    "counts_of",
    "event_stats",
    "parse_server_timing",
    "phase_result",
    "reconcile",
    "resilience_delta",
    "summary_ms",
    "upstream_checks",
    "upstream_delta",
]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 3)


def summary_ms(seconds: Iterable[float]) -> Summary:
    """Count, mean and nearest-rank p50/p95/p99/max of durations in seconds, as ms."""
    values = sorted(seconds)
    if not values:
        return Summary(0, None, None, None, None, None)
    return Summary(
        count=len(values),
        mean=_ms(sum(values) / len(values)),
        p50=_ms(percentile(values, 50)),
        p95=_ms(percentile(values, 95)),
        p99=_ms(percentile(values, 99)),
        max=_ms(values[-1]),
    )


def parse_server_timing(header: bytes) -> dict[str, float]:
    """``b"queue;dur=1.2, overhead;dur=0.4"`` → ``{"queue": 1.2, "overhead": 0.4}`` (ms)."""
    parts: dict[str, float] = {}
    for item in header.split(b","):
        name, _, params = item.strip().partition(b";")
        for param in params.split(b";"):
            key, _, value = param.strip().partition(b"=")
            if key == b"dur":
                with contextlib.suppress(ValueError):
                    parts[name.decode()] = float(value)
    return parts


def event_stats(ok: Sequence[Outcome], wall: float) -> EventStats:
    """Every SSE event of the successful streams ``ok`` over ``wall`` seconds (see
    ``EventStats``)."""
    counts = [len(o.event_times) for o in ok]
    sizes = [o.body_bytes for o in ok]
    total = sum(counts)
    return EventStats(
        total=total,
        per_s=round(total / wall, 2) if wall > 0 else 0.0,
        per_stream=[min(counts), max(counts)] if counts else [],
        bytes_per_stream=[min(sizes), max(sizes)] if sizes else [],
        gap_ms=summary_ms(b - a for o in ok for a, b in itertools.pairwise(o.event_times)),
        mean_arrival_ms=_mean_profile([[t - o.intended for t in o.event_times] for o in ok]),
        mean_content_arrival_ms=_mean_profile(
            [[t - o.intended for t in o.content_times] for o in ok]
        ),
    )


def _mean_profile(series: Sequence[Sequence[float]]) -> list[float]:
    """The mean of each position (s → ms) over the series of the most common length."""
    if not series:
        return []
    common = Counter(len(s) for s in series).most_common(1)[0][0]
    same = [s for s in series if len(s) == common]
    return [round(sum(column) / len(same) * 1000.0, 3) for column in zip(*same, strict=True)]


def counts_of(run: Run) -> Counts:
    kinds = Counter(o.kind for o in run.outcomes)
    codes = Counter(
        o.code or f"http_{o.status}" for o in run.outcomes if o.kind in ("error", "shed")
    )
    return Counts(
        offered=run.offered,
        sent=len(run.outcomes),
        ok=kinds["ok"],
        shed=kinds["shed"],
        error=kinds["error"],
        aborted=kinds["aborted"],
        unsent_late=run.unsent_late,
        unsent_bound=run.unsent_bound,
        errors_by_code=dict(sorted(codes.items())),
    )


def upstream_delta(before: Mapping[str, Any], after: Mapping[str, Any]) -> Upstream:
    """What the simulator did between two ``/_sim/stats`` snapshots. ``max_in_flight`` is the
    peak since the last reset, so reset the simulator when the phase starts."""

    def delta(key: str) -> int:
        return int(after[key]) - int(before[key])

    return Upstream(
        requests=delta("requests_total"),
        max_in_flight=int(after["max_in_flight"]),
        completed=delta("completed"),
        abandoned=delta("abandoned"),
        errors=delta("errors"),
    )


def _timeline(outcomes: Sequence[Outcome], start: float, bucket: float) -> list[TimelinePoint]:
    if not outcomes:
        return []
    buckets: dict[int, list[Outcome]] = {}
    for outcome in outcomes:
        buckets.setdefault(int((outcome.intended - start) // bucket), []).append(outcome)
    points = []
    for index in range(max(buckets) + 1):
        group = buckets.get(index, [])
        ok = sorted(o.latency for o in group if o.kind == "ok")
        points.append(
            TimelinePoint(
                t=round(index * bucket, 3),
                offered=len(group),
                ok=len(ok),
                shed=sum(1 for o in group if o.kind == "shed"),
                error=sum(1 for o in group if o.kind == "error"),
                p50_ms=_ms(percentile(ok, 50)) if ok else None,
                p99_ms=_ms(percentile(ok, 99)) if ok else None,
            )
        )
    return points


def _cpu(usage: CpuUsage | None, requests: Mapping[str, int]) -> Cpu:
    if usage is None:
        return Cpu(None, None, None, None, None, None, None, None)

    def per_request(name: str) -> float | None:
        seconds, count = usage.seconds.get(name), requests.get(name, 0)
        return None if seconds is None or count <= 0 else round(seconds / count * 1000.0, 3)

    def util(name: str) -> float | None:
        value = usage.util.get(name)
        return None if value is None else round(value, 3)

    return Cpu(
        proxy_ms_per_request=per_request("proxy"),
        simulator_ms_per_request=per_request("simulator"),
        client_ms_per_request=per_request("client"),
        proxy_util=util("proxy"),
        simulator_util=util("simulator"),
        client_util=util("client"),
        machine_util=None if usage.machine_util is None else round(usage.machine_util, 3),
        other_util=None if usage.other_util is None else round(usage.other_util, 3),
    )


def phase_result(
    name: str,
    run: Run,
    *,
    via: str,
    proxy: str | None,
    stream: bool,
    upstream: Upstream,
    cpu: CpuUsage | None,
    bucket: float = 1.0,
    extra: dict[str, Any] | None = None,
) -> PhaseResult:
    """Everything a phase reports, from its run and its before/after measurements."""
    counts = counts_of(run)
    ok = [o for o in run.outcomes if o.kind == "ok"]
    wall = max(run.wall, 1e-9)
    ttft = itl = send_lag = events = None
    if stream:
        ttft = summary_ms(t for o in ok if (t := o.ttft) is not None)
        gaps = [b - a for o in ok for a, b in itertools.pairwise(o.content_times)]
        itl = summary_ms(gaps)
        events = event_stats(ok, wall)
    if run.mode == "open":
        send_lag = summary_ms(max(0.0, o.sent - o.intended) for o in run.outcomes)
    timing = None
    if via == "proxy":
        parts: dict[str, list[float]] = {}
        for o in ok:
            if o.server_timing is not None:
                for key, value in parse_server_timing(o.server_timing).items():
                    parts.setdefault(key, []).append(value / 1000.0)
        timing = {key: summary_ms(values) for key, values in sorted(parts.items())}
    answered = counts.ok + counts.shed + counts.error + counts.aborted
    # An open loop offers its configured rate, however long the server takes to answer.
    offered_rate = run.rate if run.rate is not None else run.offered / wall
    return PhaseResult(
        name=name,
        via=via,
        proxy=proxy,
        mode=run.mode,
        stream=stream,
        concurrency=run.concurrency,
        rate_per_s=run.rate,
        wall_s=round(wall, 3),
        counts=counts,
        rates=Rates(
            offered=round(offered_rate, 2),
            goodput=round(counts.ok / wall, 2),
            shed=round(counts.shed / wall, 2),
        ),
        latency_ms=summary_ms(o.latency for o in ok),
        ttft_ms=ttft,
        itl_ms=itl,
        send_lag_ms=send_lag,
        proxy_timing_ms=timing,
        upstream=upstream,
        cpu=_cpu(
            cpu,
            {
                "proxy": answered if via == "proxy" else 0,
                "simulator": upstream.requests,
                "client": counts.sent,
            },
        ),
        timeline=_timeline(run.outcomes, run.started, bucket),
        extra=extra or {},
        events=events,
    )


def reconcile(
    phase: str,
    counts: Counts,
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    *,
    stream: bool,
) -> list[Check]:
    """Compare what the clients saw with the proxy's ``/metrics`` deltas over the phase.

    The proxy counts a request it took on exactly once, as success or error (a client that
    left is an error with status 499), and a request its gate shed as ``rejected``. So:
    ``success == ok``, ``error == error + aborted``, ``total == ok + error + aborted``,
    ``rejected == shed``, ``by_status["499"] == aborted``, and ``stream`` counts every
    streamed request (none in a non-streaming phase).
    """

    def delta(section: str, key: str) -> int:
        return int(after[section].get(key, 0)) - int(before[section].get(key, 0))

    def status_delta(status: str) -> int:
        return int(after["requests"]["by_status"].get(status, 0)) - int(
            before["requests"]["by_status"].get(status, 0)
        )

    handled = counts.ok + counts.error + counts.aborted
    pairs: list[tuple[str, int, int]] = [
        ("requests.total", handled, delta("requests", "total")),
        ("requests.success", counts.ok, delta("requests", "success")),
        ("requests.error", counts.error + counts.aborted, delta("requests", "error")),
        ("rejected.total", counts.shed, delta("rejected", "total")),
        ("requests.stream", handled if stream else 0, delta("requests", "stream")),
    ]
    if counts.aborted:
        pairs.append(('requests.by_status["499"]', counts.aborted, status_delta("499")))
    return [
        Check(
            name=f"{phase}: clients vs proxy {field}",
            ok=client == proxy,
            expected=client,
            actual=proxy,
            detail="client-side count (expected) vs the proxy's /metrics delta (actual)",
        )
        for field, client, proxy in pairs
    ]


def resilience_delta(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, int] | None:
    """The counters of the proxy's ``/metrics`` ``upstream`` block over a phase (gauges such
    as ``adaptive_limit`` and ``cooldown_remaining_s`` are left out); ``None`` when either
    snapshot has no such block."""
    old, new = before.get("upstream"), after.get("upstream")
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return None
    return {
        key: int(value) - int(old.get(key, 0))
        for key, value in new.items()
        if isinstance(value, int) and not isinstance(value, bool) and key != "adaptive_limit"
    }


def upstream_checks(
    phase: str, sim_requests: int, before: Mapping[str, Any], after: Mapping[str, Any]
) -> list[Check]:
    """Reconcile the simulator with the proxy when the proxy may retry upstream calls.

    Every attempt the proxy started (``upstream.attempts``, retries included) must have
    reached the simulator, and nothing else; and every request the proxy took on made
    exactly one first attempt (``attempts - retries``), except those a shared cooldown shed
    before any (``shed_by_cooldown``, at most). Without an ``upstream`` block in
    ``/metrics`` only the weaker fact is checkable: at least one call per request.
    """
    took_on = int(after["requests"]["total"]) - int(before["requests"]["total"])
    counters = resilience_delta(before, after)
    if counters is None:
        return [
            Check(
                f"{phase}: every request the proxy took on reached the upstream",
                sim_requests >= took_on,
                f">= {took_on}",
                sim_requests,
                "proxy requests.total delta vs simulator requests; /metrics has no upstream "
                "block, so retries cannot be told apart",
            )
        ]
    attempts = counters.get("attempts", 0)
    first = attempts - counters.get("retries", 0)
    shed = counters.get("shed_by_cooldown", 0)
    return [
        Check(
            f"{phase}: every upstream attempt the proxy counted reached the simulator",
            sim_requests == attempts,
            attempts,
            sim_requests,
            "proxy upstream.attempts delta (expected) vs simulator requests (actual)",
        ),
        Check(
            f"{phase}: every request the proxy took on made one first attempt",
            took_on - shed <= first <= took_on,
            took_on if shed == 0 else f"{took_on - shed}..{took_on}",
            first,
            "proxy requests.total delta, less upstream.shed_by_cooldown (expected) vs "
            "upstream.attempts - upstream.retries (actual)",
        ),
    ]
