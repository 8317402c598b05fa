"""The dashboard's tenant table: cost and shed rate per tenant, from ``by_tenant``.

The running proxy serves ``/dashboard`` as usual; its ``/metrics`` answers are replaced (a
Playwright route) with the snapshot of a registry this test fed traffic for three
configured tenants, an unconfigured name and requests without a tenant: the document the
real ``MetricsRegistry.snapshot`` builds, so the page is tested against the real shape.
The proxy's own ``/metrics`` (no tenants configured) is covered by the live test, which
expects the table hidden behind its note.
"""

from __future__ import annotations

from typing import Any

import pytest
from browser_support import LiveProxy, assert_metrics_shown, assert_tenants_shown, open_dashboard

from trio_batcher.observatory.metrics import Gauges, MetricsRegistry, Timing
from trio_batcher.observatory.pricing import load_pricing

pytestmark = pytest.mark.browser

TENANTS = frozenset({"team-chat", "team-batch", "key-1a2b3c4d"})
SONNET = "claude-sonnet-4-5"
HAIKU = "claude-3-5-haiku-latest"
GAUGES = Gauges(active=0, waiting=0, upstream_in_flight=0, upstream_cap=6)


def tenant_traffic() -> MetricsRegistry:
    registry = MetricsRegistry(window=64, pricing=load_pricing(None), known_tenants=lambda: TENANTS)
    usage = {"input_tokens": 1200, "output_tokens": 300}
    for i in range(40):  # the batch job: heavy, shed by its own queue share and its budget
        timing = Timing(total=0.8 + i / 100, queue=0.3, upstream=0.5)
        registry.record_success(SONNET, usage, timing, tenant="team-batch")
    for reason in ["tenant_queue_full"] * 25 + ["insufficient_quota"] * 5:
        registry.record_rejected(reason, tenant="team-batch")
    for i in range(12):  # the chat team: light, fast, never shed
        registry.record_success(
            HAIKU,
            {"input_tokens": 50, "output_tokens": 40},
            Timing(total=0.1 + i / 1000, upstream_ttfb=0.02, ttft=0.05, upstream=0.09),
            stream=True,
            tenant="team-chat",
        )
    registry.record_error(HAIKU, 529, Timing(total=0.2, upstream=0.15), tenant="team-chat")
    registry.record_success("claude-unpriced-test", usage, Timing(total=0.3), tenant="key-1a2b3c4d")
    registry.record_rejected("rate_limited", tenant="key-1a2b3c4d")
    registry.record_error(None, 401, Timing(total=0.001))  # before any tenant: (other)
    registry.record_rejected("queue_full", tenant="not-configured")
    return registry


def open_tenant_dashboard(
    proxy: LiveProxy, open_page: Any, registry: MetricsRegistry, tenant: str | None = None
) -> Any:
    """``/dashboard`` of the running proxy, its ``/metrics`` polls answered by ``registry``:
    the whole view, or what ``tenant``'s own key reads."""
    if tenant is None:
        return open_dashboard(proxy, open_page, lambda: registry.snapshot(GAUGES))
    return open_dashboard(proxy, open_page, lambda: registry.tenant_snapshot(tenant))


def test_dashboard_shows_cost_and_shed_rate_per_tenant(
    live_proxy: LiveProxy, open_page: Any
) -> None:
    registry = tenant_traffic()
    snap = registry.snapshot(GAUGES)
    assert set(snap["by_tenant"]) == TENANTS | {"(other)"}
    opened = open_tenant_dashboard(live_proxy, open_page, registry)
    assert_metrics_shown(opened, snap)  # every tile and table, the tenant table among them
    rows = opened.page.locator("#tenants tbody tr")
    assert rows.count() == 4
    # Ordered by cost: the batch job first, the unpriced tenant's cost marked a lower bound.
    assert rows.first.locator("td").first.inner_text() == "team-batch"
    assert opened.text("tenant-shed-rate-team-batch") == "42.9 %"  # 30 of 70
    assert opened.text("tenant-shed-rate-team-chat") == "0.0 %"
    unpriced = opened.page.locator("#tenants tbody tr", has_text="key-1a2b3c4d")
    assert "lower bound" in unpriced.inner_text()
    opened.screenshot("observability-tenants")
    opened.assert_clean()


def test_one_tenant_alone_hides_the_table_behind_a_note(
    live_proxy: LiveProxy, open_page: Any
) -> None:
    registry = MetricsRegistry(window=8, pricing=load_pricing(None))  # no tenants configured
    registry.record_success(SONNET, {"output_tokens": 5}, Timing(total=0.1))
    registry.record_rejected("queue_full")
    opened = open_tenant_dashboard(live_proxy, open_page, registry)
    assert_tenants_shown(opened, registry.snapshot()["by_tenant"])
    assert "one tenant, (other)" in opened.text("tenants-none")
    opened.assert_clean()


def test_a_tenants_own_view_shows_its_figures_and_says_the_rest_is_not_its_to_see(
    live_proxy: LiveProxy, open_page: Any
) -> None:
    registry = tenant_traffic()
    own = registry.tenant_snapshot("team-batch")
    opened = open_tenant_dashboard(live_proxy, open_page, registry, tenant="team-batch")
    assert "team-batch" in opened.text("own-view")
    assert opened.number("req-total") == own["requests"]["total"] == 40
    assert opened.number("shed-total") == own["rejected"]["total"] == 30
    assert opened.number("shed-tenant_queue_full") == 25
    assert opened.text("inflight") == "–" and opened.text("windows-flushed") == "–"
    assert "own view" in opened.text("tenants-none")
    text = opened.page.inner_text("body")
    assert "team-chat" not in text and "key-1a2b3c4d" not in text
    opened.screenshot("observability-tenant-view")
    opened.assert_clean()
