"""The observatory per surface: each front door (``openai.chat``, ``anthropic.messages``,
``anthropic.count_tokens``...) counted apart, beside the all-time totals.

One pipeline serves every door, so the totals answer "how is the gateway doing"; these
answer "how is each kind of client doing": requests by status, tokens (cache reads and
writes too), the estimated cost, and the timing split (queue, upstream, overhead), as
all-time histograms and as percentiles over the same recent window the totals use.

Memory is bounded: surfaces are named by the code (one per door), never by a client, and
each keeps ``window`` recent samples per timing part.

``SurfaceTotals`` is the observatory's one "requests of a kind" counter: the per-tenant
breakdown (``tenants``) keeps one per tenant, with more timing parts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final, final

from .latency import Histogram, HistogramCounts, Timing, summary_ms
from .pricing import TokenUsage

__all__ = ["PARTS", "SurfaceStatistics", "SurfaceTotals", "surface_snapshot"]

# The timing parts kept per surface, each as a histogram and a window of samples; each is
# the name of a ``Timing`` attribute.
PARTS: Final = ("total", "queue", "upstream", "overhead")


@final
@dataclass(frozen=True, slots=True)
class SurfaceStatistics:
    """All-time counters of one surface."""

    requests: Mapping[str, int]  # status -> count
    errors: int
    streamed: int
    input_tokens: int
    output_tokens: int
    cache_read: int
    cache_write: int
    cost_usd: Decimal
    histograms: Mapping[str, HistogramCounts]  # part -> histogram, in the parts' order
    # requests whose usage had no price (their tokens are counted, their cost is not)
    unpriced_requests: int = 0


@final
class SurfaceTotals:
    """One surface's counters; the registry calls ``record`` under its own lock.

    Args:
      window: recent samples kept per timing part.
      parts: the timing parts kept, each a ``Timing`` attribute name.
    """

    __slots__ = (
        "_cost",
        "_errors",
        "_histograms",
        "_parts",
        "_requests",
        "_samples",
        "_streamed",
        "_tokens",
        "_unpriced",
    )

    def __init__(self, window: int, parts: tuple[str, ...] = PARTS) -> None:
        self._parts = parts
        self._requests: dict[str, int] = {}
        self._errors = self._streamed = self._unpriced = 0
        self._tokens = [0, 0, 0, 0]  # input, output, cache read, cache write
        self._cost = Decimal(0)
        self._histograms = {part: Histogram() for part in parts}
        self._samples: dict[str, deque[float]] = {part: deque(maxlen=window) for part in parts}

    def record(
        self,
        status: str,
        timing: Timing,
        *,
        stream: bool,
        tokens: TokenUsage | None = None,
        cost: Decimal | None = None,
    ) -> None:
        self._requests[status] = self._requests.get(status, 0) + 1
        if status != "200":
            self._errors += 1
        if stream:
            self._streamed += 1
        if tokens is not None:
            counts = self._tokens
            counts[0] += tokens.input
            counts[1] += tokens.output
            counts[2] += tokens.cache_read
            counts[3] += tokens.cache_write
            if cost is None:
                self._unpriced += 1
        if cost is not None:
            self._cost += cost
        for part in self._parts:
            value: float | None = getattr(timing, part)
            if value is not None:
                self._histograms[part].observe(value)
                self._samples[part].append(value)

    def record_offline(self, requests: int, tokens: TokenUsage, cost: Decimal | None) -> None:
        """Count ``requests`` answered through a Message Batch: counts, tokens and cost,
        and no latency sample (see ``MetricsRegistry.record_offline``)."""
        self._requests["200"] = self._requests.get("200", 0) + requests
        counts = self._tokens
        counts[0] += tokens.input
        counts[1] += tokens.output
        counts[2] += tokens.cache_read
        counts[3] += tokens.cache_write
        if cost is None:
            self._unpriced += requests
        else:
            self._cost += cost

    def statistics(self) -> SurfaceStatistics:
        tokens = self._tokens
        return SurfaceStatistics(
            requests=dict(self._requests),
            errors=self._errors,
            streamed=self._streamed,
            input_tokens=tokens[0],
            output_tokens=tokens[1],
            cache_read=tokens[2],
            cache_write=tokens[3],
            cost_usd=self._cost,
            histograms={part: h.counts() for part, h in self._histograms.items()},
            unpriced_requests=self._unpriced,
        )

    def samples(self) -> dict[str, list[float]]:
        return {part: list(values) for part, values in self._samples.items()}


def surface_snapshot(
    stats: SurfaceStatistics, samples: Mapping[str, list[float]]
) -> dict[str, Any]:
    """One surface's entry in ``GET /metrics`` (``by_surface``); samples sorted here.

    ``timing`` has one ``<part>_ms`` summary per part ``samples`` holds, in its order.
    """
    total = sum(stats.requests.values())
    return {
        "requests": {
            "total": total,
            "success": stats.requests.get("200", 0),
            "error": stats.errors,
            "stream": stats.streamed,
            "by_status": dict(sorted(stats.requests.items())),
        },
        "tokens": {
            "input": stats.input_tokens,
            "output": stats.output_tokens,
            "cache_read": stats.cache_read,
            "cache_write": stats.cache_write,
        },
        "estimated_cost_usd": float(stats.cost_usd),
        "timing": {f"{part}_ms": summary_ms(sorted(values)) for part, values in samples.items()},
    }
