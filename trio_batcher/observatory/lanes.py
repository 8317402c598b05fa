"""The priority lanes in the observatory: per lane, what was admitted and shed, how long
requests waited, and who waits now (the ``lanes`` block of ``/metrics``).

Lanes (``admission.lanes``) exist to keep interactive requests' waits short while
deferrable work queues, so the figure that shows whether they work is each lane's *queue
wait* -- arrival to the start of the upstream call, the admission gate and the upstream
cap's token together (a request's ``Timing.queue``) -- side by side: an interactive p95 near
zero while the deferrable one grows is the lanes doing their job; both growing alike is a
saturated gateway with lanes off (``LANES_ENABLED=0``) or nothing deferrable. The lane is
the one a request was queued in, so with lanes off every request counts as interactive.

Recorded by the pipeline under the registry's lock (``MetricsRegistry.record_lane_*``);
names come from the code (two lanes), so memory is two counters, two histograms and two
windows of ``window`` samples.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, final

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from .latency import Histogram, HistogramCounts, percentile_ms

__all__ = ["LANE_NAMES", "LaneBook", "LaneStatistics", "lane_families", "lanes_document"]

LANE_NAMES: Final = ("interactive", "deferrable")
_PREFIX: Final = "trio_batcher_"


@final
@dataclass(frozen=True, slots=True)
class LaneStatistics:
    """One lane's all-time counters: admitted through the gate, shed by reason, and the
    queue waits of its finished requests."""

    admitted: int
    shed: Mapping[str, int]
    wait: HistogramCounts


@final
class LaneBook:
    """Counters and recent queue waits per lane; the registry holds the lock."""

    def __init__(self, window: int) -> None:
        self._admitted = dict.fromkeys(LANE_NAMES, 0)
        self._shed: dict[str, dict[str, int]] = {lane: {} for lane in LANE_NAMES}
        self._histograms = {lane: Histogram() for lane in LANE_NAMES}
        self._samples: dict[str, deque[float]] = {lane: deque(maxlen=window) for lane in LANE_NAMES}

    def admitted(self, lane: str) -> None:
        self._admitted[lane] += 1

    def shed(self, lane: str, reason: str) -> None:
        shed = self._shed[lane]
        shed[reason] = shed.get(reason, 0) + 1

    def waited(self, lane: str, seconds: float) -> None:
        self._histograms[lane].observe(seconds)
        self._samples[lane].append(seconds)

    def statistics(self) -> dict[str, LaneStatistics]:
        return {
            lane: LaneStatistics(
                self._admitted[lane], dict(self._shed[lane]), self._histograms[lane].counts()
            )
            for lane in LANE_NAMES
        }

    def samples(self) -> dict[str, list[float]]:
        return {lane: list(values) for lane, values in self._samples.items()}


def lanes_document(
    stats: Mapping[str, LaneStatistics],
    samples: Mapping[str, list[float]],
    waiting: Mapping[str, int] | None,
) -> dict[str, Any]:
    """The ``lanes`` block of ``GET /metrics`` (docs/metrics.md)."""
    document: dict[str, Any] = {}
    for lane in LANE_NAMES:
        entry = stats[lane]
        values = sorted(samples[lane])
        document[lane] = {
            "admitted": entry.admitted,
            "shed": sum(entry.shed.values()),
            "shed_by_reason": dict(sorted(entry.shed.items())),
            "waiting": None if waiting is None else waiting.get(lane, 0),
            "queue_wait_ms": {
                "p50": percentile_ms(values, 50),
                "p95": percentile_ms(values, 95),
                "sample_count": len(values),
            },
        }
    return document


def lane_families(
    stats: Mapping[str, LaneStatistics], waiting: Mapping[str, int] | None
) -> Iterator[Metric]:
    """``trio_batcher_lane_*``: the same figures, labelled by ``lane``."""
    admitted = CounterMetricFamily(
        _PREFIX + "lane_admitted",
        "Requests admitted through the gate, by priority lane.",
        labels=["lane"],
    )
    shed = CounterMetricFamily(
        _PREFIX + "lane_shed",
        "Requests shed by the gate, by priority lane and reason.",
        labels=["lane", "reason"],
    )
    wait = HistogramMetricFamily(
        _PREFIX + "lane_queue_wait_seconds",
        "Time before the upstream call started (gate and upstream cap), by priority lane.",
        labels=["lane"],
    )
    for lane in LANE_NAMES:
        entry = stats[lane]
        admitted.add_metric([lane], entry.admitted)
        for reason, count in sorted(entry.shed.items()):
            shed.add_metric([lane, reason], count)
        counts = entry.wait
        bounds = [repr(float(bound)) for bound in counts.bounds] + ["+Inf"]
        wait.add_metric(
            [lane], list(zip(bounds, map(float, counts.cumulative), strict=True)), counts.sum
        )
    yield admitted
    yield shed
    yield wait
    if waiting is not None:
        gauge = GaugeMetricFamily(
            _PREFIX + "lane_waiting",
            "Requests waiting for admission now, by priority lane.",
            labels=["lane"],
        )
        for lane in LANE_NAMES:
            gauge.add_metric([lane], waiting.get(lane, 0))
        yield gauge
