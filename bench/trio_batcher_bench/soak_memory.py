"""The proxy's memory over a soak: the RSS series, its fitted slope, and a plot-sized copy.

Pure (no I/O, no clock). The sampler records, once a second, the proxy's RSS next to the
number of requests the proxy had counted by then (``requests.total + rejected.total``
from ``/metrics``). After the warm-up, a least-squares line through (requests, RSS) gives
the growth in **bytes per request** -- the figure a leak is stated in, independent of the
request rate -- and one through (time, RSS) the growth per second. A process that does not
leak still moves (allocator arenas, caches filling, the latency window filling up), so the
target is stated over many requests: at most ``SLOPE_TARGET_BYTES`` per request over at
least ``SLOPE_MIN_REQUESTS`` (``slope_check``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, final

from .results import Check

__all__ = [
    "SLOPE_MIN_REQUESTS",
    "SLOPE_TARGET_BYTES",
    "MemorySample",
    "downsample",
    "least_squares_slope",
    "memory_summary",
    "slope_check",
]

SLOPE_TARGET_BYTES: Final = 10.0
SLOPE_MIN_REQUESTS: Final = 100_000
PLOT_POINTS: Final = 600


@final
@dataclass(frozen=True, slots=True)
class MemorySample:
    """One second of the soak: time from the start, the proxy's RSS and its gauges."""

    t: float
    rss: int
    requests: int  # requests.total + rejected.total since the start of the run
    trio_tasks: int | None
    active: int | None
    upstream_in_flight: int | None

    def row(self) -> list[Any]:
        return [
            round(self.t, 2),
            self.rss,
            self.requests,
            self.trio_tasks,
            self.active,
            self.upstream_in_flight,
        ]


COLUMNS: Final = ["t_s", "rss_bytes", "requests", "trio_tasks", "active", "upstream_in_flight"]


def least_squares_slope(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """The slope of the least-squares line through the points; ``None`` for fewer than
    two distinct ``x``."""
    n = len(xs)
    if n < 2 or n != len(ys):
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx


def downsample(rows: Sequence[list[Any]], limit: int = PLOT_POINTS) -> list[list[Any]]:
    """At most ``limit`` of ``rows``, evenly spaced, the first and last always kept."""
    if len(rows) <= limit:
        return list(rows)
    step = (len(rows) - 1) / (limit - 1)
    return [list(rows[round(i * step)]) for i in range(limit)]


def memory_summary(samples: Sequence[MemorySample], warmup_s: float) -> dict[str, Any]:
    """RSS at the start, after the warm-up and at the end, and the fitted slopes."""
    fit = [s for s in samples if s.t >= warmup_s]
    per_request = least_squares_slope([s.requests for s in fit], [s.rss for s in fit])
    per_second = least_squares_slope([s.t for s in fit], [s.rss for s in fit])
    requests_in_fit = fit[-1].requests - fit[0].requests if len(fit) >= 2 else 0
    mib = 1024 * 1024
    return {
        "samples": len(samples),
        "warmup_s": warmup_s,
        "rss_start_bytes": samples[0].rss if samples else None,
        "rss_after_warmup_bytes": fit[0].rss if fit else None,
        "rss_end_bytes": samples[-1].rss if samples else None,
        "rss_max_bytes": max((s.rss for s in samples), default=None),
        "rss_growth_after_warmup_mib": (
            round((fit[-1].rss - fit[0].rss) / mib, 3) if len(fit) >= 2 else None
        ),
        "requests_in_fit": requests_in_fit,
        "slope_bytes_per_request": None if per_request is None else round(per_request, 3),
        "slope_bytes_per_s": None if per_second is None else round(per_second, 1),
        # The fitted line's ends, for the plot: [[t, rss], [t, rss]].
        "fit_line": (
            [
                [round(fit[0].t, 2), round(_at(fit, per_request, fit[0].requests))],
                [round(fit[-1].t, 2), round(_at(fit, per_request, fit[-1].requests))],
            ]
            if per_request is not None
            else None
        ),
        "target_bytes_per_request": SLOPE_TARGET_BYTES,
        "target_min_requests": SLOPE_MIN_REQUESTS,
    }


def _at(fit: Sequence[MemorySample], slope: float, requests: float) -> float:
    """The fitted line's RSS at ``requests`` (it passes through the means)."""
    mx = sum(s.requests for s in fit) / len(fit)
    my = sum(s.rss for s in fit) / len(fit)
    return my + slope * (requests - mx)


def slope_check(memory: Mapping[str, Any]) -> Check:
    slope, count = memory["slope_bytes_per_request"], memory["requests_in_fit"]
    return Check(
        f"soak: RSS slope after warm-up <= {SLOPE_TARGET_BYTES:g} bytes/request "
        f"over >= {SLOPE_MIN_REQUESTS:,} requests",
        slope is not None and slope <= SLOPE_TARGET_BYTES and count >= SLOPE_MIN_REQUESTS,
        f"<= {SLOPE_TARGET_BYTES:g} over >= {SLOPE_MIN_REQUESTS:,}",
        f"{slope} over {count:,}",
    )
