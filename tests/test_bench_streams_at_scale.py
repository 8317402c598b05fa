"""The ``streams-at-scale`` scenario: its arithmetic as data (plateau, memory per open stream,
the gap the proxy adds), the stream client against servers that end streams badly, and a
tiny real run of the scenario with its report.
"""

from __future__ import annotations

import io
from functools import partial
from pathlib import Path

import trio

from trio_batcher_bench.cpu import CpuUsage
from trio_batcher_bench.harness import Bench, Options
from trio_batcher_bench.load import Outcome, Run, Target
from trio_batcher_bench.progress import Display
from trio_batcher_bench.report import render_markdown
from trio_batcher_bench.results import PhaseResult, Report, ScenarioResult, Upstream
from trio_batcher_bench.scenarios import SCENARIOS
from trio_batcher_bench.stats import phase_result
from trio_batcher_bench.streams_at_scale import (
    OpenStreams,
    one_stream,
    plan_of,
    run_streams_at_scale,
)
from trio_batcher_bench.streams_at_scale_stats import (
    Plateau,
    RssSample,
    door_summary,
    gc_delta,
    late_gaps_by_second,
    per_stream_kib,
    plateau,
    side_by_side,
    steady_gaps,
    steady_window,
)
from trio_batcher_bench.wire import encode_request

# -- arithmetic --------------------------------------------------------------------------------


def test_the_plateau_is_the_median_of_the_samples_with_the_most_streams_open() -> None:
    samples = [
        RssSample(0.0, 70_000, 0),
        RssSample(0.2, 80_000, 500),  # still ramping up
        RssSample(0.4, 130_000, 1000),
        RssSample(0.6, 131_000, 1000),
        RssSample(0.8, 190_000, 1000),  # a moment's spike: not what every stream keeps
        RssSample(1.0, 125_000, 999),  # the first stream ended
    ]
    top = plateau(samples)
    assert top == Plateau(
        open_streams=1000, samples=3, seconds=0.4, median_kib=131_000, max_kib=190_000
    )
    # (131,000 - 67,000) KiB over 1,000 streams.
    assert per_stream_kib(67_000.0, top) == 64.0


def test_a_run_where_no_stream_opened_has_no_plateau_and_no_figure_per_stream() -> None:
    assert plateau([]) is None
    assert plateau([RssSample(0.0, 70_000, 0), RssSample(0.2, 70_100, 0)]) is None
    assert per_stream_kib(70_000.0, None) is None


def test_when_some_streams_failed_the_memory_is_divided_by_those_that_were_open() -> None:
    top = plateau(
        [RssSample(0.0, 10_000, 0), RssSample(0.2, 14_000, 40), RssSample(0.4, 14_000, 40)]
    )
    assert top is not None and top.open_streams == 40
    assert per_stream_kib(10_000.0, top) == 100.0


def _stream(start: float, gaps: list[float]) -> Outcome:
    """A whole stream: content events ``gaps`` apart, two prelude events and one at the end."""
    times = [start]
    for gap in gaps:
        times.append(times[-1] + gap)
    outcome = Outcome(0.0, 0.0, times[-1], 200, "ok")
    outcome.first_content = times[0]
    outcome.content_times = times
    outcome.event_times = [0.0, 0.0, *times, times[-1]]  # prelude, content, the end
    return outcome


def _phase(
    name: str, outcomes: list[Outcome], *, via: str, cpu: float | None = None
) -> PhaseResult:
    run = Run(outcomes, 0.0, 10.0, offered=len(outcomes), concurrency=len(outcomes))
    usage = CpuUsage(10.0, {"proxy": cpu, "simulator": 1.0, "client": 0.5}, {}, None, None)
    return phase_result(
        name,
        run,
        via=via,
        proxy=None if via == "simulator" else name,
        stream=True,
        upstream=Upstream(len(outcomes), len(outcomes), len(outcomes), 0, 0),
        cpu=usage,
    )


def test_the_added_gap_is_the_proxys_p99_minus_the_direct_p99_over_every_streams_gaps() -> None:
    # 100 gaps each way: nearest-rank p99 is the 99th smallest.
    steady = _stream(0.5, [0.5] * 50)
    direct = _phase("direct", [steady, _stream(0.5, [0.5] * 48 + [0.502] * 2)], via="simulator")
    slow = [0.5] * 47 + [0.510, 0.530, 0.540]
    proxy = _phase("proxy", [steady, _stream(0.5, slow)], via="proxy", cpu=0.306)
    figures = door_summary(2, direct, proxy, 65_536.0, Plateau(2, 5, 1.0, 65_664.0, 65_700))
    assert figures["gap_p50_direct_ms"] == figures["gap_p50_proxy_ms"] == 500.0
    assert figures["gap_p99_direct_ms"] == 502.0 and figures["gap_p99_proxy_ms"] == 530.0
    assert figures["gap_max_proxy_ms"] == 540.0
    assert figures["added_gap_p99_ms"] == 28.0
    assert figures["errors_direct"] == figures["errors_proxy"] == 0
    assert figures["rss_per_open_stream_kib"] == 64.0
    assert figures["rss_idle_mib"] == 64.0
    # 306 ms of proxy CPU over 2 streams of 51 content + 3 other events each.
    assert figures["upstream_events_per_stream"] == 54
    assert figures["proxy_cpu_s"] == 0.306
    assert figures["proxy_cpu_ms_per_upstream_event"] == round(306 / 108, 4)


