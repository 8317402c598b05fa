"""The soak scenario: its books as data (classification, ledger, reconciliation, the 5xx
attribution, the RSS fit), its traffic plan, and one very short real run.
"""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from trio_batcher.errors import ProxyError
from trio_batcher.pipeline.relay import deadline_error
from trio_batcher.settings import Settings
from trio_batcher.translation.openai_chat import TranslationOptions
from trio_batcher.translation.openai_responses import (
    ResponsesCodec,
    ResponsesStream,
    translate_request,
)
from trio_batcher_bench.scenarios import SCENARIOS
from trio_batcher_bench.soak_checks import reconcile, store_check
from trio_batcher_bench.soak_ledger import (
    FiveXX,
    Ledger,
    Result,
    classify,
    explain_5xx,
    proxy_status,
)
from trio_batcher_bench.soak_memory import (
    MemorySample,
    downsample,
    least_squares_slope,
    memory_summary,
)
from trio_batcher_bench.soak_plan import (
    KINDS,
    SCHEDULED,
    STORE_EVERY,
    Mix,
    Planned,
    arrivals,
    faults_that_may_5xx,
)
from trio_batcher_bench.sse import ContentCounter, StreamEnding

# -- what a client saw ------------------------------------------------------------------------


def _openai_error(code: str | None, kind: str = "rate_limit_error", message: str = "") -> bytes:
    return json.dumps(
        {"error": {"message": message, "type": kind, "param": None, "code": code}}
    ).encode()


def _anthropic_error(kind: str, message: str) -> bytes:
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


def test_classify_tells_gate_sheds_cooldowns_and_errors_apart_in_every_dialect() -> None:
    assert classify("openai", 200) == Result("ok", 200, 200)
    assert classify("openai", 429, _openai_error("queue_full")) == Result(
        "shed", 429, None, "queue_full"
    )
    # Responses errors are in OpenAI's shape, and the proxy records the status they carry.
    assert classify("responses", 503, _openai_error("queue_timeout", "service_unavailable")) == (
        Result("shed", 503, None, "queue_timeout")
    )
    assert classify("responses", 429, _openai_error("upstream_cooldown")) == Result(
        "cooldown", 429, 429, "upstream_cooldown"
    )
    assert classify("responses", 502, _openai_error("api_error", "api_error")) == Result(
        "error", 502, 502, "api_error"
    )
    capacity = "The proxy is at capacity (queue_timeout); retry after 1 s."
    assert classify("anthropic", 429, _anthropic_error("rate_limit_error", capacity)) == Result(
        "shed", 429, None, "queue_timeout"
    )
    assert classify("openai", 503, _openai_error("upstream_cooldown", "service_unavailable")) == (
        Result("cooldown", 503, 503, "upstream_cooldown")
    )
    overloaded = "The upstream is overloaded; retry after 2 s."
    assert classify("anthropic", 529, _anthropic_error("overloaded_error", overloaded)) == (
        Result("cooldown", 529, 503, "upstream_cooldown")
    )
    # The upstream's own errors, relayed to an Anthropic client as the upstream sent them,
    # are recorded by the proxy under the gateway's status policy.
    relayed = classify("anthropic", 500, _anthropic_error("api_error", "Internal server error"))
    assert relayed == Result("error", 500, 502, "api_error")
    assert proxy_status("anthropic", 529) == 503 and proxy_status("openai", 504) == 504
    assert proxy_status("responses", 503) == 503


def test_a_stream_that_ends_in_an_error_event_is_an_error_with_the_status_it_stands_for() -> None:
    assert classify("openai", 200, stream_error="overloaded_error") == Result(
        "error", 503, 503, "overloaded_error"
    )
    assert classify("anthropic", 200, stream_error="api_error").proxy_status == 502
    assert classify("openai", 200, stream_error="upstream_error").proxy_status == 502


