"""The shared-state gauges for Prometheus: this instance's view of the cluster.

Every instance exports its own, labelled ``instance`` (its cluster id), so a dashboard can
show each one's mode and the cluster's load side by side; the request metrics stay per
instance and are summed across instances in Prometheus.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, final

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["ClusterCollector"]

PREFIX = "trio_batcher_cluster_"

# (JSON key in the ``cluster`` block, metric name, kind, help)
_FAMILIES = (
    ("instances_alive", "instances_alive", "gauge", "Instances alive at the last heartbeat."),
    ("cap", "upstream_cap", "gauge", "The upstream cap shared by every instance."),
    (
        "cap_in_force",
        "upstream_cap_in_force",
        "gauge",
        "The cap the last lease round trip granted against (the shared adaptive limit if lower).",
    ),
    (
        "in_flight_seen",
        "upstream_in_flight",
        "gauge",
        "The cluster's upstream calls as the instances last reported them (lease syncs).",
    ),
    ("held_here", "slots_held", "gauge", "Upstream slots this instance holds."),
    (
        "block_here",
        "slots_block",
        "gauge",
        "Slots of the cap leased to this instance as its block (granted from locally).",
    ),
    (
        "lease_syncs",
        "lease_syncs",
        "counter",
        "Syncs of this instance's block with Redis (renewals, growth, giving back).",
    ),
    ("waiting_here", "slots_waiting", "gauge", "Jobs of this instance waiting for a slot."),
    ("fallbacks", "fallbacks", "counter", "Times this instance fell back to local limits."),
    ("leases_lost", "leases_lost", "counter", "Leases found expired while their call ran."),
    (
        "cooldowns_published",
        "cooldowns_published",
        "counter",
        "Cooldowns this instance told the others of.",
    ),
)


@final
class ClusterCollector(Collector):
    def __init__(self, cluster_fn: Callable[[], Mapping[str, Any] | None]) -> None:
        self._cluster_fn = cluster_fn

    def collect(self) -> Iterator[Metric]:
        cluster = self._cluster_fn()
        if cluster is None:
            return
        instance = [str(cluster["instance"])]
        shared = GaugeMetricFamily(
            PREFIX + "shared",
            "1 while shared state answers, 0 while this instance uses its fallback share.",
            labels=["instance"],
        )
        shared.add_metric(instance, 1 if cluster["mode"] == "shared" else 0)
        yield shared
        for key, name, kind, doc in _FAMILIES:
            value = cluster.get(key)
            if value is None:
                continue
            family: GaugeMetricFamily | CounterMetricFamily
            if kind == "counter":
                family = CounterMetricFamily(PREFIX + name, doc, labels=["instance"])
            else:
                family = GaugeMetricFamily(PREFIX + name, doc, labels=["instance"])
            family.add_metric(instance, value)
            yield family
        redis = cluster.get("redis")
        if redis:
            yield from _redis_families(instance, redis)


def _redis_families(instance: list[str], redis: Mapping[str, Any]) -> Iterator[Metric]:
    """Round trips as gauges of recent percentiles (seconds), and the command counters."""
    round_trip = GaugeMetricFamily(
        PREFIX + "redis_round_trip_seconds",
        "Round trip of this instance's recent Redis commands, by quantile.",
        labels=["instance", "quantile"],
    )
    for key, quantile in (("p50", "0.5"), ("p99", "0.99")):
        if redis.get(key) is not None:
            round_trip.add_metric([*instance, quantile], redis[key] / 1000)
    yield round_trip
    for key, doc in (
        ("commands", "Redis commands this instance sent."),
        ("failures", "Redis commands that failed or timed out."),
    ):
        family = CounterMetricFamily(PREFIX + "redis_" + key, doc, labels=["instance"])
        family.add_metric(instance, redis[key])
        yield family
