"""Anthropic stream events → Responses SSE events, as data. Upstream events are the
simulator's own (``simulator.sse.render_stream``), decoded as the gateway decodes them; the
output is parsed back and validated against the ``openai`` SDK's event types strictly, and
folded by the SDK's own accumulator (``ResponseStreamState``), which must arrive at the
terminal event's response -- and at what the non-stream reply says."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from trio_batcher.errors import ProxyError
from trio_batcher.simulator.prompt import InputUsage
from trio_batcher.simulator.reply_data import Block, Reply
from trio_batcher.simulator.sse import error_event, render_stream
from trio_batcher.translation.openai_chat import TranslationOptions
from trio_batcher.translation.openai_responses import ResponsesCodec, translate_request
from trio_batcher.upstream.sse import SSEDecoder

OPTIONS = TranslationOptions(
    default_model="claude-sonnet-4-5", default_max_tokens=4096, anthropic_version="2023-06-01"
)
RESPONSE_ID = "resp_" + "fedcba9876543210" * 3
EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
TOOLS = [
    {"type": "function", "name": "get_weather"},
    {
        "type": "namespace",
        "name": "crm",
        "description": "CRM",
        "tools": [{"type": "function", "name": "lookup"}],
    },
]
Upstream = tuple[str, dict[str, Any], str]


def codec_for(**extra: Any) -> ResponsesCodec:
    tr = translate_request(
        {"model": "claude-sonnet-4-5", "input": "hi", "stream": True, "tools": TOOLS, **extra},
        OPTIONS,
    )
    return ResponsesCodec(tr, response_id=RESPONSE_ID, created_at=1700000000)


def decode(raw: bytes) -> list[Upstream]:
    return [(e.event, json.loads(e.data), e.data) for e in SSEDecoder().feed(raw)]


def sim_reply(*blocks: Block, stop_reason: str = "end_turn") -> Reply:
    return Reply(
        model="claude-sonnet-4-5",
        blocks=blocks,
        stop_reason=stop_reason,
        stop_sequence=None,
        input_usage=InputUsage(
            input_tokens=20, cache_creation_input_tokens=5, cache_read_input_tokens=100
        ),
        output_tokens=sum(len(b.pieces) for b in blocks),
    )


def upstream(reply: Reply) -> list[Upstream]:
    return decode(b"".join(e.data for e in render_stream(reply, "msg_sim")))


def parse(chunks: list[bytes]) -> list[dict[str, Any]]:
    """Our bytes as the SDK reads them: every event named by its type, strictly valid."""
    events = []
    for name, data, _ in decode(b"".join(chunks)):
        assert name == data["type"]
        EVENTS.validate_python(data, strict=True)
        events.append(data)
    return events


def run(
    codec: ResponsesCodec, events: list[Upstream], *, finish: bool = True
) -> list[dict[str, Any]]:
    stream = codec.stream()
    chunks: list[bytes] = []
    for name, data, raw in events:
        chunks += stream.feed(name, data, raw)
    if finish:
        chunks += stream.finish()
    assert stream.terminator == b""
    return parse(chunks)


def fold(events: list[dict[str, Any]]) -> ResponseStreamState[Any]:
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    for event in events:
        state.handle_event(EVENTS.validate_python(event))
    return state


def unparsed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: unparsed(v) for k, v in value.items() if k not in ("parsed", "parsed_arguments")}
    if isinstance(value, list):
        return [unparsed(v) for v in value]
    return value


TEXT = Block("text", ("Hel", "lo", "!"))
THINK = Block("thinking", ("Let me ", "think."), signature="U0lHTkFUVVJF")
CALL_A = Block(
    "tool_use", ('{"city": ', '"Paris"}'), id="toolu_A", name="get_weather", input={"city": "Paris"}
)
CALL_B = Block("tool_use", ('{"q": "bob"}',), id="toolu_B", name="crm__lookup", input={"q": "bob"})


def test_a_text_stream_is_the_sequence_the_sdk_expects() -> None:
    events = run(codec_for(), upstream(sim_reply(TEXT)))
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert (
        events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    )
    assert [e["delta"] for e in events[4:7]] == ["Hel", "lo", "!"]
    assert events[7]["text"] == "Hello!"
    done = events[-1]["response"]
    assert done["status"] == "completed"
    assert done["usage"]["input_tokens"] == 125 and done["usage"]["output_tokens"] == 3
    Response.model_validate(done, strict=True)


@pytest.mark.parametrize("include", [[], ["reasoning.encrypted_content"]])
def test_stream_folds_to_the_terminal_response_and_to_the_plain_reply(include: list[str]) -> None:
    reply = sim_reply(THINK, TEXT, CALL_A, CALL_B, stop_reason="tool_use")
    codec = codec_for(include=include)
    events = run(codec, upstream(reply))
    terminal = events[-1]["response"]
    state = fold(events)
    completed = state._completed_response
    assert completed is not None
    # The SDK's parsed types add its own ``parsed`` fields; everything else must be ours.
    assert [unparsed(item.to_dict()) for item in completed.output] == terminal["output"]
    snapshot = state._ResponseStreamState__current_snapshot  # type: ignore[attr-defined]
    folded = {item.id: item for item in snapshot.output}
    for item in terminal["output"]:
        if item["type"] == "message":
            assert folded[item["id"]].content[0].text == item["content"][0]["text"]
        elif item["type"] == "function_call":
            assert folded[item["id"]].arguments == item["arguments"]

    plain = ResponsesCodec(codec._tr, response_id=RESPONSE_ID, created_at=1700000000)
    body = plain.reply(reply.message_json("msg_sim"), b"")

    def canonical(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {**i, "arguments": json.loads(i["arguments"])} if i["type"] == "function_call" else i
            for i in items
        ]

    assert canonical(terminal["output"]) == canonical(body["output"])
    assert {k: v for k, v in terminal.items() if k != "output"} == {
        k: v for k, v in body.items() if k != "output"
    }
    assert canonical(codec.final["output"]) == canonical(plain.final["output"])  # type: ignore[index]


def test_parallel_calls_are_two_function_call_items_with_their_own_arguments() -> None:
    events = run(codec_for(), upstream(sim_reply(CALL_A, CALL_B, stop_reason="tool_use")))
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert [(e["output_index"], e["item"]["arguments"], e["item"]["status"]) for e in added] == [
        (0, "", "in_progress"),
        (1, "", "in_progress"),
    ]
    assert added[1]["item"]["name"] == "lookup" and added[1]["item"]["namespace"] == "crm"
    done = {
        e["output_index"]: e["arguments"]
        for e in events
        if e["type"] == "response.function_call_arguments.done"
    }
    assert json.loads(done[0]) == {"city": "Paris"} and json.loads(done[1]) == {"q": "bob"}
    assert [i["call_id"] for i in events[-1]["response"]["output"]] == ["toolu_A", "toolu_B"]


def test_thinking_streams_as_a_reasoning_summary_and_its_signature_as_the_blob() -> None:
    codec = codec_for(include=["reasoning.encrypted_content"])
    events = run(codec, upstream(sim_reply(THINK, TEXT)))
    kinds = [e["type"] for e in events[2:8]]
    assert kinds == [
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
    ]
    item_done = events[8]
    assert item_done["type"] == "response.output_item.done"
    assert item_done["item"]["summary"] == [{"type": "summary_text", "text": "Let me think."}]
    assert item_done["item"]["encrypted_content"] == "thinking:U0lHTkFUVVJF"


def test_without_include_the_blob_is_only_in_final() -> None:
    codec = codec_for()
    events = run(codec, upstream(sim_reply(THINK, TEXT)))
    assert all("encrypted_content" not in json.dumps(e) for e in events)
    assert codec.final is not None
    assert codec.final["output"][0]["encrypted_content"] == "thinking:U0lHTkFUVVJF"


def start_event() -> Upstream:
    return upstream(sim_reply(TEXT))[0]


def ev(name: str, **data: Any) -> Upstream:
    payload = {"type": name, **data}
    return (name, payload, json.dumps(payload))


def test_redacted_thinking_and_whole_tool_inputs() -> None:
    codec = codec_for(include=["reasoning.encrypted_content"])
    events = run(
        codec,
        [
            start_event(),
            ev(
                "content_block_start",
                index=0,
                content_block={"type": "redacted_thinking", "data": "REDACTED"},
            ),
            ev("content_block_stop", index=0),
            ev(
                "content_block_start",
                index=1,
                content_block={
                    "type": "tool_use",
                    "id": "toolu_W",
                    "name": "get_weather",
                    "input": {"city": "Oslo"},
                },
            ),
            ev("content_block_stop", index=1),
            ev(
                "content_block_start",
                index=2,
                content_block={
                    "type": "tool_use",
                    "id": "toolu_E",
                    "name": "get_weather",
                    "input": {},
                },
            ),
            ev(
                "content_block_delta",
                index=2,
                delta={"type": "input_json_delta", "partial_json": ""},
            ),
            ev("content_block_stop", index=2),
            ev("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 9}),
            ev("message_stop"),
        ],
    )
    output = events[-1]["response"]["output"]
    assert output[0] == {
        "type": "reasoning",
        "id": output[0]["id"],
        "summary": [],
        "encrypted_content": "redacted_thinking:REDACTED",
    }
    assert output[1]["arguments"] == '{"city":"Oslo"}' and output[2]["arguments"] == "{}"
    deltas = [e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"]
    assert deltas == ['{"city":"Oslo"}', "{}"]
    fold(events)


def test_final_is_set_when_the_terminal_event_is_returned_not_before() -> None:
    codec = codec_for()
    stream = codec.stream()
    events = upstream(sim_reply(TEXT))
    for name, data, raw in events[:-1]:
        stream.feed(name, data, raw)
        assert codec.final is None
    chunks = stream.feed(*events[-1])
    assert codec.final is not None and codec.final["status"] == "completed"
    assert parse(chunks)[-1]["response"] == codec.final
    assert stream.finish() == []


@pytest.mark.parametrize(
    ("stop_reason", "kind", "reason"),
    [
        ("max_tokens", "response.incomplete", "max_output_tokens"),
        ("model_context_window_exceeded", "response.incomplete", "max_output_tokens"),
        ("refusal", "response.incomplete", "content_filter"),
        ("pause_turn", "response.completed", None),
        ("stop_sequence", "response.completed", None),
    ],
)
def test_terminal_event_for_each_stop_reason(
    stop_reason: str, kind: str, reason: str | None
) -> None:
    events = run(codec_for(), upstream(sim_reply(TEXT, stop_reason=stop_reason)))
    assert events[-1]["type"] == kind
    details = events[-1]["response"]["incomplete_details"]
    assert (details and details["reason"]) == reason
    assert fold(events)


def test_a_stream_that_ends_after_message_delta_is_closed_by_finish() -> None:
    codec = codec_for()
    events = upstream(sim_reply(TEXT))[:-1]  # no message_stop
    out = run(codec, events, finish=False)
    assert out[-1]["type"] == "response.output_item.done"
    stream_events = run(codec_for(), events, finish=True)
    assert stream_events[-1]["type"] == "response.completed"


@pytest.mark.parametrize(
    ("kind", "code"),
    [
        ("overloaded_error", "server_error"),
        ("rate_limit_error", "rate_limit_exceeded"),
        ("api_error", "server_error"),
    ],
)
def test_an_upstream_error_mid_stream_is_response_failed_with_what_there_was(
    kind: str, code: str
) -> None:
    codec = codec_for()
    stream = codec.stream()
    events = upstream(sim_reply(TEXT, CALL_A, stop_reason="tool_use"))
    cut = (
        next(
            i
            for i, (n, d, _) in enumerate(events)
            if n == "content_block_start" and d["index"] == 1
        )
        + 2
    )
    chunks: list[bytes] = []
    for name, data, raw in events[:cut]:
        chunks += stream.feed(name, data, raw)
    [(_, error, raw)] = decode(error_event(kind, "Overloaded", "req_1"))
    chunks.append(stream.upstream_error(error, raw))
    parsed = parse(chunks)
    failed = parsed[-1]
    assert failed["type"] == "response.failed"
    response = failed["response"]
    assert response["status"] == "failed"
    assert response["error"]["code"] == code and "Overloaded" in response["error"]["message"]
    assert [(i["type"], i["status"]) for i in response["output"]] == [
        ("message", "completed"),
        ("function_call", "incomplete"),
    ]
    assert codec.final is not None and codec.final["status"] == "failed"
    assert stream.finish() == [] and stream.error(ProxyError(504, "late")) == b""
    fold(parsed)


def test_a_gateway_error_after_the_start_is_response_failed() -> None:
    codec = codec_for()
    stream = codec.stream()
    chunks: list[bytes] = []
    for name, data, raw in upstream(sim_reply(THINK, TEXT))[:4]:
        chunks += stream.feed(name, data, raw)
    chunks.append(
        stream.error(
            ProxyError(
                502,
                "The upstream stream ended before the message was complete.",
                code="upstream_stream_truncated",
            )
        )
    )
    parsed = parse(chunks)
    response = parsed[-1]["response"]
    assert parsed[-1]["type"] == "response.failed"
    assert response["error"] == {
        "code": "server_error",
        "message": "The upstream stream ended before the message was complete.",
    }
    assert (
        response["output"][0]["type"] == "reasoning"
        and response["output"][0]["status"] == "incomplete"
    )
    assert response["output"][0]["summary"] == [{"type": "summary_text", "text": "Let me "}]
    fold(parsed)


def test_an_error_before_any_event_still_opens_the_response() -> None:
    codec = codec_for()
    stream = codec.stream()
    parsed = parse([stream.error(ProxyError(429, "slow down"))])
    assert [e["type"] for e in parsed] == [
        "response.created",
        "response.in_progress",
        "response.failed",
    ]
    assert parsed[-1]["response"]["error"]["code"] == "rate_limit_exceeded"
    fold(parsed)


def test_pings_unknown_events_and_server_tool_blocks_add_nothing() -> None:
    events = [
        start_event(),
        ev("ping"),
        ev(
            "content_block_start",
            index=0,
            content_block={"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}},
        ),
        ev(
            "content_block_delta", index=0, delta={"type": "input_json_delta", "partial_json": "{}"}
        ),
        ev("content_block_stop", index=0),
        ev("something_new", x=1),
        ev("content_block_start", index=1, content_block={"type": "text", "text": ""}),
        ev("content_block_delta", index=1, delta={"type": "text_delta", "text": "ok"}),
        ev("content_block_delta", index=1, delta={"type": "citations_delta", "citation": {}}),
        ev("content_block_stop", index=1),
        ev("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 1}),
        ev("message_stop"),
    ]
    out = run(codec_for(), events)
    assert [i["type"] for i in out[-1]["response"]["output"]] == ["message"]
    assert out[-1]["response"]["output"][0]["id"].endswith("0000")
    assert sum(e["type"] == "response.output_text.delta" for e in out) == 1


def test_nothing_follows_the_terminal_event() -> None:
    codec = codec_for()
    stream = codec.stream()
    events = upstream(sim_reply(TEXT))
    for name, data, raw in events:
        stream.feed(name, data, raw)
    assert stream.feed(*events[1]) == []
    assert stream.upstream_error({"type": "error", "error": {"type": "api_error"}}, "") == b""
