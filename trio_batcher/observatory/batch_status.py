"""Batches by status, for ``/metrics`` (``batches.by_status``) and Prometheus
(``trio_batcher_batches{status}``).

The counts live in the batch store, which is SQLite behind a worker thread, and Prometheus
collectors are synchronous. So the metrics routes ``refresh`` the gauge (one ``GROUP BY``
over the status index) just before they answer, and the collector reads what was refreshed.
Every OpenAI status is always listed, zeros included, so a dashboard's series never
disappears. A store that fails leaves the section out rather than failing the scrape.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Final, final, get_args

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..translation.openai_batch import OpenAIBatchStatus

__all__ = ["BATCH_STATUSES", "BatchStatusCollector", "BatchStatusGauge"]

log = logging.getLogger("trio_batcher")

BATCH_STATUSES: Final[tuple[str, ...]] = get_args(OpenAIBatchStatus)
_NAME: Final = "trio_batcher_batches"


@final
class BatchStatusGauge:
    """The latest counts of ``counts_fn`` (the store's ``status_counts``)."""

    def __init__(self, counts_fn: Callable[[], Awaitable[dict[str, int]]]) -> None:
        self._counts_fn = counts_fn
        self.latest: dict[str, int] | None = None

    async def refresh(self) -> dict[str, Any] | None:
        """Read the counts again; the ``/metrics`` section (None if the store failed)."""
        try:
            counts = await self._counts_fn()
        except Exception as exc:
            log.warning("batch counts unavailable for the metrics: %s", exc)
            self.latest = None
            return None
        self.latest = {status: counts.get(status, 0) for status in BATCH_STATUSES}
        return {"by_status": dict(self.latest)}


@final
class BatchStatusCollector(Collector):
    def __init__(self, gauge: BatchStatusGauge) -> None:
        self._gauge = gauge

    def collect(self) -> Iterator[Metric]:
        latest = self._gauge.latest
        if latest is None:
            return
        family = GaugeMetricFamily(
            _NAME, "OpenAI Batch API batches stored, by status.", labels=["status"]
        )
        for status, count in latest.items():
            family.add_metric([status], count)
        yield family
