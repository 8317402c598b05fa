"""Anthropic stream events → OpenAI chunks, as data, plus the reassembly property:
a streamed reply, accumulated by OpenAI's rules (ours and the openai SDK's own), equals the
non-stream translation of the same reply."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from trio_batcher.translation.openai_chat import (
    StreamTranslator,
    UpstreamStreamError,
    translate_response,
    translate_usage,
)

Event = tuple[str, dict[str, Any]]


# -- a pure model of Anthropic's streaming: message → the events it would stream ------------


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or []


def events_for(
    message: dict[str, Any], *, piece: int = 3, repeat_usage: bool = False
) -> list[Event]:
    """The SSE events Anthropic sends for ``message`` (strings split every ``piece`` chars).

    Like the real API: message_start carries the input/cache usage and output_tokens 1,
    tool input arrives as input_json_delta pieces starting with an empty one, thinking ends
    with a signature_delta, pings are interleaved, message_delta carries cumulative usage.
    """
    usage = message["usage"]
    start_usage = {k: v for k, v in usage.items() if k != "output_tokens"} | {"output_tokens": 1}
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": start_usage,
    }
    events: list[Event] = [("message_start", {"type": "message_start", "message": start})]
    events.append(("ping", {"type": "ping"}))
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        deltas: list[dict[str, Any]] = []
        first: dict[str, Any]
        if kind == "text":
            first = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in _pieces(block["text"], piece)]
        elif kind == "tool_use":
            first = {**block, "input": {}}
            arguments = json.dumps(block["input"]) if block["input"] else ""
            deltas = [
                {"type": "input_json_delta", "partial_json": p}
                for p in ["", *_pieces(arguments, piece)]
            ]
        elif kind == "thinking":
            first = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": p} for p in _pieces(block["thinking"], piece)
            ]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        else:  # redacted_thinking arrives whole
            first = block
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": first},
            )
        )
        for delta in deltas:
            events.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    delta_usage = dict(usage) if repeat_usage else {"output_tokens": usage["output_tokens"]}
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": delta_usage,
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def run(events: list[Event], *, include_usage: bool = False) -> list[dict[str, Any]]:
    translator = StreamTranslator(
        model="my-model", completion_id="chatcmpl-1", created=1700, include_usage=include_usage
    )
    chunks = [chunk for name, data in events for chunk in translator.feed(name, data)]
    chunks += translator.finish()
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk, strict=True)
    return chunks


def summary(chunks: list[dict[str, Any]]) -> list[Any]:
    """Chunks minus the envelope: a delta dict, ("finish", reason) or ("usage", usage)."""
    out: list[Any] = []
    for chunk in chunks:
        if not chunk["choices"]:
            out.append(("usage", chunk["usage"]))
        elif chunk["choices"][0]["finish_reason"] is not None:
            assert chunk["choices"][0]["delta"] == {}
            out.append(("finish", chunk["choices"][0]["finish_reason"]))
        else:
            out.append(chunk["choices"][0]["delta"])
    return out


def message(*blocks: dict[str, Any], stop_reason: str = "end_turn", **usage: int) -> dict[str, Any]:
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": list(blocks),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5, **usage},
    }


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def tool_use(call_id: str, name: str, input: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": input}


ROLE = {"role": "assistant", "content": ""}


def block_start(index: int, block: dict[str, Any]) -> Event:
    return (
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": block},
    )


def block_delta(index: int, delta: dict[str, Any]) -> Event:
    return ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


def block_stop(index: int) -> Event:
    return ("content_block_stop", {"type": "content_block_stop", "index": index})


START = (
    "message_start",
    {"type": "message_start", "message": {**message(), "content": [], "stop_reason": None}},
)
STOP = ("message_stop", {"type": "message_stop"})


def message_delta(stop_reason: str | None, **usage: int) -> Event:
    return (
        "message_delta",
        {"type": "message_delta", "delta": {"stop_reason": stop_reason}, "usage": usage},
    )


# -- event list → chunk list --------------------------------------------------------------

STREAMS = [
    # (id, events, expected summary)
    (
        "text",
        events_for(message(text("Hello!"))),
        [ROLE, {"content": "Hel"}, {"content": "lo!"}, ("finish", "stop")],
    ),
    (
        "tool_call_index_counts_tool_calls_not_blocks",
        events_for(
            message(
                text("Hm"),
                tool_use("toolu_1", "get", {"a": 1}),
                tool_use("toolu_2", "put", {}),
                stop_reason="tool_use",
            ),
            piece=100,
        ),
        [
            ROLE,
            {"content": "Hm"},
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "toolu_1",
                        "type": "function",
                        "function": {"name": "get", "arguments": ""},
                    }
                ]
            },
            {"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 1}'}}]},
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "toolu_2",
                        "type": "function",
                        "function": {"name": "put", "arguments": ""},
                    }
                ]
            },
            {"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]},
            ("finish", "tool_calls"),
        ],
    ),
    (
        "tool_call_only_reply_has_null_content",
        events_for(message(tool_use("toolu_1", "get", {}), stop_reason="tool_use"), piece=100),
        [
            {"role": "assistant", "content": None},
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "toolu_1",
                        "type": "function",
                        "function": {"name": "get", "arguments": ""},
                    }
                ]
            },
            {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]},
            ("finish", "tool_calls"),
        ],
    ),
    (
        "thinking_streams_reasoning_then_the_signed_block",
        events_for(
            message({"type": "thinking", "thinking": "Let me see", "signature": "sig"}, text("4")),
            piece=6,
        ),
        [
            ROLE,
            {"reasoning_content": "Let me"},
            {"reasoning_content": " see"},
            {
                "thinking_blocks": [
                    {"index": 0, "type": "thinking", "thinking": "Let me see", "signature": "sig"}
                ]
            },
            {"content": "4"},
            ("finish", "stop"),
        ],
    ),
    (
        "redacted_thinking",
        events_for(message({"type": "redacted_thinking", "data": "opaque"}, text("ok"))),
        [
            ROLE,
            {"thinking_blocks": [{"index": 0, "type": "redacted_thinking", "data": "opaque"}]},
            {"content": "ok"},
            ("finish", "stop"),
        ],
    ),
    (
        "silent_events",
        [
            START,
            ("ping", {"type": "ping"}),
            block_start(0, text("")),
            block_delta(0, {"type": "citations_delta", "citation": {"type": "char_location"}}),
            block_delta(0, {"type": "text_delta", "text": ""}),
            ("some_future_event", {"type": "some_future_event"}),
            block_stop(0),
            block_start(
                1, {"type": "server_tool_use", "id": "srvtoolu_1", "name": "x", "input": {}}
            ),
            block_delta(1, {"type": "input_json_delta", "partial_json": "{}"}),
            block_stop(1),
            message_delta("end_turn", output_tokens=1),
            STOP,
        ],
        [ROLE, ("finish", "stop")],
    ),
    (
        "max_tokens_is_length",
        [
            START,
            block_start(0, text("")),
            block_delta(0, {"type": "text_delta", "text": "a"}),
            message_delta("max_tokens", output_tokens=1),
            STOP,
        ],
        [ROLE, {"content": "a"}, ("finish", "length")],
    ),
    (
        "refusal_is_content_filter",
        [START, message_delta("refusal", output_tokens=0), STOP],
        [ROLE, ("finish", "content_filter")],
    ),
    (
        "finish_on_message_stop_when_delta_lacks_reason",
        [START, message_delta(None, output_tokens=3), STOP],
        [ROLE, ("finish", "stop")],
    ),
    (
        "truncated_stream_finish_still_closes",
        [START, block_start(0, text("")), block_delta(0, {"type": "text_delta", "text": "a"})],
        [ROLE, {"content": "a"}, ("finish", "stop")],
    ),
    (
        "role_before_content_without_message_start",
        [
            block_start(0, text("")),
            block_delta(0, {"type": "text_delta", "text": "a"}),
            message_delta("end_turn"),
            STOP,
        ],
        [ROLE, {"content": "a"}, ("finish", "stop")],
    ),
    (
        "text_in_block_start",
        [START, block_start(0, text("pre")), block_stop(0), message_delta("end_turn"), STOP],
        [ROLE, {"content": "pre"}, ("finish", "stop")],
    ),
    (
        "event_name_message_falls_back_to_type",
        [("message", START[1]), ("", message_delta("end_turn")[1])],
        [ROLE, ("finish", "stop")],
    ),
]


@pytest.mark.parametrize(
    ("events", "expected"), [r[1:] for r in STREAMS], ids=[r[0] for r in STREAMS]
)
def test_events_become_chunks(events: list[Event], expected: list[Any]) -> None:
    assert summary(run(events)) == expected


def test_every_chunk_shares_the_envelope() -> None:
    chunks = run(
        events_for(message(text("Hello"), tool_use("t", "f", {"x": 1}), stop_reason="tool_use"))
    )
    for chunk in chunks:
        assert {k: chunk[k] for k in ("id", "object", "created", "model")} == {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1700,
            "model": "my-model",
        }
        assert "usage" not in chunk
        assert "system_fingerprint" not in chunk  # a string in the schema: omitted, not null
        assert [c["index"] for c in chunk["choices"]] == [0]
        assert chunk["choices"][0]["logprobs"] is None
    assert chunks[0]["choices"][0]["delta"] == ROLE
    assert sum("role" in c["choices"][0]["delta"] for c in chunks) == 1
    assert sum(c["choices"][0]["finish_reason"] is not None for c in chunks) == 1


def test_include_usage_adds_null_usage_and_a_final_usage_chunk() -> None:
    reply = message(text("Hi"), input_tokens=10, cache_read_input_tokens=90, output_tokens=4)
    chunks = run(events_for(reply), include_usage=True)
    assert all(chunk["usage"] is None for chunk in chunks[:-1])
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == translate_usage(reply["usage"])
    assert chunks[-1]["usage"]["prompt_tokens"] == 100
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"


def test_message_delta_usage_overwrites_and_never_adds() -> None:
    translator = StreamTranslator(model="m", completion_id="c", created=0, include_usage=True)
    translator.feed(*START)  # output_tokens 5 in the start message
    translator.feed(*message_delta("end_turn", output_tokens=15))
    translator.feed(*message_delta("end_turn", output_tokens=17, input_tokens=12))
    assert translator.upstream_usage == {"input_tokens": 12, "output_tokens": 17}
    assert translator.final_usage == translate_usage({"input_tokens": 12, "output_tokens": 17})
    assert translator.stop_reason == "end_turn"
    assert translator.finish()[-1]["usage"]["completion_tokens"] == 17


def test_properties_before_any_usage() -> None:
    translator = StreamTranslator(model="m", completion_id="c", created=0, include_usage=False)
    assert (translator.upstream_usage, translator.final_usage, translator.stop_reason) == (
        {},
        None,
        None,
    )


def test_finish_chunk_is_emitted_exactly_once() -> None:
    translator = StreamTranslator(model="m", completion_id="c", created=0, include_usage=True)
    emitted = translator.feed(*START) + translator.feed(*message_delta("end_turn", output_tokens=2))
    assert translator.finished
    emitted += translator.feed(*STOP) + translator.finish()
    assert translator.finish() == []
    assert summary(emitted) == [ROLE, ("finish", "stop"), ("usage", translator.final_usage)]


ERRORS = [
    (
        "overloaded",
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        {
            "message": "Overloaded",
            "type": "overloaded_error",
            "param": None,
            "code": "overloaded_error",
        },
    ),
    (
        "api_error",
        {"type": "error", "error": {"type": "api_error", "message": "Internal"}},
        {"message": "Internal", "type": "api_error", "param": None, "code": "api_error"},
    ),
    (
        "unknown_type_is_api_error_with_code",
        {"type": "error", "error": {"type": "brand_new_error", "message": "New"}},
        {"message": "New", "type": "api_error", "param": None, "code": "brand_new_error"},
    ),
    (
        "malformed",
        {"type": "error"},
        {
            "message": "The upstream reported an error.",
            "type": "api_error",
            "param": None,
            "code": None,
        },
    ),
]


@pytest.mark.parametrize(("data", "error"), [r[1:] for r in ERRORS], ids=[r[0] for r in ERRORS])
def test_error_event_raises_with_an_openai_error_body(
    data: dict[str, Any], error: dict[str, Any]
) -> None:
    translator = StreamTranslator(model="m", completion_id="c", created=0, include_usage=False)
    translator.feed(*START)
    with pytest.raises(UpstreamStreamError) as caught:
        translator.feed("error", data)
    assert caught.value.error == {"error": error}


# -- the reassembly property ------------------------------------------------------------


def accumulate(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """OpenAI's documented client-side accumulation: concatenate strings per field, merge
    tool_calls (and thinking_blocks) entries by ``index``."""
    message: dict[str, Any] = {}
    finish = None
    usage = None
    for chunk in chunks:
        usage = chunk.get("usage") or usage
        for choice in chunk["choices"]:
            finish = choice["finish_reason"] or finish
            for key, value in choice["delta"].items():
                if key in ("tool_calls", "thinking_blocks"):
                    entries = message.setdefault(key, [])
                    for fragment in value:
                        if fragment["index"] == len(entries):
                            entries.append({})
                        _merge(entries[fragment["index"]], fragment)
                elif key == "role":
                    message["role"] = value
                elif value is None:
                    message.setdefault(key, None)  # OpenAI: a null delta field adds nothing
                else:
                    message[key] = (message.get(key) or "") + value
    return {"message": message, "finish_reason": finish, "usage": usage}


def _merge(target: dict[str, Any], fragment: dict[str, Any]) -> None:
    for key, value in fragment.items():
        if isinstance(value, dict):
            _merge(target.setdefault(key, {}), value)
        elif isinstance(value, str) and key not in ("type",):
            target[key] = target.get(key, "") + value
        else:
            target[key] = value


def normalised(message: dict[str, Any]) -> dict[str, Any]:
    """What must agree between stream and non-stream: content (null ≡ ""), tool calls with
    parsed arguments, reasoning, thinking blocks (without stream indexes)."""
    out = {
        "role": message.get("role"),
        "content": message.get("content") or "",
        "reasoning_content": message.get("reasoning_content"),
        "tool_calls": [
            {
                "id": c["id"],
                "type": c["type"],
                "name": c["function"]["name"],
                "arguments": json.loads(c["function"]["arguments"]),
            }
            for c in message.get("tool_calls") or []
        ],
        "thinking_blocks": [
            {k: v for k, v in b.items() if k != "index"}
            for b in message.get("thinking_blocks") or []
        ],
    }
    return out


_texts = st.text(max_size=20)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
_blocks = st.one_of(
    st.builds(text, _texts),
    st.builds(
        tool_use,
        st.from_regex(r"toolu_[A-Za-z0-9]{4}", fullmatch=True),
        st.sampled_from(["get", "put_x", "a-b"]),
        st.dictionaries(st.text(max_size=6), _json, max_size=3),
    ),
    st.builds(
        lambda t, s: {"type": "thinking", "thinking": t, "signature": s},
        _texts,
        st.text("abc=", max_size=8),
    ),
    st.builds(
        lambda d: {"type": "redacted_thinking", "data": d}, st.text("xyz", min_size=1, max_size=8)
    ),
)
_stop_reasons = st.sampled_from(
    [
        "end_turn",
        "stop_sequence",
        "pause_turn",
        "max_tokens",
        "model_context_window_exceeded",
        "tool_use",
        "refusal",
    ]
)
_counts = st.integers(0, 10_000)


@st.composite
def _messages(draw: st.DrawFn) -> dict[str, Any]:
    usage = {"input_tokens": draw(_counts), "output_tokens": draw(st.integers(1, 10_000))}
    for key in ("cache_creation_input_tokens", "cache_read_input_tokens"):
        if draw(st.booleans()):
            usage[key] = draw(_counts)
    return message(*draw(st.lists(_blocks, max_size=5)), stop_reason=draw(_stop_reasons), **usage)


def _expected(reply: dict[str, Any]) -> dict[str, Any]:
    completion = translate_response(
        reply, model="my-model", completion_id="chatcmpl-1", created=1700
    )
    ChatCompletion.model_validate(completion, strict=True)
    choice = completion["choices"][0]
    return {
        "message": normalised(choice["message"]),
        "finish_reason": choice["finish_reason"],
        "usage": completion["usage"],
    }


@settings(max_examples=200, derandomize=True, deadline=None)
@given(reply=_messages(), piece=st.integers(1, 8), repeat_usage=st.booleans())
def test_stream_reassembles_to_the_non_stream_reply(
    reply: dict[str, Any], piece: int, repeat_usage: bool
) -> None:
    chunks = run(events_for(reply, piece=piece, repeat_usage=repeat_usage), include_usage=True)
    got = accumulate(chunks)
    assert {**got, "message": normalised(got["message"])} == _expected(reply)


def _sdk_accumulated(chunks: list[dict[str, Any]]) -> Any:
    """The openai SDK's own accumulation (``get_final_completion`` would also *parse*, and
    refuses ``finish_reason: length``; the snapshot is the accumulation alone)."""
    state: ChatCompletionStreamState[None] = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(ChatCompletionChunk.model_validate(chunk, strict=True))
    return state.current_completion_snapshot


@settings(max_examples=100, derandomize=True, deadline=None)
@given(reply=_messages(), piece=st.integers(1, 8))
def test_openai_sdk_accumulation_matches_the_non_stream_reply(
    reply: dict[str, Any], piece: int
) -> None:
    chunks = run(events_for(reply, piece=piece), include_usage=True)
    final = _sdk_accumulated(chunks)
    choice = final.choices[0]
    got = {
        "message": normalised(choice.message.model_dump(exclude_none=True)),
        "finish_reason": choice.finish_reason,
        "usage": final.usage.model_dump(exclude_none=True) if final.usage else None,
    }
    assert got == _expected(reply)
