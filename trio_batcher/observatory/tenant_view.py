"""What one tenant may see of the observatory: its own figures, and nothing counted over
anyone else's requests.

Theory of operation
-------------------
A gateway with client keys serves ``/metrics`` and ``/metrics/prometheus`` to two kinds of
reader: the operator, with ``METRICS_TOKEN``, who sees the whole registry; and a tenant,
with one of its own keys, who sees only its own entry (``by_tenant[<its name>]``). The
tenant view leaves out *every* gateway-wide figure, not only the other tenants' entries:
a total minus the tenant's own is the sum of the others (``requests``, ``tokens``,
``cost``, ``rejected``, ``by_model``, ``by_surface``), and the live gauges
(``concurrency``, the garbage collector, ``upstream``, ``cluster``, ``batches``) count the
other tenants' requests as they run. What stays is what was counted over the tenant's own
requests, the price table's provenance, and when the registry started.

The JSON keeps the shape of the whole view for the sections it has (``requests``,
``latency``, ``tokens``, ``cost``, ``rejected``, ``timing``), filled from the tenant's
entry, so a dashboard or script written for one reads the other; ``"view": "tenant"``
and ``"tenant"`` say which it is, and the absent sections are absent, never zero. The
Prometheus text (``PrometheusExporter.render_tenant``) is the ``trio_batcher_tenant_*``
families with the one ``tenant`` label value, and ``trio_batcher_start_time_seconds``.

The registry copies the one entry under its lock (``MetricsRegistry.tenant_statistics``);
shaping it happens here, outside the lock, as for the whole snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from .pricing import PriceTable
from .tenants import TenantStatistics, tenant_snapshot

__all__ = ["tenant_document"]


def tenant_document(
    name: str,
    stats: TenantStatistics,
    samples: Mapping[str, list[float]],
    *,
    window: int,
    pricing: PriceTable,
    started_at: float,
    uptime: float,
) -> dict[str, Any]:
    """The JSON ``GET /metrics`` answers a tenant's key with; docs/metrics.md has it."""
    entry = tenant_snapshot(stats, samples)
    timing = entry["timing"]
    total = timing["total_ms"]
    tokens = entry["tokens"]
    return {
        "view": "tenant",
        "tenant": name,
        "requests": entry["requests"],
        "latency": {
            "p50_ms": total["p50"],
            "p95_ms": total["p95"],
            "p99_ms": total["p99"],
            "max_ms": total["max"],
            "sample_count": total["sample_count"],
            "window": window,
        },
        "tokens": {**tokens, "total": sum(tokens.values())},
        "cost": {
            "estimated_cost_usd": entry["estimated_cost_usd"],
            "estimate_complete": entry["estimate_complete"],
            "unpriced": {"requests": entry["unpriced_requests"]},
            "pricing_source": pricing.source,
            "pricing_as_of": pricing.as_of,
        },
        "rejected": entry["shed"],
        "timing": {part: value for part, value in timing.items() if part != "total_ms"},
        "by_tenant": {name: entry},
        "started_at": datetime.fromtimestamp(started_at, UTC).isoformat(timespec="milliseconds"),
        "uptime_s": round(uptime, 3),
    }
