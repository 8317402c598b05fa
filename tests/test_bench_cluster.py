"""The ``cluster`` scenario and the soak's Redis restart: their arithmetic as data, the
redis-server the bench starts, and one tiny real run of the scenario.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_batcher_bench.cluster import SCALING_CORES, scaling_target
from trio_batcher_bench.cluster_stats import (
    cap_audit,
    cluster_block,
    command_delta,
    compare,
    drain_check,
    in_flight_buckets,
    lease_checks,
    lease_keys,
    lease_residue,
    lease_sync_counts,
    side_by_side,
)
from trio_batcher_bench.load import Quota
from trio_batcher_bench.processes import ServerError
from trio_batcher_bench.redis_server import (
    IncompleteReply,
    encode_command,
    hash_of,
    parse_commandstats,
    parse_reply,
    redis_binary,
    running_redis,
)
from trio_batcher_bench.report import render_markdown
from trio_batcher_bench.results import Report, ScenarioResult
from trio_batcher_bench.scenarios import SCENARIOS
from trio_batcher_bench.soak import _outage
from trio_batcher_bench.soak_ledger import FiveXX, Result
from trio_batcher_bench.soak_plan import faults_that_may_5xx
from trio_batcher_bench.soak_redis import (
    LEAD_S,
    OUTAGE_S,
    SETTLE_S,
    Outage,
    quiet_spans,
    redis_checks,
    restart_at,
    task_slack,
)

# -- the cap, from the upstream's side --------------------------------------------------------


def test_a_call_that_starts_with_the_cap_already_in_flight_is_a_violation() -> None:
    # cap 2: [0, 10) and [1, 5) fill it; [2, 3) starts with two running: one violation,
    # 1 s above the cap; [5, 6) starts the instant [1, 5) ends: no overlap.
    calls = [(0.0, 10.0), (1.0, 5.0), (2.0, 3.0), (5.0, 6.0)]
    audit = cap_audit(calls, cap=2)
    assert audit["violations"] == 1 and audit["peak"] == 3
    assert audit["time_over_cap_ms"] == 1000.0
    assert audit["calls"] == 4
    assert audit["mean_in_flight"] == round((10 + 4 + 1 + 1) / 10, 3)
    assert audit["occupancy"] == round(1.6 / 2, 4)


def test_calls_that_never_exceed_the_cap_have_no_violation_even_back_to_back() -> None:
    calls = [(float(i), float(i + 1)) for i in range(10)] + [(0.5, 9.5)]
    audit = cap_audit(calls, cap=2)
    assert audit["violations"] == 0 and audit["peak"] == 2 and audit["time_over_cap_ms"] == 0
    assert cap_audit([], cap=8) == {
        "calls": 0, "peak": 0, "violations": 0, "time_over_cap_ms": 0.0,
        "mean_in_flight": None, "occupancy": None,
    }  # fmt: skip


def test_in_flight_buckets_give_each_buckets_peak_and_time_weighted_mean() -> None:
    table = in_flight_buckets([(0.0, 0.15), (0.05, 0.1), (0.25, 0.3)], 0.0, 0.1)
    assert table["columns"] == ["t_ms", "max", "mean"]
    assert table["rows"] == [[0.0, 2, 1.5], [100.0, 1, 0.5], [200.0, 1, 0.5]]
    assert in_flight_buckets([], 0.0)["rows"] == []


def test_a_shared_quota_stops_every_loop_at_the_same_total() -> None:
    quota = Quota(3)
    assert [quota.take() for _ in range(5)] == [True, True, True, False, False]


# -- the comparison -----------------------------------------------------------------------------


def _config(tput: float, cpu: float | None, redis: float | None, shared: bool) -> dict[str, Any]:
    return {
        "instances": 2 if shared else 1, "shared_state": shared, "clients": 300,
        "requests": 12000, "requests_by_instance": {"a": 6000, "b": 6000},
        "throughput_per_s": tput, "latency_p50_ms": 1500.0, "latency_p99_ms": 1900.0,
        "queue_p50_ms": 1400.0, "client_errors_by_status": {}, "upstream_max_in_flight": 8,
        "upstream_mean_in_flight": 7.1, "cap_violations": 0, "proxy_cpu_ms_per_request": cpu,
        "redis_cpu_ms_per_request": redis,
        "redis_commands": {"commands_per_request": 30.0, "scripts_per_request": 3.5}
        if shared else None,
    }  # fmt: skip


def test_compare_reads_the_redis_cost_as_the_difference_of_cpu_per_request() -> None:
    single, cluster = _config(190.0, 2.5, None, False), _config(171.0, 4.0, 0.4, True)
    assert compare(single, cluster) == {
        "throughput_ratio": 0.9,
        "proxy_cpu_added_ms_per_request": 1.5,
        "cpu_added_with_redis_ms_per_request": 1.9,
        "proxy_cpu_ratio": 1.6,
    }
    unmeasured = compare(single, _config(171.0, None, None, True))
    assert unmeasured["proxy_cpu_added_ms_per_request"] is None
    assert unmeasured["proxy_cpu_ratio"] is None


def test_the_cpu_ratio_is_cluster_over_single_and_needs_both_measured() -> None:
    # Issue 30's acceptance: at most 1.3x one instance's proxy CPU per request.
    assert (
        compare(_config(190.0, 2.0, None, False), _config(185.0, 2.5, 0.05, True))[
            "proxy_cpu_ratio"
        ]
        == 1.25
    )
    assert (
        compare(_config(190.0, None, None, False), _config(185.0, 2.5, 0.05, True))[
            "proxy_cpu_ratio"
        ]
        is None
    )


def test_the_unbound_scaling_is_judged_only_with_cores_for_both_instances() -> None:
    small = scaling_target(0.67, 2)
    assert small.met is None and small.actual == 0.67 and small.unit == "x"
    assert "2 cores" in small.name and "reported only" in small.name
    assert scaling_target(1.9, SCALING_CORES).met is True
    assert scaling_target(1.5, 16).met is False
    assert scaling_target(None, 16).met is None


def test_the_side_by_side_table_renders_in_the_markdown_report() -> None:
    table = side_by_side(8, _config(190.0, 2.5, None, False), _config(171.0, 4.0, 0.4, True))
    assert table["columns"] == ["", "1 instance, cap 8", "2 instances + Redis, cap 8"]
    rows = {row[0]: row[1:] for row in table["rows"]}
    assert rows["p50 / p99 (ms)"] == ["1,500.0 / 1,900.0", "1,500.0 / 1,900.0"]
    assert rows["Redis commands per request (scripts)"] == [None, "30.0 (3.5)"]
    assert rows["cap violations (calls started above the cap)"] == [0, 0]
    scenario = ScenarioResult("cluster", "Cluster", "d", {}, summary={"side_by_side": table})
    markdown = render_markdown(Report("now", "c", False, {}, [scenario]))
    assert "| 1 instance, cap 8 | 2 instances + Redis, cap 8 |" in markdown
    assert "| proxy CPU per request (ms) | 2.5 | 4 |" in markdown


def test_redis_commands_are_counted_per_request_without_the_benchs_own_info() -> None:
    stats = parse_commandstats(
        "# Commandstats\r\ncmdstat_evalsha:calls=30,usec=90,usec_per_call=3.00\r\n"
        "cmdstat_zadd:calls=25,usec=5\r\ncmdstat_info:calls=4,usec=1\r\n"
    )
    assert stats == {"evalsha": 30, "zadd": 25, "info": 4}
    got = command_delta({"evalsha": 10, "info": 2}, stats, requests=10)
    assert got == {
        "commands_per_request": 4.5,
        "scripts_per_request": 2.0,
        "calls": {"zadd": 25, "evalsha": 20},
    }


def test_the_side_by_side_table_puts_the_unbound_pair_beside_the_binding_one() -> None:
    single, cluster = _config(190.0, 2.5, None, False), _config(185.0, 3.0, 0.03, True)
    cluster["lease_syncs"] = {"a": {"syncs": 12, "per_s": 1.9}, "b": {"syncs": 14, "per_s": 2.2}}
    cluster["lease_drain"] = {"drained": True, "drain_s": 1.2, "bound_s": 8.0}
    stuck = dict(cluster, lease_drain={"drained": False, "drain_s": 8.0, "bound_s": 8.0})
    table = side_by_side(8, single, cluster, (1024, single, stuck))
    assert table["columns"][1:] == [
        "1 instance, cap 8", "2 instances + Redis, cap 8",
        "1 instance, cap 1024", "2 instances + Redis, cap 1024",
    ]  # fmt: skip
    rows = {row[0]: row[1:] for row in table["rows"]}
    assert rows["lease syncs by instance (per s)"] == [
        None, "a: 12 (1.9), b: 14 (2.2)", None, "a: 12 (1.9), b: 14 (2.2)"
    ]  # fmt: skip
    assert rows["blocks drained after idle (s)"] == [None, 1.2, None, "not within 8"]


# -- the lease blocks in Redis ------------------------------------------------------------------


def test_lease_keys_are_named_as_the_proxy_names_them() -> None:
    keys = lease_keys("trio-batcher:")
    assert keys["blocks"] == "{trio-batcher}:sem:upstream:blocks"
    assert keys["used"] == "{trio-batcher}:sem:upstream:used"
    assert keys["expiry"] == "{trio-batcher}:sem:upstream:expiry"
    assert lease_keys("bench")["wants"] == "{bench}:sem:upstream:wants"


def test_blocks_left_in_redis_after_idle_are_a_ghost_lease() -> None:
    gone = lease_residue({}, {}, {}, 0)
    assert gone == {
        "instances_holding": 0, "slots_held": 0, "used": 0, "wants": 0,
        "expiry_entries": 0, "drained": True,
    }  # fmt: skip
    # A block with nothing used is still a ghost: its slots are nobody else's.
    ghost = lease_residue({"i1": "3", "i2": "5"}, {"i1": "0", "i2": "0"}, {"i1": "0"}, 2)
    assert ghost["drained"] is False and ghost["slots_held"] == 8
    assert ghost["instances_holding"] == 2 and ghost["used"] == 0
    assert lease_residue({}, {"i1": "1"}, {}, 0)["drained"] is False

    ok = drain_check("cluster", {"drained": True, "drain_s": 1.3, "bound_s": 8.0, "residue": gone})
    assert ok.ok and ok.actual == "drained in 1.3 s"
    assert (
        ok.name == "cluster: no ghost lease: the blocks in Redis drained once the proxies were idle"
    )
    bad = drain_check(
        "cluster", {"drained": False, "drain_s": 8.0, "bound_s": 8.0, "residue": ghost}
    )
    assert not bad.ok and bad.actual == "8 slots held by 2 instance(s), 0 used, after 8.0 s"


def test_a_lost_lease_or_a_missing_cluster_block_fails_its_instances_check() -> None:
    checks = lease_checks("cluster", {"a": {"leases_lost": 0}, "b": {"leases_lost": 2}, "c": None})
    assert [(c.name, c.ok, c.actual) for c in checks] == [
        ("cluster/a: no lease lost (leases_lost at the end)", True, 0),
        ("cluster/b: no lease lost (leases_lost at the end)", False, 2),
        ("cluster/c: no lease lost (leases_lost at the end)", False, None),
    ]


def test_lease_syncs_are_counted_over_the_phase_and_per_second() -> None:
    before = {"a": {"lease_syncs": 5}, "b": {"lease_syncs": 7}, "c": None}
    after = {"a": {"lease_syncs": 25}, "b": {"lease_syncs": 17}, "c": {"lease_syncs": 3}}
    assert lease_sync_counts(before, after, 10.0) == {
        "a": {"syncs": 20, "per_s": 2.0},
        "b": {"syncs": 10, "per_s": 1.0},
        "c": {"syncs": None, "per_s": None},
    }


def test_resp_commands_and_replies_round_trip_as_data() -> None:
    assert encode_command("HGETALL", "{x}:a b") == b"*2\r\n$7\r\nHGETALL\r\n$7\r\n{x}:a b\r\n"
    reply = b"*4\r\n$2\r\ni1\r\n$1\r\n3\r\n$-1\r\n:5\r\n+OK\r\n"
    assert parse_reply(reply) == (["i1", "3", None, 5], len(reply) - 5)
    assert parse_reply(reply, len(reply) - 5) == ("OK", len(reply))
    for cut in (3, 10, len(reply) - 9):
        with pytest.raises(IncompleteReply):
            parse_reply(reply[:cut])
    with pytest.raises(ServerError, match="WRONGTYPE"):
        parse_reply(b"-WRONGTYPE Operation against a key\r\n")
    assert hash_of(["i1", "3", "i2", "0"]) == {"i1": "3", "i2": "0"}
    assert hash_of([]) == {}
    with pytest.raises(ServerError):
        hash_of(["odd"])


def test_the_cluster_block_is_kept_without_the_random_instance_id() -> None:
    block = {"instance": "abc123", "mode": "shared", "fallbacks": 0, "leases_lost": 0}
    assert cluster_block(block) == {"mode": "shared", "fallbacks": 0, "leases_lost": 0}
    assert cluster_block(None) is None


# -- the soak's Redis restart -----------------------------------------------------------------


def test_the_restart_is_planned_near_the_middle_clear_of_every_busy_span() -> None:
    busy = [(40.0, 55.0), (60.0, 70.0)]
    at = restart_at(120.0, busy)
    assert at == 71.0  # the nearest to 60 whose window [t - 1, t + 7] misses both spans
    window = (at - LEAD_S, at + OUTAGE_S + SETTLE_S)
    assert not any(a < window[1] and window[0] < b for a, b in busy)
    assert restart_at(120.0, []) == 60.0
    assert restart_at(120.0, [(0.0, 120.0)]) is None
    assert restart_at(10.0, []) is None  # too short for the outage and the margin


def test_the_soaks_restart_avoids_its_bursts_overload_windows_and_scheduled_529s() -> None:
    spans = quiet_spans(
        60.0, bursts=(1.5, 4.0), burst_every_s=15.0, overload_every_s=45.0, overload_for_s=2.0,
        scheduled_529=(30.0, 15.0), slack_s=10.0,
    )  # fmt: skip
    assert (6.0, 11.5) in spans and (-1.0, 12.0) in spans and (14.0, 25.0) in spans
    assert spans == sorted(spans)
    for minutes in (2, 4, 10):
        outage = _outage(minutes * 60.0)
        assert outage is not None, minutes
        assert minutes * 60 / 4 < outage.planned_at < minutes * 60 * 3 / 4
    assert _outage(6.0) is None


def _outage_seen(shared: bool = True) -> Outage:
    outage = Outage(60.0, mode_before="shared", fallbacks_before=0, stopped_at=60.0)
    outage.started_at, outage.fallback_at, outage.fallbacks_during = 63.1, 60.2, 1
    outage.shared_at = 64.0 if shared else None
    for at, kind in ((59.5, "ok"), (61.0, "ok"), (62.0, "shed"), (70.0, "ok")):
        outage.observe(at, Result(kind))  # type: ignore[arg-type]
    return outage


def test_the_restart_checks_hold_when_the_proxy_fell_back_and_came_back() -> None:
    outage = _outage_seen()
    before = {"mode": "shared", "fallbacks": 0}
    after = {"mode": "shared", "fallbacks": 1}
    five = [
        FiveXX(61.0, "openai", 502, None, "status_500"),  # its own fault
        FiveXX(80.0, "openai", 503, None, None),  # after the window
    ]
    checks = redis_checks(outage, five, faults_that_may_5xx(), before, after)
    assert [c.ok for c in checks] == [True] * 5
    assert outage.as_json() == {
        "planned_at_s": 60.0, "mode_before_stop": "shared", "stopped_at_s": 60.0, "started_at_s": 63.1, "down_s": 3.1,
        "fallback_after_stop_s": 0.2, "shared_after_start_s": 0.9, "window_s": [60.0, 66.0],
        "outcomes_in_window": {"ok": 1, "shed": 1},
    }  # fmt: skip


def test_a_5xx_in_the_outage_without_a_fault_and_a_proxy_stuck_in_fallback_fail() -> None:
    outage = _outage_seen(shared=False)
    before = {"mode": "shared", "fallbacks": 0}
    after = {"mode": "fallback", "fallbacks": 1}
    five = [FiveXX(62.5, "anthropic", 529, "overloaded_error", None)]
    checks = redis_checks(outage, five, faults_that_may_5xx(), before, after)
    failed = {c.name for c in checks if not c.ok}
    assert failed == {
        "soak: the proxy came back to shared mode after Redis restarted",
        "soak: the proxy's shared state is in shared mode at the end (/metrics cluster)",
        "soak: no client 5xx caused by the Redis outage",
    }
    # A fallback counted before the stop is not the outage's.
    outage.fallbacks_before = 1
    assert not outage.went_to_fallback()
    # No restart planned: only the end state is checked.
    end = {"mode": "shared", "fallbacks": 0}
    only = redis_checks(None, five, faults_that_may_5xx(), before, end)
    assert [(c.name, c.ok) for c in only] == [
        ("soak: the proxy's shared state is in shared mode at the end (/metrics cluster)", True)
    ]


def test_trio_tasks_may_exceed_the_baseline_only_by_the_redis_connections_added() -> None:
    assert task_slack(2, 5)[0] == 9 and "2 → 5" in task_slack(2, 5)[1]
    assert task_slack(2, 2) == (0, "") == task_slack(3, 2) == task_slack(None, 4)


# -- redis-server and a tiny run ----------------------------------------------------------------


needs_redis = pytest.mark.skipif(redis_binary() is None, reason="redis-server is not installed")


@needs_redis
async def test_the_benchs_redis_restarts_on_its_port_empty(tmp_path: Path) -> None:
    binary = redis_binary()
    assert binary is not None
    async with running_redis(binary, tmp_path) as redis:
        port, first = redis.port, redis.pid
        assert first is not None and await redis.clients() == 0
        assert "ping" in await redis.commandstats()  # the readiness probe
        await redis.stop()
        assert redis.pid is None
        await redis.start()
        assert redis.port == port and redis.pid not in (None, first)
        assert "ping" in await redis.commandstats()
        key = lease_keys("trio-batcher:")["blocks"]
        assert await redis.query("HSET", key, "i1", "3", "i2", "5") == 2
        assert hash_of(await redis.query("HGETALL", key)) == {"i1": "3", "i2": "5"}
        assert await redis.query("ZCARD", "{trio-batcher}:absent") == 0
    assert redis.pid is None
    with pytest.raises(OSError):
        await trio.open_tcp_stream("127.0.0.1", port)


def test_the_cluster_scenario_runs_with_all_and_names_redis() -> None:
    scenario = SCENARIOS["cluster"]
    assert scenario.in_all and "Redis" in scenario.description


@needs_redis
def test_a_tiny_cluster_run_holds_the_cap_across_two_instances(tmp_path: Path) -> None:
    out = tmp_path / "cluster.json"
    done = subprocess.run(
        [sys.executable, "-m", "trio_batcher_bench", "--scenario", "cluster", "--quick",
         "--duration", "1.5", "--warmup", "0.2", "--concurrency", "24", "--out", str(out),
         "--visuals-json", "", "--no-progress"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    report = json.loads(out.read_text())
    scenario = report["scenarios"]["cluster"]
    failed = [c for c in scenario["checks"] if not c["ok"]]
    assert done.returncode == 0 and not failed, (failed, done.stderr[-3000:])
    assert [p["name"] for p in scenario["phases"]] == [
        "single", "cluster", "single-unbound", "cluster-unbound"
    ]  # fmt: skip
    names = {c["name"] for c in scenario["checks"]}
    assert "cluster: no upstream call started above the cap (every call's trace)" in names
    assert "cluster/b: clients vs proxy requests.total" in names
    assert "cluster/a: the shared state is in shared mode at the end" in names
    for phase in ("cluster", "cluster-unbound"):
        assert f"{phase}/a: no lease lost (leases_lost at the end)" in names
        assert (
            f"{phase}: no ghost lease: the blocks in Redis drained once the proxies were idle"
            in names
        )
    assert "cluster-unbound: every upstream call's trace was audited" in names
    summary = scenario["summary"]
    single, cluster = summary["single"], summary["cluster"]
    assert single["cluster"] is None and single["redis_cpu_ms_per_request"] is None
    assert set(cluster["cluster"]) == {"a", "b"}
    instance = cluster["cluster"]["a"]
    assert instance["mode"] == "shared" and "instance" not in instance
    # Blocks, not a lease per request: far fewer scripts than requests.
    assert cluster["redis_commands"]["scripts_per_request"] < 1
    assert set(cluster["lease_syncs"]) == {"a", "b"}
    assert (
        cluster["lease_drain"]["drained"] and cluster["lease_drain"]["residue"]["slots_held"] == 0
    )
    unbound = summary["unbound"]
    assert unbound["cap"] == 1024 and unbound["cores"] and unbound["throughput_ratio"]
    for config in (single, cluster):
        assert config["cap_violations"] == 0 and config["upstream_max_in_flight"] <= 8
        assert config["traces_audited"] == config["upstream_requests"] == config["requests"]
    for config in (unbound["single"], unbound["cluster"]):
        assert config["traces_audited"] == config["upstream_requests"] == config["requests"]
    assert sum(cluster["requests_by_instance"].values()) == cluster["requests"]
    assert summary["proxy_cpu_added_ms_per_request"] is not None
    assert summary["proxy_cpu_ratio"] is not None
    targets = {t["name"]: t for t in scenario["targets"]}
    assert (
        targets["proxy CPU per request, 2 instances + Redis vs 1 instance (cap binding)"]["target"]
        == "<= 1.3x"
    )
    rows = scenario["traces"]["in_flight"]["cluster"]["rows"]
    assert rows and max(row[1] for row in rows) <= 8
    markdown = out.with_suffix(".md").read_text()
    assert "| 1 instance, cap 8 | 2 instances + Redis, cap 8 |" in markdown
