"""OpenAI Batch API ⇄ Anthropic Message Batches, as data: every line error, the id map,
split planning at both limits, each result type's output line (parsed by the ``openai``
SDK's types, strictly) and the status table."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai.types import Batch, BatchError
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from trio_batcher.translation import openai_chat, openai_responses
from trio_batcher.translation.openai_batch import (
    ANTHROPIC_CUSTOM_ID,
    CHAT_ENDPOINT,
    MAX_CUSTOM_ID_CHARS,
    RESPONSES_ENDPOINT,
    BatchLine,
    LineChecker,
    LineError,
    PlannedBatch,
    RequestTooLarge,
    anthropic_custom_id,
    batch_body,
    combined,
    openai_status,
    output_line,
    request_counts,
    request_entry,
    split_batches,
    unix_seconds,
    validate_line,
)
from trio_batcher.translation.openai_chat import TranslationOptions

OPTS = TranslationOptions(
    default_model="claude-sonnet-4-5", default_max_tokens=1024, anthropic_version="2023-06-01"
)
CHAT_BODY: dict[str, Any] = {
    "model": "claude-sonnet-4-5",
    "messages": [{"role": "user", "content": "hi"}],
}
RESP_BODY: dict[str, Any] = {"model": "claude-sonnet-4-5", "input": "hi"}


def raw(line: object) -> bytes:
    return json.dumps(line).encode() + b"\n"


def chat_line(custom_id: object = "a", **fields: Any) -> dict[str, Any]:
    line = {"custom_id": custom_id, "method": "POST", "url": CHAT_ENDPOINT, "body": CHAT_BODY}
    line.update(fields)
    return line


def resp_line(custom_id: str = "a", **body: Any) -> dict[str, Any]:
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": RESPONSES_ENDPOINT,
        "body": {**RESP_BODY, **body},
    }


# --- validate_line ------------------------------------------------------------------------

LINE_ERRORS: list[tuple[str, bytes, str, str | None]] = [
    ("not json", b"{not json\n", "invalid_json", None),
    ("not utf-8", b'{"custom_id": "\xff"}\n', "invalid_json", None),
    ("not an object", b"[1, 2]\n", "invalid_json", None),
    (
        "no custom_id",
        raw({k: v for k, v in chat_line().items() if k != "custom_id"}),
        "missing_required_parameter",
        "custom_id",
    ),
    ("null custom_id", raw(chat_line(None)), "missing_required_parameter", "custom_id"),
    (
        "no method",
        raw({k: v for k, v in chat_line().items() if k != "method"}),
        "missing_required_parameter",
        "method",
    ),
    (
        "no url",
        raw({k: v for k, v in chat_line().items() if k != "url"}),
        "missing_required_parameter",
        "url",
    ),
    (
        "no body",
        raw({k: v for k, v in chat_line().items() if k != "body"}),
        "missing_required_parameter",
        "body",
    ),
    ("numeric custom_id", raw(chat_line(7)), "invalid_custom_id", "custom_id"),
    ("empty custom_id", raw(chat_line("")), "invalid_custom_id", "custom_id"),
    (
        "long custom_id",
        raw(chat_line("x" * (MAX_CUSTOM_ID_CHARS + 1))),
        "invalid_custom_id",
        "custom_id",
    ),
    ("GET", raw(chat_line(method="GET")), "invalid_method", "method"),
    ("other url", raw(chat_line(url="/v1/embeddings")), "invalid_url", "url"),
    ("other endpoint", raw(chat_line(url=RESPONSES_ENDPOINT)), "mismatched_url", "url"),
    ("body not object", raw(chat_line(body=[1])), "invalid_request", "body"),
    (
        "stream",
        raw(chat_line(body={**CHAT_BODY, "stream": True})),
        "unsupported_parameter",
        "body.stream",
    ),
    ("translation: n", raw(chat_line(body={**CHAT_BODY, "n": 2})), "invalid_request", "body.n"),
    (
        "translation: messages",
        raw(chat_line(body={"model": "m"})),
        "invalid_request",
        "body.messages",
    ),
    (
        "translation: deep param",
        raw(chat_line(body={"model": "m", "messages": [{"role": "user", "content": 5}]})),
        "invalid_request",
        "body.messages[0].content",
    ),
]


@pytest.mark.parametrize(
    ("raw_line", "code", "param"), [c[1:] for c in LINE_ERRORS], ids=[c[0] for c in LINE_ERRORS]
)
def test_each_bad_line_is_named_with_its_code_and_param(
    raw_line: bytes, code: str, param: str | None
) -> None:
    result = validate_line(raw_line, 7, CHAT_ENDPOINT, OPTS)
    assert isinstance(result, LineError)
    assert (result.line, result.code, result.param) == (7, code, param)
    assert result.message
    entry = BatchError.model_validate(result.as_batch_error(), strict=True)
    assert entry.line == 7 and entry.code == code


def test_a_refused_body_keeps_the_translations_own_message() -> None:
    result = validate_line(raw(chat_line(body={**CHAT_BODY, "n": 2})), 1, CHAT_ENDPOINT, OPTS)
    assert isinstance(result, LineError)
    assert result.message == "n > 1 is not supported: the upstream returns one choice."


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"previous_response_id": "resp_1"}, "body.previous_response_id"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "body.input"),
        ({"stream": True}, "body.stream"),
    ],
)
def test_responses_lines_needing_a_store_or_a_stream_are_refused(
    body: dict[str, Any], param: str
) -> None:
    result = validate_line(raw(resp_line(**body)), 2, RESPONSES_ENDPOINT, OPTS)
    assert isinstance(result, LineError)
    assert (result.code, result.param) == ("unsupported_parameter", param)


def test_a_valid_chat_line_carries_exactly_the_realtime_translation() -> None:
    body = {**CHAT_BODY, "max_completion_tokens": 50, "stop": ["x"], "seed": 1, "stream": False}
    result = validate_line(raw(chat_line("req-1", body=body)), 3, CHAT_ENDPOINT, OPTS)
    assert isinstance(result, BatchLine)
    realtime = openai_chat.translate_request(body, OPTS)
    assert (result.line, result.custom_id) == (3, "req-1")
    assert result.params == realtime.body
    assert "stream" not in result.params
    assert result.request.ignored_params == ("seed",)


def test_a_valid_responses_line_carries_exactly_the_realtime_translation() -> None:
    result = validate_line(
        raw(resp_line("r", instructions="be brief")), 1, RESPONSES_ENDPOINT, OPTS
    )
    assert isinstance(result, BatchLine)
    realtime = openai_responses.translate_request({**RESP_BODY, "instructions": "be brief"}, OPTS)
    assert result.params == realtime.body


def test_an_unknown_batch_endpoint_is_the_callers_error() -> None:
    with pytest.raises(ValueError, match="embeddings"):
        validate_line(raw(chat_line()), 1, "/v1/embeddings", OPTS)
    with pytest.raises(ValueError):
        LineChecker("/v1/embeddings", OPTS)


# --- LineChecker --------------------------------------------------------------------------


def feed_all(checker: LineChecker, lines: list[bytes]) -> list[BatchLine | LineError]:
    return [result for line in lines for result in checker.feed(line)]


def test_duplicates_are_named_on_the_later_line_even_after_an_invalid_first() -> None:
    lines = [
        raw(chat_line("a")),
        raw(chat_line("b", method="GET")),  # invalid, but its id is taken
        b"\n",  # empty: numbered, not a request
        raw(chat_line("a")),
        raw(chat_line("b")),
        raw(chat_line("c")),
    ]
    checker = LineChecker(CHAT_ENDPOINT, OPTS)
    results = feed_all(checker, lines)
    summary = [(r.line, r.code if isinstance(r, LineError) else "ok") for r in results]
    assert summary == [
        (1, "ok"),
        (2, "invalid_method"),
        (4, "duplicate_custom_id"),
        (5, "duplicate_custom_id"),
        (6, "ok"),
    ]
    assert (checker.line_no, checker.requests, checker.bytes) == (6, 5, sum(map(len, lines)))


def test_the_request_limit_is_reported_once_on_the_first_line_past_it() -> None:
    checker = LineChecker(CHAT_ENDPOINT, OPTS, max_lines=2)
    results = feed_all(checker, [raw(chat_line(str(i))) for i in range(4)])
    errors = [(r.line, r.code) for r in results if isinstance(r, LineError)]
    assert errors == [(3, "max_requests_exceeded")]
    assert sum(isinstance(r, BatchLine) for r in results) == 4  # later lines still checked


def test_the_byte_limit_counts_terminators_and_is_reported_once() -> None:
    lines = [raw(chat_line(str(i))) for i in range(4)]
    limit = len(lines[0]) + len(lines[1])  # exactly two lines fit
    checker = LineChecker(CHAT_ENDPOINT, OPTS, max_bytes=limit)
    results = feed_all(checker, lines)
    errors = [(r.line, r.code) for r in results if isinstance(r, LineError)]
    assert errors == [(3, "max_file_size_exceeded")]


def test_errors_make_a_failed_batch_object_the_sdk_parses() -> None:
    checker = LineChecker(CHAT_ENDPOINT, OPTS)
    results = feed_all(checker, [b"oops\n", raw(chat_line("a")), raw(chat_line("a"))])
    data = [r.as_batch_error() for r in results if isinstance(r, LineError)]
    batch = Batch.model_validate(
        {
            "id": "batch_1",
            "object": "batch",
            "endpoint": CHAT_ENDPOINT,
            "input_file_id": "file-1",
            "completion_window": "24h",
            "status": "failed",
            "created_at": 1,
            "failed_at": 2,
            "errors": {"object": "list", "data": data},
        },
        strict=True,
    )
    assert batch.errors is not None and batch.errors.data is not None
    assert [(e.line, e.code) for e in batch.errors.data] == [
        (1, "invalid_json"),
        (3, "duplicate_custom_id"),
    ]


# --- custom ids ---------------------------------------------------------------------------


def test_ids_anthropic_accepts_stay_and_others_get_a_deterministic_safe_id() -> None:
    assert anthropic_custom_id("request-1_A", 0) == "request-1_A"
    mapped = anthropic_custom_id("request 1/ü", 12)
    assert mapped == anthropic_custom_id("request 1/ü", 12)
    assert mapped.startswith("r12-") and ANTHROPIC_CUSTOM_ID.fullmatch(mapped)
    assert anthropic_custom_id("x" * 65, 0) != "x" * 65  # too long for Anthropic
    assert anthropic_custom_id("x" * 64, 0) == "x" * 64


def test_a_client_id_in_the_generated_form_is_mapped_so_it_never_meets_a_generated_one() -> None:
    generated = anthropic_custom_id("a b", 0)
    assert generated.startswith("r0-")
    # The client names line 1 like line 0's generated id: it is mapped, under its own index.
    own = anthropic_custom_id(generated, 1)
    assert own != generated and own.startswith("r1-")
    assert anthropic_custom_id("r1-deadbeef0000x", 3) == "r1-deadbeef0000x"  # not the form


@given(st.lists(st.text(max_size=70), unique=True, max_size=60))
def test_distinct_client_ids_always_map_to_distinct_anthropic_ids(originals: list[str]) -> None:
    generated_like = [anthropic_custom_id(o, i) for i, o in enumerate(originals)]
    mixed = [*originals, *generated_like]  # ids that look generated are the hard case
    mixed = list(dict.fromkeys(mixed))
    sent = [anthropic_custom_id(o, i) for i, o in enumerate(mixed)]
    assert len(set(sent)) == len(sent)
    assert all(ANTHROPIC_CUSTOM_ID.fullmatch(a) for a in sent)
    assert sent == [anthropic_custom_id(o, i) for i, o in enumerate(mixed)]  # deterministic


# --- split planning -----------------------------------------------------------------------


def entries(n: int) -> list[bytes]:
    return [
        request_entry(f"id{i}", {"model": "m", "max_tokens": 1, "messages": []}) for i in range(n)
    ]


def test_split_at_the_request_limit() -> None:
    plans = list(split_batches(entries(7), max_requests=3))
    assert [(p.first, p.count) for p in plans] == [(0, 3), (3, 3), (6, 1)]


def test_split_at_the_byte_limit_counts_the_body_as_sent() -> None:
    lines = entries(5)
    one = len(lines[0])  # all the same size here
    exactly_two = len(b'{"requests":[]}') + 2 * one + 1
    plans = list(split_batches(lines, max_bytes=exactly_two))
    assert [(p.first, p.count) for p in plans] == [(0, 2), (2, 2), (4, 1)]
    for plan in plans:
        body = b"".join(batch_body(lines[plan.first : plan.first + plan.count]))
        assert len(body) == plan.bytes <= exactly_two
        assert [r["custom_id"] for r in json.loads(body)["requests"]] == [
            f"id{i}" for i in range(plan.first, plan.first + plan.count)
        ]
    assert [p.count for p in split_batches(lines, max_bytes=exactly_two - 1)] == [1] * 5


def test_split_takes_pairs_lazily_and_refuses_a_request_no_body_can_hold() -> None:
    pairs = ((f"id{i}", {"model": "m"}) for i in itertools.count())
    first = next(split_batches(itertools.islice(pairs, 10), max_requests=4))
    assert first == PlannedBatch(
        0,
        4,
        len(b"".join(batch_body(entries(0)))) + 4 * len(request_entry("id0", {"model": "m"})) + 3,
    )
    with pytest.raises(RequestTooLarge) as info:
        list(split_batches([b"x" * 10, b"y" * 100], max_bytes=50))
    assert info.value.index == 1
    assert list(split_batches([])) == []


# --- output lines -------------------------------------------------------------------------


def counter_ids() -> Any:
    n = itertools.count(1)
    return lambda prefix: f"{prefix}{next(n)}"


MESSAGE = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "Hello!"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 5, "output_tokens": 2},
}


def translated(endpoint: str, line: dict[str, Any]) -> Any:
    result = validate_line(raw(line), 1, endpoint, OPTS)
    assert isinstance(result, BatchLine)
    return result.request


def test_a_succeeded_chat_result_is_an_output_line_with_a_strict_chat_completion() -> None:
    request = translated(CHAT_ENDPOINT, chat_line("q 1"))
    result = {"custom_id": "r0-x", "result": {"type": "succeeded", "message": MESSAGE}}
    kind, line = output_line(
        result, "q 1", CHAT_ENDPOINT, request=request, created=1700, ids=counter_ids()
    )
    assert kind == "output"
    body = line["response"]["body"]
    assert line == {
        "id": "batch_req_2",
        "custom_id": "q 1",
        "response": {"status_code": 200, "request_id": "req_3", "body": body},
        "error": None,
    }
    completion = ChatCompletion.model_validate(body, strict=True)
    assert (completion.id, completion.created, completion.model) == (
        "chatcmpl-1",
        1700,
        "claude-sonnet-4-5",
    )
    assert completion.choices[0].message.content == "Hello!"
    assert body == openai_chat.translate_response(
        MESSAGE, model="claude-sonnet-4-5", completion_id="chatcmpl-1", created=1700
    )


def test_a_succeeded_responses_result_is_an_output_line_with_a_strict_response() -> None:
    request = translated(RESPONSES_ENDPOINT, resp_line("a"))
    result = {"custom_id": "a", "result": {"type": "succeeded", "message": MESSAGE}}
    kind, line = output_line(
        result, "a", RESPONSES_ENDPOINT, request=request, created=1700, ids=counter_ids()
    )
    assert kind == "output" and line["error"] is None
    response = Response.model_validate(line["response"]["body"], strict=True)
    assert (response.id, response.output_text, response.status) == ("resp_1", "Hello!", "completed")


def errored(kind: str, message: str, request_id: str | None = "req_upstream") -> dict[str, Any]:
    error = {"type": "error", "error": {"type": kind, "message": message}, "request_id": request_id}
    return {"custom_id": "a", "result": {"type": "errored", "error": error}}


@pytest.mark.parametrize(
    ("kind", "status", "code"),
    [
        ("invalid_request_error", 400, "invalid_request_error"),
        ("rate_limit_error", 429, "rate_limit_error"),
        ("overloaded_error", 503, "overloaded_error"),
        ("api_error", 502, "api_error"),
        ("authentication_error", 502, "upstream_authentication_error"),
        ("something_new", 502, "something_new"),
    ],
)
def test_an_errored_result_is_an_error_line_with_the_realtime_status_and_body(
    kind: str, status: int, code: str
) -> None:
    request = translated(CHAT_ENDPOINT, chat_line())
    out, line = output_line(
        errored(kind, "nope"), "a", CHAT_ENDPOINT, request=request, created=1, ids=counter_ids()
    )
    assert out == "error" and line["error"] is None
    assert line["response"]["status_code"] == status
    assert line["response"]["request_id"] == "req_upstream"
    assert set(line["response"]["body"]["error"]) == {"message", "type", "param", "code"}
    assert line["response"]["body"]["error"]["code"] == code


def test_an_errored_result_is_reworded_as_the_realtime_door_rewords_it() -> None:
    request = translated(
        CHAT_ENDPOINT, chat_line(body={**CHAT_BODY, "max_completion_tokens": 999999})
    )
    message = "max_tokens: 999999 > 64000, which is the maximum allowed"
    result = errored("invalid_request_error", message, request_id=None)
    _, line = output_line(result, "a", CHAT_ENDPOINT, request=request, created=1, ids=counter_ids())
    error = line["response"]["body"]["error"]
    assert error["param"] == "max_completion_tokens"
    assert error["message"].startswith("max_completion_tokens: 999999")
    assert line["response"]["request_id"] == "req_3"  # none upstream: one of ours
    bare = {
        "custom_id": "a",
        "result": {"type": "errored", "error": {"type": "overloaded_error", "message": "busy"}},
    }
    _, line = output_line(bare, "a", CHAT_ENDPOINT, request=request, created=1, ids=counter_ids())
    assert line["response"]["status_code"] == 503


@pytest.mark.parametrize(
    ("kind", "code"), [("canceled", "batch_cancelled"), ("expired", "batch_expired")]
)
def test_requests_that_never_ran_are_error_lines_with_openais_codes(kind: str, code: str) -> None:
    request = translated(RESPONSES_ENDPOINT, resp_line())
    result = {"custom_id": "a", "result": {"type": kind}}
    out, line = output_line(
        result, "orig", RESPONSES_ENDPOINT, request=request, created=1, ids=counter_ids()
    )
    assert out == "error"
    assert line == {
        "id": "batch_req_2",
        "custom_id": "orig",
        "response": None,
        "error": {"code": code, "message": line["error"]["message"]},
    }


def test_an_unknown_result_is_an_error_line_not_a_lost_request() -> None:
    request = translated(CHAT_ENDPOINT, chat_line())
    for result in (
        {"custom_id": "a", "result": {"type": "teleported"}},
        {"custom_id": "a"},
        {"result": {"type": "succeeded", "message": "x"}},
    ):
        out, line = output_line(
            result, "a", CHAT_ENDPOINT, request=request, created=1, ids=counter_ids()
        )
        assert out == "error" and line["response"]["status_code"] == 502
        assert line["response"]["body"]["error"]["code"] == "upstream_protocol_error"


def test_the_endpoint_and_the_request_must_agree() -> None:
    request = translated(CHAT_ENDPOINT, chat_line())
    with pytest.raises(ValueError):
        output_line(
            {"result": {"type": "expired"}}, "a", RESPONSES_ENDPOINT, request=request, created=1
        )


# --- status -------------------------------------------------------------------------------


def upstream(status: str, cancel_initiated_at: str | None = None, **counts: int) -> dict[str, Any]:
    return {
        "processing_status": status,
        "cancel_initiated_at": cancel_initiated_at,
        "request_counts": counts,
    }


STATUS_TABLE: list[tuple[dict[str, Any] | None, dict[str, bool], str]] = [
    (upstream("ended", succeeded=3), {"failed": True}, "failed"),
    (None, {}, "validating"),
    (None, {"cancel_requested": True}, "cancelling"),
    (None, {"validated": True}, "validating"),
    (None, {"validated": True, "cancel_requested": True}, "cancelled"),
    (upstream("in_progress", processing=3), {"validated": True}, "in_progress"),
    (
        upstream("in_progress", processing=3),
        {"validated": True, "cancel_requested": True},
        "cancelling",
    ),
    (
        upstream("canceling", "2025-01-01T00:00:00Z", processing=3),
        {"validated": True},
        "cancelling",
    ),
    (upstream("ended", succeeded=3), {"validated": True, "finalizing": True}, "finalizing"),
    (
        upstream("ended", "2025-01-01T00:00:00Z", succeeded=1, canceled=2),
        {"validated": True, "finalizing": True},
        "cancelling",
    ),
    (upstream("ended", succeeded=3), {"validated": True}, "completed"),
    (upstream("ended", errored=3), {"validated": True}, "completed"),
    (
        upstream("ended", succeeded=1, canceled=2),
        {"validated": True, "cancel_requested": True},
        "cancelled",
    ),
    (upstream("ended", "2025-01-01T00:00:00Z", succeeded=3), {"validated": True}, "cancelled"),
    (upstream("ended", succeeded=1, expired=2), {"validated": True}, "expired"),
    (
        upstream("ended", succeeded=1, expired=1, canceled=1),
        {"validated": True, "cancel_requested": True},
        "cancelled",
    ),
]


@pytest.mark.parametrize(("batch", "flags", "expected"), STATUS_TABLE)
def test_the_status_table(
    batch: dict[str, Any] | None, flags: dict[str, bool], expected: str
) -> None:
    args = {"cancel_requested": False, "validated": False, "finalizing": False, **flags}
    assert openai_status(batch, **args) == expected


def test_request_counts_sum_every_part_and_count_unrun_requests_as_failed() -> None:
    parts = [upstream("ended", succeeded=5, errored=1), upstream("ended", canceled=2, expired=3)]
    assert request_counts(parts) == {"total": 11, "completed": 5, "failed": 6}
    assert request_counts(upstream("in_progress", processing=4)) == {
        "total": 4,
        "completed": 0,
        "failed": 0,
    }
    assert request_counts({"request_counts": {"succeeded": True, "errored": -1}}) == {
        "total": 0,
        "completed": 0,
        "failed": 0,
    }


def test_several_message_batches_combine_into_one_state() -> None:
    a = {
        **upstream("ended", succeeded=2),
        "created_at": "2025-01-01T00:00:00Z",
        "ended_at": "2025-01-01T02:00:00Z",
        "expires_at": "2025-01-02T00:00:00Z",
    }
    b = {
        **upstream("in_progress", processing=1),
        "created_at": "2025-01-01T00:00:05Z",
        "ended_at": None,
        "expires_at": "2025-01-02T00:00:05Z",
    }
    both = combined([a, b])
    assert both["processing_status"] == "in_progress" and both["ended_at"] is None
    assert (both["created_at"], both["expires_at"]) == (
        "2025-01-01T00:00:00Z",
        "2025-01-02T00:00:05Z",
    )
    assert request_counts(both) == {"total": 3, "completed": 2, "failed": 0}
    b_done = {**b, **upstream("ended", succeeded=1), "ended_at": "2025-01-01T03:00:00Z"}
    assert combined([a, b_done])["ended_at"] == "2025-01-01T03:00:00Z"
    assert (
        combined([a, {**b, "processing_status": "canceling"}])["processing_status"] == "canceling"
    )
    assert (
        openai_status(
            combined([a, b_done]), cancel_requested=False, validated=True, finalizing=False
        )
        == "completed"
    )
    with pytest.raises(ValueError):
        combined([])


def test_timestamps_become_unix_seconds() -> None:
    assert unix_seconds("2024-09-24T18:37:24.100435Z") == 1727203044
    assert unix_seconds("2024-09-24T18:37:24+00:00") == 1727203044
    assert unix_seconds(None) is None and unix_seconds("yesterday") is None
