"""Anthropic reply → OpenAI chat.completion, as data; every result validated by the openai SDK."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.chat import ChatCompletion

from trio_batcher.translation.openai_chat import (
    new_completion_id,
    translate_response,
    translate_usage,
)

USAGE = {"input_tokens": 10, "output_tokens": 5}


def reply(
    *blocks: dict[str, Any], stop_reason: str | None = "end_turn", **usage: int
) -> dict[str, Any]:
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": list(blocks),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {**USAGE, **usage},
    }


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def tool_use(call_id: str, name: str, input: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": input}


def thinking(t: str, signature: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": t, "signature": signature}


def translate(message: dict[str, Any]) -> dict[str, Any]:
    result = translate_response(message, model="my-model", completion_id="chatcmpl-1", created=1700)
    ChatCompletion.model_validate(result, strict=True)
    return result


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


MESSAGES = [
    # (id, Anthropic content blocks, expected OpenAI message)
    ("text", [text("Hello")], {"role": "assistant", "content": "Hello", "refusal": None}),
    (
        "text_blocks_concatenated",
        [text("Hel"), text("lo")],
        {"role": "assistant", "content": "Hello", "refusal": None},
    ),
    ("no_blocks_is_empty_string", [], {"role": "assistant", "content": "", "refusal": None}),
    (
        "tool_use_only_content_null",
        [tool_use("toolu_1", "get", {"city": "Paris", "n": [1, 2]})],
        {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "tool_calls": [call("toolu_1", "get", '{"city":"Paris","n":[1,2]}')],
        },
    ),
    (
        "text_and_tool_calls",
        [text("Checking."), tool_use("toolu_1", "a", {}), tool_use("toolu_2", "b", {"x": None})],
        {
            "role": "assistant",
            "content": "Checking.",
            "refusal": None,
            "tool_calls": [call("toolu_1", "a", "{}"), call("toolu_2", "b", '{"x":null}')],
        },
    ),
    (
        "non_ascii_arguments_kept_as_json_escapes",
        [tool_use("toolu_1", "say", {"t": "é"})],
        {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "tool_calls": [call("toolu_1", "say", '{"t":"\\u00e9"}')],
        },
    ),
    (
        "thinking_is_reasoning_content_and_blocks",
        [
            thinking("Let me ", "s1"),
            {"type": "redacted_thinking", "data": "xyz"},
            thinking("see.", "s2"),
            text("4"),
        ],
        {
            "role": "assistant",
            "content": "4",
            "refusal": None,
            "reasoning_content": "Let me see.",
            "thinking_blocks": [
                {"type": "thinking", "thinking": "Let me ", "signature": "s1"},
                {"type": "redacted_thinking", "data": "xyz"},
                {"type": "thinking", "thinking": "see.", "signature": "s2"},
            ],
        },
    ),
    (
        "unknown_blocks_skipped",
        [
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
            text("ok"),
        ],
        {"role": "assistant", "content": "ok", "refusal": None},
    ),
    (
        "text_citations_dropped",
        [{"type": "text", "text": "cited", "citations": [{"type": "char_location"}]}],
        {"role": "assistant", "content": "cited", "refusal": None},
    ),
]


@pytest.mark.parametrize(
    ("blocks", "message"), [r[1:] for r in MESSAGES], ids=[r[0] for r in MESSAGES]
)
def test_reply_content_translation(blocks: list[dict[str, Any]], message: dict[str, Any]) -> None:
    assert translate(reply(*blocks))["choices"][0]["message"] == message


FINISH = [
    ("end_turn", "stop"),
    ("stop_sequence", "stop"),
    ("pause_turn", "stop"),
    ("max_tokens", "length"),
    ("model_context_window_exceeded", "length"),
    ("tool_use", "tool_calls"),
    ("refusal", "content_filter"),
    (None, "stop"),
    ("some_future_reason", "stop"),
]


@pytest.mark.parametrize(("stop_reason", "finish_reason"), FINISH, ids=[str(r[0]) for r in FINISH])
def test_stop_reason_becomes_finish_reason(stop_reason: str | None, finish_reason: str) -> None:
    result = translate(reply(text("x"), stop_reason=stop_reason))
    assert result["choices"][0]["finish_reason"] == finish_reason


USAGES = [
    # (id, Anthropic usage, expected OpenAI usage)
    (
        "plain",
        {"input_tokens": 10, "output_tokens": 5},
        {
            "prompt_tokens": 10,
            "completion_tokens": 5,
            "total_tokens": 15,
            "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        },
    ),
    (
        "cache_writes_and_reads_count_as_prompt",
        {
            "input_tokens": 10,
            "cache_creation_input_tokens": 200,
            "cache_read_input_tokens": 3000,
            "output_tokens": 7,
            "cache_creation": {"ephemeral_5m_input_tokens": 200, "ephemeral_1h_input_tokens": 0},
            "service_tier": "standard",
        },
        {
            "prompt_tokens": 3210,
            "completion_tokens": 7,
            "total_tokens": 3217,
            "prompt_tokens_details": {"cached_tokens": 3000, "cache_write_tokens": 200},
        },
    ),
    (
        "null_cache_fields_are_zero",
        {
            "input_tokens": 3,
            "cache_creation_input_tokens": None,
            "cache_read_input_tokens": None,
            "output_tokens": 1,
        },
        {
            "prompt_tokens": 3,
            "completion_tokens": 1,
            "total_tokens": 4,
            "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        },
    ),
    (
        "thinking_tokens_are_reasoning_tokens",
        {"input_tokens": 3, "output_tokens": 50, "output_tokens_details": {"thinking_tokens": 40}},
        {
            "prompt_tokens": 3,
            "completion_tokens": 50,
            "total_tokens": 53,
            "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 40},
        },
    ),
    (
        "empty",
        {},
        {
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "total_tokens": 0,
            "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        },
    ),
]


@pytest.mark.parametrize(("usage", "expected"), [r[1:] for r in USAGES], ids=[r[0] for r in USAGES])
def test_usage_formula(usage: dict[str, Any], expected: dict[str, Any]) -> None:
    assert translate_usage(usage) == expected
    message = {**reply(text("x")), "usage": usage}
    assert translate(message)["usage"] == expected


def test_completion_envelope() -> None:
    result = translate(reply(text("Hi")))
    assert result == {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700,
        "model": "my-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hi", "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": translate_usage(USAGE),
    }


def test_reply_parses_into_sdk_objects() -> None:
    message = reply(
        thinking("t", "sig"), text("Hi"), tool_use("toolu_1", "f", {"a": 1}), stop_reason="tool_use"
    )
    completion = ChatCompletion.model_validate(translate(message), strict=True)
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    tool_call = choice.message.tool_calls[0]
    assert tool_call.type == "function"
    assert (tool_call.id, tool_call.function.name, tool_call.function.arguments) == (
        "toolu_1",
        "f",
        '{"a":1}',
    )
    assert completion.usage is not None and completion.usage.prompt_tokens_details is not None
    # extras survive as attributes, so a client can send them back on the next turn
    assert choice.message.model_dump()["thinking_blocks"] == [
        {"type": "thinking", "thinking": "t", "signature": "sig"}
    ]
    constructed = ChatCompletion.construct(**translate(message))
    assert constructed.id == "chatcmpl-1"


def test_completion_ids_are_fresh_chatcmpl_ids() -> None:
    ids = {new_completion_id() for _ in range(100)}
    assert len(ids) == 100
    assert all(i.startswith("chatcmpl-") and len(i) > len("chatcmpl-") + 16 for i in ids)
