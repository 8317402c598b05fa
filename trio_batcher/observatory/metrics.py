"""The observatory's registry: what the proxy counts about itself, and its JSON snapshot.

Theory of operation
-------------------
Request handlers report each finished request once, synchronously, through
``record_success`` / ``record_error``; the admission layer reports shed requests through
``record_rejected`` and flushed windows through ``record_window``. Record methods never
await, so on one trio loop they cannot interleave; a ``threading.Lock`` still guards every
mutation and every read, so a reader on another thread (or a future threaded caller) sees a
consistent state. It costs an uncontended acquire per call.

Two kinds of state, kept apart on purpose:

* **All-time counters** -- requests by model and status, tokens, cost, rejections, windows,
  and cumulative latency histograms with fixed buckets. These only grow; Prometheus reads
  them through :meth:`MetricsRegistry.statistics`, and the JSON snapshot is built from the
  same object, so the two surfaces cannot disagree.
* **Recent windows** -- the last ``window`` raw samples of each latency (a ``deque``), from
  which the snapshot computes exact nearest-rank percentiles. Recent, not all-time: a slow
  start-up does not haunt p99 forever, and a quiet proxy keeps showing old samples until new
  traffic rolls them out.

Requests the proxy refused before doing any work (``record_rejected``) are counted apart:
they are outside ``requests`` and outside every latency sample, so shedding load cannot make
the latency percentiles look better.

Four breakdowns sit beside the totals, each in its own module: per model (``models``:
names come from clients, so a name earns an entry only once the upstream answered for it),
per front door (``surfaces``: names come from the code), per tenant (``tenants``: names
come from the tenants configuration, through ``known_tenants``; anything else, and no
tenant at all, is the one ``(other)`` entry) and per upstream (``upstreams``: names come
from the upstreams configuration, through ``known_upstreams``, with the routing events:
failovers, spills, affinity). Every finished or shed request is in exactly one tenant
entry, so ``by_tenant`` adds up to ``requests`` and ``rejected``; a request's cost is
computed once, at the price of the upstream that served it, and that one figure goes to
every breakdown it is in.

Memory is bounded: windows by ``window`` (clamped to [1, 100000]), per-model entries by
``max_models``, per-tenant entries by ``max_tenants`` and per-upstream ones by
``max_upstreams`` (each with its own windows), status codes, rejection reasons, attempt
outcomes and routing causes by the code that produces them.

When metrics are disabled the application holds no registry at all, so nothing here runs.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, Final, Literal, final

from .flex import FlexTotals
from .lanes import LaneBook, LaneStatistics, lanes_document
from .latency import LATENCY_BUCKETS as LATENCY_BUCKETS
from .latency import Histogram, HistogramCounts
from .latency import Timing as Timing
from .latency import percentile as percentile
from .models import NO_MODEL as NO_MODEL
from .models import OTHER_MODELS as OTHER_MODELS
from .models import ModelBook, ModelTotals
from .models import ModelStatistics as ModelStatistics
from .pricing import PriceTable, TokenUsage
from .snapshot import snapshot_document
from .statistics import Gauges as Gauges
from .statistics import MetricsStatistics as MetricsStatistics
from .surfaces import SurfaceTotals
from .tenant_view import tenant_document
from .tenants import OTHER_TENANTS as OTHER_TENANTS
from .tenants import KnownTenants, TenantBook, TenantStatistics, no_tenants
from .upstreams import MAX_UPSTREAMS, KnownUpstreams, RoutingTotals, UpstreamBook
from .upstreams import OTHER_UPSTREAMS as OTHER_UPSTREAMS

__all__ = [
    "LATENCY_BUCKETS",
    "NO_MODEL",
    "OTHER_MODELS",
    "OTHER_TENANTS",
    "OTHER_UPSTREAMS",
    "WINDOW_MAX",
    "WINDOW_MIN",
    "Gauges",
    "HistogramCounts",
    "MetricsRegistry",
    "MetricsStatistics",
    "ModelStatistics",
    "TenantStatistics",
    "Timing",
    "percentile",
]

WINDOW_MIN: Final = 1
WINDOW_MAX: Final = 100_000
_WINDOW_REASONS: Final = ("size", "time", "drain")


@final
class MetricsRegistry:
    """Counters, latency windows and cost estimates for one application instance.

    Args:
      window: how many recent samples each latency window keeps; clamped to [1, 100000].
      pricing: the price table cost estimates come from.
      max_models: distinct model names tracked individually; later ones share ``(other)``.
      known_model: whether a name is a real model before the upstream has answered for it
        (the bundled catalogue), so an outage right after start still shows per model.
      known_tenants: the configured tenant names (``by_tenant``); see :attr:`known_tenants`.
      max_tenants: distinct tenant names tracked individually; later ones share ``(other)``.
      known_upstreams: the configured upstream names (``by_upstream``), asked (under the
        registry's lock) the first time each name is recorded; None accepts any name.
      max_upstreams: distinct upstream names tracked individually; later ones share
        ``(other)``.
      clock: monotonic seconds, for ``uptime_s`` (tests inject one).
    """

    def __init__(
        self,
        *,
        window: int,
        pricing: PriceTable,
        max_models: int = 100,
        known_model: Callable[[str], bool] = lambda _: False,
        known_tenants: KnownTenants = no_tenants,
        max_tenants: int = 100,
        known_upstreams: KnownUpstreams | None = None,
        max_upstreams: int = MAX_UPSTREAMS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window: Final = max(WINDOW_MIN, min(WINDOW_MAX, window))
        self.pricing: Final = pricing
        self._models = ModelBook(pricing, max_models=max_models, known_model=known_model)
        self._tenants = TenantBook(
            self.window, known_tenants=known_tenants, max_tenants=max_tenants
        )
        self._upstreams = UpstreamBook(
            self.window, known_upstreams=known_upstreams, max_upstreams=max_upstreams
        )
        self._routing = RoutingTotals()
        # The flex path's own counters (``service_tier: "flex"``), the ``flex`` block.
        self.flex: Final = FlexTotals(self.window, pricing)
        self._lanes = LaneBook(self.window)  # priority lanes (``lanes``)
        self._clock = clock
        self._started_mono = clock()
        self._started_wall = time.time()
        self._lock = threading.Lock()

        self._requests: dict[tuple[str, str], int] = {}
        self._success = self._errors = self._streamed = 0
        self._all = ModelTotals(None, priced=True)  # tokens and cost over every model
        # requests whose usage has no price: successes, and streams that broke after usage
        self._unpriced = ModelTotals(None, priced=False)
        self._rejected: dict[str, int] = {}
        self._windows: dict[str, int] = dict.fromkeys(_WINDOW_REASONS, 0)
        self._windowed_requests = 0
        self._surfaces: dict[str, SurfaceTotals] = {}  # named by the code: one per door
        self._histograms = {name: Histogram() for name in ("request", "ttft", "queue", "upstream")}
        self._samples: dict[str, deque[float]] = {
            name: deque(maxlen=self.window)
            for name in ("total", "queue", "upstream_ttfb", "ttft", "upstream", "overhead")
        }

    @property
    def started_at(self) -> float:
        """When this registry started, Unix time."""
        return self._started_wall

    @property
    def known_tenants(self) -> KnownTenants:
        """The configured tenant names: a callable, asked (under the registry's lock) the
        first time each name is recorded, so a reload that adds a tenant is seen at its
        first request. Keep it cheap, e.g. ``lambda: watcher.directory.names()``."""
        return self._tenants.known_tenants

    @known_tenants.setter
    def known_tenants(self, known_tenants: KnownTenants) -> None:
        with self._lock:
            self._tenants.known_tenants = known_tenants

    @property
    def known_upstreams(self) -> KnownUpstreams | None:
        """The configured upstream names (None: any name, up to ``max_upstreams``): asked
        under the registry's lock the first time each name is recorded, so keep it cheap,
        e.g. ``lambda: names`` over the upstreams file's names."""
        return self._upstreams.known_upstreams

    @known_upstreams.setter
    def known_upstreams(self, known_upstreams: KnownUpstreams | None) -> None:
        with self._lock:
            self._upstreams.known_upstreams = known_upstreams

    # -- recording -------------------------------------------------------------------------

    def record_success(
        self,
        model: str,
        usage: Mapping[str, Any],
        timing: Timing,
        *,
        stream: bool = False,
        surface: str | None = None,
        tenant: str | None = None,
        upstream: str | None = None,
    ) -> None:
        """Count a request answered from upstream: latency, tokens, and cost if priced.

        ``surface``: the door it came in by, counted apart as well (``by_surface``).
        ``tenant``: whose request it was (``by_tenant``; None or unknown: ``(other)``).
        ``upstream``: the upstream that answered (``by_upstream``); its prices, where the
        price table gives it its own, are the ones this request costs everywhere.
        """
        with self._lock:
            entry = self._count_request(model, "200", timing, stream, answered=True)
            self._success += 1
            tokens = TokenUsage.from_anthropic(usage)
            cost = self._spend(model, entry, tokens, upstream=upstream)
            if surface is not None:
                self._surface(surface).record(
                    "200", timing, stream=stream, tokens=tokens, cost=cost
                )
            self._tenants.record(tenant, "200", timing, stream=stream, tokens=tokens, cost=cost)
            if upstream is not None:
                self._upstreams.record(
                    upstream, "200", timing, stream=stream, tokens=tokens, cost=cost
                )

    def record_error(
        self,
        model: str | None,
        status: int,
        timing: Timing,
        *,
        stream: bool = False,
        usage: Mapping[str, Any] | None = None,
        surface: str | None = None,
        tenant: str | None = None,
        upstream: str | None = None,
    ) -> None:
        """Count a request that ended in an error: latency, and tokens and cost only for
        ``usage`` the upstream reported before it ended (a stream its client left).

        ``surface``, ``tenant``, ``upstream``: as for :meth:`record_success`; a request
        refused before it was routed has no ``upstream`` and is in no upstream's entry.
        """
        with self._lock:
            # Usage means the upstream took the request: the name is a real model.
            answered = bool(usage) and model is not None
            entry = self._count_request(model, str(status), timing, stream, answered=answered)
            entry.errors += 1
            self._errors += 1
            tokens = cost = None
            if usage and model is not None:
                tokens = TokenUsage.from_anthropic(usage)
                cost = self._spend(model, entry, tokens, upstream=upstream)
            if surface is not None:
                self._surface(surface).record(
                    str(status), timing, stream=stream, tokens=tokens, cost=cost
                )
            self._tenants.record(
                tenant, str(status), timing, stream=stream, tokens=tokens, cost=cost
            )
            if upstream is not None:
                self._upstreams.record(
                    upstream, str(status), timing, stream=stream, tokens=tokens, cost=cost
                )

    def record_offline(
        self,
        model: str,
        usage: Mapping[str, Any],
        *,
        requests: int,
        surface: str,
        price_factor: Decimal,
        tenant: str | None = None,
    ) -> None:
        """Count ``requests`` answered through a Message Batch, with their summed ``usage``.

        Tokens and cost go into the model's and the surface's totals, the cost times
        ``price_factor`` (the batch discount). No latency: a batch request's time is hours
        of queueing, not a sample of the realtime path, so it stays out of every histogram.
        """
        with self._lock:
            name, entry = self._models.entry(model, answered=True)
            entry.requests += requests
            self._requests[name, "200"] = self._requests.get((name, "200"), 0) + requests
            self._success += requests
            tokens = TokenUsage.from_anthropic(usage)
            cost = self._spend(model, entry, tokens, price_factor)
            totals = self._surface(surface)
            totals.record_offline(requests, tokens, cost)
            self._tenants.record_offline(tenant, requests, tokens, cost)

    def record_call(self, surface: str, status: int, timing: Timing) -> None:
        """Count a call that generates nothing (``count_tokens``): under its surface only,
        outside ``requests``, tokens, cost and the latency samples of generations."""
        with self._lock:
            self._surface(surface).record(str(status), timing, stream=False)

    def _surface(self, name: str) -> SurfaceTotals:
        entry = self._surfaces.get(name)
        if entry is None:
            entry = self._surfaces[name] = SurfaceTotals(self.window)
        return entry

    def _spend(
        self,
        model: str,
        entry: ModelTotals,
        tokens: TokenUsage,
        factor: Decimal | None = None,
        *,
        upstream: str | None = None,
    ) -> Decimal | None:
        """Add ``tokens`` to the totals; their cost (times ``factor``) at ``upstream``'s
        prices where it has its own, or None when unpriced."""
        entry.add_tokens(tokens)
        self._all.add_tokens(tokens)
        if upstream is not None and self.pricing.has_own_prices(upstream):
            price = self.pricing.price_for(model, upstream)
        else:
            price = self.pricing.price_for(model) if entry.shared else entry.price
        if price is not None:
            cost = price.cost(tokens) if factor is None else price.cost(tokens) * factor
            entry.cost += cost
            self._all.cost += cost
            return cost
        entry.priced = False
        self._unpriced.requests += 1
        self._unpriced.add_tokens(tokens)
        return None

    def record_attempt(self, upstream: str, outcome: str) -> None:
        """Count one attempt on ``upstream`` and how it went: ``"ok"``, or the failure
        signal (``overloaded``, ``rate_limited``, ``server_error``, ``connect_error``,
        ``timeout``, ``client_error``, ...)."""
        with self._lock:
            self._upstreams.record_attempt(upstream, outcome)

    def record_failover(self, from_upstream: str, to_upstream: str, cause: str) -> None:
        """Count a request moved to ``to_upstream`` after ``from_upstream`` failed before
        its first byte (``cause``: the failure signal)."""
        with self._lock:
            names = self._upstreams.name(from_upstream), self._upstreams.name(to_upstream)
            self._routing.record_failover(*names, cause)

    def record_spill(self, preferred: str, to_upstream: str, cause: str) -> None:
        """Count a request ``to_upstream`` took because its ``preferred`` upstream (the
        conversation's own, or the weighted pick) was full (``cause`` ``"full"``) or
        cooling down (``"cooling"``)."""
        with self._lock:
            names = self._upstreams.name(preferred), self._upstreams.name(to_upstream)
            self._routing.record_spill(*names, cause)

    def record_affinity(self, kept: bool) -> None:
        """Count a continuing conversation's turn (its key was in the affinity table):
        sent to the upstream that served it before (``kept``), or moved elsewhere."""
        with self._lock:
            self._routing.record_affinity(kept)

    def record_rejected(self, reason: str, *, tenant: str | None = None) -> None:
        """Count a request shed before any work (queue_full, queue_timeout, shutdown,
        tenant_queue_full, rate_limited, insufficient_quota, ...).

        Kept out of ``requests`` and every latency sample. ``tenant``: whose request it
        was (``by_tenant``; None or unknown: ``(other)``).
        """
        with self._lock:
            self._rejected[reason] = self._rejected.get(reason, 0) + 1
            self._tenants.record_rejected(tenant, reason)

    def record_lane_admitted(self, lane: str) -> None:
        """Count a request admitted through the gate in ``lane`` (``lanes``)."""
        with self._lock:
            self._lanes.admitted(lane)

    def record_lane_shed(self, lane: str, reason: str) -> None:
        """Count a request of ``lane`` the gate shed (also in ``record_rejected``)."""
        with self._lock:
            self._lanes.shed(lane, reason)

    def record_lane_wait(self, lane: str, seconds: float) -> None:
        """A finished request's queue wait (``Timing.queue``) in its lane."""
        with self._lock:
            self._lanes.waited(lane, seconds)

    def lane_statistics(self) -> dict[str, LaneStatistics]:
        """The lanes' all-time counters (their Prometheus view)."""
        with self._lock:
            return self._lanes.statistics()

    def record_window(self, size: int, reason: Literal["size", "time", "drain"]) -> None:
        """Count a flushed admission window of ``size`` requests and why it flushed."""
        with self._lock:
            self._windows[reason] = self._windows.get(reason, 0) + 1
            self._windowed_requests += size

    def _count_request(
        self, model: str | None, status: str, timing: Timing, stream: bool, *, answered: bool
    ) -> ModelTotals:
        name, entry = self._models.entry(model, answered=answered)
        entry.requests += 1
        self._requests[name, status] = self._requests.get((name, status), 0) + 1
        if stream:
            self._streamed += 1

        samples, histograms = self._samples, self._histograms
        samples["total"].append(timing.total)
        histograms["request"].observe(timing.total)
        samples["queue"].append(timing.queue)
        histograms["queue"].observe(timing.queue)
        samples["overhead"].append(timing.overhead)
        if timing.upstream is not None:
            samples["upstream"].append(timing.upstream)
            histograms["upstream"].observe(timing.upstream)
        if timing.upstream_ttfb is not None:
            samples["upstream_ttfb"].append(timing.upstream_ttfb)
        if timing.ttft is not None:
            samples["ttft"].append(timing.ttft)
            histograms["ttft"].observe(timing.ttft)
        return entry

    # -- reading ---------------------------------------------------------------------------

    def statistics(self) -> MetricsStatistics:
        """A consistent copy of the all-time counters."""
        with self._lock:
            return self._statistics()

    def _statistics(self) -> MetricsStatistics:
        everything, unpriced = self._all, self._unpriced
        return MetricsStatistics(
            requests=dict(self._requests),
            success=self._success,
            errors=self._errors,
            streamed=self._streamed,
            by_model=self._models.statistics(),
            input_tokens=everything.input,
            output_tokens=everything.output,
            cache_read=everything.cache_read,
            cache_write=everything.cache_write,
            cost_usd=everything.cost,
            unpriced_requests=unpriced.requests,
            unpriced_input_tokens=unpriced.input,
            unpriced_output_tokens=unpriced.output,
            unpriced_cache_read=unpriced.cache_read,
            unpriced_cache_write=unpriced.cache_write,
            rejected=dict(self._rejected),
            windows=dict(self._windows),
            windowed_requests=self._windowed_requests,
            histograms={name: h.counts() for name, h in self._histograms.items()},
            started_at=self._started_wall,
            by_surface={name: entry.statistics() for name, entry in self._surfaces.items()},
            by_tenant=self._tenants.statistics(),
            by_upstream=self._upstreams.statistics(),
            routing=self._routing.statistics(),
        )

    def tenant_statistics(self, tenant: str) -> TenantStatistics:
        """One tenant's all-time counters (zero if it has none yet): its Prometheus view."""
        with self._lock:
            return self._tenants.one(tenant)[0]

    def tenant_snapshot(self, tenant: str) -> dict[str, Any]:
        """The JSON ``GET /metrics`` answers ``tenant``'s own key with: its own figures and
        nothing counted over other tenants' requests (``tenant_view``, docs/metrics.md)."""
        with self._lock:
            stats, samples = self._tenants.one(tenant)
            uptime = self._clock() - self._started_mono
        return tenant_document(
            tenant,
            stats,
            samples,
            window=self.window,
            pricing=self.pricing,
            started_at=self._started_wall,
            uptime=uptime,
        )

    def snapshot(self, gauges: Gauges | None = None) -> dict[str, Any]:
        """The JSON document served at ``GET /metrics``; see docs/metrics.md for every field.

        Args:
          gauges: current concurrency; without it the ``concurrency`` values are null.
        """
        with self._lock:
            stats = self._statistics()
            samples = {name: list(values) for name, values in self._samples.items()}
            surface_samples = {name: entry.samples() for name, entry in self._surfaces.items()}
            tenant_samples = self._tenants.samples()
            upstream_samples = self._upstreams.samples()
            lane_stats, lane_samples = self._lanes.statistics(), self._lanes.samples()
            uptime = self._clock() - self._started_mono
        document = snapshot_document(
            stats,
            samples,
            surface_samples,
            tenant_samples,
            upstream_samples,
            window=self.window,
            uptime=uptime,
            pricing=self.pricing,
            gauges=gauges,
        )
        waiting = gauges.lanes_waiting if gauges is not None else None
        document["lanes"] = lanes_document(lane_stats, lane_samples, waiting)
        return document
