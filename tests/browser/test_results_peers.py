"""results.html shows the ``peers`` scenario: every load through every gateway side by side,
with the numbers of the data it read, and a CPU chart per load.

Opened from the file system, the page shows the report's own ``peers`` scenario, or, for a
report without one (``--scenario all`` does not run it), the last recorded run
(``visuals/data/peers.js``, written by ``visuals/build_data.py --peers``).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from browser_support import VISUALS, assert_shows, results_page_scenario

pytestmark = pytest.mark.browser


def _slug(value: object) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(value).lower()).strip("-")


def test_results_page_puts_the_gateways_side_by_side(open_page: Any) -> None:
    scenario = results_page_scenario("peers")
    table = scenario["summary"]["table"]
    columns = table["columns"]
    opened = open_page((VISUALS / "results.html").as_uri())
    section = opened.page.get_by_test_id("scenario-peers")
    assert section.count() == 1
    assert section.get_by_test_id(re.compile(r"^peers-row-\d+$")).count() == len(table["rows"])
    vias = {row[1] for row in table["rows"]}
    assert {"direct", "trio-batcher", "trio-batcher ×2 workers"} <= vias
    for row in table["rows"]:
        prefix = f"peers-{_slug(row[0])}-{_slug(row[1])}"
        for column in ("ok/s", "p50 ms", "CPU ms/request"):
            value = row[columns.index(column)]
            if value is not None:
                digits = 2 if column == "CPU ms/request" else 1
                assert_shows(opened, f"{prefix}-{_slug(column)}", value, digits)
        share = row[columns.index("of direct")]
        if share is not None:
            assert opened.text(f"{prefix}-of-direct") == share
    for load in {row[0] for row in table["rows"]}:
        chart = section.get_by_test_id(f"chart-peers-{_slug(load)}")
        assert chart.is_visible(), load
        gateways = [r for r in table["rows"] if r[0] == load and r[7] is not None]
        assert chart.locator("rect").count() >= len(gateways)
    held = sum(1 for c in scenario["checks"] if c["ok"])
    assert opened.text("checks-peers").startswith(f"{held} of {len(scenario['checks'])}")
    opened.screenshot("results-peers")
    opened.assert_clean()