def test_stream_ending_finds_the_end_or_the_error_across_piece_boundaries() -> None:
    anthropic = StreamEnding("anthropic")
    for piece in (b"event: content_block_delta\ndata: {}\n\nevent: err", b"or\ndata: ",
                  b'{"type":"error","error":{"type":"overloaded_error","message":"x"}}\n\n'):  # fmt: skip
        anthropic.feed(piece)
    assert (anthropic.complete, anthropic.error_type) == (False, "overloaded_error")
    whole = StreamEnding("anthropic")
    whole.feed(b"event: message_stop\ndata: {}\n\n")
    assert (whole.complete, whole.error_type) == (True, None)
    openai = StreamEnding("openai")
    openai.feed(b'data: {"choices":[]}\n\ndata: {"error": {"type": "upstream_error"}}\n\n')
    assert openai.error_type == "upstream_error" and not openai.complete
    done = StreamEnding("openai")
    done.feed(b"data: [DO")
    done.feed(b"NE]\n\n")
    assert done.complete


_OPTIONS = TranslationOptions(
    default_model="claude-sonnet-4-5", default_max_tokens=4096, anthropic_version="2023-06-01"
)


def _planned(kind: str) -> Planned:
    mix = Mix("127.0.0.1", 8000, seed=3)
    return next(p for a in arrivals(60.0, 200.0, 0, 0, 0) if (p := mix.plan(a)).kind == kind)


def _responses_stream(kind: str) -> tuple[bytes, ResponsesStream]:
    """The proxy's encoder for the soak's own request of ``kind``, started: its bytes for
    ``message_start`` and a first block with two deltas, and the encoder to end it with."""
    planned = _planned(kind)
    block: dict[str, Any]
    tr = translate_request(json.loads(planned.request[planned.body_offset :]), _OPTIONS)
    stream = ResponsesCodec(tr, response_id="resp_" + "ab" * 24, created_at=1700000000).stream()
    if kind == "responses-tools-stream":
        block = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in ('{"ci', 'ty":"P"}')]
    else:
        block = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": t} for t in ("Hel", "lo")]
    upstream: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"usage": {"input_tokens": 9}}},
        {"type": "content_block_start", "index": 0, "content_block": block},
        *({"type": "content_block_delta", "index": 0, "delta": d} for d in deltas),
    ]
    return _feed(stream, upstream), stream


def _feed(stream: ResponsesStream, upstream: list[dict[str, Any]]) -> bytes:
    return b"".join(b"".join(stream.feed(event["type"], event, "")) for event in upstream)


def _read(body: bytes) -> tuple[StreamEnding, ContentCounter]:
    """A Responses body as the soak's client reads it, in pieces of 7 bytes."""
    ending, content = StreamEnding("responses"), ContentCounter("responses")
    for i in range(0, len(body), 7):
        ending.feed(body[i : i + 7])
        content.feed(body[i : i + 7])
    return ending, content


def _outcome(body: bytes) -> Result:
    ending, _ = _read(body)
    assert not ending.complete and ending.error_type is not None
    return classify(
        "responses", 200, stream_error=ending.error_type, stream_message=ending.error_message
    )


def test_the_soaks_responses_requests_are_valid_for_the_door_and_one_in_five_is_stored() -> None:
    mix = Mix("127.0.0.1", 8000, seed=1)
    plan = [mix.plan(a) for a in arrivals(60.0, 200.0, 15.0, 100, 0.1)]
    planned = [p for p in plan if p.api == "responses"]
    assert {p.kind for p in planned} == {k for k, v in KINDS.items() if v[1] == "responses"}
    for p in planned:
        tr = translate_request(json.loads(p.request[p.body_offset :]), _OPTIONS)
        assert p.request.startswith(b"POST /v1/responses ")
        assert (tr.store, tr.stream) == (p.store, p.stream)
        assert bool(tr.body.get("tools")) is ("tools" in p.kind) and not tr.ignored_params
    assert sum(p.store for p in planned) == math.ceil(len(planned) / STORE_EVERY)


