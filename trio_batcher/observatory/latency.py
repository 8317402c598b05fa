"""Latency bookkeeping shared by the observatory: one request's timing split, all-time
histograms with fixed buckets, and nearest-rank percentiles over recent samples."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, final

__all__ = [
    "LATENCY_BUCKETS",
    "Histogram",
    "HistogramCounts",
    "Timing",
    "percentile",
    "percentile_ms",
    "summary_ms",
]

# Seconds. LLM calls run from tens of milliseconds (a cached short reply, an early error) to
# minutes (long generations), so the buckets span four orders of magnitude.
LATENCY_BUCKETS: Final[tuple[float, ...]] = (
    0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
)  # fmt: skip


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of an ascending, non-empty sequence.

    The rank is ``round(p / 100 * (n - 1))`` clamped into ``[0, n - 1]``, with Python's
    round (ties go to the even rank), so p100 is the maximum, p0 the minimum, a single
    sample is every percentile, and the answer is always an observed sample, never an
    interpolation.
    """
    n = len(sorted_values)
    rank = round(p / 100.0 * (n - 1))
    return sorted_values[max(0, min(n - 1, rank))]


@final
@dataclass(frozen=True, slots=True)
class Timing:
    """Where one request's time went, in seconds (None where a part did not happen).

    ``total`` is what the client experienced, admission wait included. ``queue`` is the
    time before our upstream call started (gate wait plus window wait). ``upstream`` runs
    from the call's start to its last byte, ``upstream_ttfb`` to its response headers;
    ``ttft`` (streams) runs from the request's arrival to the first token sent.
    """

    total: float
    queue: float = 0.0
    upstream_ttfb: float | None = None
    ttft: float | None = None
    upstream: float | None = None

    @property
    def overhead(self) -> float:
        """The proxy's own time: total minus queue minus upstream, never negative."""
        upstream = 0.0 if self.upstream is None else self.upstream
        return max(0.0, self.total - self.queue - upstream)

    def server_timing_header(self) -> str:
        """A ``Server-Timing`` header value, milliseconds, listing only the parts that apply.

        Order: queue, upstream, ttfb, ttft, overhead, total; e.g.
        ``queue;dur=1.2, upstream;dur=40.1, overhead;dur=0.4, total;dur=41.7``.
        """
        parts = [("queue", self.queue)]
        if self.upstream is not None:
            parts.append(("upstream", self.upstream))
        if self.upstream_ttfb is not None:
            parts.append(("ttfb", self.upstream_ttfb))
        if self.ttft is not None:
            parts.append(("ttft", self.ttft))
        parts += [("overhead", self.overhead), ("total", self.total)]
        return ", ".join(f"{name};dur={_header_ms(seconds)}" for name, seconds in parts)


def _header_ms(seconds: float) -> str:
    text = f"{seconds * 1000.0:.3f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


@final
@dataclass(frozen=True, slots=True)
class HistogramCounts:
    """An all-time latency histogram: cumulative counts per upper bound, then +Inf."""

    bounds: tuple[float, ...]
    cumulative: tuple[int, ...]  # len(bounds) + 1; the last is the +Inf bucket == count
    sum: float
    count: int


class Histogram:
    """An all-time histogram over ``LATENCY_BUCKETS``; ``counts()`` freezes it."""

    __slots__ = ("_counts", "_sum")

    def __init__(self) -> None:
        self._counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self._sum = 0.0

    def observe(self, seconds: float) -> None:
        # bisect_left puts a value equal to a bound in that bound's bucket: Prometheus' "le".
        self._counts[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self._sum += seconds

    def counts(self) -> HistogramCounts:
        running, cumulative = 0, []
        for count in self._counts:
            running += count
            cumulative.append(running)
        return HistogramCounts(LATENCY_BUCKETS, tuple(cumulative), self._sum, running)


def percentile_ms(sorted_seconds: Sequence[float], p: float) -> float | None:
    if not sorted_seconds:
        return None
    value = percentile(sorted_seconds, p) * 1000.0
    return round(value, 3) if math.isfinite(value) else None


def summary_ms(sorted_seconds: Sequence[float]) -> dict[str, float | int | None]:
    return {
        "p50": percentile_ms(sorted_seconds, 50),
        "p95": percentile_ms(sorted_seconds, 95),
        "p99": percentile_ms(sorted_seconds, 99),
        "max": percentile_ms(sorted_seconds, 100),
        "sample_count": len(sorted_seconds),
    }
