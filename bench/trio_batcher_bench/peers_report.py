"""The ``peers`` scenario's figures as a side-by-side table, ratios, and the issue's targets.

Pure: the rows ``peers._measure`` produced in, the summary and ``TargetResult`` list out,
so the arithmetic is tested as data. Every ratio is within one run: a gateway's CPU per
request divided by trio-batcher's (so LiteLLM's row reads "7× ours"), throughput as a share
of direct at the same load, latency added over direct.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from .figures import delta, ratio
from .harness import target_result
from .results import TargetResult

__all__ = ["peers_summary", "peers_targets"]

OURS: Final = "trio-batcher"
LITELLM: Final = "LiteLLM"
FLOOR: Final = "floor"
# The performance issue's targets (a report, not timed tests).
LITELLM_CPU_RATIO_MIN: Final = 10.0  # non-stream, 50 clients: ours <= 1/10 of LiteLLM's
FLOOR_CPU_RATIO_MAX: Final = 1.25  # ours <= 1.25x the floor server's
LITELLM_STREAM_RATIO_MIN: Final = 8.0  # 20 streams: ours <= 1/8 of LiteLLM's per stream
STREAM_ADDED_P50_MAX_MS: Final = 5.0
EVENT_CPU_MAX_MS: Final = 0.1  # 100 streams: CPU per upstream event
WORKERS_THROUGHPUT_MIN: Final = 0.90  # 2 workers at 50 clients, vs direct

_COLUMNS: Final = [
    "load",
    "via",
    "ok/s",
    "of direct",
    "p50 ms",
    "added p50 ms",
    "p99 ms",
    "CPU ms/request",
    "CPU vs trio-batcher",
    "errors",
]


def _find(rows: Sequence[dict[str, Any]], load: str, via: str) -> dict[str, Any] | None:
    return next((r for r in rows if r["load"] == load and r["via"] == via), None)


def _direct(rows: Sequence[dict[str, Any]], load: str) -> dict[str, Any] | None:
    return next((r for r in rows if r["load"] == load and r["direct"]), None)


def _cpu_ratio(row: dict[str, Any] | None, base: dict[str, Any] | None) -> float | None:
    """``row``'s CPU per request over ``base``'s."""
    if row is None or base is None:
        return None
    a, b = base.get("cpu_ms_per_request"), row.get("cpu_ms_per_request")
    return None if a is None or b is None else ratio(a, b)


def _share(row: dict[str, Any] | None, direct: dict[str, Any] | None) -> float | None:
    if row is None or direct is None or row["per_s"] is None or direct["per_s"] is None:
        return None
    return ratio(direct["per_s"], row["per_s"])


def _added(row: dict[str, Any] | None, direct: dict[str, Any] | None, key: str) -> float | None:
    if row is None or direct is None:
        return None
    return delta(direct.get(key), row.get(key))


def _r(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def event_cpu_ms(rows: Sequence[dict[str, Any]], load: str) -> float | None:
    """trio-batcher's CPU per upstream event at ``load``: CPU per stream over the events
    the simulator sends per stream (counted by the direct clients)."""
    ours, direct = _find(rows, load, OURS), _direct(rows, load)
    if ours is None or direct is None or not direct.get("events_per_stream"):
        return None
    cpu = ours.get("cpu_ms_per_request")
    return None if cpu is None else cpu / direct["events_per_stream"]


def peers_summary(rows: Sequence[dict[str, Any]], *, workers: int) -> dict[str, Any]:
    """The side-by-side table (``{"columns", "rows"}``, which the report renders) and the
    ratios the targets are about."""
    table = []
    for row in rows:
        direct, ours = _direct(rows, row["load"]), _find(rows, row["load"], OURS)
        share = _share(row, direct)
        table.append(
            [
                row["load"],
                row["via"],
                row["per_s"],
                None if row["direct"] or share is None else f"{share:.0%}",
                row["p50_ms"],
                None if row["direct"] else _r(_added(row, direct, "p50_ms")),
                row["p99_ms"],
                None if row["direct"] else row["cpu_ms_per_request"],
                None if row["direct"] else _times(_cpu_ratio(row, ours)),
                row["errors"],
            ]
        )
    by_load: dict[str, Any] = {}
    for load in dict.fromkeys(r["load"] for r in rows):
        direct, ours = _direct(rows, load), _find(rows, load, OURS)
        peer, floor = _find(rows, load, LITELLM), _find(rows, load, FLOOR)
        many = _find(rows, load, f"{OURS} ×{workers} workers")
        by_load[load] = {
            "litellm_cpu_over_ours": _r(_cpu_ratio(peer, ours)),
            "ours_cpu_over_floor": _r(_cpu_ratio(ours, floor)),
            "throughput_of_direct": {
                via: _r(_share(row, direct), 3)
                for via, row in ((OURS, ours), (f"{workers} workers", many), (LITELLM, peer))
                if row is not None
            },
            "added_p50_ms": {
                via: _r(_added(row, direct, "p50_ms"))
                for via, row in ((OURS, ours), (f"{workers} workers", many), (LITELLM, peer))
                if row is not None
            },
            "upstream_cpu_ms_per_request": None if direct is None else direct["cpu_ms_per_request"],
        }
        if direct is not None and direct.get("events_per_stream"):
            by_load[load]["upstream_events_per_stream"] = direct["events_per_stream"]
            by_load[load]["ours_cpu_ms_per_upstream_event"] = _r(event_cpu_ms(rows, load), 4)
    return {"table": {"columns": _COLUMNS, "rows": table}, "by_load": by_load}


def _times(value: float | None) -> str | None:
    return None if value is None else f"{value:.2f}×"


def peers_targets(rows: Sequence[dict[str, Any]], *, workers: int) -> list[TargetResult]:
    plain, streams, many = "50 clients, non-stream", "20 streams", "100 streams"
    ours = _find(rows, plain, OURS)
    ours_streams = _find(rows, streams, OURS)
    return [
        target_result(
            "LiteLLM's CPU per request over ours, 50 clients non-stream",
            f">= {LITELLM_CPU_RATIO_MIN:g}x",
            _cpu_ratio(_find(rows, plain, LITELLM), ours),
            "x",
            lambda v: v >= LITELLM_CPU_RATIO_MIN,
        ),
        target_result(
            "our CPU per request over the floor server's, 50 clients non-stream",
            f"<= {FLOOR_CPU_RATIO_MAX:g}x",
            _cpu_ratio(ours, _find(rows, plain, FLOOR)),
            "x",
            lambda v: v <= FLOOR_CPU_RATIO_MAX,
        ),
        target_result(
            "LiteLLM's CPU per stream over ours, 20 streams",
            f">= {LITELLM_STREAM_RATIO_MIN:g}x",
            _cpu_ratio(_find(rows, streams, LITELLM), ours_streams),
            "x",
            lambda v: v >= LITELLM_STREAM_RATIO_MIN,
        ),
        target_result(
            "p50 the proxy adds over direct, 20 streams",
            f"<= {STREAM_ADDED_P50_MAX_MS:g} ms",
            _added(ours_streams, _direct(rows, streams), "p50_ms"),
            "ms",
            lambda v: v <= STREAM_ADDED_P50_MAX_MS,
        ),
        target_result(
            "our CPU per upstream event, 100 streams",
            f"<= {EVENT_CPU_MAX_MS:g} ms",
            event_cpu_ms(rows, many),
            "ms",
            lambda v: v <= EVENT_CPU_MAX_MS,
        ),
        target_result(
            f"throughput with {workers} workers vs direct, 50 clients non-stream",
            f">= {WORKERS_THROUGHPUT_MIN:.0%}",
            _pct(_share(_find(rows, plain, f"{OURS} ×{workers} workers"), _direct(rows, plain))),
            "%",
            lambda v: v >= WORKERS_THROUGHPUT_MIN * 100,
        ),
    ]


def _pct(value: float | None) -> float | None:
    return None if value is None else value * 100
