"""The observatory per upstream: which deployment served what, and how requests moved.

Theory of operation
-------------------
With several upstreams (``UPSTREAMS_FILE``; without it, the one named ``default``) the
router sends each request to one of them. The pipeline tells the registry which one
answered (``upstream=`` on ``record_success`` / ``record_error``), each attempt and its
outcome (``record_attempt``), and each routing event: a failover after a failure before the
first byte, a spill from a full or cooling preferred upstream, and whether a continuing
conversation's turn kept its upstream (its prompt cache lives there). This module keeps:

* per upstream, the requests it finished as a :class:`~.surfaces.SurfaceTotals` (requests by
  status, tokens with cache reads and writes, cost at *that upstream's* price, every timing
  part as histograms and recent windows), plus its attempts by outcome;
* :class:`RoutingTotals`: failovers and spills by cause and by path (from -> to), and the
  affinity of continuing turns (kept or moved).

A request refused before routing (``upstream=None``) is in no upstream's entry, so
``by_upstream`` adds up to the requests that reached one, not to ``requests``.

Names are bounded, since they become JSON keys and Prometheus label values. They come from
the configuration, never from a client; still, only a name in ``known_upstreams()`` (when
the registry is given one) gets an entry of its own, and at most ``max_upstreams`` do; any
other is counted under ``(other)``, in the entries and in the routing paths alike. Each entry
keeps ``window`` samples per timing part: at most ``(max_upstreams + 1) * 6 * window``.

The registry calls everything here under its own lock; nothing here locks.
``known_upstreams`` is called under that lock, only when a name has no entry yet.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final, final

from .latency import Timing, percentile_ms, summary_ms
from .pricing import TokenUsage
from .surfaces import SurfaceStatistics, SurfaceTotals

__all__ = [
    "MAX_UPSTREAMS",
    "OTHER_UPSTREAMS",
    "UPSTREAM_PARTS",
    "KnownUpstreams",
    "RoutingStatistics",
    "RoutingTotals",
    "UpstreamBook",
    "UpstreamStatistics",
    "routing_snapshot",
    "upstream_snapshot",
]

OTHER_UPSTREAMS: Final = "(other)"
MAX_UPSTREAMS: Final = 64
# Every part of ``Timing``: "is bedrock-east slower to first byte than anthropic-main?"
UPSTREAM_PARTS: Final = ("total", "queue", "upstream_ttfb", "ttft", "upstream", "overhead")

KnownUpstreams = Callable[[], Iterable[str]]


@final
@dataclass(frozen=True, slots=True)
class UpstreamStatistics:
    """All-time counters of one upstream: the requests it finished, and its attempts."""

    finished: SurfaceStatistics  # histograms keyed by UPSTREAM_PARTS
    attempts: Mapping[str, int]  # outcome ("ok", or the failure signal) -> count


@final
@dataclass(frozen=True, slots=True)
class RoutingStatistics:
    """All-time routing events: failovers, spills, and the affinity of continuing turns."""

    failovers_by_cause: Mapping[str, int]
    failovers: Mapping[tuple[str, str], int]  # (from, to) -> count
    spills_by_cause: Mapping[str, int]
    spills: Mapping[tuple[str, str], int]  # (preferred, to) -> count
    affinity_kept: int
    affinity_moved: int


@final
class _UpstreamTotals:
    __slots__ = ("attempts", "finished")

    def __init__(self, window: int) -> None:
        self.finished = SurfaceTotals(window, UPSTREAM_PARTS)
        self.attempts: dict[str, int] = {}

    def statistics(self) -> UpstreamStatistics:
        return UpstreamStatistics(self.finished.statistics(), dict(self.attempts))


@final
class UpstreamBook:
    """The per-upstream entries, bounded as the module docstring says.

    Args:
      window: recent samples each entry keeps per timing part.
      known_upstreams: the configured names, asked when a name has no entry yet; None
        accepts any name (still at most ``max_upstreams``).
      max_upstreams: names with an entry of their own; later ones share ``(other)``.
    """

    def __init__(
        self,
        window: int,
        *,
        known_upstreams: KnownUpstreams | None,
        max_upstreams: int = MAX_UPSTREAMS,
    ) -> None:
        self._window = window
        self.known_upstreams = known_upstreams
        self._max_upstreams = max(0, max_upstreams)
        self._named = 0  # entries of their own, (other) aside
        self._entries: dict[str, _UpstreamTotals] = {}

    def name(self, upstream: str) -> str:
        """The name ``upstream`` is counted under (creating its entry when first used)."""
        if upstream in self._entries:
            return upstream
        name = OTHER_UPSTREAMS
        if (
            upstream != OTHER_UPSTREAMS
            and self._named < self._max_upstreams
            and (self.known_upstreams is None or upstream in self.known_upstreams())
        ):
            self._named += 1
            name = upstream
        if name not in self._entries:
            self._entries[name] = _UpstreamTotals(self._window)
        return name

    def record(
        self,
        upstream: str,
        status: str,
        timing: Timing,
        *,
        stream: bool,
        tokens: TokenUsage | None = None,
        cost: Decimal | None = None,
    ) -> None:
        """Count one request ``upstream`` finished (``cost`` None: unpriced, or no usage)."""
        entry = self._entries[self.name(upstream)]
        entry.finished.record(status, timing, stream=stream, tokens=tokens, cost=cost)

    def record_attempt(self, upstream: str, outcome: str) -> None:
        attempts = self._entries[self.name(upstream)].attempts
        attempts[outcome] = attempts.get(outcome, 0) + 1

    def statistics(self) -> dict[str, UpstreamStatistics]:
        return {name: entry.statistics() for name, entry in self._entries.items()}

    def samples(self) -> dict[str, dict[str, list[float]]]:
        return {name: entry.finished.samples() for name, entry in self._entries.items()}


@final
class RoutingTotals:
    """Failovers, spills and affinity; names already bounded by the :class:`UpstreamBook`."""

    __slots__ = (
        "_failovers",
        "_failovers_by_cause",
        "_kept",
        "_moved",
        "_spills",
        "_spills_by_cause",
    )

    def __init__(self) -> None:
        self._failovers: dict[tuple[str, str], int] = {}
        self._failovers_by_cause: dict[str, int] = {}
        self._spills: dict[tuple[str, str], int] = {}
        self._spills_by_cause: dict[str, int] = {}
        self._kept = self._moved = 0

    def record_failover(self, from_upstream: str, to_upstream: str, cause: str) -> None:
        path = (from_upstream, to_upstream)
        self._failovers[path] = self._failovers.get(path, 0) + 1
        self._failovers_by_cause[cause] = self._failovers_by_cause.get(cause, 0) + 1

    def record_spill(self, preferred: str, to_upstream: str, cause: str) -> None:
        path = (preferred, to_upstream)
        self._spills[path] = self._spills.get(path, 0) + 1
        self._spills_by_cause[cause] = self._spills_by_cause.get(cause, 0) + 1

    def record_affinity(self, kept: bool) -> None:
        if kept:
            self._kept += 1
        else:
            self._moved += 1

    def statistics(self) -> RoutingStatistics:
        return RoutingStatistics(
            failovers_by_cause=dict(self._failovers_by_cause),
            failovers=dict(self._failovers),
            spills_by_cause=dict(self._spills_by_cause),
            spills=dict(self._spills),
            affinity_kept=self._kept,
            affinity_moved=self._moved,
        )


def _ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def upstream_snapshot(
    stats: UpstreamStatistics,
    samples: Mapping[str, list[float]],
    *,
    window: int,
    own_prices: bool,
) -> dict[str, Any]:
    """One upstream's entry in ``GET /metrics`` (``by_upstream``); docs/metrics.md has the
    fields. ``latency`` and ``timing`` have the shapes of the top-level sections of those
    names, over this upstream's own recent requests."""
    finished = stats.finished
    parts = {part: sorted(values) for part, values in samples.items()}
    total = parts["total"]
    requests = sum(finished.requests.values())
    prompt = finished.input_tokens + finished.cache_read + finished.cache_write
    return {
        "requests": requests,
        "success": finished.requests.get("200", 0),
        "errors": finished.errors,
        "errors_by_status": {
            status: count for status, count in sorted(finished.requests.items()) if status != "200"
        },
        "stream": finished.streamed,
        "latency": {
            "p50_ms": percentile_ms(total, 50),
            "p95_ms": percentile_ms(total, 95),
            "p99_ms": percentile_ms(total, 99),
            "max_ms": percentile_ms(total, 100),
            "sample_count": len(total),
            "window": window,
        },
        "timing": {f"{part}_ms": summary_ms(parts[part]) for part in UPSTREAM_PARTS[1:]},
        "tokens": {
            "input": finished.input_tokens,
            "output": finished.output_tokens,
            "cache_read": finished.cache_read,
            "cache_write": finished.cache_write,
        },
        "cache_read_ratio": _ratio(finished.cache_read, prompt),
        "cost_usd": float(finished.cost_usd),
        "estimate_complete": finished.unpriced_requests == 0,
        "unpriced_requests": finished.unpriced_requests,
        "own_prices": own_prices,
        "attempts": sum(stats.attempts.values()),
        "attempts_by_outcome": dict(sorted(stats.attempts.items())),
    }


def _paths(counts: Mapping[tuple[str, str], int]) -> list[dict[str, Any]]:
    return [
        {"from": source, "to": target, "count": count}
        for (source, target), count in sorted(counts.items())
    ]


def routing_snapshot(stats: RoutingStatistics) -> dict[str, Any]:
    """The ``routing`` section of ``GET /metrics``; docs/metrics.md has the fields."""
    continuing = stats.affinity_kept + stats.affinity_moved
    return {
        "failovers_total": sum(stats.failovers_by_cause.values()),
        "failovers_by_cause": dict(sorted(stats.failovers_by_cause.items())),
        "failovers": _paths(stats.failovers),
        "spills_total": sum(stats.spills_by_cause.values()),
        "spills_by_cause": dict(sorted(stats.spills_by_cause.items())),
        "spills": _paths(stats.spills),
        "affinity": {
            "continuing_turns": continuing,
            "kept": stats.affinity_kept,
            "moved": stats.affinity_moved,
            "kept_ratio": _ratio(stats.affinity_kept, continuing),
        },
    }
