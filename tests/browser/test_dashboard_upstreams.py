"""The dashboard's upstream table: requests, errors, latency, cache reads and cost per
upstream, with the failover, spill and affinity counts, from ``by_upstream`` and ``routing``.

As in ``test_dashboard_tenants``, the running proxy serves ``/dashboard`` and its
``/metrics`` polls are answered with the snapshot of a registry this test fed: here the
calls a router makes for three upstreams, so the page is tested against the real shape.
"""

from __future__ import annotations

from typing import Any

import pytest
from browser_support import LiveProxy, assert_metrics_shown, assert_upstreams_shown, open_dashboard

from trio_batcher.observatory.metrics import Gauges, MetricsRegistry, Timing
from trio_batcher.observatory.pricing import load_pricing

pytestmark = pytest.mark.browser

UPSTREAMS = ("anthropic-main", "bedrock-east", "vertex-eu")
SONNET = "claude-sonnet-4-5"
GAUGES = Gauges(active=0, waiting=0, upstream_in_flight=0, upstream_cap=6)


def routed_traffic() -> MetricsRegistry:
    registry = MetricsRegistry(
        window=64, pricing=load_pricing(None), known_upstreams=lambda: UPSTREAMS
    )
    cached = {"input_tokens": 200, "output_tokens": 300, "cache_read_input_tokens": 1800}
    for i in range(30):  # the main upstream: continuing conversations, mostly cache hits
        registry.record_attempt("anthropic-main", "ok")
        registry.record_success(
            SONNET, cached, Timing(total=0.5 + i / 100, upstream=0.45), upstream="anthropic-main"
        )
        registry.record_affinity(kept=i % 10 != 0)
    for i in range(12):  # bedrock: takes the spill-over and the failovers, cold caches
        registry.record_attempt("bedrock-east", "ok")
        registry.record_success(
            SONNET,
            {"input_tokens": 2000, "output_tokens": 300},
            Timing(total=0.9 + i / 100, upstream=0.8),
            upstream="bedrock-east",
        )
    for _ in range(8):
        registry.record_spill("anthropic-main", "bedrock-east", "full")
    for _ in range(3):
        registry.record_attempt("anthropic-main", "overloaded")
        registry.record_failover("anthropic-main", "bedrock-east", "overloaded")
    registry.record_attempt("vertex-eu", "timeout")
    registry.record_error(SONNET, 504, Timing(total=30.0, upstream=29.9), upstream="vertex-eu")
    registry.record_error(None, 400, Timing(total=0.001))  # refused before routing
    return registry


def test_dashboard_shows_each_upstream_and_the_routing_counts(
    live_proxy: LiveProxy, open_page: Any
) -> None:
    registry = routed_traffic()
    snap = registry.snapshot(GAUGES)
    assert list(snap["by_upstream"]) == sorted(UPSTREAMS)
    opened = open_dashboard(live_proxy, open_page, lambda: registry.snapshot(GAUGES))
    assert_metrics_shown(opened, snap)  # every tile and table, the upstream table among them
    rows = opened.page.locator("#upstreams tbody tr")
    assert rows.count() == 3
    assert rows.first.locator("td").first.inner_text() == "anthropic-main"  # most requests
    assert opened.text("upstream-cache-read-anthropic-main") == "90.0 %"  # 1800 of 2000
    assert opened.text("upstream-cache-read-bedrock-east") == "0.0 %"
    assert opened.text("upstream-cache-read-vertex-eu") == "–"  # no prompt yet
    assert opened.number("upstream-errors-vertex-eu") == 1
    assert opened.number("routing-failovers") == 3
    assert opened.text("routing-failover-causes") == "(overloaded 3)"
    assert opened.number("routing-spills") == 8
    assert opened.text("routing-spill-causes") == "(full 8)"
    assert opened.text("routing-affinity") == "27 of 30 turns (90.0 %)"
    opened.screenshot("observability-upstreams")
    opened.assert_clean()


def test_one_default_upstream_without_routing_events_hides_the_table(
    live_proxy: LiveProxy, open_page: Any
) -> None:
    registry = MetricsRegistry(window=8, pricing=load_pricing(None))
    registry.record_attempt("default", "ok")
    registry.record_success(SONNET, {"output_tokens": 5}, Timing(total=0.1), upstream="default")
    opened = open_dashboard(live_proxy, open_page, lambda: registry.snapshot(GAUGES))
    assert_upstreams_shown(opened, registry.snapshot(GAUGES))
    assert not opened.page.locator("#upstreams-panel").is_visible()
    # A failover to a second upstream is something to show, even if it holds no request yet.
    registry.record_failover("default", "backup", "connect_error")
    opened = open_dashboard(live_proxy, open_page, lambda: registry.snapshot(GAUGES))
    assert opened.page.locator("#upstreams-panel").is_visible()
    assert opened.number("upstream-requests-backup") == 0
    opened.assert_clean()


def test_a_tenants_own_view_shows_no_upstream_table(live_proxy: LiveProxy, open_page: Any) -> None:
    registry = MetricsRegistry(
        window=8,
        pricing=load_pricing(None),
        known_tenants=lambda: {"team-a"},
        known_upstreams=lambda: UPSTREAMS,
    )
    registry.record_success(
        SONNET, {"output_tokens": 5}, Timing(total=0.1), tenant="team-a", upstream="vertex-eu"
    )
    registry.record_failover("anthropic-main", "vertex-eu", "overloaded")
    opened = open_dashboard(live_proxy, open_page, lambda: registry.tenant_snapshot("team-a"))
    assert not opened.page.locator("#upstreams-panel").is_visible()
    text = opened.page.inner_text("body")
    assert "vertex-eu" not in text and "anthropic-main" not in text
    opened.assert_clean()
