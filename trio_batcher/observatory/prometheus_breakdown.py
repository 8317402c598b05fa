"""The Prometheus families of the observatory's breakdowns: per front door and per tenant.

Both are built the same way from a ``SurfaceStatistics`` per label value (requests by
status, tokens by kind, cost, and a histogram per timing part), under their own metric
names and label (``trio_batcher_surface_*{surface}``, ``trio_batcher_tenant_*{tenant}``).
The label values are bounded where they are recorded: surfaces by the code, tenants by the
tenants configuration (``observatory.tenants``), so no client string becomes a label here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Final

from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric

from .latency import HistogramCounts
from .surfaces import SurfaceStatistics
from .tenants import TenantStatistics

__all__ = ["PREFIX", "breakdown_families", "buckets", "surface_families", "tenant_families"]

PREFIX: Final = "trio_batcher_"


def buckets(counts: HistogramCounts) -> list[tuple[str, float]]:
    """A histogram's cumulative buckets as ``HistogramMetricFamily.add_metric`` takes them."""
    bounds = [repr(float(bound)) for bound in counts.bounds] + ["+Inf"]
    return list(zip(bounds, map(float, counts.cumulative), strict=True))


def breakdown_families(
    label: str,
    entries: Mapping[str, SurfaceStatistics],
    docs: Mapping[str, str],
    stem: str | None = None,
) -> Iterator[Metric]:
    """``<stem>_requests``, ``_tokens``, ``_cost_usd`` and ``_duration_seconds`` by
    ``label`` (``stem``: ``label`` unless its names are taken, as ``upstream_*`` are)."""
    name = PREFIX + (label if stem is None else stem) + "_"
    requests = CounterMetricFamily(name + "requests", docs["requests"], labels=[label, "status"])
    tokens = CounterMetricFamily(name + "tokens", docs["tokens"], labels=[label, "kind"])
    cost = CounterMetricFamily(name + "cost_usd", docs["cost"], labels=[label])
    duration = HistogramMetricFamily(
        name + "duration_seconds", docs["duration"], labels=[label, "part"]
    )
    for value, entry in sorted(entries.items()):
        for status, count in sorted(entry.requests.items()):
            requests.add_metric([value, status], count)
        for kind, count in (
            ("input", entry.input_tokens),
            ("output", entry.output_tokens),
            ("cache_read", entry.cache_read),
            ("cache_write", entry.cache_write),
        ):
            tokens.add_metric([value, kind], count)
        cost.add_metric([value], float(entry.cost_usd))
        for part, counts in entry.histograms.items():
            duration.add_metric([value, part], buckets(counts), counts.sum)
    yield requests
    yield tokens
    yield cost
    yield duration


_SURFACE_DOCS: Final = {
    "requests": "Requests by front door (openai.chat, anthropic.messages, ...) and HTTP status; "
    "count_tokens calls are counted here only.",
    "tokens": "Tokens reported by the upstream, by front door and kind.",
    "cost": "Estimated spend in USD by front door (priced models only).",
    "duration": "Where each request's time went, by front door and part (total, queue, "
    "upstream, overhead).",
}

_TENANT_DOCS: Final = {
    "requests": "Requests answered, by tenant and HTTP status (shed requests are in "
    "tenant_rejected); tenant is a configured name or (other).",
    "tokens": "Tokens reported by the upstream, by tenant and kind.",
    "cost": "Estimated spend in USD by tenant (priced models only).",
    "duration": "Where each request's time went, by tenant and part (total, queue, "
    "upstream_ttfb, ttft, upstream, overhead).",
}


def surface_families(by_surface: Mapping[str, SurfaceStatistics]) -> Iterator[Metric]:
    """Each front door apart: requests, tokens, cost and the timing split per surface."""
    yield from breakdown_families("surface", by_surface, _SURFACE_DOCS)


def tenant_families(by_tenant: Mapping[str, TenantStatistics]) -> Iterator[Metric]:
    """Each tenant apart: the surface families' four, plus shedding and unpriced usage."""
    yield from breakdown_families(
        "tenant", {name: entry.finished for name, entry in by_tenant.items()}, _TENANT_DOCS
    )
    rejected = CounterMetricFamily(
        PREFIX + "tenant_rejected",
        "Requests shed before any work, by tenant and reason (queue_full, "
        "tenant_queue_full, rate_limited, insufficient_quota, ...).",
        labels=["tenant", "reason"],
    )
    unpriced = CounterMetricFamily(
        PREFIX + "tenant_unpriced_requests",
        "Requests of the tenant whose usage had no price; nonzero means its cost is incomplete.",
        labels=["tenant"],
    )
    for tenant, entry in sorted(by_tenant.items()):
        for reason, count in sorted(entry.rejected.items()):
            rejected.add_metric([tenant, reason], count)
        unpriced.add_metric([tenant], entry.finished.unpriced_requests)
    yield rejected
    yield unpriced
