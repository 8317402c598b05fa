"""The ``failover`` scenario: its arithmetic as data, the upstreams file it writes, and a tiny
real run through ``trio-batcher bench`` (two simulators, one gateway, a 529 storm)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from trio_batcher.upstreams.config import parse_upstreams
from trio_batcher_bench.failover import (
    KEY_ENV,
    UPSTREAM_NAMES,
    Turn,
    cache_read_ratio,
    third_of,
    upstreams_toml,
)


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
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    failover = json.loads(out.read_text())["scenarios"]["failover"]
    assert all(c["ok"] for c in failover["checks"]), failover["checks"]
    summary = failover["summary"]
    variants = summary["variants"]
    assert list(variants) == ["affinity-on", "affinity-off"]
    for name, variant in variants.items():
        assert variant["client_errors"] == 0, name
        assert variant["client_requests"] == variant["gateway_requests"] > 0
        assert set(variant["latency"]) == {"all", "healthy", "storm", "recovered"}
        assert set(variant["by_upstream"]) == set(UPSTREAM_NAMES)
        assert variant["storm_529s"] > 0
        assert variant["failovers_by_cause"]
    on, off = variants["affinity-on"], variants["affinity-off"]
    assert on["cache_read_ratio"] > off["cache_read_ratio"]
    assert on["affinity"]["kept_ratio"] > 0.9
    assert off["affinity"]["continuing_turns"] == 0
    rows = [row[0] for row in summary["side_by_side"]["rows"]]
    assert "cache-read ratio" in rows and "affinity kept ratio" in rows
    assert "## failover:" in out.with_suffix(".md").read_text()
