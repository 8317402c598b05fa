"""The figures the registry hands out: what exporters and the snapshot read.

Kept apart from the registry (``metrics``) so that those readers (``snapshot``,
``prometheus``) depend on these plain records, not on the registry that fills them: the
registry builds its snapshot with ``snapshot``, and nothing here imports either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import final

from .gc_pauses import GcStatistics
from .latency import HistogramCounts
from .models import ModelStatistics
from .surfaces import SurfaceStatistics
from .tenants import TenantStatistics
from .upstreams import RoutingStatistics, UpstreamStatistics

__all__ = ["Gauges", "MetricsStatistics"]


@final
@dataclass(frozen=True, slots=True)
class Gauges:
    """Instantaneous concurrency, read from the admission layer when a snapshot is taken."""

    active: int
    waiting: int
    upstream_in_flight: int
    upstream_cap: int | None
    # Tasks alive in the process's trio run (``trio.lowlevel.current_statistics``): back to
    # its idle baseline after any traffic, or something was left running.
    trio_tasks: int | None = None
    # The garbage collector's pauses so far (``gc_pauses``).
    gc: GcStatistics | None = None
    # Requests waiting for admission now, by priority lane (``lanes``).
    lanes_waiting: Mapping[str, int] | None = None


@final
@dataclass(frozen=True)
class MetricsStatistics:
    """A consistent copy of every all-time counter; what exporters read.

    ``histograms`` is keyed ``request`` (total duration), ``ttft``, ``queue``, ``upstream``.
    Token totals cover all traffic, priced or not; ``unpriced_*`` is the part of them whose
    model has no price, and ``cost_usd`` covers only the priced part.
    """

    requests: Mapping[tuple[str, str], int]  # (model, status) -> count
    success: int
    errors: int
    streamed: int
    by_model: Mapping[str, ModelStatistics]
    input_tokens: int
    output_tokens: int
    cache_read: int
    cache_write: int
    cost_usd: Decimal
    unpriced_requests: int
    unpriced_input_tokens: int
    unpriced_output_tokens: int
    unpriced_cache_read: int
    unpriced_cache_write: int
    rejected: Mapping[str, int]
    windows: Mapping[str, int]
    windowed_requests: int
    histograms: Mapping[str, HistogramCounts]
    started_at: float  # Unix time
    by_surface: Mapping[str, SurfaceStatistics] = field(default_factory=dict)
    by_tenant: Mapping[str, TenantStatistics] = field(default_factory=dict)
    by_upstream: Mapping[str, UpstreamStatistics] = field(default_factory=dict)
    routing: RoutingStatistics = field(
        default_factory=lambda: RoutingStatistics({}, {}, {}, {}, 0, 0)
    )
