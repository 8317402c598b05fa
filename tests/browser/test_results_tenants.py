"""results.html draws the ``tenants`` scenario: the quiet tenant's latency alone and under
the flood, and the admitted shares under 3:1, with the numbers of the data it read.

Opened from the file system, the page shows the report's own ``tenants`` scenario, or, for a
report without one, the last recorded run (``visuals/data/tenants.js``, written by
``visuals/build_data.py --tenants``).
"""

from __future__ import annotations

from typing import Any

import pytest
from browser_support import VISUALS, assert_shows, results_page_scenario

pytestmark = pytest.mark.browser


def test_results_page_charts_the_tenants_latency_and_admitted_shares(open_page: Any) -> None:
    scenario = results_page_scenario("tenants")
    summary = scenario["summary"]
    quiet, loud = summary["quiet_tenant"], summary["flooding_tenant"]
    flood, weighted = summary["flood"], summary["weighted"]
    opened = open_page((VISUALS / "results.html").as_uri())
    section = opened.page.get_by_test_id("scenario-tenants")
    assert section.count() == 1
    charts = ["latency", "flood", "share", "admissions"]
    for chart in charts:
        assert section.get_by_test_id(f"chart-tenants-{chart}").is_visible(), chart
    # Bars: two categories of two (latency), of three (the flood), of two (the shares).
    for chart, bars in (("latency", 4), ("flood", 6), ("share", 4)):
        assert section.get_by_test_id(f"chart-tenants-{chart}").locator("rect").count() >= bars
    # Admissions over time: one line per tenant, and the window's two edges.
    admissions = section.get_by_test_id("chart-tenants-admissions")
    assert admissions.locator("path").count() >= 2
    assert_shows(opened, "tenants-quiet-alone-p50", summary["quiet_alone"]["latency_p50_ms"], 1)
    assert_shows(opened, "tenants-quiet-loaded-p50", flood[quiet]["latency_p50_ms"], 1)
    assert_shows(opened, "tenants-quiet-ratio", summary["quiet_p50_ratio"], 2)
    assert opened.number("tenants-quiet-shed") == flood[quiet]["shed"]
    assert opened.number("tenants-flood-shed") == flood[loud]["shed"]
    assert opened.number("tenants-admitted-heavy") == weighted["admitted"][loud]
    assert opened.number("tenants-admitted-light") == weighted["admitted"][quiet]
    assert_shows(opened, "tenants-ratio", weighted["ratio"], 2)
    held = sum(1 for c in scenario["checks"] if c["ok"])
    assert opened.text("checks-tenants").startswith(f"{held} of {len(scenario['checks'])}")
    opened.screenshot("results-tenants")
    opened.assert_clean()
