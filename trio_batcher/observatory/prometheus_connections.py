"""The upstream pool's connection counters in Prometheus' format.

Apart from the registry's families because they are read off the pool
(``upstream.pool.UpstreamPool``), not recorded per request: how many connections were
opened, and how many requests the pool sent again because the reused connection provably
never carried them. Resends that may have reached the upstream are the retry policy's and
count in ``upstream_retries``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import final

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from .prometheus_breakdown import PREFIX

__all__ = ["ConnectionsCollector"]


@final
class ConnectionsCollector(Collector):
    """``counts_fn`` returns (connections opened, requests resent unsent)."""

    def __init__(self, counts_fn: Callable[[], tuple[int, int]]) -> None:
        self._counts_fn = counts_fn

    def collect(self) -> Iterator[Metric]:
        opened, resent = self._counts_fn()
        yield CounterMetricFamily(
            PREFIX + "upstream_connections_opened",
            "Connections opened to the upstream (keep-alive reuse keeps this low).",
            value=opened,
        )
        yield CounterMetricFamily(
            PREFIX + "upstream_resent_unsent",
            "Requests sent again on a new connection because the reused one was found "
            "closed before any byte of them went out (never billed twice).",
            value=resent,
        )
