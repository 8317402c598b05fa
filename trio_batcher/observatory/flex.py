"""What the flex window did (``service_tier: "flex"`` through Message Batches), counted.

The flex path's own counters, apart from the registry's request totals: how many flex
requests joined a window, how many Message Batches they made and how full each was, how
long each request waited for its answer, how the waits that ran out were resolved (by
``FLEX_ON_TIMEOUT`` policy), the results nobody was waiting for any more, and the money:
what the answered requests cost at the batch price, beside what the same tokens would have
cost realtime -- the difference is the saving. A flex request is also in the registry's
``requests``, tokens and cost (at the batch price, outside the latency samples, as Batch
API results are: its time is the batch's queue, not the realtime path's), so ``flex`` is a
view of a subset, never extra spend.

Memory is bounded: the waits keep the last ``window`` samples, every other figure is a
counter whose labels come from the code. A ``threading.Lock`` guards each change and each
read, as in the registry.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any, Final, final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .latency import percentile
from .pricing import PriceTable, TokenUsage

__all__ = ["FLEX_OUTCOMES", "FLEX_POLICIES", "FlexCollector", "FlexTotals"]

FLEX_POLICIES: Final = ("realtime", "error")
"""``FLEX_ON_TIMEOUT``'s values: what a wait that ran out became."""

FLEX_OUTCOMES: Final = ("succeeded", "errored", "expired", "canceled", "unavailable", "shutdown")
"""How a flex request's batch answered it; ``unavailable``: the batch could not be made,
polled or read (answered by the ``FLEX_ON_TIMEOUT`` policy, as a wait that ran out);
``shutdown``: the gateway's grace period ended first (503)."""

_FLUSH_REASONS: Final = ("size", "time", "bytes", "drain")
_PREFIX: Final = "trio_batcher_flex_"


@final
class FlexTotals:
    """The flex counters of one app (``MetricsRegistry.flex``)."""

    def __init__(self, window: int, pricing: PriceTable) -> None:
        self._pricing = pricing
        self._lock = threading.Lock()
        self._waits: deque[float] = deque(maxlen=max(1, window))
        self.requests = 0
        self.rejected_full = 0
        self.left_before_flush = 0
        self.batches = 0
        self.batched_requests = 0
        self.largest_batch = 0
        self.flushes: dict[str, int] = dict.fromkeys(_FLUSH_REASONS, 0)
        self.batches_canceled = 0
        self.outcomes: dict[str, int] = dict.fromkeys(FLEX_OUTCOMES, 0)
        self.timeouts: dict[str, int] = dict.fromkeys(FLEX_POLICIES, 0)
        self.dropped_results = 0
        self.cost_usd = Decimal(0)
        self.realtime_cost_usd = Decimal(0)
        self.dropped_cost_usd = Decimal(0)

    # -- recording --------------------------------------------------------------------------

    def joined(self) -> None:
        """A flex request joined a window."""
        with self._lock:
            self.requests += 1

    def refused(self) -> None:
        """A flex request found ``FLEX_MAX_PENDING`` requests waiting: 429."""
        with self._lock:
            self.rejected_full += 1

    def left(self) -> None:
        """A request left its window before it was flushed: nothing was sent for it."""
        with self._lock:
            self.left_before_flush += 1

    def flushed(self, size: int, reason: str) -> None:
        """A window of ``size`` requests was submitted as one Message Batch."""
        with self._lock:
            self.batches += 1
            self.batched_requests += size
            self.largest_batch = max(self.largest_batch, size)
            self.flushes[reason] = self.flushes.get(reason, 0) + 1

    def canceled(self) -> None:
        """A submitted batch was cancelled upstream: every request in it had gone."""
        with self._lock:
            self.batches_canceled += 1

    def answered(
        self,
        outcome: str,
        waited: float,
        model: str | None = None,
        usage: Mapping[str, Any] | None = None,
        price_factor: Decimal = Decimal(1),
        upstream: str | None = None,
    ) -> None:
        """A waiting request got its batch's answer after ``waited`` seconds; a succeeded
        one's ``usage`` costs ``price_factor`` of the realtime price, which is counted too."""
        with self._lock:
            self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
            self._waits.append(waited)
            if model is not None and usage:
                full = self._pricing.cost(model, TokenUsage.from_anthropic(usage), upstream)
                if full is not None:
                    self.realtime_cost_usd += full
                    self.cost_usd += full * price_factor

    def timed_out(self, policy: str, waited: float) -> None:
        """A wait reached ``FLEX_MAX_WAIT_S`` (or its batch failed) and ``policy`` applied."""
        with self._lock:
            self.timeouts[policy] = self.timeouts.get(policy, 0) + 1
            self._waits.append(waited)

    def dropped(
        self,
        model: str | None = None,
        usage: Mapping[str, Any] | None = None,
        price_factor: Decimal = Decimal(1),
    ) -> None:
        """A result came for a request that had gone (its client left, or its wait ran
        out): Message Batches cannot cancel one request, so it was processed and billed."""
        with self._lock:
            self.dropped_results += 1
            if model is not None and usage:
                full = self._pricing.cost(model, TokenUsage.from_anthropic(usage))
                if full is not None:
                    self.dropped_cost_usd += full * price_factor

    # -- reading ----------------------------------------------------------------------------

    def snapshot(self, pending: int = 0) -> dict[str, Any]:
        """The ``flex`` block of ``GET /metrics`` (docs/metrics.md)."""
        with self._lock:
            waits = sorted(self._waits)
            doc: dict[str, Any] = {
                "requests": self.requests,
                "pending": pending,
                "rejected_full": self.rejected_full,
                "left_before_flush": self.left_before_flush,
                "batches": {
                    "submitted": self.batches,
                    "by_reason": dict(self.flushes),
                    "mean_size": round(self.batched_requests / self.batches, 3)
                    if self.batches
                    else None,
                    "max_size": self.largest_batch,
                    "canceled": self.batches_canceled,
                },
                "outcomes": dict(self.outcomes),
                "timeouts": dict(self.timeouts),
                "dropped_results": self.dropped_results,
                "wait": {
                    "p50_ms": _ms(waits, 50),
                    "p95_ms": _ms(waits, 95),
                    "max_ms": _ms(waits, 100),
                    "sample_count": len(waits),
                },
                "cost": {
                    "batch_usd": float(self.cost_usd),
                    "realtime_usd": float(self.realtime_cost_usd),
                    "saved_usd": float(self.realtime_cost_usd - self.cost_usd),
                    "dropped_usd": float(self.dropped_cost_usd),
                },
            }
        return doc

    def wait_quantiles(self) -> dict[str, float]:
        with self._lock:
            waits = sorted(self._waits)
        if not waits:
            return {}
        return {"0.5": percentile(waits, 50), "0.95": percentile(waits, 95)}


