"""Every page opened from the file system shows the numbers of its bundled data file.

A page opened as ``file://`` reads ``visuals/data/<name>.js``; each test reads the same file,
compares it with what the page rendered (elements marked ``data-testid``), asserts the page
logged no console error, and saves a screenshot to ``tests/artifacts/screenshots/``.
"""

from __future__ import annotations

import heapq
import math
from typing import Any

import pytest
from browser_support import (
    VISUALS,
    Opened,
    assert_metrics_shown,
    assert_report_shown,
    assert_shows,
    load_js_data,
)

pytestmark = pytest.mark.browser


def file_url(page: str) -> str:
    return (VISUALS / page).as_uri()


def nearest_rank(values: list[float], p: float) -> float:
    ordered = sorted(values)
    rank = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[rank]


# -- index ---------------------------------------------------------------------------------


def test_index_links_to_the_four_pages(open_page: Any) -> None:
    opened = open_page(file_url("index.html"))
    for name in ("batching", "observability", "backpressure", "results"):
        href = opened.page.get_by_test_id(f"link-{name}").get_attribute("href")
        assert href == f"{name}.html"
        assert (VISUALS / href).is_file()
    opened.screenshot("index")
    opened.assert_clean()


# -- batching ------------------------------------------------------------------------------


def simulate(
    arrivals: list[float], services: list[float], size: int, wait: float, cap: float
) -> dict[str, Any]:
    """The windowing rules of trio_batcher/batching.py, written again independently of the
    page's JavaScript: one open window, flush on size or ``wait`` after its first arrival,
    then FIFO through ``cap`` shared upstream slots; call k lasts ``services[k]``."""
    order = sorted(arrivals)
    flushed_at: list[float] = []
    reasons = {"size": 0, "time": 0}
    window: list[float] = []
    for t in order:
        if window and t >= window[0] + wait:
            flushed_at += [window[0] + wait] * len(window)
            reasons["time"] += 1
            window = []
        window.append(t)
        if len(window) >= size:
            flushed_at += [t] * len(window)
            reasons["size"] += 1
            window = []
    if window:
        flushed_at += [window[0] + wait] * len(window)
        reasons["time"] += 1
    slots = [-math.inf] * int(min(cap, len(order)))
    heapq.heapify(slots)
    starts, ends, previous = [], [], -math.inf
    for k, ready in enumerate(flushed_at):
        start = max(ready, heapq.heappop(slots), previous)
        end = start + services[k % len(services)]
        heapq.heappush(slots, end)
        starts.append(start)
        ends.append(end)
        previous = start
    events = sorted([(s, 1) for s in starts] + [(e, -1) for e in ends])
    level = peak = 0
    for _, change in events:
        level += change
        peak = max(peak, level)
    return {
        "reasons": reasons,
        "max_in_flight": peak,
        "first_start": min(starts),
        "last_end": max(ends),
        "p50": nearest_rank([e - a for e, a in zip(ends, order, strict=True)], 50),
        "p99": nearest_rank([e - a for e, a in zip(ends, order, strict=True)], 99),
    }


def column(table: dict[str, Any], name: str) -> list[Any]:
    i = table["columns"].index(name)
    return [row[i] for row in table["rows"]]


def set_control(opened: Opened, name: str, value: float) -> None:
    opened.page.fill(f"#{name}", str(value))  # fires `input`, which re-runs the simulation


def assert_simulation(opened: Opened, expected: dict[str, Any]) -> None:
    assert opened.number("sim-windows-size") == expected["reasons"]["size"]
    assert opened.number("sim-windows-time") == expected["reasons"]["time"]
    assert opened.number("sim-max-inflight") == expected["max_in_flight"]
    assert_shows(opened, "sim-first-start", expected["first_start"], 1)
    assert_shows(opened, "sim-last-end", expected["last_end"], 1)
    assert_shows(opened, "sim-p50", expected["p50"], 1)
    assert_shows(opened, "sim-p99", expected["p99"], 1)