def test_a_responses_stream_is_whole_at_its_terminal_event_and_counts_its_deltas() -> None:
    for kind in ("responses-stream", "responses-tools-stream"):
        started, stream = _responses_stream(kind)
        ending, content = _read(started)
        assert (ending.complete, ending.error_type, content.count) == (False, None, 2), kind
        stop: list[dict[str, Any]] = [
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}},
            {"type": "message_stop"},
        ]
        whole = started + _feed(stream, stop)
        ending, content = _read(whole)
        assert b"response.completed" in whole and b"[DONE]" not in whole
        assert (ending.complete, ending.error_type, content.count) == (True, None, 2), kind
        assert classify("responses", 200, stream_error=ending.error_type) == Result("ok", 200, 200)
    incomplete = StreamEnding("responses")
    incomplete.feed(b'event: response.incomplete\ndata: {"type":"response.incomplete"}\n\n')
    assert incomplete.complete


def test_a_failed_responses_stream_counts_under_the_status_the_proxy_records() -> None:
    def upstream(kind: str, message: str) -> Result:
        started, stream = _responses_stream("responses-stream")
        error = {"type": "error", "error": {"type": kind, "message": message}}
        return _outcome(started + stream.upstream_error(error, ""))

    def gateway(exc: ProxyError) -> Result:
        started, stream = _responses_stream("responses-stream")
        return _outcome(started + stream.error(exc))

    # pipeline.relay: an upstream error event counts as the status it would have had before
    # the first byte (an overload is a 503); a gateway error as its own status.
    overloaded = upstream("overloaded_error", "Overloaded")
    assert overloaded == Result("error", 503, 503, "overloaded_error")
    assert upstream("rate_limit_error", "Slow down") == Result(
        "error", 429, 429, "rate_limit_error"
    )
    assert upstream("api_error", "Internal server error").proxy_status == 502
    assert gateway(deadline_error(Settings())) == Result("error", 504, 504, "server_error")
    truncated = ProxyError(502, "The upstream stream ended before the message was complete.")
    assert gateway(truncated) == Result("error", 502, 502, "server_error")
    # An ``error`` event (never sent by the gateway today) is an error as well.
    event = {"type": "error", "code": "server_error", "message": "x", "param": None}
    raw = b"event: error\ndata: " + json.dumps(event).encode() + b"\n\n"
    assert _outcome(raw) == Result("error", 502, 502, "server_error")


# -- the books ---------------------------------------------------------------------------------


def _ledger() -> Ledger:
    ledger = Ledger(offered=17)
    add = ledger.add
    for _ in range(5):
        add(Result("ok", 200, 200), api="openai", stream=True, fault=None, at=1.0)
    for _ in range(3):
        add(Result("ok", 200, 200), api="anthropic", stream=False, fault=None, at=1.0)
    add(Result("shed", 429, None, "queue_full"), api="openai", stream=False, fault=None, at=2.0)
    add(Result("shed", 429, None, "queue_full"), api="anthropic", stream=True, fault=None, at=2.0)
    add(Result("left", 0, 499, "before_body"), api="openai", stream=True, fault=None, at=3.0)
    add(Result("left", 200, 499, "mid_stream"), api="anthropic", stream=True, fault=None, at=3.0)
    add(
        Result("error", 502, 502, "api_error"),
        api="openai",
        stream=False,
        fault="status_500",
        at=4.0,
    )
    add(
        Result("cooldown", 503, 503, "upstream_cooldown"),
        api="openai",
        stream=False,
        fault=None,
        at=5.0,
    )
    add(Result("ok", 200, 200), api="responses", stream=False, fault=None, at=6.0, store=True)
    add(Result("ok", 200, 200), api="responses", stream=True, fault=None, at=6.0)
    add(
        Result("error", 503, 503, "overloaded_error"),
        api="responses",
        stream=True,
        fault="stream_error",
        at=6.0,
    )
    return ledger