def test_a_stream_that_did_not_end_whole_is_an_error_of_the_door() -> None:
    direct = _phase("direct", [_stream(0.5, [0.5] * 3)] * 3, via="simulator")
    broken = Outcome(0.0, 0.0, 1.0, 200, "error", "truncated")
    proxy = _phase("proxy", [_stream(0.5, [0.5] * 3), broken], via="proxy", cpu=0.1)
    figures = door_summary(3, direct, proxy, None, None)
    # One truncated, one never answered at all (3 asked for, 2 came back).
    assert figures["errors_proxy"] == 2 and figures["errors_direct"] == 0
    assert figures["errors_by_code_proxy"] == {"truncated": 1}
    assert figures["rss_per_open_stream_kib"] is None
    table = side_by_side({"chat": figures, "messages": figures})
    assert table["columns"] == ["", "direct", "proxy: chat", "proxy: messages"]
    assert table["rows"][0] == ["errors (of the streams asked for)", 0, 2, 2]


def test_the_steady_state_is_from_the_last_stream_opening_to_the_first_ending() -> None:
    early = _stream(0.5, [0.5, 2.0, 0.5, 0.5, 0.5])  # a stall while the others still open
    late = _stream(1.5, [0.5, 0.5, 0.5, 0.5])
    late.event_times[0] = 1.2  # its prelude: the last stream open
    late.done = 4.0
    failed = Outcome(0.0, 0.0, 0.1, 500, "error")
    window = steady_window([early, late, failed])
    assert window == (1.2, 4.0)
    # early: 0.5 1.0 3.0 3.5 4.0 4.5 -> gaps inside [1.2, 4.0]: 3.0-3.5, 3.5-4.0;
    # late: 1.5 2.0 2.5 3.0 3.5 -> all four.
    gaps = steady_gaps([early, late, failed], window)
    assert gaps.count == 6 and gaps.max == 500.0
    assert steady_gaps([failed], steady_window([failed])).count == 0


def test_late_events_are_counted_by_the_second_they_arrived_in() -> None:
    paced = _stream(0.5, [0.5] * 6)  # 0.5 .. 3.5
    paused = _stream(0.5, [0.5, 1.4, 0.5, 0.601])  # late at 2.4 and 3.501
    assert late_gaps_by_second([paced, paused], 0.0) == [[2, 1], [3, 1]]
    assert late_gaps_by_second([paced], 0.0) == []


def test_the_plateaus_cores_are_the_cpu_seconds_over_its_own_span() -> None:
    top = plateau(
        [
            RssSample(0.0, 1000, 10, 5.0),
            RssSample(1.0, 2000, 20, 5.9),
            RssSample(3.0, 2000, 20, 7.1),
            RssSample(4.0, 1500, 10, 9.0),
        ]
    )
    assert top is not None and top.cores == 0.6  # 1.2 s of CPU over 2 s
    assert plateau([RssSample(0.0, 1000, 10)]) == Plateau(10, 1, 0.0, 1000, 1000, None)


def test_the_gc_figures_are_the_phases_collections_and_pauses() -> None:
    def block(collections: int, total: float, longest: float) -> dict[str, object]:
        return {
            "gc": {
                "2": {
                    "collections": collections,
                    "pause_seconds_total": total,
                    "pause_seconds_max": longest,
                }
            }
        }

    assert gc_delta(block(3, 0.25, 0.1), block(5, 1.75, 0.9)) == {
        "2": {"collections": 2, "pause_ms_total": 1500.0, "pause_ms_max_so_far": 900.0}
    }
    assert gc_delta(None, block(1, 0.0, 0.0)) == gc_delta({"gc": None}, block(1, 0, 0)) == {}


def test_the_plan_is_a_thousand_streams_for_a_minute_and_honours_the_flags() -> None:
    def plan(options: Options) -> tuple[int, float, float]:
        return plan_of(Bench(options, Display(stream=io.StringIO(), rich=False)))

    assert plan(Options()) == (1000, 60.0, 2.0)
    assert plan(Options(quick=True)) == (200, 15.0, 2.0)
    assert plan(Options(quick=True, concurrency=20, duration=3.0)) == (20, 3.0, 0.6)
    assert SCENARIOS["streams-at-scale"].in_all is False
    names = list(SCENARIOS)
    assert names.index("streams-at-scale") + 1 == names.index("batch-memory")


