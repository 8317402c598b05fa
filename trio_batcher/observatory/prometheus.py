"""The Prometheus view of the observatory: the registry's counters in exposition format.

Nothing here counts anything. One custom collector reads
:meth:`MetricsRegistry.statistics` (and the live gauges) at scrape time, so the text served
at ``/metrics/prometheus`` and the JSON at ``/metrics`` are two renderings of the same
numbers. Each exporter owns a private ``CollectorRegistry``: two app instances in one
process (tests do this) never share or clash over series, and the process-global default
registry stays untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, choose_encoder
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from ..upstream.resilience import ResilienceStatistics
from .flex import FlexCollector
from .gc_pauses import GcStatistics
from .lanes import lane_families
from .metrics import Gauges, MetricsRegistry
from .prometheus_breakdown import PREFIX, buckets, surface_families, tenant_families
from .prometheus_cluster import ClusterCollector
from .prometheus_upstreams import routing_families, upstream_families

__all__ = ["PrometheusExporter"]

# registry key -> (metric name, help)
_HISTOGRAMS = (
    (
        "request",
        "request_duration_seconds",
        "End-to-end request duration as the client saw it, admission wait included.",
    ),
    ("ttft", "ttft_seconds", "Streams: time from request arrival to the first token sent."),
    (
        "queue",
        "queue_wait_seconds",
        "Time before the upstream call started (admission gate plus window wait).",
    ),
    ("upstream", "upstream_duration_seconds", "Upstream call duration, start to last byte."),
)


class _RegistryCollector:
    """Renders one MetricsRegistry (and the gauges) each time it is collected."""

    def __init__(
        self,
        registry: MetricsRegistry,
        gauges_fn: Callable[[], Gauges],
        upstream_fn: Callable[[], ResilienceStatistics] | None,
    ) -> None:
        self._registry = registry
        self._gauges_fn = gauges_fn
        self._upstream_fn = upstream_fn

    def collect(self) -> Iterator[Metric]:
        stats = self._registry.statistics()

        requests = CounterMetricFamily(
            PREFIX + "requests",
            "Requests answered, by model and HTTP status (shed requests are not counted here).",
            labels=["model", "status"],
        )
        for (model, status), count in sorted(stats.requests.items()):
            requests.add_metric([model, status], count)
        yield requests

        streamed = CounterMetricFamily(
            PREFIX + "streamed_requests", "Requests answered as a stream (a subset of requests)."
        )
        streamed.add_metric([], stats.streamed)
        yield streamed

        tokens = CounterMetricFamily(
            PREFIX + "tokens",
            "Tokens reported by the upstream, by model and kind; input is uncached input.",
            labels=["model", "kind"],
        )
        cost = CounterMetricFamily(
            PREFIX + "cost_usd",
            "Estimated spend in USD from the price table; unpriced models contribute nothing.",
            labels=["model"],
        )
        for model, m in sorted(stats.by_model.items()):
            # Error-only models have no usage to report, unless a stream broke after some.
            used = m.input_tokens or m.output_tokens or m.cache_read or m.cache_write
            if m.requests > m.errors or used:
                for kind, value in (
                    ("input", m.input_tokens),
                    ("output", m.output_tokens),
                    ("cache_read", m.cache_read),
                    ("cache_write", m.cache_write),
                ):
                    tokens.add_metric([model, kind], value)
            if m.priced or m.cost_usd:
                cost.add_metric([model], float(m.cost_usd))
        yield tokens
        yield cost

        unpriced = CounterMetricFamily(
            PREFIX + "unpriced_requests",
            "Requests that used tokens of a model with no price (successes, and streams that "
            "broke after usage); nonzero means cost is incomplete.",
        )
        unpriced.add_metric([], stats.unpriced_requests)
        yield unpriced

        rejected = CounterMetricFamily(
            PREFIX + "rejected",
            "Requests shed before any work, by reason (outside requests_total and latency).",
            labels=["reason"],
        )
        for reason, count in sorted(stats.rejected.items()):
            rejected.add_metric([reason], count)
        yield rejected

        windows = CounterMetricFamily(
            PREFIX + "windows_flushed",
            "Admission windows flushed, by what flushed them.",
            labels=["reason"],
        )
        for reason, count in sorted(stats.windows.items()):
            windows.add_metric([reason], count)
        yield windows

        windowed = CounterMetricFamily(
            PREFIX + "windowed_requests",
            "Requests released by flushed windows; divided by windows_flushed, the mean size.",
        )
        windowed.add_metric([], stats.windowed_requests)
        yield windowed

        for key, name, doc in _HISTOGRAMS:
            histogram = HistogramMetricFamily(PREFIX + name, doc)
            counts = stats.histograms[key]
            histogram.add_metric([], buckets(counts), counts.sum)
            yield histogram

        gauges = self._gauges_fn()
        for name, doc, value in (
            ("inflight_requests", "Requests being handled now.", gauges.active),
            ("waiting_requests", "Requests waiting for admission.", gauges.waiting),
            ("upstream_inflight", "Upstream calls in flight.", gauges.upstream_in_flight),
        ):
            yield GaugeMetricFamily(PREFIX + name, doc, value=value)
        if gauges.trio_tasks is not None:
            yield GaugeMetricFamily(
                PREFIX + "trio_tasks",
                "Tasks alive in the process's trio run; back to its idle baseline after traffic.",
                value=gauges.trio_tasks,
            )
        if gauges.gc is not None:
            yield from _gc_families(gauges.gc)
        if gauges.upstream_cap is not None:
            yield GaugeMetricFamily(
                PREFIX + "upstream_concurrency_cap",
                "Current cap on concurrent upstream calls.",
                value=gauges.upstream_cap,
            )

        if self._upstream_fn is not None:
            yield from _upstream_families(self._upstream_fn())

        yield from surface_families(stats.by_surface)
        yield from tenant_families(stats.by_tenant)
        yield from upstream_families(stats.by_upstream)
        yield from routing_families(stats.routing)
        yield from lane_families(self._registry.lane_statistics(), gauges.lanes_waiting)

        yield _start_time(stats.started_at)


def _upstream_families(stats: ResilienceStatistics) -> Iterator[Metric]:
    """Retries, failures and cooldowns: what an alert on retry amplification needs."""
    for name, doc, value in (
        (
            "upstream_attempts",
            "Upstream calls started, retries included; over requests_total, the retry "
            "amplification the upstream sees.",
            stats.attempts,
        ),
        ("upstream_retries", "Upstream attempts that were retries.", stats.retries),
        (
            "upstream_cooldowns_opened",
            "Times a 429/529 retry-after or an exhausted rate limit held new upstream calls.",
            stats.cooldowns_opened,
        ),
        (
            "upstream_ratelimit_holds",
            "Holds caused by anthropic-ratelimit-*-remaining reaching 0.",
            stats.ratelimit_holds,
        ),
    ):
        yield CounterMetricFamily(PREFIX + name, doc, value=value)
    denied = CounterMetricFamily(
        PREFIX + "upstream_retries_denied",
        "Retryable upstream failures not retried, by why (budget spent, deadline too near).",
        labels=["reason"],
    )
    denied.add_metric(["budget"], stats.retries_denied_by_budget)
    denied.add_metric(["deadline"], stats.retries_denied_by_deadline)
    yield denied
    failures = CounterMetricFamily(
        PREFIX + "upstream_failures",
        "Failed upstream attempts, retried or not, by kind (rate_limited, overloaded, ...).",
        labels=["signal"],
    )
    for signal, count in sorted(stats.failures_by_signal.items()):
        failures.add_metric([signal], count)
    yield failures
    yield GaugeMetricFamily(
        PREFIX + "upstream_cooldown_remaining_seconds",
        "How long the longest open upstream cooldown still holds new calls.",
        value=stats.cooldown_remaining,
    )


class PrometheusExporter:
    """Serves one MetricsRegistry in Prometheus' text format from a private registry.

    Args:
      registry: the metrics to expose.
      gauges_fn: returns the current concurrency gauges; called once per scrape.
      upstream_fn: returns the resilience counters (retries, cooldowns), if there are any.
      cluster_fn: returns the ``cluster`` block of ``/metrics`` (shared state), or None.
    """

    def __init__(
        self,
        registry: MetricsRegistry,
        gauges_fn: Callable[[], Gauges],
        upstream_fn: Callable[[], ResilienceStatistics] | None = None,
        cluster_fn: Callable[[], Mapping[str, Any] | None] | None = None,
    ) -> None:
        self._registry = registry
        self.collector_registry = CollectorRegistry(auto_describe=False)
        self.collector_registry.register(_RegistryCollector(registry, gauges_fn, upstream_fn))
        self.collector_registry.register(FlexCollector(registry.flex))
        if cluster_fn is not None:
            self.collector_registry.register(ClusterCollector(cluster_fn))

    def render_tenant(self, tenant: str, accept: str | None = None) -> tuple[bytes, str]:
        """A tenant's own scrape (``render``'s return): its ``trio_batcher_tenant_*``
        families and the start time, nothing counted over other tenants' requests
        (``observatory.tenant_view``). A throwaway registry per scrape: this exporter's own
        holds the gateway-wide collectors (the cluster's, the batches'), which a tenant may
        not read."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_TenantCollector(self._registry, tenant))
        return _render(registry, accept)

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """Return ``(body, content_type)`` for a scrape.

        Without ``accept`` this is the classic text format (version 0.0.4), which every
        Prometheus reads. Pass the request's ``Accept`` header to let a scraper that asks
        for OpenMetrics get it.
        """
        return _render(self.collector_registry, accept)


