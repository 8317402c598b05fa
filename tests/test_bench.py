"""The benchmark harness: its arithmetic as data, its drivers over loopback, and a tiny real run.

The end-to-end test starts the simulator and the proxy as separate processes through
``trio-batcher bench`` (the lab, ``bench/``, installed beside the gateway) and checks the
report: every client count reconciled with the proxy's /metrics, and the JSON shape the
pages read.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_batcher_bench import processes
from trio_batcher_bench.burst import _steps
from trio_batcher_bench.harness import Bench, Options, target_for
from trio_batcher_bench.load import Outcome, Target, call, open_loop
from trio_batcher_bench.progress import Display
from trio_batcher_bench.ratelimit import AMPLIFICATION_MAX
from trio_batcher_bench.report import js_module, render_markdown
from trio_batcher_bench.results import SCHEMA, Counts, Report, ScenarioResult
from trio_batcher_bench.sse import ContentCounter, EventCounter
from trio_batcher_bench.stats import (
    event_stats,
    parse_server_timing,
    reconcile,
    summary_ms,
    upstream_checks,
)
from trio_batcher_bench.wire import Pool, encode_request

# -- arithmetic ------------------------------------------------------------------------------


def _counts(ok: int = 0, shed: int = 0, error: int = 0, aborted: int = 0) -> Counts:
    sent = ok + shed + error + aborted
    return Counts(sent, sent, ok, shed, error, aborted, 0, 0, {})


def _metrics(
    total: int, success: int, error: int, stream: int = 0, rejected: int = 0, s499: int = 0
) -> dict[str, Any]:
    return {
        "requests": {
            "total": total,
            "success": success,
            "error": error,
            "stream": stream,
            "by_status": {"499": s499} if s499 else {},
        },
        "rejected": {"total": rejected},
    }


def test_reconcile_passes_when_clients_and_proxy_agree() -> None:
    before = _metrics(10, 10, 0)
    after = _metrics(10 + 7, 10 + 5, 2, rejected=3)
    checks = reconcile("p", _counts(ok=5, error=2, shed=3), before, after, stream=False)
    assert [c.ok for c in checks] == [True] * 5


def test_reconcile_flags_a_request_the_proxy_did_not_count() -> None:
    checks = reconcile("p", _counts(ok=5), _metrics(0, 0, 0), _metrics(4, 4, 0), stream=False)
    failed = {c.name: (c.expected, c.actual) for c in checks if not c.ok}
    assert failed == {
        "p: clients vs proxy requests.total": (5, 4),
        "p: clients vs proxy requests.success": (5, 4),
    }


def test_reconcile_matches_clients_that_left_to_499_errors() -> None:
    after = _metrics(6, 0, 6, stream=6, s499=5)
    checks = reconcile("p", _counts(aborted=6), _metrics(0, 0, 0), after, stream=True)
    failed = {c.name: (c.expected, c.actual) for c in checks if not c.ok}
    assert failed == {'p: clients vs proxy requests.by_status["499"]': (6, 5)}


def _with_upstream(total: int, attempts: int, retries: int, shed: int = 0) -> dict[str, Any]:
    metrics = _metrics(total, total, 0)
    metrics["upstream"] = {
        "attempts": attempts,
        "retries": retries,
        "shed_by_cooldown": shed,
        "cooldowns_opened": 1,
        "adaptive_limit": None,
    }
    return metrics


def test_upstream_checks_reconcile_the_simulator_with_the_proxys_attempts() -> None:
    before = _with_upstream(10, 12, 2)
    after = _with_upstream(10 + 20, 12 + 23, 2 + 3)  # 20 requests, 3 of them retried
    assert [c.ok for c in upstream_checks("p", 23, before, after)] == [True, True]
    failed = [c.name for c in upstream_checks("p", 22, before, after) if not c.ok]
    assert failed == ["p: every upstream attempt the proxy counted reached the simulator"]
    # A request the proxy took on that never reached the upstream is caught too.
    short = _with_upstream(10 + 21, 12 + 23, 2 + 3)
    failed = [c.name for c in upstream_checks("p", 23, before, short) if not c.ok]
    assert failed == ["p: every request the proxy took on made one first attempt"]
    # ...unless a shared cooldown shed it before any attempt.
    shed = _with_upstream(10 + 21, 12 + 23, 2 + 3, shed=1)
    assert all(c.ok for c in upstream_checks("p", 23, before, shed))


def test_upstream_checks_without_an_upstream_block_only_bound_the_calls() -> None:
    checks = upstream_checks("p", 25, _metrics(0, 0, 0), _metrics(20, 20, 0))
    assert [(c.ok, c.actual) for c in checks] == [(True, 25)]
    assert not upstream_checks("p", 19, _metrics(0, 0, 0), _metrics(20, 20, 0))[0].ok


def test_a_summary_table_is_rendered_as_a_markdown_table() -> None:
    scenario = ScenarioResult("s", "t", "d", {})
    scenario.summary = {
        "side_by_side": {
            "columns": ["", "ON", "OFF"],
            "rows": [["upstream 429s", 4, 152], ["errors", {}, {"429": 109}]],
        }
    }
    markdown = render_markdown(Report("now", "cmd", True, {}, [scenario]))
    assert "| upstream 429s | 4 | 152 |" in markdown
    assert "| errors | none | 429: 109 |" in markdown


def test_summary_uses_nearest_rank_percentiles_in_ms() -> None:
    summary = summary_ms([i / 1000 for i in range(1, 101)])  # 1..100 ms
    assert (summary.count, summary.p50, summary.p95, summary.p99, summary.max) == (
        100,
        51.0,
        95.0,
        99.0,
        100.0,
    )
    assert summary_ms([]).p50 is None


def test_server_timing_header_parsed_to_ms() -> None:
    header = b"queue;dur=0.754, upstream;dur=67.882, overhead;dur=0.239, total;dur=68.875"
    assert parse_server_timing(header) == {
        "queue": 0.754,
        "upstream": 67.882,
        "overhead": 0.239,
        "total": 68.875,
    }


def test_content_events_are_counted_across_piece_boundaries() -> None:
    anthropic = ContentCounter("anthropic")
    stream = (
        b"event: message_start\ndata: {}\n\nevent: content_block_delta\ndata: {}\n\n"
        b"event: content_block_delta\ndata: {}\n\nevent: message_stop\ndata: {}\n\n"
    )
    found = [anthropic.feed(stream[i : i + 7]) for i in range(0, len(stream), 7)]
    assert sum(found) == 2

    openai = ContentCounter("openai")
    role = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
    text = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
    assert openai.feed(role + text[:20]) == 0
    assert openai.feed(text[20:] + b"data: [DONE]\n\n") == 1


def test_sse_events_are_counted_across_piece_boundaries_whatever_their_kind() -> None:
    stream = (
        b"event: message_start\ndata: {}\n\nevent: ping\ndata: {}\n\n"
        b"event: content_block_delta\ndata: {}\n\nevent: message_stop\ndata: {}\n\n"
    )
    for size in (1, 2, 3, 7, len(stream)):
        events = EventCounter()
        found = [events.feed(stream[i : i + size]) for i in range(0, len(stream), size)]
        assert (sum(found), events.count, events.bytes) == (4, 4, len(stream)), size
    # An event completes in the piece that brings its blank line, not before.
    events = EventCounter()
    assert [events.feed(p) for p in (b"data: 1\n", b"\ndata: [DONE]\n", b"\n")] == [0, 1, 1]


def _stream_outcome(intended: float, events: list[float], content: list[float]) -> Outcome:
    return Outcome(
        intended, intended, events[-1], 200, "ok", content_times=content, event_times=events
    )


def test_event_stats_profile_each_event_over_streams_that_carry_the_same_events() -> None:
    ok = [
        _stream_outcome(0.0, [0.010, 0.020, 0.040], [0.020]),
        _stream_outcome(1.0, [1.030, 1.040, 1.060], [1.040]),
        _stream_outcome(2.0, [2.010, 2.050], [2.050]),  # a short one: not in the profile
    ]
    ok[0].body_bytes, ok[1].body_bytes, ok[2].body_bytes = 300, 300, 200
    stats = event_stats(ok, wall=2.0)
    assert (stats.total, stats.per_s, stats.per_stream, stats.bytes_per_stream) == (
        8, 4.0, [2, 3], [200, 300],
    )  # fmt: skip
    assert stats.mean_arrival_ms == [20.0, 30.0, 50.0]
    assert stats.mean_content_arrival_ms == [36.667]  # every stream has one content event
    assert (stats.gap_ms.count, stats.gap_ms.max) == (5, 40.0)


def test_in_flight_steps_from_call_intervals() -> None:
    assert _steps([(0.0, 10.0), (5.0, 10.0), (10.0, 12.0)]) == [
        [0.0, 1],
        [5.0, 2],
        [10.0, 1],
        [12.0, 0],
    ]


# -- drivers over loopback ---------------------------------------------------------------------


async def _slow_http(delay: float, stream: trio.SocketStream) -> None:
    """A minimal keep-alive HTTP/1.1 server answering every request after ``delay``."""
    buf = b""
    try:
        while True:
            while b"\r\n\r\n" not in buf:
                data = await stream.receive_some(65536)
                if not data:
                    return
                buf += data
            head, _, buf = buf.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            while len(buf) < length:
                buf += await stream.receive_some(65536)
            buf = buf[length:]
            await trio.sleep(delay)
            await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
    except trio.BrokenResourceError:
        return


async def test_open_loop_counts_arrivals_beyond_its_concurrency_bound_and_times_from_intent() -> (
    None
):
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, partial(_slow_http, 0.2), 0))
        port = listeners[0].socket.getsockname()[1]
        request = encode_request("POST", "127.0.0.1", port, "/", [], b"{}")
        target = Target("simulator", "anthropic", "127.0.0.1", port, False, request)
        pool = Pool("127.0.0.1", port)
        run = await open_loop(pool, target, rate=100.0, count=10, max_in_flight=3)
        await pool.aclose()
        nursery.cancel_scope.cancel()
    # Arrivals every 10 ms, each answered after 200 ms: only the first three fit the bound.
    assert (run.offered, len(run.outcomes), run.unsent_bound, run.unsent_late) == (10, 3, 7, 0)
    assert all(o.kind == "ok" and o.latency >= 0.2 for o in run.outcomes)
    assert all(o.latency == o.done - o.intended for o in run.outcomes)


# -- processes ---------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); trio reaps it in Process.wait, so it would be gone.
    return True


async def test_servers_are_stopped_with_sigterm_even_when_the_block_fails(tmp_path: Path) -> None:
    pids: list[int] = []
    with pytest.raises(RuntimeError, match="scenario broke"):
        async with processes.running_stack([], {"p": {}}, tmp_path) as stack:
            pids = [stack.sim.pid, stack.proxies["p"].pid]
            assert (await stack.proxies["p"].metrics())["requests"]["total"] == 0
            raise RuntimeError("scenario broke")
    assert pids and not any(_alive(pid) for pid in pids)
    for log in ("simulator.log", "proxy-p.log"):
        assert "SIGTERM received" in (tmp_path / log).read_text()


async def test_a_server_that_cannot_start_is_reported_with_its_log(tmp_path: Path) -> None:
    with pytest.raises(processes.ServerError, match="--ttft-ms must be >= 0"):
        async with processes.running_stack(["--ttft-ms", "-1"], {}, tmp_path):
            pytest.fail("the simulator should not have started")


async def test_sim_idle_returns_every_trace_when_asked_for_more_than_the_simulator_holds(
    tmp_path: Path,
) -> None:
    async with processes.running_stack(["--ttft-ms", "0"], {}, tmp_path) as stack:
        target = target_for("simulator", stack.sim.url)
        pool = Pool(target.host, target.port)
        outcomes = [await call(pool, target, trio.current_time()) for _ in range(3)]
        await pool.aclose()
        bench = Bench(Options(), Display(stream=io.StringIO(), rich=False))
        # 5 > 3 held: the simulator's own slice would hand back only the newest 2.
        stats = await bench.sim_idle(stack, recent=5)
    assert [o.kind for o in outcomes] == ["ok"] * 3
    assert sorted(t["request_id"].encode() for t in stats["recent"]) == sorted(
        o.request_id for o in outcomes if o.request_id is not None
    )
    assert len(stats["recent"]) == 3


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_bytes()
            except OSError:
                continue
            if int(stat.rsplit(b")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_sigterm_stops_the_bench_and_every_server_it_started(tmp_path: Path) -> None:
    err = tmp_path / "stderr.txt"
    with err.open("w") as sink:
        bench = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "trio_batcher_bench",
                "--scenario",
                "overhead",
                "--duration",
                "30",
                "--warmup",
                "0",
                "--concurrency",
                "2",
                "--out",
                str(tmp_path / "r.json"),
                "--visuals-json",
                "",
                "--no-progress",
            ],
            stderr=sink,
        )
    try:
        deadline = time.monotonic() + 30
        while "direct: 2 clients" not in err.read_text():  # the load is running
            assert bench.poll() is None and time.monotonic() < deadline, err.read_text()
            time.sleep(0.05)
        servers = _children(bench.pid)
        # Simulator, proxy, floor server, and the supervisor of the two-worker proxy,
        # whose workers are the bench's grandchildren.
        assert len(servers) == 4
        servers += [pid for server in servers for pid in _children(server)]
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        if bench.poll() is None:
            bench.kill()
    assert not any(_alive(pid) for pid in servers)
    assert "SIGTERM; servers stopped" in err.read_text()
    assert not (tmp_path / "r.json").exists()


# -- a tiny real run ---------------------------------------------------------------------------


def test_tiny_bench_reconciles_with_the_proxy_and_writes_the_report(tmp_path: Path) -> None:
    """Through ``trio-batcher bench``, the command the docs give: the gateway's CLI hands
    the flags to the lab (a separate distribution, imported only for this)."""
    out = tmp_path / "report.json"
    visuals = tmp_path / "visuals" / "results.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "trio_batcher",
            "bench",
            "--scenario",
            "overhead,disconnect",
            "--quick",
            "--duration",
            "1",
            "--warmup",
            "0.2",
            "--concurrency",
            "4",
            "--out",
            str(out),
            "--visuals-json",
            str(visuals),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert json.loads(visuals.read_text()) == report
    # The pages' file:// twin, in visuals/build_data.py's format.
    script = visuals.with_suffix(".js").read_text()
    assert script == js_module("BENCH_RESULTS", report)
    assert script.startswith("window.BENCH_RESULTS = {") and script.endswith("};\n")
    assert report["schema"] == SCHEMA and report["ok"] is True
    assert list(report["scenarios"]) == ["overhead", "disconnect"]

    overhead = report["scenarios"]["overhead"]
    assert [p["name"] for p in overhead["phases"]] == ["direct", "proxy", "direct-5", "proxy-5"]
    proxy = overhead["phases"][1]
    assert proxy["counts"]["ok"] > 0 and proxy["counts"]["ok"] == proxy["counts"]["sent"]
    assert proxy["cpu"]["proxy_ms_per_request"] > 0
    assert set(proxy["latency_ms"]) == {"count", "mean", "p50", "p95", "p99", "max"}
    reconciled = [c for c in overhead["checks"] if "clients vs proxy" in c["name"]]
    assert len(reconciled) == 10 and all(c["ok"] for c in reconciled)
    assert {t["name"] for t in overhead["targets"]} >= {"proxy CPU per request"}
    floor = overhead["summary"]["floor"]
    assert floor["requests"] > 0 and floor["failed"] == 0
    assert floor["cpu_ms_per_request"] > 0 and floor["throughput_ratio"] > 0

    disconnect = report["scenarios"]["disconnect"]
    summary = disconnect["summary"]["mid-stream-proxy"]
    assert summary["aborted"] == summary["upstream_abandoned"] == 20
    assert all(c["ok"] for c in disconnect["checks"])
    assert any('by_status["499"]' in c["name"] for c in disconnect["checks"])

    markdown = out.with_suffix(".md").read_text()
    assert "## overhead" in markdown and "## disconnect" in markdown
    assert "disconnect" in done.stderr  # the plain progress lines


def test_tiny_ratelimit_run_shows_coordinated_backoff_keeping_amplification_low(
    tmp_path: Path,
) -> None:
    out = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "trio_batcher_bench",
            "--scenario",
            "ratelimit",
            "--duration",
            "2",
            "--out",
            str(out),
            "--visuals-json",
            "",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    report = json.loads(out.read_text())
    scenario = report["scenarios"]["ratelimit"]
    failed = [c for c in scenario["checks"] if not c["ok"]]
    assert done.returncode == 0 and not failed, (failed, done.stderr[-3000:])
    assert [p["name"] for p in scenario["phases"]] == ["backoff-on", "backoff-off"]
    reconciled = [c for c in scenario["checks"] if "clients vs proxy" in c["name"]]
    assert len(reconciled) == 10

    summary = scenario["summary"]
    on, off = summary["on"], summary["off"]
    for variant in (on, off):
        assert {
            "goodput_per_s",
            "client_errors_by_status",
            "latency_p50_ms",
            "latency_p99_ms",
            "upstream_429",
            "upstream_requests",
            "amplification",
            "upstream_attempts",
            "cooldowns_opened",
        } <= set(variant)
        assert variant["client_ok"] > 0
        assert variant["amplification"] == round(
            variant["upstream_requests"] / variant["client_requests"], 4
        )
    assert on["amplification"] <= AMPLIFICATION_MAX
    assert on["upstream_429"] < off["upstream_429"]
    # The proxy's own counters agree with the simulator, and only ON shares a cooldown.
    assert on["upstream_attempts"] == on["upstream_requests"]
    assert off["upstream_attempts"] == off["upstream_requests"]
    assert off["cooldowns_opened"] == off["ratelimit_holds"] == 0
    assert on["cooldowns_opened"] + on["ratelimit_holds"] > 0
    assert summary["side_by_side"]["columns"] == ["", "coordinated backoff ON", "OFF"]
    polls = scenario["traces"]["on"]["upstream_status_polls"]
    assert polls["columns"] == ["t_ms", "ok_total", "r429_total", "requests_total"]
    assert polls["rows"] and polls["rows"][-1][1] <= on["client_ok"]
    assert "| upstream 429s (simulator) |" in out.with_suffix(".md").read_text()


def test_tiny_stream_run_relays_anthropic_events_unchanged_and_reports_both_pairs(
    tmp_path: Path,
) -> None:
    out = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "trio_batcher_bench",
            "--scenario",
            "stream",
            "--quick",
            "--duration",
            "1",
            "--warmup",
            "0.2",
            "--concurrency",
            "4",
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
    report = json.loads(out.read_text())
    scenario = report["scenarios"]["stream"]
    failed = [c for c in scenario["checks"] if not c["ok"]]
    assert done.returncode == 0 and not failed, (failed, done.stderr[-3000:])
    phases = {p["name"]: p for p in scenario["phases"]}
    assert list(phases) == [
        "direct", "proxy", "anthropic-direct", "anthropic-proxy",
        "direct-5", "proxy-5", "anthropic-direct-5", "anthropic-proxy-5",
    ]  # fmt: skip
    # Every phase through the proxy reconciled with /metrics, the Messages door's too.
    for name in ("proxy", "anthropic-proxy", "proxy-5", "anthropic-proxy-5"):
        reconciled = [c for c in scenario["checks"] if c["name"].startswith(f"{name}: clients")]
        assert len(reconciled) == 5 and phases[name]["counts"]["ok"] > 0, name
    # The simulator's 24-token stream is 30 SSE events (prelude, ping included; closing
    # events), and /v1/messages hands the client every one of them, byte for byte.
    direct, relayed = phases["anthropic-direct"]["events"], phases["anthropic-proxy"]["events"]
    assert direct["per_stream"] == relayed["per_stream"] == [30, 30]
    assert direct["bytes_per_stream"] == relayed["bytes_per_stream"]
    assert len(relayed["mean_arrival_ms"]) == 30 and len(relayed["mean_content_arrival_ms"]) == 24
    names = {c["name"] for c in scenario["checks"]}
    assert "anthropic: one stream through /v1/messages is the simulator's, byte for byte" in names
    assert "anthropic-proxy: every stream carried the simulator's events (count and bytes)" in names
    # Through the OpenAI door the same upstream events become other chunks: no 1:1 profile.
    assert phases["proxy"]["events"]["per_stream"] != direct["per_stream"]

    summary = scenario["summary"]
    assert {"added_ttft_p50_ms", "itl_p50_proxy_ms", "light_added_ttft_p50_ms"} <= set(summary)
    pairs = summary["pairs"]
    assert set(pairs) == {"openai", "anthropic", "openai-5", "anthropic-5"}
    assert pairs["anthropic"]["path"] == "/v1/messages"
    assert pairs["anthropic"]["phases"] == ["anthropic-direct", "anthropic-proxy"]
    for pair in pairs.values():
        assert set(pair) == set(pairs["openai"])
        assert pair["proxy_cpu_ms_per_event"] > 0
        assert pair["added_ms_per_content_event"] is not None
        assert pair["relay_added_last_event_ms"] is not None
    assert pairs["anthropic"]["added_ms_per_event"] is not None
    assert pairs["openai"]["added_ms_per_event"] is None
    # Every stream was matched to the simulator's trace of its call by request id.
    for phase in phases.values():
        timing = phase["extra"]["upstream_timing"]
        assert timing["matched"] == timing["streams"] == phase["counts"]["ok"], phase["name"]
    assert summary["side_by_side"]["columns"][1:] == [
        "OpenAI: direct", "OpenAI: proxy", "Anthropic: direct", "Anthropic: proxy",
    ]  # fmt: skip
    assert [t["name"] for t in scenario["targets"]] == [
        "TTFT the proxy adds (p50)",
        "TTFT the proxy adds (p50), Anthropic Messages",
    ]
    assert "| SSE events per stream | 30 |" in out.with_suffix(".md").read_text()