def _ms(values: list[float], p: float) -> float | None:
    return round(percentile(values, p) * 1000, 3) if values else None


@final
class FlexCollector(Collector):
    """``FlexTotals`` in Prometheus' format (the ``trio_batcher_flex_*`` families)."""

    def __init__(self, totals: FlexTotals) -> None:
        self._totals = totals

    def collect(self) -> Iterator[Metric]:
        snap = self._totals.snapshot()
        quantiles = self._totals.wait_quantiles()
        yield CounterMetricFamily(
            _PREFIX + "requests",
            "Requests with service_tier flex that joined a flex window.",
            value=snap["requests"],
        )
        yield CounterMetricFamily(
            _PREFIX + "rejected_full",
            "Flex requests refused (429) because FLEX_MAX_PENDING were already waiting.",
            value=snap["rejected_full"],
        )
        batches = CounterMetricFamily(
            _PREFIX + "batches",
            "Flex windows submitted as one Message Batch, by why they flushed.",
            labels=["reason"],
        )
        for reason, count in snap["batches"]["by_reason"].items():
            batches.add_metric([reason], count)
        yield batches
        yield CounterMetricFamily(
            _PREFIX + "batched_requests",
            "Requests in the submitted flex batches (divided by batches: the mean size).",
            value=self._totals.batched_requests,
        )
        yield GaugeMetricFamily(
            _PREFIX + "batch_size_max",
            "The largest flex batch submitted so far.",
            value=snap["batches"]["max_size"],
        )
        outcomes = CounterMetricFamily(
            _PREFIX + "results",
            "Flex requests answered by their batch, by result.",
            labels=["outcome"],
        )
        for outcome, count in snap["outcomes"].items():
            outcomes.add_metric([outcome], count)
        yield outcomes
        timeouts = CounterMetricFamily(
            _PREFIX + "timeouts",
            "Flex waits that reached FLEX_MAX_WAIT_S, by the FLEX_ON_TIMEOUT policy applied.",
            labels=["policy"],
        )
        for policy, count in snap["timeouts"].items():
            timeouts.add_metric([policy], count)
        yield timeouts
        yield CounterMetricFamily(
            _PREFIX + "dropped_results",
            "Batch results for requests that had gone (client left or wait ran out).",
            value=snap["dropped_results"],
        )
        wait = GaugeMetricFamily(
            _PREFIX + "wait_seconds",
            "Recent flex waits, join to answer: nearest-rank quantiles.",
            labels=["quantile"],
        )
        for q, value in quantiles.items():
            wait.add_metric([q], value)
        yield wait
        cost = CounterMetricFamily(
            _PREFIX + "cost_usd",
            "Flex spend: 'batch' what was paid (batch price), 'realtime' what the same "
            "tokens cost realtime; the difference is the saving.",
            labels=["price"],
        )
        cost.add_metric(["batch"], snap["cost"]["batch_usd"])
        cost.add_metric(["realtime"], snap["cost"]["realtime_usd"])
        yield cost
