"""visuals/build_data.py turns a bench report into the pages' data files, copying, not computing.

No browser needed: these run in the default test session too.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from browser_support import DATA, VISUALS


def _load_build_data() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_data", VISUALS / "build_data.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build_data = _load_build_data()


def read_js(path: Path) -> Any:
    match = re.fullmatch(r"window\.(\w+) = (.*);\n", path.read_text(), flags=re.DOTALL)
    assert match, path
    return match.group(1), json.loads(match.group(2))


def tiny_report(*scenarios: str) -> dict[str, Any]:
    table = {"columns": ["t_ms", "in_flight"], "rows": [[0.0, 0], [1.5, 1], [3.0, 0]]}
    phase = {
        "name": "p", "rate_per_s": 10.0, "wall_s": 1.0, "counts": {}, "rates": {},
        "latency_ms": {}, "send_lag_ms": None, "proxy_timing_ms": None, "upstream": {},
        "cpu": {}, "timeline": [],
    }  # fmt: skip
    bodies: dict[str, dict[str, Any]] = {
        "burst": {"traces": {"batched": {"upstream_in_flight": table}}},
        "overload": {"title": "o", "description": "d"},
        "overhead": {},
    }

    def scenario(name: str) -> dict[str, Any]:
        base: dict[str, Any] = {"ok": True, "error": None, "config": {}, "summary": {"n": 1}}
        base.update(targets=[], checks=[], notes=[], phases=[phase], traces={})
        return {**base, **bodies[name]}

    return {
        "schema": "trio-batcher-bench/1",
        "created_at": "2026-11-30T00:00:00+00:00",
        "command": "trio-batcher bench --quick",
        "quick": True,
        "ok": True,
        "machine": {"git_commit": "abc1234", "cpus": 2},
        "scenarios": {name: scenario(name) for name in scenarios},
    }


def test_the_js_twin_sets_a_global_to_exactly_the_json(tmp_path: Path) -> None:
    document = {"a": [1, 2.5, None], "b": "ünïcode </script>"}
    build_data.write_pair("thing", "THING", document, tmp_path)
    assert json.loads((tmp_path / "thing.json").read_text()) == document
    assert read_js(tmp_path / "thing.js") == ("THING", document)


def test_scenario_files_are_written_only_for_scenarios_the_report_ran(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text(json.dumps(tiny_report("burst", "overload")))
    assert build_data.build(report, tmp_path) == ["results", "burst-trace", "overload"]
    burst = json.loads((tmp_path / "burst-trace.json").read_text())
    assert burst["traces"]["batched"]["upstream_in_flight"]["rows"] == [
        [0.0, 0],
        [1.5, 1],
        [3.0, 0],
    ]
    assert burst["source"]["git_commit"] == "abc1234"

    # A report without them leaves the previous trace and overload data in place.
    report.write_text(json.dumps(tiny_report("overhead")))
    before = (tmp_path / "burst-trace.json").read_text()
    assert build_data.build(report, tmp_path) == ["results"]
    assert (tmp_path / "burst-trace.json").read_text() == before
    assert read_js(tmp_path / "results.js")[1]["scenarios"].keys() == {"overhead"}


def test_a_file_that_is_not_a_bench_report_is_refused(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"schema": "something-else"}))
    with pytest.raises(ValueError, match="not a trio-batcher-bench/1 report"):
        build_data.build(report, tmp_path)


@pytest.mark.parametrize("name", ["burst-trace", "overload", "metrics-snapshot"])
def test_committed_data_twins_agree(name: str) -> None:
    """What a served page reads (JSON) is what a file:// page reads (the script)."""
    _, from_js = read_js(DATA / f"{name}.js")
    assert from_js == json.loads((DATA / f"{name}.json").read_text())
