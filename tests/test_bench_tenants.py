"""The ``tenants`` scenario: its arithmetic and verdicts as data, the tenants file it writes,
and its report rendered as markdown.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from trio_batcher.tenants import hash_key, parse_tenants
from trio_batcher_bench.load import Outcome
from trio_batcher_bench.report import render_markdown
from trio_batcher_bench.results import Report, ScenarioResult
from trio_batcher_bench.tenant_stats import (
    admitted_between,
    cumulative_admissions,
    statuses,
    tenant_summary,
    tenants_targets,
    weighted_share,
)
from trio_batcher_bench.tenants import KEYS, tenants_toml


def _ok(done: float, intended: float = 0.0) -> Outcome:
    return Outcome(intended, intended, done, 200, "ok")


def _shed(code: str = "queue_full") -> Outcome:
    return Outcome(0.0, 0.0, 0.001, 429, "shed", code)


def test_statuses_count_successes_by_status_and_failures_by_status_and_code() -> None:
    outcomes = [_ok(0.1), _ok(0.2), _shed(), _shed(), _shed("tenant_queue_full")]
    outcomes.append(Outcome(0.0, 0.0, 1.0, 0, "error", "client_timeout"))
    assert statuses(outcomes) == {
        "0 client_timeout": 1,
        "200": 2,
        "429 queue_full": 2,
        "429 tenant_queue_full": 1,
    }


def test_a_tenants_latency_is_over_its_successes_only_from_the_intended_send() -> None:
    outcomes = [_ok(0.100), _ok(0.300, intended=0.100), _ok(0.150), _shed()]
    summary = tenant_summary(outcomes)
    assert summary["requests"] == 4 and summary["ok"] == 3 and summary["shed"] == 1
    assert summary["latency_p50_ms"] == 150.0  # nearest rank of 100, 150, 200 ms
    assert summary["latency_max_ms"] == 200.0
    assert summary["statuses"] == {"200": 3, "429 queue_full": 1}


def test_admissions_are_the_successes_finished_inside_the_window() -> None:
    by_tenant = {
        "team-a": [_ok(0.5), _ok(1.0), _ok(1.5), _ok(2.9), _ok(3.0), _shed()],
        "team-b": [_ok(0.9), _ok(2.0)],
    }
    # [1.0, 3.0): the first slots (before) and the drain (at or after the end) are left out.
    assert admitted_between(by_tenant, 1.0, 3.0) == {"team-a": 3, "team-b": 1}


def test_the_weighted_share_is_the_heavy_tenants_admissions_over_the_light_ones() -> None:
    assert weighted_share({"a": 300, "b": 100}, "a", "b") == {"ratio": 3.0, "share": 0.75}
    assert weighted_share({"a": 5, "b": 0}, "a", "b") == {"ratio": None, "share": 1.0}
    assert weighted_share({}, "a", "b") == {"ratio": None, "share": None}


def test_cumulative_admissions_count_each_tenants_successes_at_every_bucket_edge() -> None:
    by_tenant = {"a": [_ok(10.05), _ok(10.15), _ok(10.15), _shed()], "b": [_ok(10.1)]}
    table = cumulative_admissions(by_tenant, zero=10.0, bucket=0.1)
    assert table["columns"] == ["t_ms", "a", "b"]
    assert table["rows"] == [[0.0, 0, 0], [100.0, 1, 1], [200.0, 3, 1]]  # up to the last one


def _verdicts(**changes: object) -> dict[str, bool | None]:
    figures: dict[str, object] = {
        "quiet_unloaded_p50_ms": 110.0,
        "quiet_loaded_p50_ms": 150.0,
        "quiet_shed": 0,
        "flood_shed": 164,
        "ratio": 3.1,
        "weights": (3.0, 1.0),
    }
    figures.update(changes)
    return {t.name: t.met for t in tenants_targets(**figures)}  # type: ignore[arg-type]


def test_targets_are_met_when_the_quiet_tenant_keeps_its_latency_and_the_weights_hold() -> None:
    targets = tenants_targets(
        quiet_unloaded_p50_ms=110.0,
        quiet_loaded_p50_ms=150.0,
        quiet_shed=0,
        flood_shed=164,
        ratio=3.1,
        weights=(3.0, 1.0),
    )
    assert [t.met for t in targets] == [True, True, True, True]
    assert targets[0].actual == round(150 / 110, 3) and targets[0].unit == "x"
    assert targets[3].target == "3 ± 10% (2.70 to 3.30)"


def test_each_target_is_missed_on_its_own_figure() -> None:
    missed = [
        (dict(quiet_loaded_p50_ms=221.0), 0),  # more than twice 110 ms
        (dict(quiet_shed=1), 1),
        (dict(flood_shed=0), 2),  # nobody absorbed any shedding: no flood at all
        (dict(ratio=2.69), 3),
        (dict(ratio=3.31), 3),
    ]
    for changes, index in missed:
        verdicts = list(_verdicts(**changes).values())
        assert verdicts[index] is False, changes
        assert all(v for i, v in enumerate(verdicts) if i != index), changes
    # Exactly twice and the edges of the band still meet.
    assert all(_verdicts(quiet_loaded_p50_ms=220.0, ratio=2.7).values())


def test_a_figure_that_could_not_be_measured_is_neither_met_nor_missed() -> None:
    verdicts = list(_verdicts(quiet_unloaded_p50_ms=None, ratio=None).values())
    assert verdicts == [None, True, True, None]


def test_the_tenants_file_is_one_the_proxy_accepts_with_digests_only() -> None:
    text = tenants_toml({"team-a": 3.0})
    tenants = {t.name: t for t in parse_tenants(text)}
    assert tenants["team-a"].weight == 3.0 and tenants["team-b"].weight == 1.0
    for name, key in KEYS.items():
        assert key not in text
        assert list(tenants[name].key_hashes) == [hash_key(key)]


def test_the_markdown_report_shows_the_targets_and_the_latency_table() -> None:
    scenario = ScenarioResult("tenants", "Tenants", "Two tenants.", {})
    scenario.targets = tenants_targets(
        quiet_unloaded_p50_ms=110.0,
        quiet_loaded_p50_ms=240.0,
        quiet_shed=0,
        flood_shed=164,
        ratio=2.98,
        weights=(3.0, 1.0),
    )
    scenario.summary = {
        "latency": {
            "columns": ["series", "requests", "p50_ms", "p99_ms"],
            "rows": [
                ["team-b alone", 20, 110.0, 130.0],
                ["team-b during the flood", 20, 240.0, 260.0],
            ],
        },
        "weighted": {"admitted": {"team-a": 447, "team-b": 150}, "ratio": 2.98},
    }
    report = Report(
        "2026-12-02T00:00:00+00:00", "trio-batcher bench --scenario tenants", False, {}, [scenario]
    )
    markdown = render_markdown(report)
    assert (
        "- **MISSED**: quiet tenant's p50 during the flood, against its p50 alone: 2.18 x"
        in markdown
    )
    assert "- **met**: admitted ratio under saturation with weights 3:1: 2.98 :1" in markdown
    assert "| team-b during the flood | 20 | 240.0 | 260.0 |" in markdown
    assert "    - team-a: 447" in markdown


def _build_data() -> Any:
    path = Path(__file__).resolve().parent.parent / "visuals" / "build_data.py"
    spec = importlib.util.spec_from_file_location("build_data", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_build_data_records_a_tenants_run_for_results_html_without_touching_the_results(
    tmp_path: Path,
) -> None:
    build_data = _build_data()
    tenants = {"ok": True, "title": "Tenants", "phases": [{"name": "flood"}], "error": None}
    report = {"schema": "trio-batcher-bench/1", "command": "c", "scenarios": {"tenants": tenants}}
    path = tmp_path / "tenants-report.json"
    path.write_text(json.dumps(report))
    assert build_data.build_tenants(path, tmp_path) == ["tenants"]
    assert not (tmp_path / "results.json").exists()
    written = json.loads((tmp_path / "tenants.json").read_text())
    assert written["scenario"] == tenants and written["source"]["command"] == "c"
    assert (tmp_path / "tenants.js").read_text().startswith("window.BENCH_TENANTS = {")
    # A whole report that ran it records it too; one that did not leaves the last one alone.
    (tmp_path / "tenants.json").unlink()
    assert build_data.build(path, tmp_path) == ["results", "tenants"]
    path.write_text(json.dumps({**report, "scenarios": {}}))
    (tmp_path / "tenants.json").unlink()
    assert build_data.build(path, tmp_path) == ["results"]
    assert not (tmp_path / "tenants.json").exists()
    path.write_text(json.dumps({**report, "scenarios": {}}))
    assert build_data.main(["--tenants", str(path), "--data-dir", str(tmp_path)]) == 2


def test_tiny_tenants_run_sheds_only_the_flood_and_reports_the_weighted_admissions(
    tmp_path: Path,
) -> None:
    out = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "trio_batcher_bench",
            "--scenario",
            "tenants",
            "--quick",
            "--duration",
            "1.5",
            "--warmup",
            "0.2",
            "--out",
            str(out),
            "--visuals-json",
            "",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    scenario = json.loads(out.read_text())["scenarios"]["tenants"]
    assert [p["name"] for p in scenario["phases"]] == ["b-alone", "flood", "weighted"]
    assert all(c["ok"] for c in scenario["checks"]), scenario["checks"]
    flood = scenario["summary"]["flood"]
    assert flood["team-b"]["statuses"] == {"200": 10}  # never shed
    assert flood["team-a"]["shed"] > 0 and set(flood["team-a"]["statuses"]) == {
        "200",
        "429 queue_full",
    }
    weighted = scenario["summary"]["weighted"]
    assert weighted["admitted"]["team-a"] > weighted["admitted"]["team-b"] > 0
    assert [t["met"] is not None for t in scenario["targets"]] == [True] * 4
    assert scenario["traces"]["admissions"]["columns"] == ["t_ms", "team-a", "team-b"]
    # The proxies' tenants files hold digests, never the keys.
    files = sorted((tmp_path / "logs" / "tenants").glob("*.toml"))
    assert [f.name for f in files] == ["equal.toml", "weighted.toml"]
    assert all(key not in path.read_text() for path in files for key in KEYS.values())
    assert "## tenants" in out.with_suffix(".md").read_text()