def _surface(by_status: dict[str, int]) -> dict[str, Any]:
    return {"requests": {"total": sum(by_status.values()), "by_status": by_status}}


def _metrics(by_status: dict[str, int], rejected: dict[str, int], stream: int, surfaces: dict[str, dict[str, int]]) -> dict[str, Any]:  # fmt: skip
    return {
        "requests": {
            "total": sum(by_status.values()),
            "success": by_status.get("200", 0),
            "error": sum(v for k, v in by_status.items() if k != "200"),
            "stream": stream,
            "by_status": by_status,
        },
        "rejected": {"total": sum(rejected.values()), "by_reason": rejected},
        "by_surface": {name: _surface(s) for name, s in surfaces.items()},
    }


_EMPTY = _metrics({}, {}, 0, {})


def _agreeing() -> dict[str, Any]:
    # The cooldown was raised inside the call: counted as a request (503), not rejected.
    return _metrics(
        {"200": 10, "499": 2, "502": 1, "503": 2},
        {"queue_full": 2},
        stream=8,  # 6 ok streams, 1 failed, 1 left mid-stream; not the one left before its body
        surfaces={
            "openai.chat": {"200": 5, "499": 1, "502": 1, "503": 1},
            "openai.responses": {"200": 2, "503": 1},
            "anthropic.messages": {"200": 3, "499": 1},
        },
    )


def test_reconcile_holds_when_every_request_is_counted_once_where_it_belongs() -> None:
    checks = reconcile(_ledger(), _EMPTY, _agreeing())
    assert [c.name for c in checks if not c.ok] == []
    assert len(checks) >= 15


def test_reconcile_accepts_a_cooldown_the_proxy_shed_before_admission() -> None:
    after = _agreeing()
    after["requests"]["by_status"]["503"] -= 1
    after["requests"]["total"] -= 1
    after["requests"]["error"] -= 1
    after["rejected"] = {"total": 3, "by_reason": {"queue_full": 2, "upstream_cooldown": 1}}
    after["by_surface"]["openai.chat"] = _surface({"200": 5, "499": 1, "502": 1})
    assert [c.name for c in reconcile(_ledger(), _EMPTY, after) if not c.ok] == []


def test_reconcile_catches_a_leaving_client_the_proxy_never_counted() -> None:
    after = _agreeing()
    after["requests"]["by_status"]["499"] = 1
    after["requests"]["total"] -= 1
    after["requests"]["stream"] -= 1
    after["by_surface"]["anthropic.messages"] = _surface({"200": 3})
    failed = {c.name for c in reconcile(_ledger(), _EMPTY, after) if not c.ok}
    assert failed == {
        "soak: the proxy counted every request once (requests.total + rejected.total)",
        'soak: requests.by_status["499"] = clients that left',
        "soak: requests.stream = streaming requests the proxy took on",
        "soak: by_surface[anthropic.messages].requests.total = that door's requests taken on",
        'soak: by_surface[anthropic.messages].requests.by_status["499"] = that door\'s',
    }


def test_reconcile_checks_the_responses_door_apart_from_chat() -> None:
    # The Responses stream error counted under Chat: the totals agree, the doors do not.
    after = _agreeing()
    after["by_surface"]["openai.chat"] = _surface({"200": 5, "499": 1, "502": 1, "503": 2})
    after["by_surface"]["openai.responses"] = _surface({"200": 2})
    failed = {c.name for c in reconcile(_ledger(), _EMPTY, after) if not c.ok}
    assert failed == {
        "soak: by_surface[openai.chat].requests.total = that door's requests taken on",
        "soak: by_surface[openai.responses].requests.total = that door's requests taken on",
    }


