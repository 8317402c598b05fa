"""The pages served by a running proxy: the dashboard polls the live ``/metrics``.

A real proxy runs as a child process (``trio-batcher serve --simulate`` with
``METRICS_ENABLED=1`` and batching on); the test sends it chat requests over loopback, opens
``/dashboard`` in headless Chromium, and compares what the page shows with what ``/metrics``
answers. The other pages, served at ``/visuals/<page>``, read the JSON twins of their data.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from browser_support import LiveProxy, assert_metrics_shown, assert_report_shown

pytestmark = pytest.mark.browser

# Two priced families and one the price table does not know.
MODELS = [
    "claude-sonnet-4-5",
    "claude-3-5-haiku-latest",
    "claude-unpriced-test",
]  # a claude-* id the price table lacks


def send_traffic(proxy: LiveProxy, count: int, streams: int) -> None:
    jobs = [(MODELS[i % len(MODELS)], False) for i in range(count)]
    jobs += [(MODELS[i % 2], True) for i in range(streams)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = list(pool.map(lambda job: proxy.chat(*job), jobs))
    assert statuses == [200] * len(jobs)


def wait_for_total(opened: Any, total: int) -> None:
    opened.page.wait_for_function(
        "total => document.querySelector('[data-testid=req-total]')?.textContent === String(total)",
        arg=total,
        timeout=15_000,
    )


def test_dashboard_shows_the_live_metrics_and_follows_new_traffic(
    live_proxy: LiveProxy, open_page: Any
) -> None:
    send_traffic(live_proxy, count=12, streams=4)
    snapshot = live_proxy.wait_idle()
    assert snapshot["requests"]["total"] == 16

    opened = open_page(live_proxy.url + "/dashboard", ready="body[data-mode='live']")
    # Served at /dashboard the page still finds its stylesheet and scripts under /visuals/.
    radius = opened.page.eval_on_selector(".tile", "e => getComputedStyle(e).borderRadius")
    assert radius == "10px"
    wait_for_total(opened, 16)
    # Two polls make a rate; the page keeps polling on its own.
    opened.page.wait_for_function(
        "Number(document.querySelector('[data-testid=poll-count]')?.textContent) >= 2",
        timeout=10_000,
    )
    # Idle, so every counter and latency window is what /metrics says now.
    assert_metrics_shown(opened, live_proxy.get_json("/metrics"))
    assert opened.page.get_by_test_id("cost-complete").inner_text().startswith("lower bound")

    # New traffic shows up without a reload.
    send_traffic(live_proxy, count=6, streams=0)
    after = live_proxy.wait_idle()
    wait_for_total(opened, after["requests"]["total"])
    assert_metrics_shown(opened, live_proxy.get_json("/metrics"))
    opened.screenshot("observability-live")
    opened.assert_clean()


@pytest.mark.parametrize("page", ["index", "batching", "backpressure", "results"])
def test_pages_served_by_the_proxy_read_their_json_data(
    live_proxy: LiveProxy, open_page: Any, page: str
) -> None:
    opened = open_page(f"{live_proxy.url}/visuals/{page}.html")
    if page != "index":
        assert opened.page.get_by_test_id("data-source").inner_text().endswith(".json")
    if page == "results":
        assert_report_shown(opened, live_proxy.get_json("/visuals/data/results.json"))
    opened.assert_clean()
