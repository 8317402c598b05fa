"""The observatory per tenant: who spends what, and who gets shed.

Theory of operation
-------------------
The pipeline tells the registry which tenant a request was (``tenant=`` on
``record_success`` / ``record_error`` / ``record_rejected``); this module keeps each tenant's
totals: requests by status, requests shed by reason, tokens, estimated cost, and the whole
timing split (total, queue, upstream TTFB, TTFT, upstream, overhead) as all-time histograms
and as percentiles over the registry's recent window. A tenant's finished requests are a
:class:`~.surfaces.SurfaceTotals`, the same counter each front door has, so the two
breakdowns cannot drift apart in what they count.

The names are bounded, because they become JSON keys and Prometheus label values. Only a
name in the configured set (``known_tenants()``, which the app points at the tenants file's
names and may change on reload) gets an entry of its own, and at most ``max_tenants`` do;
any other string, and a request with no tenant (``None``), is counted in the one shared
``(other)`` entry. A name keeps its entry once it has one, even after a reload drops it from
the configuration: its counters are all-time, like every other counter here, and only the
configuration (never a client) can add names. Each entry holds ``window`` samples per timing
part, so memory is at most ``(max_tenants + 1) * 6 * window`` samples.

The observatory sees tenant *names* only, never keys: a key is resolved to its tenant before
anything is recorded.

The registry calls every method under its own lock; nothing here locks. ``known_tenants`` is
called under that lock, only when a name has no entry yet, so it must be cheap and must not
call back into the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final, final

from .latency import Timing
from .pricing import TokenUsage
from .surfaces import SurfaceStatistics, SurfaceTotals, surface_snapshot

__all__ = [
    "OTHER_TENANTS",
    "TENANT_PARTS",
    "KnownTenants",
    "TenantBook",
    "TenantStatistics",
    "no_tenants",
    "tenant_snapshot",
]

OTHER_TENANTS: Final = "(other)"
# Every part of ``Timing``: a tenant's latency is the question "why is team B slow?".
TENANT_PARTS: Final = ("total", "queue", "upstream_ttfb", "ttft", "upstream", "overhead")

KnownTenants = Callable[[], Collection[str]]


def no_tenants() -> Collection[str]:
    """The default configured set: empty, so every request is ``(other)``."""
    return ()


@final
@dataclass(frozen=True, slots=True)
class TenantStatistics:
    """All-time counters of one tenant: its finished requests, and those shed before work."""

    finished: SurfaceStatistics  # histograms keyed by TENANT_PARTS
    rejected: Mapping[str, int]  # reason -> count


@final
class _TenantTotals:
    __slots__ = ("finished", "rejected")

    def __init__(self, window: int) -> None:
        self.finished = SurfaceTotals(window, TENANT_PARTS)
        self.rejected: dict[str, int] = {}

    def statistics(self) -> TenantStatistics:
        return TenantStatistics(self.finished.statistics(), dict(self.rejected))


@final
class TenantBook:
    """The per-tenant entries, bounded as the module docstring says.

    Args:
      window: recent samples each entry keeps per timing part.
      known_tenants: the configured tenant names, asked when a name has no entry yet.
      max_tenants: names with an entry of their own; later ones share ``(other)``.
    """

    def __init__(self, window: int, *, known_tenants: KnownTenants, max_tenants: int) -> None:
        self._window = window
        self.known_tenants = known_tenants
        self._max_tenants = max(0, max_tenants)
        self._named = 0  # entries of their own, (other) aside
        self._entries: dict[str, _TenantTotals] = {}

    def _entry(self, tenant: str | None) -> _TenantTotals:
        name = OTHER_TENANTS
        if tenant is not None and tenant != OTHER_TENANTS:
            entry = self._entries.get(tenant)
            if entry is not None:
                return entry
            if self._named < self._max_tenants and tenant in self.known_tenants():
                self._named += 1
                name = tenant
        entry = self._entries.get(name)
        if entry is None:
            entry = self._entries[name] = _TenantTotals(self._window)
        return entry

    def record(
        self,
        tenant: str | None,
        status: str,
        timing: Timing,
        *,
        stream: bool,
        tokens: TokenUsage | None = None,
        cost: Decimal | None = None,
    ) -> None:
        """Count one finished request (``cost`` None: unpriced, or no usage)."""
        self._entry(tenant).finished.record(status, timing, stream=stream, tokens=tokens, cost=cost)

    def record_offline(
        self, tenant: str | None, requests: int, tokens: TokenUsage, cost: Decimal | None
    ) -> None:
        """Count ``requests`` a batch of ``tenant``'s answered: no latency sample."""
        self._entry(tenant).finished.record_offline(requests, tokens, cost)

    def record_rejected(self, tenant: str | None, reason: str) -> None:
        rejected = self._entry(tenant).rejected
        rejected[reason] = rejected.get(reason, 0) + 1

    def statistics(self) -> dict[str, TenantStatistics]:
        return {name: entry.statistics() for name, entry in self._entries.items()}

    def one(self, tenant: str) -> tuple[TenantStatistics, dict[str, list[float]]]:
        """One tenant's counters and samples, zero when it has no entry (yet): what its own
        view of the metrics shows. Never creates an entry, and never answers for
        ``(other)``'s under another name."""
        entry = self._entries.get(tenant) if tenant != OTHER_TENANTS else None
        if entry is None:
            entry = _TenantTotals(self._window)
        return entry.statistics(), entry.finished.samples()

    def samples(self) -> dict[str, dict[str, list[float]]]:
        return {name: entry.finished.samples() for name, entry in self._entries.items()}


def tenant_snapshot(stats: TenantStatistics, samples: Mapping[str, list[float]]) -> dict[str, Any]:
    """One tenant's entry in ``GET /metrics`` (``by_tenant``); docs/metrics.md has the fields.

    The shape of a ``by_surface`` entry (requests, tokens, cost, timing: samples sorted
    there), plus ``shed`` and whether the cost covers every request.
    """
    document = surface_snapshot(stats.finished, samples)
    document["estimate_complete"] = stats.finished.unpriced_requests == 0
    document["unpriced_requests"] = stats.finished.unpriced_requests
    document["shed"] = {
        "total": sum(stats.rejected.values()),
        "by_reason": dict(sorted(stats.rejected.items())),
    }
    return document
