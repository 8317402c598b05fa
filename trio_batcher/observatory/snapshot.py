"""The JSON document ``GET /metrics`` serves, built from a consistent copy of the counters.

Kept apart from the registry so that recording stays small: the registry copies its state
under its lock and returns; sorting samples and shaping the document happen here, outside
it, so a recorder never waits on a snapshot. docs/metrics.md describes every field.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from .latency import percentile_ms, summary_ms
from .pricing import PriceTable
from .statistics import Gauges, MetricsStatistics
from .surfaces import surface_snapshot
from .tenants import tenant_snapshot
from .upstreams import routing_snapshot, upstream_snapshot

__all__ = ["snapshot_document"]


def snapshot_document(
    stats: MetricsStatistics,
    samples: dict[str, list[float]],
    surface_samples: Mapping[str, Mapping[str, list[float]]],
    tenant_samples: Mapping[str, Mapping[str, list[float]]],
    upstream_samples: Mapping[str, Mapping[str, list[float]]],
    *,
    window: int,
    uptime: float,
    pricing: PriceTable,
    gauges: Gauges | None,
) -> dict[str, Any]:
    # Sorting happens outside the lock: recording never waits on a snapshot's sort.
    for values in samples.values():
        values.sort()
    total = samples["total"]

    by_status: dict[str, int] = {}
    for (_, status), count in stats.requests.items():
        by_status[status] = by_status.get(status, 0) + count
    windows_flushed = sum(stats.windows.values())
    return {
        "requests": {
            "total": stats.success + stats.errors,
            "success": stats.success,
            "error": stats.errors,
            "stream": stats.streamed,
            "by_status": dict(sorted(by_status.items())),
        },
        "latency": {
            "p50_ms": percentile_ms(total, 50),
            "p95_ms": percentile_ms(total, 95),
            "p99_ms": percentile_ms(total, 99),
            "max_ms": percentile_ms(total, 100),
            "sample_count": len(total),
            "window": window,
        },
        "tokens": {
            "input": stats.input_tokens,
            "output": stats.output_tokens,
            "cache_read": stats.cache_read,
            "cache_write": stats.cache_write,
            "total": stats.input_tokens
            + stats.output_tokens
            + stats.cache_read
            + stats.cache_write,
        },
        "cost": {
            "estimated_cost_usd": float(stats.cost_usd),
            "estimate_complete": stats.unpriced_requests == 0,
            "unpriced": {
                "requests": stats.unpriced_requests,
                "input_tokens": stats.unpriced_input_tokens,
                "output_tokens": stats.unpriced_output_tokens,
                "cache_read_tokens": stats.unpriced_cache_read,
                "cache_write_tokens": stats.unpriced_cache_write,
            },
            "by_model": {
                name: float(m.cost_usd) for name, m in stats.by_model.items() if m.cost_usd
            },
            "pricing_source": pricing.source,
            "pricing_as_of": pricing.as_of,
        },
        "rejected": {
            "total": sum(stats.rejected.values()),
            "by_reason": dict(sorted(stats.rejected.items())),
        },
        "concurrency": {
            "active": None if gauges is None else gauges.active,
            "waiting": None if gauges is None else gauges.waiting,
            "upstream_in_flight": None if gauges is None else gauges.upstream_in_flight,
            "upstream_cap": None if gauges is None else gauges.upstream_cap,
            "trio_tasks": None if gauges is None else gauges.trio_tasks,
        },
        "gc": None if gauges is None or gauges.gc is None else gauges.gc.to_json(),
        "windows": {
            "flushed": windows_flushed,
            "by_reason": dict(stats.windows),
            "mean_size": (
                round(stats.windowed_requests / windows_flushed, 3) if windows_flushed else None
            ),
        },
        "by_model": {
            name: {
                "requests": m.requests,
                "errors": m.errors,
                "input_tokens": m.input_tokens,
                "output_tokens": m.output_tokens,
                "cache_read": m.cache_read,
                "cache_write": m.cache_write,
                "cost_usd": float(m.cost_usd),
                "priced": m.priced,
            }
            for name, m in stats.by_model.items()
        },
        "timing": {
            f"{name}_ms": summary_ms(samples[name])
            for name in ("queue", "upstream_ttfb", "ttft", "upstream", "overhead")
        },
        "by_surface": {
            name: surface_snapshot(stats.by_surface[name], surface_samples[name])
            for name in sorted(stats.by_surface)
        },
        "by_tenant": {
            name: tenant_snapshot(stats.by_tenant[name], tenant_samples[name])
            for name in sorted(stats.by_tenant)
        },
        "by_upstream": {
            name: upstream_snapshot(
                stats.by_upstream[name],
                upstream_samples[name],
                window=window,
                own_prices=pricing.has_own_prices(name),
            )
            for name in sorted(stats.by_upstream)
        },
        "routing": routing_snapshot(stats.routing),
        "started_at": datetime.fromtimestamp(stats.started_at, UTC).isoformat(
            timespec="milliseconds"
        ),
        "uptime_s": round(uptime, 3),
    }