# -- the stream client -------------------------------------------------------------------------


async def _answer(response: bytes, stream: trio.SocketStream) -> None:
    """Read one request head, send ``response`` as it is, close."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = await stream.receive_some(65536)
        if not data:
            return
        buf += data
    await stream.send_all(response)
    await stream.aclose()


def _chunked(*pieces: bytes) -> bytes:
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)
    return head + body + b"0\r\n\r\n"


_CHUNK = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'


async def _outcome(response: bytes) -> tuple[Outcome, int]:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, partial(_answer, response), 0))
        port = listeners[0].socket.getsockname()[1]
        request = encode_request("POST", "127.0.0.1", port, "/v1/chat/completions", [], b"{}")
        target = Target("proxy", "openai", "127.0.0.1", port, True, request)
        open_streams = OpenStreams()
        outcome = await one_stream(target, trio.current_time(), open_streams, 5.0)
        nursery.cancel_scope.cancel()
    return outcome, open_streams.now


async def test_a_whole_chat_stream_is_ok_and_counts_its_content_events() -> None:
    outcome, still_open = await _outcome(_chunked(_CHUNK, _CHUNK, b"data: [DONE]\n\n"))
    assert (outcome.kind, outcome.status, len(outcome.content_times)) == ("ok", 200, 2)
    assert len(outcome.event_times) == 3 and still_open == 0


async def test_a_stream_without_its_terminator_or_with_an_error_event_is_an_error() -> None:
    truncated, still_open = await _outcome(_chunked(_CHUNK, _CHUNK))
    assert (truncated.kind, truncated.code) == ("error", "truncated") and still_open == 0
    error = b'data: {"error":{"type":"overloaded_error","message":"busy"}}\n\n'
    failed, _ = await _outcome(_chunked(_CHUNK, error, b"data: [DONE]\n\n"))
    assert (failed.kind, failed.code) == ("error", "overloaded_error")
    cut, still_open = await _outcome(_chunked(_CHUNK)[:-5])  # the connection closes mid-body
    assert (cut.kind, cut.code, still_open) == ("error", "ProtocolError", 0)
    refused, _ = await _outcome(
        b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 2\r\n\r\n{}"
    )
    assert (refused.kind, refused.status) == ("error", 500)


# -- a tiny real run ---------------------------------------------------------------------------


async def test_tiny_run_reports_memory_per_stream_and_the_added_gap_for_both_doors(
    tmp_path: Path,
) -> None:
    options = Options(concurrency=20, duration=2.0, log_dir=tmp_path)
    bench = Bench(options, Display(stream=io.StringIO(), rich=False))
    spec = SCENARIOS["streams-at-scale"]
    scenario = ScenarioResult(spec.name, spec.title, spec.description, {})
    await run_streams_at_scale(bench, scenario)

    failed = [c for c in scenario.checks if not c.ok]
    assert scenario.ok and not failed, failed
    phases = {p.name: p for p in scenario.phases}
    assert list(phases) == ["direct", "proxy", "anthropic-proxy"]
    for phase in phases.values():
        assert phase.counts.ok == 20 and phase.itl_ms is not None
        # 4 content events (2 s at 2 a second), half a second apart.
        assert phase.itl_ms.count == 20 * 3
        assert phase.itl_ms.p50 is not None and 450 < phase.itl_ms.p50 < 550
    doors = scenario.summary["doors"]
    assert set(doors) == {"chat", "messages"}
    for figures in doors.values():
        assert figures["errors_proxy"] == 0
        assert figures["plateau_open_streams"] == 20 and figures["plateau_samples"] >= 3
        assert figures["rss_per_open_stream_kib"] is not None
        assert figures["added_gap_p99_ms"] is not None
        assert figures["proxy_cpu_ms_per_upstream_event"] > 0
        assert figures["proxy_cores_all_open"] is not None
        assert set(figures["proxy_gc"]) == set(figures["client_gc_proxy"]) == {"0", "1", "2"}
        late = figures["late_gaps_by_second_proxy"]
        assert isinstance(late, list) and all(len(pair) == 2 for pair in late)
    # Anthropic Messages through the proxy is the simulator's events, relayed.
    relayed, direct = phases["anthropic-proxy"].events, phases["direct"].events
    assert relayed is not None and direct is not None
    assert relayed.per_stream == direct.per_stream == [10, 10]
    assert [t.name for t in scenario.targets][:3] == [
        "proxy RSS per open stream",
        "streams that did not end whole",
        "inter-event gap the proxy adds (p99)",
    ]
    assert scenario.config["open_file_limit"] >= 20
    report = Report("now", "bench", False, {}, [scenario])
    markdown = render_markdown(report)
    assert "| proxy RSS per open stream (KiB) |" in markdown
