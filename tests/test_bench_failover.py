"""The ``failover`` scenario: its arithmetic as data, the upstreams file it writes, and a tiny
real run through ``trio-batcher bench`` (two simulators, one gateway, a 529 storm with
``retry-after`` and one without, each with affinity on and off)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from trio_batcher.upstreams.config import parse_upstreams
from trio_batcher_bench import build_parser
from trio_batcher_bench.failover import (
    KEY_ENV,
    UPSTREAM_NAMES,
    Turn,
    cache_read_ratio,
    run_names,
    side_by_side,
    storm_529_times,
    third_of,
    upstreams_toml,
)

RUNS = [
    "retry-after/affinity-on",
    "retry-after/affinity-off",
    "no-retry-after/affinity-on",
    "no-retry-after/affinity-off",
]


def test_a_request_belongs_to_the_third_of_the_run_it_was_sent_in() -> None:
    assert [third_of(s, 6.0) for s in (0.0, 1.99, 2.0, 3.99, 4.0, 5.99, 6.5)] == [
        "healthy",
        "healthy",
        "storm",
        "storm",
        "recovered",
        "recovered",
        "recovered",  # a turn sent at the very end still counts in the last third
    ]


def test_cache_read_ratio_is_reads_over_every_input_token() -> None:
    turns = [
        Turn(0, 0, 0.0, 0.1, 200, input_tokens=10, cache_write=2000),
        Turn(0, 1, 0.2, 0.1, 200, input_tokens=20, cache_read=2000),
        Turn(1, 0, 0.2, 0.1, 529),  # no reply: no usage
    ]
    assert cache_read_ratio(turns) == round(2000 / 4030, 4)
    assert cache_read_ratio([]) is None


def test_both_storms_run_by_default_each_with_affinity_on_and_off() -> None:
    assert [name for name, _, _ in run_names()] == RUNS
    assert run_names("no") == [
        ("no-retry-after/affinity-on", "no-retry-after", "affinity-on"),
        ("no-retry-after/affinity-off", "no-retry-after", "affinity-off"),
    ]
    assert [name for name, _, _ in run_names("yes")] == RUNS[:2]
    parser = build_parser()
    assert parser.parse_args([]).storm_retry_after == "both"
    assert parser.parse_args(["--storm-retry-after", "no"]).storm_retry_after == "no"


def test_the_storm_s_529s_are_timed_from_the_first_and_only_the_overload_s_count() -> None:
    traces = [
        {"status": 200, "fault": None, "started_at": 99.0},
        {"status": 529, "fault": "overload", "started_at": 103.5},
        {"status": 529, "fault": "overload", "started_at": 101.5},
        {"status": 529, "fault": "overload", "started_at": 100.5},
        {"status": 529, "fault": "status=529", "started_at": 100.0},  # not the storm's
    ]
    assert storm_529_times(traces) == [0.0, 1.0, 3.0]
    assert storm_529_times([]) == []


def test_the_upstreams_file_names_both_simulators_at_weight_one_without_a_key() -> None:
    text = upstreams_toml(["http://127.0.0.1:1", "http://127.0.0.1:2"])
    specs = parse_upstreams(text)
    assert [(s.name, s.kind, s.weight, s.priority) for s in specs] == [
        (UPSTREAM_NAMES[0], "anthropic", 1, 0),
        (UPSTREAM_NAMES[1], "anthropic", 1, 0),
    ]
    assert KEY_ENV in text and "sk-" not in text


def test_tiny_failover_run_has_no_client_error_and_affinity_keeps_more_cache_reads(
    tmp_path: Path,
) -> None:
    """Four runs of 3 s: the storm with and without ``retry-after``, affinity on and off.
    Nothing timed is asserted (the machine is shared): correctness and the cache."""
    out = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "trio_batcher",
            "bench",
            "--scenario",
            "failover",
            "--duration",
            "3",
            "--concurrency",
            "8",
            "--out",
            str(out),
            "--visuals-json",
            "",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    failover = json.loads(out.read_text())["scenarios"]["failover"]
    assert all(c["ok"] for c in failover["checks"]), failover["checks"]
    summary = failover["summary"]
    variants = summary["variants"]
    assert list(variants) == RUNS
    assert summary["storms"] == {"retry-after": True, "no-retry-after": False}
    for name, variant in variants.items():
        assert variant["client_errors"] == 0, name
        assert variant["client_requests"] == variant["gateway_requests"] > 0
        assert set(variant["latency"]) == {"all", "healthy", "storm", "recovered"}
        assert set(variant["by_upstream"]) == set(UPSTREAM_NAMES)
        assert variant["storm_529s"] == len(variant["storm_529_at_s"]) > 0
        assert variant["failovers_by_cause"]
        assert variant["storm_retry_after"] is name.startswith("retry-after/")
    for storm in ("retry-after", "no-retry-after"):
        on, off = variants[f"{storm}/affinity-on"], variants[f"{storm}/affinity-off"]
        assert on["cache_read_ratio"] > off["cache_read_ratio"], storm
        assert on["affinity"]["kept_ratio"] > 0.9
        assert off["affinity"]["continuing_turns"] == 0
    table = summary["side_by_side"]
    assert table == side_by_side(variants) and table["columns"] == ["", *RUNS]
    rows = [row[0] for row in table["rows"]]
    assert "cache-read ratio" in rows and "affinity kept ratio" in rows
    assert "storm 529s at (s after the first)" in rows
    assert "## failover:" in out.with_suffix(".md").read_text()
