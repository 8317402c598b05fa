"""Anthropic reply → Responses ``response`` object, as data: output items, status for every
stop reason, usage, the internal ``final`` vs. the client's view, headers and errors.
Every object is validated against the ``openai`` SDK's types, strictly."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.responses import Response

from trio_batcher.errors import ProxyError
from trio_batcher.pipeline.contract import ReplyCodec, StreamCodec
from trio_batcher.simulator.prompt import InputUsage
from trio_batcher.simulator.reply_data import Block, Reply
from trio_batcher.translation.openai_chat import TranslationOptions, translate_usage
from trio_batcher.translation.openai_responses import (
    ResponsesCodec,
    client_view,
    new_response_id,
    translate_request,
)

OPTIONS = TranslationOptions(
    default_model="claude-sonnet-4-5", default_max_tokens=4096, anthropic_version="2023-06-01"
)
RESPONSE_ID = "resp_" + "0123456789abcdef" * 3
NS_TOOLS = [
    {"type": "function", "name": "get_weather"},
    {
        "type": "namespace",
        "name": "crm",
        "description": "CRM",
        "tools": [{"type": "function", "name": "lookup"}],
    },
]


def request(**extra: Any) -> Any:
    return translate_request({"model": "claude-sonnet-4-5", "input": "hi", **extra}, OPTIONS)


def strict(obj: dict[str, Any]) -> Response:
    return Response.model_validate(obj, strict=True)


def reply(message: dict[str, Any], **extra: Any) -> tuple[dict[str, Any], ResponsesCodec]:
    codec = ResponsesCodec(request(**extra), response_id=RESPONSE_ID, created_at=1700000000)
    assert codec.final is None
    body = codec.reply(message, json.dumps(message).encode())
    strict(body)
    return body, codec


def message(
    *content: dict[str, Any], stop_reason: str = "end_turn", usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": list(content),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5} if usage is None else usage,
    }


def test_new_response_ids_look_like_openais() -> None:
    rid = new_response_id()
    assert rid.startswith("resp_") and len(rid) == 53 and rid != new_response_id()


def test_a_text_reply_is_one_message_item_and_echoes_the_request() -> None:
    body, codec = reply(
        message({"type": "text", "text": "Hello!"}), instructions="be brief", metadata={"k": "v"}
    )
    assert body["id"] == RESPONSE_ID and body["object"] == "response"
    assert body["created_at"] == 1700000000 and body["model"] == "claude-sonnet-4-5"
    assert (
        body["status"] == "completed"
        and body["error"] is None
        and body["incomplete_details"] is None
    )
    assert body["output"] == [
        {
            "type": "message",
            "id": "msg_0123456789abcdef0123456789abcdef0123456789abcdef0000",
            "role": "assistant",
            "status": "completed",
            "content": [
                {"type": "output_text", "text": "Hello!", "annotations": [], "logprobs": []}
            ],
        }
    ]
    assert body["instructions"] == "be brief" and body["metadata"] == {"k": "v"}
    assert "output_text" not in body  # an SDK property, not a wire field
    assert strict(body).output_text == "Hello!"
    assert codec.final == body


def test_tool_calls_are_function_call_items_with_namespaces_mapped_back() -> None:
    body, _ = reply(
        message(
            {"type": "text", "text": "Let me check."},
            {
                "type": "tool_use",
                "id": "toolu_A",
                "name": "get_weather",
                "input": {"city": "Paris"},
            },
            {"type": "tool_use", "id": "toolu_B", "name": "crm__lookup", "input": {}},
            stop_reason="tool_use",
        ),
        tools=NS_TOOLS,
    )
    assert body["status"] == "completed"
    assert [i["type"] for i in body["output"]] == ["message", "function_call", "function_call"]
    first, second = body["output"][1:]
    assert first == {
        "type": "function_call",
        "id": "fc_0123456789abcdef0123456789abcdef0123456789abcdef0001",
        "call_id": "toolu_A",
        "name": "get_weather",
        "arguments": '{"city":"Paris"}',
        "status": "completed",
    }
    assert (second["name"], second["namespace"], second["arguments"]) == ("lookup", "crm", "{}")
    assert body["tools"] == NS_TOOLS  # as the client sent them


THINKING = {"type": "thinking", "thinking": "Hmm.", "signature": "c2lnbmF0dXJl"}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgB"}


def test_thinking_is_a_reasoning_item_whose_blob_is_kept_internally() -> None:
    body, codec = reply(message(THINKING, REDACTED, {"type": "text", "text": "Done."}))
    final = codec.final
    assert final is not None
    assert final["output"][0] == {
        "type": "reasoning",
        "id": "rs_0123456789abcdef0123456789abcdef0123456789abcdef0000",
        "summary": [{"type": "summary_text", "text": "Hmm."}],
        "encrypted_content": "thinking:c2lnbmF0dXJl",
    }
    assert final["output"][1]["summary"] == []
    assert final["output"][1]["encrypted_content"] == "redacted_thinking:EmwKAhgB"
    # Not asked to include it: the client does not see it; the stored response keeps it.
    assert all("encrypted_content" not in item for item in body["output"])
    assert body == client_view(final, ())
    strict(final)


def test_encrypted_content_is_shown_when_included() -> None:
    body, codec = reply(message(THINKING), include=["reasoning.encrypted_content"])
    assert body["output"][0]["encrypted_content"] == "thinking:c2lnbmF0dXJl"
    assert body == codec.final


@pytest.mark.parametrize(
    ("stop_reason", "status", "details"),
    [
        ("end_turn", "completed", None),
        ("tool_use", "completed", None),
        ("stop_sequence", "completed", None),
        ("pause_turn", "completed", None),
        ("max_tokens", "incomplete", {"reason": "max_output_tokens"}),
        ("model_context_window_exceeded", "incomplete", {"reason": "max_output_tokens"}),
        ("refusal", "incomplete", {"reason": "content_filter"}),
        (None, "completed", None),
        ("something_new", "completed", None),
    ],
)
def test_stop_reasons(stop_reason: str, status: str, details: Any) -> None:
    body, _ = reply(message({"type": "text", "text": "partial"}, stop_reason=stop_reason))
    assert body["status"] == status and body["incomplete_details"] == details


@pytest.mark.parametrize(
    "usage",
    [
        {"input_tokens": 10, "output_tokens": 5},
        {
            "input_tokens": 3,
            "cache_creation_input_tokens": 100,
            "cache_read_input_tokens": 1000,
            "output_tokens": 7,
        },
        {"input_tokens": 3, "output_tokens": 9, "output_tokens_details": {"thinking_tokens": 4}},
        {},
        {"input_tokens": None, "output_tokens": -1},
    ],
)
def test_usage_is_the_chat_paths_formula_in_responses_names(usage: dict[str, Any]) -> None:
    body, _ = reply(message({"type": "text", "text": "x"}, usage=usage))
    chat = translate_usage(usage)
    assert body["usage"] == {
        "input_tokens": chat["prompt_tokens"],
        "input_tokens_details": {
            "cached_tokens": chat["prompt_tokens_details"]["cached_tokens"],
            "cache_write_tokens": chat["prompt_tokens_details"]["cache_write_tokens"],
        },
        "output_tokens": chat["completion_tokens"],
        "output_tokens_details": {
            "reasoning_tokens": chat.get("completion_tokens_details", {}).get("reasoning_tokens", 0)
        },
        "total_tokens": chat["total_tokens"],
    }


def test_cache_tokens_count_as_input() -> None:
    body, _ = reply(
        message(
            {"type": "text", "text": "x"},
            usage={
                "input_tokens": 3,
                "cache_creation_input_tokens": 100,
                "cache_read_input_tokens": 1000,
                "output_tokens": 7,
            },
        )
    )
    assert body["usage"]["input_tokens"] == 1103
    assert body["usage"]["input_tokens_details"]["cached_tokens"] == 1000
    assert body["usage"]["total_tokens"] == 1110


def test_server_tool_blocks_and_junk_are_skipped() -> None:
    body, _ = reply(
        message(
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
            "junk",  # type: ignore[arg-type]
            {"type": "text", "text": "ok"},
        )
    )
    assert [i["type"] for i in body["output"]] == ["message"]
    assert body["output"][0]["id"].endswith("0000")


def test_the_simulators_reply_validates() -> None:
    sim = Reply(
        model="claude-sonnet-4-5",
        blocks=(
            Block("thinking", ("a", "b"), signature="U0lH"),
            Block("text", ("Hel", "lo")),
            Block("tool_use", ('{"x": ', "1}"), id="toolu_S", name="get_weather", input={"x": 1}),
        ),
        stop_reason="tool_use",
        stop_sequence=None,
        input_usage=InputUsage(input_tokens=12, cache_read_input_tokens=4),
        output_tokens=6,
    )
    body, _ = reply(
        sim.message_json("msg_sim"), tools=NS_TOOLS, include=["reasoning.encrypted_content"]
    )
    assert [i["type"] for i in body["output"]] == ["reasoning", "message", "function_call"]
    assert body["usage"]["input_tokens"] == 16


def test_every_echoed_field_survives_strict_validation() -> None:
    body, _ = reply(
        message({"type": "text", "text": "x"}),
        instructions="i",
        tools=[*NS_TOOLS, {"type": "web_search", "external_web_access": False}],
        tool_choice={"type": "function", "name": "get_weather"},
        parallel_tool_calls=False,
        text={
            "format": {
                "type": "json_schema",
                "name": "n",
                "schema": {"type": "object", "properties": {"a": {"type": "string"}}},
            }
        },
        reasoning={"effort": "medium", "summary": "auto"},
        temperature=0.3,
        max_output_tokens=9999,
        previous_response_id="resp_prev",
        store=False,
        truncation="auto",
        user="u",
        safety_identifier="s",
        prompt_cache_key="k",
        max_tool_calls=2,
    )
    parsed = strict(body)
    assert parsed.parallel_tool_calls is False and body["store"] is False
    assert parsed.previous_response_id == "resp_prev" and parsed.max_output_tokens == 9999


def test_headers_name_ignored_params_and_the_upstream_request_id() -> None:
    codec = ResponsesCodec(
        request(prompt_cache_key="k", truncation="auto"), response_id=RESPONSE_ID, created_at=0
    )
    headers = codec.headers({"request-id": "req_1", "anthropic-ratelimit-requests-limit": "50"})
    assert headers["x-request-id"] == "req_1"
    assert headers["x-trio-batcher-ignored-params"] == "prompt_cache_key,truncation"
    assert headers["x-ratelimit-limit-requests"] == "50"


def test_an_upstream_cap_error_names_max_output_tokens() -> None:
    def cap_error() -> ProxyError:
        return ProxyError(
            400, "max_tokens: 200000 > 64000, which is the maximum", upstream_status=400
        )

    codec = ResponsesCodec(request(max_output_tokens=200000), response_id=RESPONSE_ID, created_at=0)
    exc = codec.error(cap_error())
    assert exc.param == "max_output_tokens" and exc.message.startswith("max_output_tokens: 200000")
    default = ResponsesCodec(request(), response_id=RESPONSE_ID, created_at=0).error(cap_error())
    assert default.param == "max_output_tokens" and "DEFAULT_MAX_TOKENS" in default.message
    other = ProxyError(400, "messages: bad", upstream_status=400)
    assert codec.error(other).param is None
    assert codec.final is None


def test_the_codec_is_the_pipelines_reply_codec() -> None:
    codec: ReplyCodec = ResponsesCodec(request(), response_id=RESPONSE_ID, created_at=0)
    stream: StreamCodec = codec.stream()
    assert stream.terminator == b""