def test_the_store_holds_a_response_per_stored_answer_and_none_for_store_false() -> None:
    ledger = _ledger()
    left = Result("left", 200, 499, "mid_stream")
    ledger.add(left, api="responses", stream=True, fault=None, at=7.0, store=True)
    assert ledger.stored_range() == (1, 2)
    assert [store_check(ledger, n).ok for n in (0, 1, 2, 3)] == [False, True, True, False]


def _with_ambiguous_leaves() -> Ledger:
    ledger = _ledger()
    ledger.offered += 2
    ledger.add(
        Result("left", 0, 499, "reset_mid_body"), api="openai", stream=False, fault=None, at=7.0
    )
    ledger.add(
        Result("left", 0, 499, "in_flight"), api="anthropic", stream=False, fault=None, at=8.0
    )
    return ledger


def test_a_reset_the_proxy_never_read_and_a_leave_that_crossed_a_shed_are_tolerated() -> None:
    # The reset never reached the proxy; the in-flight leave was shed (queue_full) first.
    after = _agreeing()
    after["rejected"] = {"total": 3, "by_reason": {"queue_full": 3}}
    checks = reconcile(_with_ambiguous_leaves(), _EMPTY, after)
    assert [c.name for c in checks if not c.ok] == []
    crossed = next(c for c in checks if "crossed" in c.name and "exactly once" in c.name)
    assert crossed.actual == 1


def test_a_leave_counted_nowhere_is_caught_even_beside_a_reset() -> None:
    # Neither a 499 nor any other count for the in-flight leave: lost, not crossed.
    failed = {c.name for c in reconcile(_with_ambiguous_leaves(), _EMPTY, _agreeing()) if not c.ok}
    assert failed == {
        "soak: the proxy counted every request once (requests.total + rejected.total)",
    }


def test_a_leave_the_proxy_counts_as_a_success_is_no_crossing() -> None:
    # In-flight leaves are held upstream for longer than they wait: a 200 cannot cross one.
    after = _agreeing()
    after["requests"]["by_status"]["200"] = 9
    after["requests"]["by_status"]["499"] = 3
    after["requests"]["total"] += 2
    after["requests"]["success"] += 1
    failed = {c.name for c in reconcile(_with_ambiguous_leaves(), _EMPTY, after) if not c.ok}
    assert {
        "soak: requests.success = answers the clients read whole",
        "soak: every crossed in-flight leave is counted exactly once as something else",
    } <= failed


def test_reconcile_catches_a_shed_counted_under_the_wrong_reason_and_a_client_failure() -> None:
    ledger = _ledger()
    ledger.offered += 1
    ledger.add(
        Result("failed", reason="ProtocolError: closed"),
        api="openai",
        stream=False,
        fault=None,
        at=6.0,
    )
    after = _agreeing()
    after["rejected"] = {"total": 2, "by_reason": {"queue_full": 1, "queue_timeout": 1}}
    failed = {c.name for c in reconcile(ledger, _EMPTY, after) if not c.ok}
    assert failed == {
        "soak: every request sent has exactly one outcome, none a client failure",
        'soak: rejected.by_reason["queue_full"] = clients shed with that reason',
        'soak: rejected.by_reason["queue_timeout"] = clients shed with that reason',
    }


def test_a_5xx_is_explained_by_its_own_fault_or_by_an_overload_period_only() -> None:
    may = faults_that_may_5xx()
    assert {"status_500", "hang", "stream_error", "stream_cut", "overloaded"} <= may
    assert "stall" not in may and "rate_limited" not in may
    periods = [(10.0, 20.0)]
    assert explain_5xx(FiveXX(1.0, "openai", 502, None, "status_500"), may, periods)
    assert explain_5xx(FiveXX(15.0, "anthropic", 529, None, None), may, periods)
    assert not explain_5xx(FiveXX(25.0, "openai", 503, None, None), may, periods)
    assert not explain_5xx(FiveXX(15.0, "openai", 502, None, None), may, periods)
    assert not explain_5xx(FiveXX(15.0, "openai", 504, None, "stall"), may, periods)


