"""The running app's long-lived parts, wired together: the composition root.

``Runtime`` is created in the ASGI lifespan (``app.py``'s ``before_serving``) and owns what
every request shares: the outbound pool and upstream client, the model catalogue, the
admission gate, the dispatcher (direct, or admission windows), resilience, the metrics
registry and the pipeline that ties them together. Each stage is built here, once, so no
module reaches into another's construction.

The files the settings name are read here too, not by ``Settings`` (which stays data):
``check_files`` reads them once before serving, so a bad pricing or tenants file stops
``serve`` (and each ASGI worker) with one line naming its setting.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import partial
from typing import Any, final

import trio

from .admission.dispatch import Dispatcher
from .admission.gate import AdmissionGate
from .admission.lanes import LanePolicy
from .admission.windows import WindowPolicy
from .cluster.shared_state import SharedState
from .cluster.spend import RedisSpendStore
from .edge.models import ModelCatalogue, find_model
from .logs import set_trace_ids_provider
from .observatory.gc_pauses import GcPauses
from .observatory.metrics import Gauges, MetricsRegistry
from .observatory.pricing import TokenUsage, load_pricing
from .observatory.prometheus import PrometheusExporter
from .observatory.prometheus_connections import ConnectionsCollector
from .offline import BATCH_PRICE_FACTOR
from .offline import SURFACE as BATCH_SURFACE
from .pipeline.core import Pipeline
from .pipeline.flex import FlexPath
from .pipeline.flex_window import FlexWindow
from .pipeline.tenancy import TenantGuard
from .settings import Settings, SettingsError
from .store import resolve_data_dir
from .store.deployment import deployment_of
from .tenants import (
    ANONYMOUS,
    SpendStore,
    SQLiteSpendStore,
    TenantRateLimits,
    TenantsFileError,
    TenantsWatcher,
    read_tenants_file,
)
from .tenants.ledger import SpendLedger
from .tracing import TracingConfigError, active_trace_ids, check_tracing, start_tracing
from .upstream.batches import MessageBatchesClient
from .upstream.client import UpstreamClient, new_upstream_pool
from .upstream.resilience import Resilience, ResilienceConfig
from .upstreams.affinity import AffinityTable
from .upstreams.build import build_steward, check_credentials, primary_settings
from .upstreams.config import UpstreamsFileError, read_upstreams_file, upstreams_in_force
from .upstreams.fleet import Fleet
from .upstreams.routing import Router
from .upstreams.steward import Steward

__all__ = ["Runtime", "check_files"]


def check_files(settings: Settings) -> None:
    """Read the files ``settings`` name as serving will, before serving.

    Raises:
      SettingsError: naming ``PRICING_FILE``, ``TENANTS_FILE`` or ``UPSTREAMS_FILE`` with
        the file's problem (for an upstreams file, also an anthropic upstream whose key
        variable is unset, and a kind whose pip extra is missing), or the ``OTEL_*``
        variable that asks for traces the gateway cannot send (the ``otel`` extra missing).
    """
    try:
        check_tracing(os.environ)
    except TracingConfigError as exc:
        raise SettingsError(exc.variable, exc.problem) from None
    pricing = None
    if settings.pricing_file is not None:
        try:
            pricing = load_pricing(settings.pricing_file)
        except ValueError as exc:
            raise SettingsError("PRICING_FILE", str(exc)) from None
    if settings.tenants_file is not None:
        try:
            read_tenants_file(settings.tenants_file)
        except TenantsFileError as exc:
            raise SettingsError("TENANTS_FILE", str(exc)) from None
    try:
        specs = upstreams_in_force(settings)
        if settings.upstreams_file is not None:
            check_credentials(specs, str(settings.upstreams_file))
    except UpstreamsFileError as exc:
        raise SettingsError("UPSTREAMS_FILE", str(exc)) from None
    if pricing is not None:
        # Prices for an upstream the gateway does not have would never be used: a typo.
        names = {spec.name for spec in specs}
        unknown = sorted(set(pricing.upstreams) - names)
        if unknown:
            raise SettingsError(
                "PRICING_FILE",
                f"prices for upstreams this gateway does not have: {', '.join(unknown)} "
                f"(its upstreams: {', '.join(sorted(names))})",
            )


def effective_settings(settings: Settings) -> Settings:
    """``settings`` with ``ANTHROPIC_BASE_URL`` and its key taken from the upstreams
    file's first anthropic upstream, when there is a file (``upstreams.build``): the one
    the Batch API's Message Batches and the deployment's identity use."""
    if settings.upstreams_file is None:
        return settings
    return primary_settings(settings, read_upstreams_file(settings.upstreams_file))


@final
class Runtime:
    """The long-lived parts of a running app, created in ``before_serving``."""

    def __init__(self, settings: Settings, tenants: TenantsWatcher | None = None) -> None:
        self.settings = settings
        # Traces (``OTEL_*``): the no-op tracer, importing nothing, unless an OTLP endpoint
        # is set; with one, the SDK's export thread starts here, in the serving process.
        self.tracing = start_tracing()
        if self.tracing.enabled:  # JSON log lines carry the ids of the request they serve
            set_trace_ids_provider(active_trace_ids)
        self.tenants = tenants or TenantsWatcher(None, proxy_api_keys=settings.proxy_api_keys)
        self.pricing = pricing = load_pricing(settings.pricing_file)
        self.http = new_upstream_pool(settings)
        self.upstream = UpstreamClient(settings, self.http)
        # Priority lanes order the gate's queue and the upstream cap's alike.
        lanes = LanePolicy(settings.lanes_enabled, settings.lane_deferrable_share)
        self.gate = AdmissionGate(
            settings.max_inflight,
            settings.max_queue,
            settings.acquire_timeout_s,
            retry_after=settings.retry_after_s,
            lanes=lanes,
        )
        self.metrics: MetricsRegistry | None = None
        if settings.metrics_enabled:
            default_model = settings.default_model
            self.metrics = MetricsRegistry(
                window=settings.metrics_latency_window,
                pricing=pricing,
                known_model=lambda name: find_model(name, default_model) is not None,
                # Tenant labels are the configured names, whatever a client sends.
                known_tenants=lambda: self.tenants.directory.names(),
            )
        limiter: trio.CapacityLimiter | None = None
        windows: WindowPolicy | None = None
        if settings.batch_enabled:
            # One limiter, shared by every window and retuned by the adaptive controller.
            limiter = trio.CapacityLimiter(settings.batch_max_concurrency)
            windows = WindowPolicy(
                max_size=settings.batch_max_size,
                max_wait=settings.batch_max_wait_s,
                window_timeout=settings.batch_timeout_s,
            )
        self.resilience = Resilience(
            ResilienceConfig(
                max_retries=settings.upstream_max_retries,
                max_wait_s=settings.upstream_retry_max_wait_s,
                budget_ratio=settings.retry_budget_ratio,
                coordinated=settings.upstream_coordinated_backoff,
                adaptive=settings.batch_adaptive,
            ),
            limiter=limiter,
        )
        # With REDIS_URL, tenants' limits and budgets, cooldowns, the retry budget, cache
        # affinity and each upstream's cap are the cluster's; so is the gateway's cap (the
        # windows' limiter, leased to instances in blocks), when there is one.
        stewards = self._stewards()
        self.shared: SharedState | None = None
        if settings.redis_url is not None:
            # Each upstream of UPSTREAMS_FILE shares its own cooldowns too.
            own = [
                (s.name, s.resilience, s.spec.max_concurrency)
                for s in stewards
                if s.resilience is not self.resilience
            ]
            self.shared = shared = SharedState(
                settings,
                self.resilience,
                settings.batch_max_concurrency if limiter is not None else None,
                upstreams=own,
            )
            for steward in stewards:
                steward.shared = partial(shared.upstream_slots.get, steward.name)
        self.fleet = self._fleet(stewards)
        self.models = ModelCatalogue(
            self.upstream.list_models if settings.upstreams_file is None else self.fleet.list_models
        )
        self.dispatcher = Dispatcher(
            limiter=limiter,
            shared=self.shared if limiter is not None else None,
            windows=windows,
            on_flush=self.metrics.record_window if self.metrics is not None else None,
            lanes=lanes,
        )
        # Budgets are enforced once ``run_ledger`` has loaded what was spent.
        self.rate_limits = TenantRateLimits()
        self.ledger: SpendLedger | None = None
        # With shared state, rpm, tpm and budgets are the cluster's (leased slices in Redis).
        self.guard = TenantGuard(
            self.rate_limits,
            None,
            pricing,
            on_refused=self._record_refused,
            shared=self.shared.tenant_limits if self.shared is not None else None,
        )
        self.flex = self._flex_window()
        self.pipeline = Pipeline(
            settings=settings,
            fleet=self.fleet,
            dispatcher=self.dispatcher,
            gate=self.gate,
            metrics=self.metrics,
            guard=self.guard,
            flex=self._flex_path(),
        )
        self.prometheus = (
            PrometheusExporter(
                self.metrics,
                self.gauges,
                self.resilience.statistics,
                cluster_fn=self.cluster_statistics,
            )
            if self.metrics is not None
            else None
        )
        if self.prometheus is not None:
            self.prometheus.collector_registry.register(
                ConnectionsCollector(
                    lambda: (self.http.connections_opened, self.http.resent_unsent)
                )
            )
        # Installed while the app serves (``app.py``'s lifespan).
        self.gc_pauses = GcPauses()
        self.draining = False
        self.drained = trio.Event()

    def _stewards(self) -> list[Steward]:
        """The upstreams requests are routed among: ``UPSTREAMS_FILE``'s, each with its own
        client and resilience, or the one upstream ``ANTHROPIC_BASE_URL`` names, served by
        the runtime's own client and resilience exactly as before there was a fleet."""
        specs = upstreams_in_force(self.settings)
        if self.settings.upstreams_file is None:
            return [Steward(specs[0], self.upstream, self.resilience)]
        return [build_steward(spec, i, self.settings) for i, spec in enumerate(specs)]

    def _fleet(self, stewards: list[Steward]) -> Fleet:
        router = Router(AffinityTable(trio.current_time))
        if self.metrics is not None:
            names = tuple(steward.name for steward in stewards)
            self.metrics.known_upstreams = lambda: names
        shared = self.shared
        return Fleet(
            stewards,
            router,
            self.metrics,
            share=(lambda: shared.affinity) if shared is not None else None,
        )

    def _batches_upstream(self) -> str | None:
        """The first anthropic upstream's name: where Message Batches go (``effective_settings``
        points the app's pool and key at it); None for a gateway of clouds only."""
        for steward in self.fleet.stewards:
            if steward.spec.kind == "anthropic":
                return steward.name
        return None

    def _flex_window(self) -> FlexWindow | None:
        """The flex window (``pipeline.flex_window``), when ``service_tier: "flex"`` can be
        batched: ``FLEX_MAX_PENDING`` > 0 and an anthropic upstream to hold the batches."""
        settings = self.settings
        if settings.flex_max_pending == 0 or self._batches_upstream() is None:
            return None
        return FlexWindow(
            MessageBatchesClient(settings, self.http),
            size=settings.flex_window_size,
            window_s=settings.flex_window_s,
            max_pending=settings.flex_max_pending,
            totals=self.metrics.flex if self.metrics is not None else None,
            price_factor=BATCH_PRICE_FACTOR,
        )

    def _flex_path(self) -> FlexPath | None:
        if self.flex is None:
            return None
        return FlexPath(
            self.flex,
            max_wait_s=self.settings.flex_max_wait_s,
            on_timeout=self.settings.flex_on_timeout,
            price_factor=BATCH_PRICE_FACTOR,
            upstream=self._batches_upstream(),
            metrics=self.metrics,
        )

    def flex_pending(self) -> int:
        """Flex requests waiting now (the ``flex.pending`` of ``/metrics``)."""
        return self.flex.pending if self.flex is not None else 0

    async def aclose(self) -> None:
        """Close every upstream's connections and flush the spans (the lifespan's end)."""
        await self.tracing.aclose()
        await self.http.aclose()
        if self.settings.upstreams_file is not None:
            for steward in self.fleet.stewards:
                await steward.caller.aclose()

    def upstream_statistics(self) -> dict[str, Any]:
        """Retries, cooldowns and the adaptive limit, for ``GET /metrics`` (``upstream``)."""
        stats = self.resilience.statistics()
        return {
            "attempts": stats.attempts,
            "retries": stats.retries,
            "retries_denied_by_budget": stats.retries_denied_by_budget,
            "retries_denied_by_deadline": stats.retries_denied_by_deadline,
            "shed_by_cooldown": stats.shed_by_cooldown,
            "cooldowns_opened": stats.cooldowns_opened,
            "cooldown_remaining_s": round(stats.cooldown_remaining, 3),
            "ratelimit_holds": stats.ratelimit_holds,
            "adaptive_limit": stats.current_limit,
            "failures_by_signal": dict(stats.failures_by_signal),
            "connections_opened": self.http.connections_opened,
            "resent_unsent": self.http.resent_unsent,
        }

    def record_batch_usage(
        self, tenant: str | None, model: str, usage: Mapping[str, Any], requests: int
    ) -> None:
        """A delivered batch's succeeded requests on ``model``: counted in the observatory
        (surface ``openai.batch``, the creating tenant's ``by_tenant``) and charged to its
        budget, both at the Message Batches price (half the standard rate)."""
        if self.metrics is not None:
            self.metrics.record_offline(
                model,
                usage,
                requests=requests,
                surface=BATCH_SURFACE,
                price_factor=BATCH_PRICE_FACTOR,
                tenant=tenant,
            )
        if self.ledger is not None and tenant is not None and self._keeps_spend(tenant):
            cost = self.pricing.cost(model, TokenUsage.from_anthropic(usage))
            if cost:
                self.ledger.charge(tenant, float(cost * BATCH_PRICE_FACTOR))
                if self.shared is not None:  # counted against the cluster's budget too
                    self.shared.tenant_limits.spend(tenant, float(cost * BATCH_PRICE_FACTOR))

    def _keeps_spend(self, tenant: str) -> bool:
        """Whether ``tenant``'s spend goes to the ledger, as ``TenantGuard.admit`` decides
        for a realtime request: every named tenant's is kept (a budget added later counts
        the period so far), but the anonymous caller of a gateway without keys writes
        nothing to disk unless the tenants file gives it a budget."""
        if tenant != ANONYMOUS:
            return True
        anonymous = self.tenants.directory.get(ANONYMOUS)
        return anonymous is not None and anonymous.budget is not None

    async def run_ledger(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """The tenants' spend, for budgets: the cluster's with shared state (Redis, so every
        instance sees every other's spend within a second), else this machine's (SQLite in
        ``DATA_DIR``, so a restart keeps it). Follows the tenants file's reloads. Start it
        after ``shared.run``: it needs the Redis link."""
        link = self.shared.link if self.shared is not None else None
        store: SpendStore = (
            RedisSpendStore(link)
            if link is not None
            else SQLiteSpendStore(
                resolve_data_dir(self.settings.data_dir),
                simulated=deployment_of(self.settings).simulated,
            )
        )
        ledger = SpendLedger(store)
        directory = self.tenants.directory
        ledger.set_tenants(directory)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(ledger.run)
                self.ledger = self.guard.budgets = ledger
                task_status.started()
                while True:  # a reload swaps the directory: budgets and buckets follow
                    await trio.sleep(1.0)
                    if self.tenants.directory is not directory:
                        directory = self.tenants.directory
                        ledger.set_tenants(directory)
                        self.rate_limits.prune(directory.names())
                        if self.shared is not None:
                            self.shared.tenant_limits.prune(directory.names())
        finally:
            self.guard.budgets = None
            with trio.CancelScope(shield=True), trio.move_on_after(2):
                await store.aclose()

    def _record_refused(self, tenant: str, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.record_rejected(reason, tenant=tenant)

    def cluster_statistics(self) -> dict[str, Any] | None:
        """The ``cluster`` block of ``GET /metrics``: ``None`` without ``REDIS_URL``."""
        return self.shared.statistics() if self.shared is not None else None

    def requests_finished_and_open(self) -> tuple[int, int]:
        """Requests through the gate that have finished, and those open now: what the heap
        tidy's schedule reads (``serving.TidySchedule``)."""
        gate = self.gate.statistics()
        return gate.admitted_total - gate.active, gate.active

    def gauges(self) -> Gauges:
        gate = self.gate.statistics()
        dispatch = self.dispatcher.statistics()
        return Gauges(
            active=gate.active,
            waiting=gate.waiting,
            upstream_in_flight=dispatch.running,
            upstream_cap=dispatch.limiter_total,
            trio_tasks=trio.lowlevel.current_statistics().tasks_living,
            gc=self.gc_pauses.statistics(),
            lanes_waiting={name: lane.waiting for name, lane in gate.lanes.items()},
        )
