"""The Prometheus families of the per-upstream breakdown and of the routing events.

Per upstream, the breakdown families every other breakdown has (requests by status, tokens
by kind, cost, a histogram per timing part) under the label ``upstream``, plus attempts by
outcome. Their stem is ``routed_`` (``trio_batcher_routed_requests_total{upstream}``), not
``upstream_``: the ``upstream_*`` names already belong to the resilience counters
(``upstream_attempts_total``, ``upstream_duration_seconds``...), which count every upstream
together, and a family cannot have two label sets. Then failovers and spills by cause and
by path, and continuing turns by whether they kept their upstream. Label values are
bounded where they are recorded (``observatory.upstreams``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Final

from prometheus_client.metrics_core import CounterMetricFamily, Metric

from .prometheus_breakdown import PREFIX, breakdown_families
from .upstreams import RoutingStatistics, UpstreamStatistics

__all__ = ["routing_families", "upstream_families"]

_UPSTREAM_DOCS: Final = {
    "requests": "Requests finished by the upstream that served them (the last one tried), "
    "by HTTP status; requests refused before routing are in none.",
    "tokens": "Tokens reported by the upstream, by upstream and kind (cache_read: prompt "
    "cache hits, which stay on the upstream that wrote them).",
    "cost": "Estimated spend in USD by upstream, at the upstream's own prices where the "
    "price table gives them (priced models only).",
    "duration": "Where each request's time went, by upstream and part (total, queue, "
    "upstream_ttfb, ttft, upstream, overhead).",
}


def upstream_families(by_upstream: Mapping[str, UpstreamStatistics]) -> Iterator[Metric]:
    """Each upstream apart: the breakdown families, unpriced requests, attempts by outcome."""
    yield from breakdown_families(
        "upstream",
        {name: entry.finished for name, entry in by_upstream.items()},
        _UPSTREAM_DOCS,
        stem="routed",
    )
    unpriced = CounterMetricFamily(
        PREFIX + "routed_unpriced_requests",
        "Requests the upstream served whose usage had no price; nonzero means its cost is "
        "incomplete.",
        labels=["upstream"],
    )
    attempts = CounterMetricFamily(
        PREFIX + "routed_attempts",
        "Attempts on each upstream by outcome (ok, or the failure signal: overloaded, "
        "rate_limited, server_error, connect_error, timeout, client_error, ...).",
        labels=["upstream", "outcome"],
    )
    for name, entry in sorted(by_upstream.items()):
        unpriced.add_metric([name], entry.finished.unpriced_requests)
        for outcome, count in sorted(entry.attempts.items()):
            attempts.add_metric([name, outcome], count)
    yield unpriced
    yield attempts


def routing_families(routing: RoutingStatistics) -> Iterator[Metric]:
    """Failovers and spills (by cause, and by path), and affinity kept or moved."""
    for noun, by_cause, paths, source, source_doc, doc in (
        (
            "failover",
            routing.failovers_by_cause,
            routing.failovers,
            "from_upstream",
            "the upstream that failed",
            "Requests moved to another upstream after a failure before the first byte, by "
            "the failure signal.",
        ),
        (
            "spill",
            routing.spills_by_cause,
            routing.spills,
            "preferred",
            "the upstream that was preferred",
            "Requests another upstream took because the preferred one (the conversation's "
            "own, or the weighted pick) was full or cooling down, by cause.",
        ),
    ):
        causes = CounterMetricFamily(PREFIX + noun + "s", doc, labels=["cause"])
        for cause, count in sorted(by_cause.items()):
            causes.add_metric([cause], count)
        yield causes
        routes = CounterMetricFamily(
            PREFIX + noun + "_paths",
            f"The {noun}s of {PREFIX}{noun}s_total by {source_doc} and the one that took them.",
            labels=[source, "to_upstream"],
        )
        for (left, took), count in sorted(paths.items()):
            routes.add_metric([left, took], count)
        yield routes
    affinity = CounterMetricFamily(
        PREFIX + "affinity_turns",
        "Turns of continuing conversations: sent back to the upstream that served them, "
        'where their prompt cache is (kept="true"), or moved to another (kept="false").',
        labels=["kept"],
    )
    affinity.add_metric(["true"], routing.affinity_kept)
    affinity.add_metric(["false"], routing.affinity_moved)
    yield affinity