# -- memory ------------------------------------------------------------------------------------


def test_the_rss_slope_is_a_least_squares_fit_in_bytes_per_request_after_the_warm_up() -> None:
    assert least_squares_slope([0, 1, 2, 3], [5, 7, 9, 11]) == 2.0
    assert least_squares_slope([1, 1], [3, 4]) is None
    # 10 s of start-up growth, then 1000 requests a second at 3 bytes each, with noise.
    samples = [
        MemorySample(t, 50_000_000 + (t * 1_000_000 if t < 10 else 10_000_000 + (t - 10) * 3000)
                     + (1000 if t % 2 else -1000), t * 1000, 20, 0, 0)
        for t in range(60)
    ]  # fmt: skip
    summary = memory_summary(samples, warmup_s=10)
    assert abs(summary["slope_bytes_per_request"] - 3.0) < 0.1
    assert summary["requests_in_fit"] == 49_000
    assert summary["rss_start_bytes"] == 49_999_000 and summary["samples"] == 60
    assert summary["fit_line"][0][0] == 10


def test_downsample_keeps_at_most_the_limit_and_both_ends() -> None:
    rows = [[i, i * 2] for i in range(10_001)]
    small = downsample(rows, 600)
    assert len(small) == 600 and small[0] == [0, 0] and small[-1] == [10_000, 20_000]
    assert downsample(rows[:5], 600) == rows[:5]


# -- the traffic plan --------------------------------------------------------------------------


def test_arrivals_merge_the_base_rate_and_the_bursts_in_time_order() -> None:
    got = list(arrivals(10.0, 100.0, 4.0, 50, 0.1))
    assert len(got) == 1000 + 2 * 50  # bursts at 2 s and 6 s (10 s is past the end)
    assert [a.at for a in got] == sorted(a.at for a in got)
    assert sum(a.burst for a in got) == 100


def test_the_mix_is_reproducible_covers_every_door_and_keeps_bursts_clean() -> None:
    def plan(seed: int) -> list[Any]:
        mix = Mix("127.0.0.1", 8000, seed=seed)
        return [mix.plan(a) for a in arrivals(60.0, 200.0, 15.0, 100, 0.1)]

    first, again = plan(1), plan(1)
    assert [p.request for p in first] == [p.request for p in again]
    kinds = Counter(p.kind for p in first)
    assert set(kinds) == set(KINDS) and {api for _, api, _, _ in KINDS.values()} == {
        "openai",
        "responses",
        "anthropic",
    }
    # Three doors share what two did: the whole, and the streams' 42.5% the stream-only
    # faults and leaves are drawn from.
    assert math.isclose(sum(share for share, *_ in KINDS.values()), 1.0)
    assert math.isclose(sum(share for share, _, stream, _ in KINDS.values() if stream), 0.425)
    assert all(p.fault is None and p.leave is None for p in first if p.burst)
    faults = Counter(p.fault for p in first if p.fault)
    assert faults["rate_limited"] == 3 and faults["overloaded"] == 2  # at 5, 25, 45 s; 15, 45 s
    assert {"status_500", "stall", "drip", "stream_error", "stream_cut"} <= set(faults)
    stages = Counter(p.leave.stage for p in first if p.leave)
    assert set(stages) == {"before_body", "reset_mid_body", "in_flight", "mid_stream"}
    for p in first[:200]:
        head, body = p.request[: p.body_offset], json.loads(p.request[p.body_offset :])
        assert head.endswith(b"\r\n\r\n") and body.get("stream", False) is p.stream
        if p.fault in SCHEDULED:
            assert "[[sim:" in json.dumps(body)
    streams = [p for p in first if p.leave and p.leave.stage == "mid_stream"]
    assert streams and all(p.stream for p in streams)


