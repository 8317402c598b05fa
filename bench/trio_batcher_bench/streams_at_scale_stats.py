"""Pure arithmetic of the ``streams-at-scale`` scenario: memory per open stream, the gaps the
proxy adds, and the figures the report shows side by side.

No I/O and no clock, so it is tested as data. ``streams_at_scale`` samples the proxy and
runs the phases; everything it concludes from the samples and the ``PhaseResult``s is here.

Memory is read off a *plateau*: the RSS samples taken while the most streams were open at
once (all of them, unless some failed), so the ramp up and the tail down -- streams opening
one after another, then ending -- never dilute it. The plateau's median, not its maximum,
is the figure: a collection or an allocator's arena growing for a moment is noise, what
every open stream keeps is not. The inter-event gap is the time between two consecutive
content events of one stream (the sparse events a user waits for); the proxy's cost is its
p99 through the proxy minus the same p99 straight from the simulator, the same streams
paced by the same upstream clock. It is reported twice: over the whole phase, ramp
included (a thousand requests arriving within seconds keep the proxy busy, and the events of
the streams already open wait behind them), and in the *steady state*, only the gaps of
events that arrived while every stream was open: what holding the streams costs, without
opening them.
"""

from __future__ import annotations

import itertools
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, final

from .load import Outcome
from .results import PhaseResult, Summary
from .stats import summary_ms

__all__ = [
    "ADDED_GAP_P99_MAX_MS",
    "EVENTS_PER_S",
    "RSS_PER_STREAM_MAX_KIB",
    "Plateau",
    "RssSample",
    "door_summary",
    "errors_of",
    "gc_delta",
    "late_gaps_by_second",
    "per_stream_kib",
    "plateau",
    "side_by_side",
    "steady_gaps",
    "steady_window",
]

EVENTS_PER_S: Final = 2.0  # content events a second in every stream
LATE_S: Final = 0.1  # a gap this much longer than the pace is a late event
RSS_PER_STREAM_MAX_KIB: Final = 64.0
ADDED_GAP_P99_MAX_MS: Final = 20.0


@final
@dataclass(frozen=True, slots=True)
class RssSample:
    """One reading of the proxy: when (trio clock, s), its RSS (KiB), streams open then,
    and the CPU seconds it had used so far."""

    t: float
    rss_kib: int
    open_streams: int
    cpu_s: float | None = None


@final
@dataclass(frozen=True, slots=True)
class Plateau:
    """The samples taken while ``open_streams`` (the most at once) were open."""

    open_streams: int
    samples: int
    seconds: float  # from the first of those samples to the last
    median_kib: float
    max_kib: int
    cores: float | None = None  # the proxy's CPU over the plateau, 1.0 = one core


def plateau(samples: Sequence[RssSample]) -> Plateau | None:
    """The plateau of ``samples``, or ``None`` when no sample saw a stream open."""
    peak = max((s.open_streams for s in samples), default=0)
    if peak <= 0:
        return None
    top = [s for s in samples if s.open_streams == peak]
    first, last = top[0], top[-1]
    cores = None
    if first.cpu_s is not None and last.cpu_s is not None and last.t > first.t:
        cores = round((last.cpu_s - first.cpu_s) / (last.t - first.t), 3)
    return Plateau(
        open_streams=peak,
        samples=len(top),
        seconds=round(top[-1].t - top[0].t, 3),
        median_kib=statistics.median(s.rss_kib for s in top),
        max_kib=max(s.rss_kib for s in top),
        cores=cores,
    )


def steady_window(outcomes: Sequence[Outcome]) -> tuple[float, float] | None:
    """(since, until): from the moment the last successful stream got its first event to
    the moment the first one ended; ``None`` without a successful stream."""
    ok = [o for o in outcomes if o.kind == "ok" and o.event_times]
    if not ok:
        return None
    return max(o.event_times[0] for o in ok), min(o.done for o in ok)


def steady_gaps(outcomes: Sequence[Outcome], window: tuple[float, float] | None) -> Summary:
    """The gaps between consecutive content events of the successful streams that both
    arrived inside ``window``."""
    if window is None:
        return summary_ms([])
    since, until = window
    return summary_ms(
        b - a
        for o in outcomes
        if o.kind == "ok"
        for a, b in itertools.pairwise(o.content_times)
        if a >= since and b <= until
    )


