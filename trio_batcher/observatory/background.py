"""Background responses in the observatory: ``/metrics`` ``background`` and Prometheus.

The runner (``edge.background``) counts here as each response moves: accepted (queued),
started (its queue wait sampled), finished by status, or refused because the queue was
full. The gauges (queued, running) are the runner's own live counts. Queue waits are a
window of the last ``window`` samples, from which p50 / p95 are exact nearest-rank
percentiles, as the registry's latency windows are. Everything is counted whether or not
metrics are on (a few integers); it is only served when they are.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any, Final, final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .latency import percentile

__all__ = ["FINAL_STATUSES", "BackgroundCollector", "BackgroundStats"]

FINAL_STATUSES: Final = ("completed", "incomplete", "failed", "cancelled")
_PREFIX: Final = "trio_batcher_background_"


@final
class BackgroundStats:
    """Counters of one process's background responses."""

    def __init__(self, window: int = 1000) -> None:
        self.queued = 0
        self.running = 0
        self.accepted = 0
        self.rejected = 0
        self.finished: dict[str, int] = dict.fromkeys(FINAL_STATUSES, 0)
        self._waits: deque[float] = deque(maxlen=max(1, window))

    def record_accepted(self) -> None:
        self.accepted += 1
        self.queued += 1

    def record_started(self, waited: float) -> None:
        self.queued -= 1
        self.running += 1
        self._waits.append(max(0.0, waited))

    def record_finished(self, status: str, *, started: bool) -> None:
        if started:
            self.running -= 1
        else:  # cancelled or shut down while still queued
            self.queued -= 1
        if status in self.finished:
            self.finished[status] += 1

    def record_rejected(self) -> None:
        self.rejected += 1

    def queue_wait_s(self) -> dict[str, float | int | None]:
        waits = sorted(self._waits)
        if not waits:
            return {"p50": None, "p95": None, "sample_count": 0}
        return {
            "p50": round(percentile(waits, 50), 6),
            "p95": round(percentile(waits, 95), 6),
            "sample_count": len(waits),
        }

    def snapshot(self) -> dict[str, Any]:
        """The ``background`` section of ``GET /metrics`` (docs/metrics.md)."""
        return {
            "queued": self.queued,
            "running": self.running,
            "accepted": self.accepted,
            "rejected": self.rejected,
            **self.finished,
            "queue_wait_s": self.queue_wait_s(),
        }


@final
class BackgroundCollector(Collector):
    """The same figures as Prometheus families."""

    def __init__(self, stats: BackgroundStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        stats = self._stats
        now = GaugeMetricFamily(
            _PREFIX + "responses",
            "Background responses of this process now, by state (queued, running).",
            labels=["state"],
        )
        now.add_metric(["queued"], stats.queued)
        now.add_metric(["running"], stats.running)
        yield now
        done = CounterMetricFamily(
            _PREFIX + "finished",
            "Background responses finished, by final status.",
            labels=["status"],
        )
        for status, count in stats.finished.items():
            done.add_metric([status], count)
        yield done
        yield CounterMetricFamily(
            _PREFIX + "rejected",
            "Background responses refused with a 429 because the queue was full.",
            value=stats.rejected,
        )
        wait = GaugeMetricFamily(
            _PREFIX + "queue_wait_seconds",
            "Recent background responses' wait before running, by quantile (0.5, 0.95).",
            labels=["quantile"],
        )
        summary = stats.queue_wait_s()
        for label, key in (("0.5", "p50"), ("0.95", "p95")):
            value = summary[key]
            if value is not None:
                wait.add_metric([label], float(value))
        yield wait