def test_batching_page_shows_the_recorded_burst_and_resimulates_it(open_page: Any) -> None:
    data = load_js_data("burst-trace")
    batched = data["traces"]["batched"]
    summary = data["summary"]["batched"]
    opened = open_page(file_url("batching.html"))
    assert opened.text("data-source") == "data/burst-trace.js"

    # Recorded numbers, as the bench measured them.
    peak = max(n for _, n in batched["upstream_in_flight"]["rows"])
    assert summary["upstream_max_in_flight"] == peak
    assert opened.number("rec-max-inflight") == peak
    assert opened.number("rec-windows-size") == summary["windows"]["by_reason"]["size"]
    assert opened.number("rec-windows-time") == summary["windows"]["by_reason"]["time"]
    unbatched_peak = data["summary"]["unbatched"]["upstream_max_in_flight"]
    assert opened.number("unb-max-inflight") == unbatched_peak
    assert_shows(opened, "rec-first-start", min(column(batched["upstream_calls"], "start_ms")), 1)
    assert_shows(opened, "rec-last-end", max(column(batched["upstream_calls"], "end_ms")), 1)
    # Latency from the intended send time: the bench's own definition, so its own p50/p99.
    assert_shows(opened, "rec-p50", summary["latency_p50_ms"], 1)
    assert_shows(opened, "rec-p99", summary["latency_p99_ms"], 1)
    queue = data["phases"]["burst-batched"]["proxy_timing_ms"]["queue"]["p50"]
    assert_shows(opened, "rec-queue-p50", queue, 1)
    assert str(len(batched["upstream_calls"]["rows"])) in opened.text("rec-calls")

    # The page's simulation agrees with an independent one, at the recorded settings...
    calls = sorted(
        zip(
            column(batched["upstream_calls"], "start_ms"),
            column(batched["upstream_calls"], "end_ms"),
            strict=True,
        )
    )
    services = [end - start for start, end in calls]
    settings = batched["settings"]
    size, wait = int(settings["BATCH_MAX_SIZE"]), float(settings["BATCH_MAX_WAIT_MS"])
    cap = int(settings["BATCH_MAX_CONCURRENCY"])
    intended = column(batched["requests"], "intended_ms")
    assert_simulation(opened, simulate(intended, services, size, wait, cap))
    opened.screenshot("batching")

    # ... after the controls change: windows that flush on time ...
    set_control(opened, "size", 64)
    set_control(opened, "wait", 2)
    set_control(opened, "cap", 10)
    on_time = simulate(intended, services, 64, 2, 10)
    assert on_time["reasons"]["time"] > 1
    assert_simulation(opened, on_time)
    # ... and on size ...
    set_control(opened, "size", 5)
    set_control(opened, "wait", 3)
    set_control(opened, "cap", 40)
    assert_simulation(opened, simulate(intended, services, 5, 3, 40))
    # ... on the actual send times ...
    opened.page.select_option("#arrivals", "sent_ms")
    sent = column(batched["requests"], "sent_ms")
    assert_simulation(opened, simulate(sent, services, 5, 3, 40))
    # ... and with batching off: no windows, no cap.
    opened.page.uncheck("#batching")
    off = simulate(sent, services, 1, 0, math.inf)
    assert opened.number("sim-max-inflight") == off["max_in_flight"]
    assert_shows(opened, "sim-last-end", off["last_end"], 1)
    assert opened.text("sim-windows-size") == "–"

    # Playback moves the clock without errors.
    opened.page.click("#reset")
    opened.page.click("#play")
    opened.page.wait_for_function(
        "document.querySelector('[data-testid=clock]').textContent !== 't = 0.0 ms'"
    )
    opened.page.click("#play")
    opened.assert_clean()


# -- observability (saved recording) ---------------------------------------------------------


def test_observability_page_replays_the_saved_recording(open_page: Any) -> None:
    data = load_js_data("metrics-snapshot")
    assert data["snapshot"] == data["history"][-1]
    opened = open_page(file_url("observability.html"))
    assert opened.page.locator("body").get_attribute("data-mode") == "saved"
    assert "Saved recording" in opened.page.inner_text("#banner")
    assert_metrics_shown(opened, data["snapshot"])
    opened.screenshot("observability")
    opened.assert_clean()


# -- backpressure --------------------------------------------------------------------------


def test_backpressure_page_shows_the_overload_steps(open_page: Any) -> None:
    data = load_js_data("overload")
    opened = open_page(file_url("backpressure.html"))
    assert opened.text("data-source") == "data/overload.js"
    assert str(int(data["summary"]["capacity_per_s"])) in opened.text("capacity")
    for i, step in enumerate(data["summary"]["steps"]):
        assert_shows(opened, f"step-{i}-offered", step["offered_per_s"], 1)
        assert_shows(opened, f"step-{i}-goodput", step["goodput_per_s"], 1)
        assert_shows(opened, f"step-{i}-shed", step["shed_per_s"], 1)
        assert_shows(opened, f"step-{i}-p50", step["admitted_p50_ms"], 1)
        assert_shows(opened, f"step-{i}-p99", step["admitted_p99_ms"], 1)
        assert opened.number(f"step-{i}-maxinflight") == step["upstream_max_in_flight"]
    for i, target in enumerate(data["targets"]):
        if target["actual"] is not None:
            assert_shows(opened, f"target-{i}-actual", target["actual"], 1)
        met = opened.page.get_by_test_id(f"target-{i}-met")
        assert met.get_attribute("data-met") == str(target["met"]).lower().replace("none", "null")
    held = sum(1 for c in data["checks"] if c["ok"])
    assert opened.text("checks-summary").startswith(f"{held} of {len(data['checks'])}")
    opened.screenshot("backpressure")
    opened.assert_clean()


# -- results -------------------------------------------------------------------------------


def test_results_page_shows_the_latest_report(open_page: Any) -> None:
    report = load_js_data("results")
    opened = open_page(file_url("results.html"))
    assert opened.text("data-source") == "data/results.js"
    assert opened.text("command") == report["command"]
    assert_report_shown(opened, report)
    opened.screenshot("results")
    opened.assert_clean()
