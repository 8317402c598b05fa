"""Helpers for the browser tests: the pages' data files, number matching, a live proxy.

Kept out of conftest.py so test modules can import them by name (``browser_support``).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
VISUALS = ROOT / "visuals"
DATA = VISUALS / "data"
SCREENSHOTS = ROOT / "tests" / "artifacts" / "screenshots"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
_SERVING = re.compile(r"serving OpenAI-compatible API on (http://\S+)/v1")


def chromium_path() -> str | None:
    """``$CHROMIUM`` if set, else Debian's ``chromium`` on PATH (``/usr/bin/chromium``)."""
    explicit = os.environ.get("CHROMIUM")
    if explicit:
        return explicit if Path(explicit).exists() else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class Opened:
    """A page and every console error / uncaught exception it produced."""

    page: Any
    errors: list[str] = field(default_factory=list)

    def text(self, testid: str) -> str:
        return str(self.page.get_by_test_id(testid).first.inner_text())

    def number(self, testid: str) -> float:
        return parse_number(self.text(testid))

    def screenshot(self, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def assert_clean(self) -> None:
        assert self.errors == [], f"console errors: {self.errors}"


def parse_number(text: str) -> float:
    """The first number in ``text`` ("1,234.5 ms" → 1234.5; "$0.0123" → 0.0123)."""
    match = re.search(r"-?\d[\d,]*(?:\.\d+)?(?:e-?\d+)?", text)
    assert match, f"no number in {text!r}"
    return float(match.group(0).replace(",", ""))


def close_to(shown: float, value: float, digits: int) -> bool:
    """``shown`` is ``value`` rounded to ``digits`` decimals (either rounding of a half)."""
    return bool(abs(shown - value) <= 0.5 * 10**-digits + 1e-9)


def load_js_data(name: str) -> Any:
    """What ``visuals/data/<name>.js`` sets its global to: what a file:// page shows."""
    text = (DATA / f"{name}.js").read_text()
    match = re.fullmatch(r"window\.\w+ = (.*);\n?", text, flags=re.DOTALL)
    assert match, f"{name}.js is not one global assignment"
    return json.loads(match.group(1))


def results_page_scenario(name: str) -> dict[str, Any]:
    """The ``name`` scenario results.html shows: the report's own, or for a report without
    one, the last recorded run (``visuals/data/<name>.js``, from ``build_data.py --<name>``)."""
    own = load_js_data("results")["scenarios"].get(name)
    if own is not None:
        return dict(own)
    recorded: dict[str, Any] = load_js_data(name)["scenario"]
    return recorded


# -- what the pages must show ------------------------------------------------------------


def assert_shows(opened: Opened, testid: str, value: float, digits: int) -> None:
    shown = opened.number(testid)
    assert close_to(shown, value, digits), f"{testid}: page shows {shown}, data says {value}"


def assert_metrics_shown(opened: Opened, snap: dict[str, Any]) -> None:
    """The tiles and tables show ``snap``, a ``/metrics`` document."""
    req = snap["requests"]
    for testid, value in (
        ("req-total", req["total"]),
        ("req-success", req["success"]),
        ("req-error", req["error"]),
        ("req-stream", req["stream"]),
        ("shed-total", snap["rejected"]["total"]),
        ("tokens-total", snap["tokens"]["total"]),
        ("windows-flushed", snap["windows"]["flushed"]),
        ("inflight", snap["concurrency"]["upstream_in_flight"]),
        ("active", snap["concurrency"]["active"]),
        ("waiting", snap["concurrency"]["waiting"]),
    ):
        assert opened.number(testid) == value, testid
    lat = snap["latency"]
    for testid, key in (
        ("lat-p50", "p50_ms"),
        ("lat-p95", "p95_ms"),
        ("lat-p99", "p99_ms"),
        ("lat-max", "max_ms"),
    ):
        assert_shows(opened, testid, lat[key], 1)
    cost = snap["cost"]["estimated_cost_usd"]
    shown = opened.number("cost-total")
    assert math.isclose(shown, cost, rel_tol=0.005, abs_tol=1e-9), (shown, cost)
    complete = opened.text("cost-complete")
    assert complete.startswith("complete" if snap["cost"]["estimate_complete"] else "lower bound")
    for name, model in snap["by_model"].items():
        assert opened.number(f"model-requests-{name}") == model["requests"], name
    for status, count in snap["requests"]["by_status"].items():
        assert opened.number(f"status-{status}") == count
    for reason, count in snap["rejected"]["by_reason"].items():
        assert opened.number(f"shed-{reason}") == count
    for key, part in snap["timing"].items():
        if part["p50"] is not None:
            assert_shows(opened, f"timing-{key}-p50", part["p50"], 2)
    for chart in ("chart-latency", "chart-timing", "chart-inflight", "chart-rates"):
        assert opened.page.locator(f"svg[data-testid={chart}] path").count() > 0, chart
    assert_tenants_shown(opened, snap.get("by_tenant"))
    assert_upstreams_shown(opened, snap)
    assert_waiting_shown(opened, snap)


def assert_tenants_shown(opened: Opened, by_tenant: dict[str, Any] | None) -> None:
    """The tenant table shows ``by_tenant`` (cost and shed rate per tenant), or, when at most
    one tenant has traffic, is hidden behind a one-line note."""
    active = {
        name: t
        for name, t in (by_tenant or {}).items()
        if t["requests"]["total"] + t["shed"]["total"]
    }
    note = opened.page.get_by_test_id("tenants-none")
    body = opened.page.locator("#tenants-body")
    if len(active) < 2:
        assert note.is_visible() and not body.is_visible()
        return
    assert body.is_visible() and not note.is_visible()
    for name, t in active.items():
        assert opened.number(f"tenant-requests-{name}") == t["requests"]["total"], name
        assert opened.number(f"tenant-errors-{name}") == t["requests"]["error"], name
        assert opened.number(f"tenant-shed-{name}") == t["shed"]["total"], name
        rate = 100 * t["shed"]["total"] / (t["requests"]["total"] + t["shed"]["total"])
        assert_shows(opened, f"tenant-shed-rate-{name}", rate, 1)
        assert_shows(opened, f"tenant-bar-shed-{name}", rate, 1)
        for testid in (f"tenant-cost-{name}", f"tenant-bar-cost-{name}"):
            shown, cost = opened.number(testid), t["estimated_cost_usd"]
            assert math.isclose(shown, cost, rel_tol=0.005, abs_tol=1e-9), (testid, shown, cost)
        latency = t["timing"]["total_ms"]
        if latency["p95"] is not None:
            assert_shows(opened, f"tenant-p50-{name}", latency["p50"], 1)
            assert_shows(opened, f"tenant-p95-{name}", latency["p95"], 1)


def assert_upstreams_shown(opened: Opened, snap: dict[str, Any]) -> None:
    """The upstream table shows ``by_upstream`` and the routing counts, or, with nothing to
    split (no ``by_upstream``, or only ``default`` and no failover or spill), is hidden."""
    by_upstream, routing = snap.get("by_upstream"), snap.get("routing")
    panel = opened.page.locator("#upstreams-panel")
    if (
        not by_upstream
        or not routing
        or (
            list(by_upstream) == ["default"]
            and routing["failovers_total"] + routing["spills_total"] == 0
        )
    ):
        assert not panel.is_visible()
        return
    assert panel.is_visible()
    assert opened.number("routing-failovers") == routing["failovers_total"]
    assert opened.number("routing-spills") == routing["spills_total"]
    for name, u in by_upstream.items():
        assert opened.number(f"upstream-requests-{name}") == u["requests"], name
        assert opened.number(f"upstream-errors-{name}") == u["errors"], name
        assert opened.number(f"upstream-attempts-{name}") == u["attempts"], name
        shown, cost = opened.number(f"upstream-cost-{name}"), u["cost_usd"]
        assert math.isclose(shown, cost, rel_tol=0.005, abs_tol=1e-9), (name, shown, cost)
        if u["latency"]["p50_ms"] is not None:
            assert_shows(opened, f"upstream-p50-{name}", u["latency"]["p50_ms"], 1)
            assert_shows(opened, f"upstream-p95-{name}", u["latency"]["p95_ms"], 1)
        if u["cache_read_ratio"] is not None:
            assert_shows(opened, f"upstream-cache-read-{name}", 100 * u["cache_read_ratio"], 1)


def waiting_to_show(snap: dict[str, Any]) -> bool:
    """Whether the "Requests that can wait" panel has anything to show: a flex request, a
    background response or a deferrable admission, in the whole view (never a tenant's)."""
    if snap.get("view") == "tenant":
        return False
    flex, background = snap.get("flex"), snap.get("background")
    deferrable = (snap.get("lanes") or {}).get("deferrable")
    return bool(
        (flex and flex["requests"] + flex["rejected_full"])
        or (background and background["accepted"] + background["rejected"])
        or (
            deferrable
            and deferrable["admitted"] + deferrable["shed"] + (deferrable["waiting"] or 0)
        )
    )


def assert_waiting_shown(opened: Opened, snap: dict[str, Any]) -> None:
    """The "Requests that can wait" panel shows ``flex``, ``background`` and ``lanes``, or,
    with nothing to show (:func:`waiting_to_show`), is hidden."""
    panel = opened.page.locator("#waiting-panel")
    if not waiting_to_show(snap):
        assert not panel.is_visible()
        return
    assert panel.is_visible()
    flex = snap.get("flex")
    if flex and flex["requests"] + flex["rejected_full"]:
        assert not opened.page.get_by_test_id("flex-none").is_visible()
        assert opened.number("flex-requests") == flex["requests"]
        assert opened.number("flex-pending") == flex["pending"]
        assert opened.number("flex-rejected") == flex["rejected_full"]
        batches = flex["batches"]
        assert opened.number("flex-batches") == batches["submitted"]
        if batches["mean_size"] is not None:
            assert_shows(opened, "flex-mean-size", batches["mean_size"], 2)
        assert opened.number("flex-max-size") == batches["max_size"]
        for key in ("p50", "p95"):
            if flex["wait"][f"{key}_ms"] is not None:
                assert_shows(opened, f"flex-wait-{key}", flex["wait"][f"{key}_ms"] / 1000, 3)
        for policy, count in flex["timeouts"].items():
            assert opened.number(f"flex-timeouts-{policy}") == count, policy
        assert opened.number("flex-dropped") == flex["dropped_results"]
        for testid, key in (
            ("flex-cost-batch", "batch_usd"),
            ("flex-cost-realtime", "realtime_usd"),
            ("flex-saved", "saved_usd"),
            ("flex-dropped-cost", "dropped_usd"),
        ):
            shown, cost = opened.number(testid), flex["cost"][key]
            assert math.isclose(shown, cost, rel_tol=0.005, abs_tol=1e-9), (testid, shown, cost)
    else:
        assert opened.page.get_by_test_id("flex-none").is_visible()
        assert opened.page.get_by_test_id("flex-requests").count() == 0
    background = snap.get("background")
    if background and background["accepted"] + background["rejected"]:
        assert not opened.page.get_by_test_id("background-none").is_visible()
        for key in (
            "accepted",
            "queued",
            "running",
            "completed",
            "incomplete",
            "failed",
            "cancelled",
        ):
            assert opened.number(f"bg-{key}") == background[key], key
        assert opened.number("bg-rejected") == background["rejected"]
        wait = background["queue_wait_s"]
        for key in ("p50", "p95"):
            if wait[key] is not None:
                assert_shows(opened, f"bg-wait-{key}", wait[key], 3)
    else:
        assert opened.page.get_by_test_id("background-none").is_visible()
        assert opened.page.get_by_test_id("bg-queued").count() == 0
    lanes = snap.get("lanes")
    assert opened.page.get_by_test_id("lanes-none").is_visible() == (not lanes)
    for name, lane in (lanes or {}).items():
        assert opened.number(f"lane-admitted-{name}") == lane["admitted"], name
        assert opened.number(f"lane-shed-{name}") == lane["shed"], name
        if lane["waiting"] is not None:
            assert opened.number(f"lane-waiting-{name}") == lane["waiting"], name
        for key in ("p50", "p95"):
            if lane["queue_wait_ms"][key] is not None:
                assert_shows(opened, f"lane-{key}-{name}", lane["queue_wait_ms"][key], 1)


def open_dashboard(
    proxy: LiveProxy, open_page: Callable[..., Opened], snapshot: Callable[[], Any]
) -> Opened:
    """``/dashboard`` of the running proxy, its ``/metrics`` polls answered with
    ``snapshot()`` (called for each poll: uptime moves on, so the rate charts have an
    interval), after two polls."""

    def answer(route: Any) -> None:
        body = json.dumps(snapshot())
        route.fulfill(status=200, content_type="application/json", body=body)

    opened = open_page(
        proxy.url + "/dashboard", ready="body[data-mode='live']", routes={"**/metrics": answer}
    )
    opened.page.wait_for_function(
        "Number(document.querySelector('[data-testid=poll-count]')?.textContent) >= 2",
        timeout=10_000,
    )
    return opened


def assert_report_shown(opened: Opened, report: dict[str, Any]) -> None:
    status = opened.text("report-status")
    assert status.startswith("PASS" if report["ok"] else "FAIL")
    for name, scenario in report["scenarios"].items():
        badge = opened.text(f"scenario-{name}-ok")
        assert badge == ("checks held" if scenario["ok"] else "FAILED")
        held = sum(1 for c in scenario["checks"] if c["ok"])
        assert opened.text(f"checks-{name}").startswith(f"{held} of {len(scenario['checks'])}")
        for i, target in enumerate(scenario["targets"]):
            if target["actual"] is not None:
                assert_shows(opened, f"target-{name}-{i}-actual", target["actual"], 2)
            met = opened.page.get_by_test_id(f"target-{name}-{i}-met")
            expected = {True: "true", False: "false", None: "null"}[target["met"]]
            assert met.get_attribute("data-met") == expected
            assert met.inner_text() == {True: "met", False: "MISSED", None: "n/a"}[target["met"]]
        for phase in scenario["phases"]:
            prefix = f"phase-{name}-{phase['name']}"
            assert_shows(opened, f"{prefix}-goodput", phase["rates"]["goodput"], 1)
            if phase["latency_ms"]["p50"] is not None:
                assert_shows(opened, f"{prefix}-p50", phase["latency_ms"]["p50"], 1)
                assert_shows(opened, f"{prefix}-p99", phase["latency_ms"]["p99"], 1)
            assert opened.number(f"{prefix}-maxinflight") == phase["upstream"]["max_in_flight"]
    floor = report["scenarios"].get("overhead", {}).get("summary", {}).get("floor")
    if floor:
        assert_shows(opened, "floor-goodput", floor["goodput_per_s"], 1)
        assert_shows(opened, "floor-ratio", floor["throughput_ratio"] * 100, 1)
        assert_shows(opened, "floor-p50", floor["p50_ms"], 1)
        assert_shows(opened, "floor-cpu", floor["cpu_ms_per_request"], 2)
        assert_shows(opened, "floor-above", floor["proxy_cpu_above_floor_ms"], 2)


@dataclass(frozen=True)
class LiveProxy:
    url: str

    def get_json(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=10) as response:
            return json.load(response)

    def chat(self, model: str, stream: bool = False) -> int:
        body: dict[str, Any] = {
            "model": model,
            "max_tokens": 16,
            "stream": stream,
            "messages": [{"role": "user", "content": "hello from the browser tests"}],
        }
        request = urllib.request.Request(
            self.url + "/v1/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
            return int(response.status)

    def wait_idle(self, timeout: float = 15.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            snapshot = self.get_json("/metrics")
            conc = snapshot["concurrency"]
            if not (conc["active"] or conc["waiting"] or conc["upstream_in_flight"]):
                return snapshot
            if time.monotonic() > deadline:
                raise TimeoutError(f"the proxy is not idle: {conc}")
            time.sleep(0.05)


@contextmanager
def running_proxy() -> Iterator[LiveProxy]:
    """``trio-batcher serve --simulate`` with metrics and batching on, as a child process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BATCH_", "MAX_", "METRICS_"))}
    env.update(
        METRICS_ENABLED="1",
        BATCH_ENABLED="1",
        BATCH_MAX_SIZE="4",
        BATCH_MAX_WAIT_MS="5",
        BATCH_MAX_CONCURRENCY="6",
        BATCH_ADAPTIVE="1",
    )
    cmd = [sys.executable, "-m", "trio_batcher", "serve", "--simulate", "--port", "0"]
    cmd += ["--log-level", "warning", "--sim-ttft-ms", "20", "--sim-tokens-per-s", "400"]
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "proxy.log"
        with log_path.open("w") as log:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=log, stdout=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            url = None
            while url is None:
                if m := _SERVING.search(log_path.read_text()):
                    url = m.group(1)
                elif proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the proxy did not start:\n{log_path.read_text()}")
                else:
                    time.sleep(0.05)
            yield LiveProxy(url)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