def late_gaps_by_second(outcomes: Sequence[Outcome], start: float) -> list[list[int]]:
    """``[second, count]`` for each second of the phase (from ``start``) in which content
    events arrived more than ``LATE_S`` behind the pace: a pause every stream felt shows
    as one second with about as many late events as streams, saturation as a run of them."""
    pace = 1.0 / EVENTS_PER_S
    late = Counter(
        int(b - start)
        for o in outcomes
        if o.kind == "ok"
        for a, b in itertools.pairwise(o.content_times)
        if b - a > pace + LATE_S
    )
    return [[second, late[second]] for second in sorted(late)]


def gc_delta(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> dict[str, Any]:
    """The proxy's garbage collections over a phase, from its ``/metrics`` ``gc`` block:
    per generation the collections and their total pause (ms), and the longest pause since
    the proxy started (ms; a maximum has no delta). ``{}`` without the block."""
    old = None if before is None else before.get("gc")
    new = None if after is None else after.get("gc")
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return {}
    return {
        gen: {
            "collections": int(stats["collections"]) - int(old[gen]["collections"]),
            "pause_ms_total": round(
                (stats["pause_seconds_total"] - old[gen]["pause_seconds_total"]) * 1000.0, 3
            ),
            "pause_ms_max_so_far": round(stats["pause_seconds_max"] * 1000.0, 3),
        }
        for gen, stats in new.items()
        if gen in old
    }


def per_stream_kib(idle_kib: float, top: Plateau | None) -> float | None:
    """What each open stream costs the proxy: (plateau median - idle) / open streams."""
    if top is None:
        return None
    return round((top.median_kib - idle_kib) / top.open_streams, 2)


def errors_of(phase: PhaseResult, streams: int) -> int:
    """Streams that did not end whole: every one asked for but the successes (an error
    status, a stream cut short or without its terminator, one never sent)."""
    return streams - phase.counts.ok


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(b - a, 3)


def _gap(phase: PhaseResult, key: str) -> float | None:
    value: float | None = None if phase.itl_ms is None else getattr(phase.itl_ms, key)
    return value


def _steady(phase: PhaseResult, key: str) -> float | None:
    summary = phase.extra.get("steady_gap_ms")
    value: float | None = getattr(summary, key) if isinstance(summary, Summary) else None
    return value


def _upstream_events(direct: PhaseResult) -> int | None:
    """SSE events the simulator sent per stream (what the proxy read upstream)."""
    events = direct.events
    return events.per_stream[-1] if events is not None and events.per_stream else None


def door_summary(
    streams: int,
    direct: PhaseResult,
    proxy: PhaseResult,
    idle_kib: float | None,
    top: Plateau | None,
) -> dict[str, Any]:
    """One door's figures: the proxy phase against the direct one, and its memory."""
    per_request = proxy.cpu.proxy_ms_per_request
    answered = proxy.counts.sent
    cpu_s = None if per_request is None else round(per_request * answered / 1000.0, 3)
    upstream = _upstream_events(direct)
    ok = proxy.counts.ok
    return {
        "phases": [direct.name, proxy.name],
        "streams": streams,
        "errors_direct": errors_of(direct, streams),
        "errors_proxy": errors_of(proxy, streams),
        "errors_by_code_proxy": proxy.counts.errors_by_code,
        "gap_p50_direct_ms": _gap(direct, "p50"),
        "gap_p50_proxy_ms": _gap(proxy, "p50"),
        "gap_p99_direct_ms": _gap(direct, "p99"),
        "gap_p99_proxy_ms": _gap(proxy, "p99"),
        "gap_max_direct_ms": _gap(direct, "max"),
        "gap_max_proxy_ms": _gap(proxy, "max"),
        "added_gap_p50_ms": _delta(_gap(direct, "p50"), _gap(proxy, "p50")),
        "added_gap_p99_ms": _delta(_gap(direct, "p99"), _gap(proxy, "p99")),
        "steady_gap_p99_direct_ms": _steady(direct, "p99"),
        "steady_gap_p99_proxy_ms": _steady(proxy, "p99"),
        "added_steady_gap_p99_ms": _delta(_steady(direct, "p99"), _steady(proxy, "p99")),
        "all_open_after_s_direct": direct.extra.get("all_open_after_s"),
        "all_open_after_s_proxy": proxy.extra.get("all_open_after_s"),
        "ttft_p50_direct_ms": None if direct.ttft_ms is None else direct.ttft_ms.p50,
        "ttft_p50_proxy_ms": None if proxy.ttft_ms is None else proxy.ttft_ms.p50,
        "rss_idle_mib": None if idle_kib is None else round(idle_kib / 1024, 1),
        "rss_plateau_mib": None if top is None else round(top.median_kib / 1024, 1),
        "rss_plateau_max_mib": None if top is None else round(top.max_kib / 1024, 1),
        "plateau_open_streams": None if top is None else top.open_streams,
        "plateau_samples": None if top is None else top.samples,
        "plateau_s": None if top is None else top.seconds,
        "rss_per_open_stream_kib": None if idle_kib is None else per_stream_kib(idle_kib, top),
        "proxy_cores_all_open": None if top is None else top.cores,
        "proxy_cpu_ms_per_event_all_open": (
            None
            if top is None or top.cores is None
            else round(top.cores * 1000.0 / (top.open_streams * EVENTS_PER_S), 4)
        ),
        "late_gaps_by_second_direct": direct.extra.get("late_gaps_by_second"),
        "late_gaps_by_second_proxy": proxy.extra.get("late_gaps_by_second"),
        "proxy_gc": proxy.extra.get("gc", {}),
        "client_gc_direct": direct.extra.get("client_gc", {}),
        "client_gc_proxy": proxy.extra.get("client_gc", {}),
        "proxy_cpu_s": cpu_s,
        "proxy_cores": proxy.cpu.proxy_util,
        "proxy_cpu_ms_per_stream": per_request,
        "upstream_events_per_stream": upstream,
        "proxy_cpu_ms_per_upstream_event": (
            None
            if cpu_s is None or not upstream or not ok
            else round(cpu_s * 1000.0 / (ok * upstream), 4)
        ),
        "client_cores_direct": direct.cpu.client_util,
        "client_cores_proxy": proxy.cpu.client_util,
        "simulator_cores_proxy": proxy.cpu.simulator_util,
    }


_ROWS: Final = (
    ("errors (of the streams asked for)", "errors_proxy"),
    ("inter-event gap p50 (ms)", "gap_p50_proxy_ms"),
    ("inter-event gap p99 (ms)", "gap_p99_proxy_ms"),
    ("inter-event gap max (ms)", "gap_max_proxy_ms"),
    ("added gap p99, proxy - direct (ms)", "added_gap_p99_ms"),
    ("steady state: gap p99 (ms)", "steady_gap_p99_proxy_ms"),
    ("steady state: added gap p99 (ms)", "added_steady_gap_p99_ms"),
    ("all streams open after (s)", "all_open_after_s_proxy"),
    ("TTFT p50 (ms)", "ttft_p50_proxy_ms"),
    ("proxy RSS idle (MiB)", "rss_idle_mib"),
    ("proxy RSS, all streams open, median (MiB)", "rss_plateau_mib"),
    ("proxy RSS per open stream (KiB)", "rss_per_open_stream_kib"),
    ("proxy cores, all streams open", "proxy_cores_all_open"),
    ("proxy CPU per event, all streams open (ms)", "proxy_cpu_ms_per_event_all_open"),
    ("proxy CPU (s)", "proxy_cpu_s"),
    ("proxy cores", "proxy_cores"),
    ("proxy CPU per upstream event (ms)", "proxy_cpu_ms_per_upstream_event"),
    ("load generator cores", "client_cores_proxy"),
)
_DIRECT: Final = {
    "errors_proxy": "errors_direct",
    "gap_p50_proxy_ms": "gap_p50_direct_ms",
    "gap_p99_proxy_ms": "gap_p99_direct_ms",
    "gap_max_proxy_ms": "gap_max_direct_ms",
    "steady_gap_p99_proxy_ms": "steady_gap_p99_direct_ms",
    "all_open_after_s_proxy": "all_open_after_s_direct",
    "ttft_p50_proxy_ms": "ttft_p50_direct_ms",
    "client_cores_proxy": "client_cores_direct",
}


def side_by_side(doors: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Direct, then each door's proxy phase, as one table (``{"columns", "rows"}``)."""
    first = next(iter(doors.values()))
    rows = [
        [label, first.get(_DIRECT[key]) if key in _DIRECT else None]
        + [door[key] for door in doors.values()]
        for label, key in _ROWS
    ]
    return {"columns": ["", "direct", *(f"proxy: {name}" for name in doors)], "rows": rows}