def _render(registry: CollectorRegistry, accept: str | None) -> tuple[bytes, str]:
    if accept is None:
        return generate_latest(registry), CONTENT_TYPE_PLAIN_0_0_4
    encoder, content_type = choose_encoder(accept)
    return encoder(registry), content_type


class _TenantCollector:
    """One tenant's families, read from the registry when collected."""

    def __init__(self, registry: MetricsRegistry, tenant: str) -> None:
        self._registry = registry
        self._tenant = tenant

    def collect(self) -> Iterator[Metric]:
        yield from tenant_families({self._tenant: self._registry.tenant_statistics(self._tenant)})
        yield _start_time(self._registry.started_at)


def _start_time(started_at: float) -> Metric:
    return GaugeMetricFamily(
        PREFIX + "start_time_seconds",
        "When this registry started, Unix time; a change means the counters reset.",
        value=started_at,
    )


def _gc_families(stats: GcStatistics) -> Iterator[Metric]:
    collections = CounterMetricFamily(
        PREFIX + "gc_collections",
        "Garbage collections run, by generation (automatic and the periodic full one).",
        labels=["generation"],
    )
    paused = CounterMetricFamily(
        PREFIX + "gc_pause_seconds",
        "Time the process stopped for garbage collections, by generation.",
        labels=["generation"],
    )
    longest = GaugeMetricFamily(
        PREFIX + "gc_pause_max_seconds",
        "The longest garbage-collection pause so far, by generation.",
        labels=["generation"],
    )
    for g, count in enumerate(stats.collections):
        collections.add_metric([str(g)], count)
        paused.add_metric([str(g)], stats.pause_s_total[g])
        longest.add_metric([str(g)], stats.pause_s_max[g])
    yield collections
    yield paused
    yield longest