# -- the command -------------------------------------------------------------------------------


def test_the_soak_is_a_scenario_of_its_own_not_part_of_all() -> None:
    # Neither is batch-memory (a memory measurement of its own, not a latency comparison),
    # peers (minutes, and LiteLLM is installed apart) nor streams-at-scale (1,000 streams).
    alone = {"soak", "batch-memory", "peers", "streams-at-scale"}
    assert alone <= set(SCENARIOS) and not any(SCENARIOS[name].in_all for name in alone)
    assert all(s.in_all for name, s in SCENARIOS.items() if name not in alone)


def test_a_very_short_soak_balances_its_books_and_writes_the_rss_series(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    done = subprocess.run(
        [sys.executable, "-m", "trio_batcher_bench", "--scenario", "soak", "--quick",
         "--minutes", "0.1", "--out", str(out), "--visuals-json", "", "--no-progress"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    report = json.loads(out.read_text())
    soak = report["scenarios"]["soak"]
    failed = [c for c in soak["checks"] if not c["ok"]]
    assert done.returncode == 0 and not failed, (failed, done.stderr[-3000:])
    names = {c["name"] for c in soak["checks"]}
    assert "soak: the proxy counted every request once (requests.total + rejected.total)" in names
    assert "soak: trio tasks back to their baseline (concurrency.trio_tasks)" in names
    assert not any("RSS slope" in n for n in names)  # --quick: reported, not checked
    requests = soak["summary"]["requests"]
    assert requests["sent"] > 500 and requests["by_outcome"]["ok"] > 0
    rss = soak["traces"]["rss"]
    assert rss["columns"][:3] == ["t_s", "rss_bytes", "requests"]
    assert 3 <= len(rss["rows"]) <= 600 and all(row[1] > 0 for row in rss["rows"])
    assert soak["summary"]["memory"]["slope_bytes_per_request"] is not None
    # With redis-server the proxy shares its state through the bench's Redis; six seconds
    # are too short for a restart clear of the bursts and 529s, and the summary says so.
    if shutil.which("redis-server") is not None:
        redis = soak["summary"]["redis"]
        assert redis["restart"] is None and redis["cluster_after"]["mode"] == "shared"
        assert "instance" not in redis["cluster_after"]
        assert any("too short for a Redis restart" in note for note in soak["notes"])
        assert (
            "soak: the proxy's shared state is in shared mode at the end (/metrics cluster)"
            in names
        )
    else:
        assert soak["summary"]["redis"] is None


def _build_data() -> Any:
    path = Path(__file__).resolve().parent.parent / "visuals" / "build_data.py"
    spec = importlib.util.spec_from_file_location("build_data", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_build_data_records_a_soak_for_results_html_without_touching_the_results(
    tmp_path: Path,
) -> None:
    build_data = _build_data()
    soak = {"ok": True, "title": "Soak", "traces": {"rss": {"columns": [], "rows": [[0, 1]]}}}
    report = {"schema": "trio-batcher-bench/1", "command": "c", "scenarios": {"soak": soak}}
    path = tmp_path / "soak-report.json"
    path.write_text(json.dumps(report))
    assert build_data.build_soak(path, tmp_path) == ["soak"]
    assert not (tmp_path / "results.json").exists()
    written = json.loads((tmp_path / "soak.json").read_text())
    assert written["scenario"] == soak and written["source"]["command"] == "c"
    assert (tmp_path / "soak.js").read_text().startswith("window.BENCH_SOAK = {")
    # A whole report that ran the soak records it too; one that did not leaves it alone.
    (tmp_path / "soak.json").unlink()
    assert build_data.build(path, tmp_path) == ["results", "soak"]
    path.write_text(json.dumps({**report, "scenarios": {}}))
    (tmp_path / "soak.json").unlink()
    assert build_data.build(path, tmp_path) == ["results"]
    assert not (tmp_path / "soak.json").exists()
