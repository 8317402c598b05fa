"""The dashboard's "Requests that can wait" panel: flex through Message Batches (requests,
window sizes, waits, timeouts, dropped results, cost at the batch price beside realtime and
the saving), background responses (queued, running, by final status, rejected, queue wait)
and the priority lanes (admitted, shed, waiting, queue wait per lane), from the ``flex``,
``background`` and ``lanes`` blocks of ``/metrics``.

As in ``test_dashboard_upstreams``, the running proxy serves ``/dashboard`` and its
``/metrics`` polls are answered with a document built by the observatory's own classes
(``MetricsRegistry`` with its ``FlexTotals`` and lanes, ``BackgroundStats``), put together as
``app.metrics_json`` does, so the page is tested against the real shapes.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from browser_support import (
    LiveProxy,
    assert_metrics_shown,
    assert_waiting_shown,
    open_dashboard,
    waiting_to_show,
)

from trio_batcher.observatory.background import BackgroundStats
from trio_batcher.observatory.metrics import Gauges, MetricsRegistry, Timing
from trio_batcher.observatory.pricing import load_pricing

pytestmark = pytest.mark.browser

SONNET = "claude-sonnet-4-5"  # $3 / $15 per million input / output tokens, realtime
BATCH_PRICE = Decimal("0.5")
USAGE = {"input_tokens": 1000, "output_tokens": 500}  # $0.0105 realtime, $0.00525 batched


def gauges(deferrable_waiting: int = 0) -> Gauges:
    return Gauges(
        active=2,
        waiting=deferrable_waiting,
        upstream_in_flight=2,
        upstream_cap=2,
        lanes_waiting={"interactive": 0, "deferrable": deferrable_waiting},
    )


def metrics_document(
    registry: MetricsRegistry,
    background: BackgroundStats,
    gauge: Gauges,
    flex_pending: int = 0,
) -> dict[str, Any]:
    """What ``GET /metrics`` answers the whole view with (``app.metrics_json``)."""
    document = {"view": "gateway", **registry.snapshot(gauge)}
    document["flex"] = registry.flex.snapshot(flex_pending)
    document["background"] = background.snapshot()
    return document


def interactive_traffic(registry: MetricsRegistry, n: int = 40) -> None:
    for i in range(n):
        registry.record_lane_admitted("interactive")
        registry.record_lane_wait("interactive", 0.001 + i / 10_000)
        registry.record_success(SONNET, USAGE, Timing(total=0.4 + i / 100, queue=0.001))


def traffic_that_waits() -> tuple[MetricsRegistry, BackgroundStats]:
    registry = MetricsRegistry(window=64, pricing=load_pricing(None))
    interactive_traffic(registry)
    flex = registry.flex
    for _ in range(12):  # 12 flex requests: windows of 4, 4 and 2 sent, 2 still in a window
        flex.joined()
    flex.refused()  # a 13th found FLEX_MAX_PENDING waiting
    flex.flushed(4, "size")
    flex.flushed(4, "size")
    flex.flushed(2, "time")
    for i in range(8):  # answered by their batches after 30..37 s (as pipeline.flex records)
        flex.answered("succeeded", 30.0 + i, SONNET, USAGE, BATCH_PRICE)
        registry.record_offline(
            SONNET, USAGE, requests=1, surface="openai.chat", price_factor=BATCH_PRICE
        )
    flex.timed_out("realtime", 60.0)  # sent again realtime at full price
    flex.timed_out("error", 60.0)
    flex.dropped(SONNET, USAGE, BATCH_PRICE)  # its client had left
    background = BackgroundStats()
    for _ in range(25):
        background.record_accepted()
    for i in range(22):
        background.record_started(0.5 * i)  # queue waits 0, 0.5, ..., 10.5 s
        registry.record_lane_admitted("deferrable")
        registry.record_lane_wait("deferrable", 0.5 * i)
    for _ in range(15):
        background.record_finished("completed", started=True)
    background.record_finished("incomplete", started=True)
    background.record_finished("failed", started=True)
    background.record_finished("cancelled", started=True)
    background.record_finished("cancelled", started=False)  # cancelled while queued
    for _ in range(3):
        background.record_rejected()
    registry.record_lane_shed("deferrable", "queue_full")
    return registry, background


def test_dashboard_shows_flex_background_and_the_lanes(
    live_proxy: LiveProxy, open_page: Any
) -> None:
    registry, background = traffic_that_waits()
    snap = metrics_document(registry, background, gauges(deferrable_waiting=3), flex_pending=2)
    opened = open_dashboard(
        live_proxy,
        open_page,
        lambda: metrics_document(registry, background, gauges(deferrable_waiting=3), 2),
    )
    assert_metrics_shown(opened, snap)  # every tile and table, this panel among them
    assert opened.page.locator("#waiting-panel").is_visible()
    # Flex: the numbers worked out by hand from what was recorded above.
    assert opened.number("flex-requests") == 12
    assert opened.number("flex-pending") == 2
    assert opened.number("flex-rejected") == 1
    assert opened.number("flex-batches") == 3
    assert opened.text("flex-mean-size") == "3.33"  # 10 requests in 3 batches
    assert opened.number("flex-max-size") == 4
    # 10 waits: 30..37 s answered, two 60 s timeouts; nearest rank.
    assert opened.text("flex-wait-p50") == "34.000 s"
    assert opened.text("flex-wait-p95") == "60.000 s"
    assert opened.number("flex-timeouts-realtime") == 1
    assert opened.number("flex-timeouts-error") == 1
    assert opened.number("flex-dropped") == 1
    assert opened.text("flex-dropped-cost") == "$0.00525"  # billed all the same, batch price
    assert opened.text("flex-cost-batch") == "$0.0420"  # 8 × $0.0105 × 0.5
    assert opened.text("flex-cost-realtime") == "$0.0840"  # 8 × $0.0105
    assert opened.text("flex-saved") == "$0.0420"
    # Background: 25 accepted, 22 started, 19 finished (one before it started), 3 refused.
    assert opened.number("bg-accepted") == 25
    assert opened.number("bg-queued") == 2
    assert opened.number("bg-running") == 4
    assert opened.number("bg-completed") == 15
    assert opened.number("bg-incomplete") == 1
    assert opened.number("bg-failed") == 1
    assert opened.number("bg-cancelled") == 2
    assert opened.number("bg-rejected") == 3
    assert opened.text("bg-wait-p50") == "5.000 s"  # rank round(10.5) = 10 of 22 waits 0..10.5 s
    assert opened.text("bg-wait-p95") == "10.000 s"
    # Lanes: the interactive waits stay in milliseconds while the deferrable ones queue.
    assert opened.number("lane-admitted-interactive") == 40
    assert opened.number("lane-admitted-deferrable") == 22
    assert opened.number("lane-shed-deferrable") == 1
    assert opened.number("lane-waiting-deferrable") == 3
    assert opened.number("lane-waiting-interactive") == 0
    assert opened.text("lane-p50-interactive") == "3.0 ms"
    assert opened.text("lane-p95-deferrable") == "10,000.0 ms"
    opened.screenshot("observability-waiting")
    opened.assert_clean()


def test_with_nothing_that_waits_the_panel_is_hidden(live_proxy: LiveProxy, open_page: Any) -> None:
    registry = MetricsRegistry(window=16, pricing=load_pricing(None))
    interactive_traffic(registry, 5)  # the lanes block counts interactive requests, always
    background = BackgroundStats()
    snap = metrics_document(registry, background, gauges())
    assert snap["lanes"]["interactive"]["admitted"] == 5 and not waiting_to_show(snap)
    opened = open_dashboard(
        live_proxy, open_page, lambda: metrics_document(registry, background, gauges())
    )
    assert_metrics_shown(opened, snap)
    assert not opened.page.locator("#waiting-panel").is_visible()
    # An older proxy or a recording, without the three blocks: hidden too, no console error.
    older = {k: v for k, v in snap.items() if k not in ("flex", "background", "lanes")}
    opened = open_dashboard(live_proxy, open_page, lambda: older)
    assert not opened.page.locator("#waiting-panel").is_visible()
    opened.assert_clean()
    # One request in the deferrable lane is something to show; flex and background say none.
    registry.record_lane_admitted("deferrable")
    registry.record_lane_wait("deferrable", 0.25)
    snap = metrics_document(registry, background, gauges())
    opened = open_dashboard(
        live_proxy, open_page, lambda: metrics_document(registry, background, gauges())
    )
    assert_waiting_shown(opened, snap)
    assert opened.page.locator("#waiting-panel").is_visible()
    assert opened.text("flex-none").startswith("No flex request yet")
    assert opened.text("background-none").startswith("No background response yet")
    assert opened.text("lane-p50-deferrable") == "250.0 ms"
    opened.assert_clean()


def test_a_tenants_own_view_shows_no_gateway_wide_waiting(
    live_proxy: LiveProxy, open_page: Any
) -> None:
    """The three blocks count every tenant's requests, so a tenant's own view has none of
    them (docs/metrics.md, "Who sees what"), and the page hides the panel even if one came."""
    registry = MetricsRegistry(
        window=8, pricing=load_pricing(None), known_tenants=lambda: {"team-a"}
    )
    registry.record_success(SONNET, USAGE, Timing(total=0.1), tenant="team-a")
    full, background = traffic_that_waits()
    own = registry.tenant_snapshot("team-a")
    assert not {"flex", "background", "lanes"} & set(own)
    leaked = {**metrics_document(full, background, gauges(3), 2), **own}
    for snapshot in (own, leaked):
        opened = open_dashboard(live_proxy, open_page, lambda s=snapshot: s)
        assert opened.text("own-view") == "team-a's own view"
        assert not opened.page.locator("#waiting-panel").is_visible()
        opened.assert_clean()
