"""OpenAI Responses request → Anthropic Messages body, as data: every mapping rule, every
refusal (with the ``param`` it names), history round trips, and parity with the Chat path
for the rules the two dialects share."""

from __future__ import annotations

import base64
import copy
import re
from typing import Any

import pytest
from openai.types.responses import Response

from trio_batcher.errors import ProxyError
from trio_batcher.translation.openai_chat import TranslationOptions
from trio_batcher.translation.openai_chat import translate_request as chat_translate
from trio_batcher.translation.openai_chat.request import JSON_OBJECT_INSTRUCTION
from trio_batcher.translation.openai_responses import (
    ResponsesCodec,
    translate_request,
)

OPTIONS = TranslationOptions(
    default_model="claude-sonnet-4-5", default_max_tokens=4096, anthropic_version="2023-06-01"
)
MODEL = "claude-sonnet-4-5"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 8).decode()
PDF = base64.b64encode(b"%PDF-1.4 hello").decode()


def tr_for(payload: dict[str, Any], history: list[dict[str, Any]] | None = None) -> Any:
    return translate_request({"model": MODEL, **payload}, OPTIONS, history or [])


def body_for(payload: dict[str, Any], history: list[dict[str, Any]] | None = None) -> Any:
    return tr_for(payload, history).body


def refused(payload: object, history: list[dict[str, Any]] | None = None) -> ProxyError:
    with pytest.raises(ProxyError) as info:
        translate_request(payload, OPTIONS, history or [])
    assert info.value.status == 400
    assert info.value.type == "invalid_request_error"
    return info.value


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def call(call_id: str, name: str = "get", arguments: Any = "{}", **extra: Any) -> dict[str, Any]:
    return {
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        **extra,
    }


def output(call_id: str, out: Any = "ok") -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": out}


def fn(name: str, **extra: Any) -> dict[str, Any]:
    return {"type": "function", "name": name, **extra}


# -- input -------------------------------------------------------------------------------


def test_string_input_is_one_user_message_with_a_generated_id() -> None:
    tr = tr_for({"input": "Hello"})
    assert tr.body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}]
    [item] = tr.input_items
    assert re.fullmatch(r"msg_[0-9a-f]{48}", item.pop("id"))
    assert item == {
        "type": "message",
        "role": "user",
        "status": "completed",
        "content": [{"type": "input_text", "text": "Hello"}],
    }


def test_given_item_ids_are_kept_and_missing_ones_generated_per_kind() -> None:
    tr = tr_for(
        {
            "input": [
                {"type": "message", "id": "msg_mine", "role": "user", "content": "q"},
                call("call_1"),
                output("call_1"),
            ]
        }
    )
    ids = [item["id"] for item in tr.input_items]
    assert ids[0] == "msg_mine"
    assert ids[1].startswith("fc_") and ids[2].startswith("fco_")


def test_messages_without_type_and_with_parts_are_messages() -> None:
    body = body_for(
        {
            "input": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "a"},
                        {"type": "input_text", "text": "b"},
                    ],
                }
            ]
        }
    )
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "a"},
        {"type": "text", "text": "b"},
    ]


def test_instructions_and_developer_and_system_messages_become_system_in_order() -> None:
    body = body_for(
        {
            "instructions": "I1",
            "input": [
                {"role": "developer", "content": [{"type": "input_text", "text": "D1"}]},
                {"role": "system", "content": "S1"},
                user("hi"),
                {"role": "assistant", "content": "hello"},
                {"role": "developer", "content": "D2"},
                user("again"),
            ],
        }
    )
    assert body["system"] == [{"type": "text", "text": t} for t in ("I1", "D1", "S1", "D2")]
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]


def test_images_by_url_and_data_url() -> None:
    body = body_for(
        {
            "input": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "input_image",
                            "image_url": "https://x.test/a.png",
                            "detail": "high",
                        },
                        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"},
                    ],
                }
            ]
        }
    )
    assert body["messages"][0]["content"] == [
        {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
    ]


def test_pdf_files_by_data_url_and_by_url() -> None:
    body = body_for(
        {
            "input": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "input_file",
                            "filename": "a.pdf",
                            "file_data": f"data:application/pdf;base64,{PDF}",
                        },
                        {"type": "input_file", "file_url": "https://x.test/b.pdf"},
                        {"type": "input_text", "text": "summarise"},
                    ],
                }
            ]
        }
    )
    assert body["messages"][0]["content"] == [
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
            "title": "a.pdf",
        },
        {"type": "document", "source": {"type": "url", "url": "https://x.test/b.pdf"}},
        {"type": "text", "text": "summarise"},
    ]


@pytest.mark.parametrize(
    ("part", "param"),
    [
        ({"type": "input_image", "file_id": "file-1"}, "input[0].content[1].file_id"),
        ({"type": "input_file", "file_id": "file-1"}, "input[0].content[1].file_id"),
        ({"type": "input_image", "image_url": "ftp://x/a.png"}, "input[0].content[1].image_url"),
        (
            {"type": "input_image", "image_url": "data:image/bmp;base64,AAAA"},
            "input[0].content[1].image_url",
        ),
        ({"type": "input_image"}, "input[0].content[1].image_url"),
        (
            {"type": "input_file", "file_data": "data:text/plain;base64,aGk="},
            "input[0].content[1].file_data",
        ),
        ({"type": "input_file", "file_url": "file:///etc/passwd"}, "input[0].content[1].file_url"),
        ({"type": "input_file"}, "input[0].content[1].file_data"),
        ({"type": "input_audio"}, "input[0].content[1].type"),
        ({"type": "input_text"}, "input[0].content[1].text"),
        ("text", "input[0].content[1]"),
    ],
)
def test_bad_content_parts_are_refused_by_path(part: object, param: str) -> None:
    content = [{"type": "input_text", "text": "ok"}, part]
    assert refused({"model": MODEL, "input": [{"role": "user", "content": content}]}).param == param


def test_assistant_output_text_and_refusal_parts_are_text() -> None:
    body = body_for(
        {
            "input": [
                user("q"),
                {
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [
                        {"type": "output_text", "text": "one", "annotations": []},
                        {"type": "refusal", "refusal": "no"},
                    ],
                },
                user("r"),
            ]
        }
    )
    assert body["messages"][1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "no"}],
    }


def test_parallel_calls_and_outputs_group_into_one_turn_each_results_first() -> None:
    body = body_for(
        {
            "input": [
                user("weather in two towns"),
                call("call_a", arguments='{"city":"A"}'),
                call("call_b", arguments='{"city":"B"}'),
                output("call_a", "sunny"),
                output("call_b", [{"type": "input_text", "text": "rain"}]),
                user("and tomorrow?"),
            ]
        }
    )
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "weather in two towns"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "call_a", "name": "get", "input": {"city": "A"}},
                {"type": "tool_use", "id": "call_b", "name": "get", "input": {"city": "B"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_a", "content": "sunny"},
                {
                    "type": "tool_result",
                    "tool_use_id": "call_b",
                    "content": [{"type": "text", "text": "rain"}],
                },
                {"type": "text", "text": "and tomorrow?"},
            ],
        },
    ]


def test_call_ids_are_made_safe_for_anthropic_alike_on_call_and_output() -> None:
    body = body_for({"input": [user("q"), call("functions.get:0"), output("functions.get:0")]})
    use_id = body["messages"][1]["content"][0]["id"]
    assert re.fullmatch(r"[a-zA-Z0-9_-]+", use_id)
    assert body["messages"][2]["content"][0]["tool_use_id"] == use_id


def test_empty_output_is_a_result_without_content_and_empty_arguments_are_no_arguments() -> None:
    body = body_for({"input": [user("q"), call("c1", arguments=""), output("c1", "")]})
    assert body["messages"][1]["content"][0]["input"] == {}
    assert body["messages"][2]["content"] == [{"type": "tool_result", "tool_use_id": "c1"}]


@pytest.mark.parametrize(
    ("items", "param"),
    [
        ([user("q"), output("nope")], "input[1].call_id"),
        ([user("q"), call("c1"), output("c1"), output("c1")], "input[3].call_id"),
        ([user("q"), call("c1"), user("no answer")], "input[1].call_id"),
        ([user("q"), call("c1")], "input[1].call_id"),
        ([user("q"), call("c1"), output("c1"), call("c1"), output("c1")], "input[3].call_id"),
        ([user("q"), call("c1", arguments="{nope"), output("c1")], "input[1].arguments"),
        ([user("q"), call("c1", arguments="[1]"), output("c1")], "input[1].arguments"),
        ([user("q"), call("c1", arguments={"a": 1}), output("c1")], "input[1].arguments"),
        (
            [user("q"), {"type": "function_call", "name": "x", "arguments": "{}"}],
            "input[1].call_id",
        ),
        (
            [user("q"), {"type": "function_call", "call_id": "c", "arguments": "{}"}],
            "input[1].name",
        ),
        (
            [user("q"), call("c1"), {"type": "function_call_output", "call_id": "c1"}],
            "input[2].output",
        ),
        ([user("q"), {"type": "reasoning", "summary": "x"}], "input[1].summary"),
        ([user("q"), {"type": "reasoning", "summary": [{"type": "x"}]}], "input[1].summary[0]"),
        ([user("q"), {"type": "item_reference", "id": "msg_unknown"}], "input[1].id"),
        ([user("a"), user("b"), user("c"), {"type": "banana"}], "input[3].type"),
        ([{"content": "no role, no type"}], "input[0].type"),
        ([{"type": "computer_call", "call_id": "c"}], "input[0].type"),
        ([{"type": "custom_tool_call", "call_id": "c"}], "input[0].type"),
        ([{"role": "robot", "content": "x"}], "input[0].role"),
        ([{"role": "user", "content": 3}], "input[0].content"),
        ([{"role": "user", "content": "   "}], "input[0].content"),
        (
            [{"role": "system", "content": [{"type": "input_image", "image_url": "https://x"}]}],
            "input[0].content[0].type",
        ),
        ([{"role": "assistant", "content": [{"type": "input_image"}]}], "input[0].content[0].type"),
        ([{"role": "user", "content": "x", "status": "done"}], "input[0].status"),
        (["just a string"], "input[0]"),
        ([], "input"),
    ],
)
def test_malformed_items_are_refused_naming_the_item(items: list[Any], param: str) -> None:
    assert refused({"model": MODEL, "input": items}).param == param


@pytest.mark.parametrize("value", [3, {"role": "user"}, True])
def test_input_of_the_wrong_type_is_refused(value: object) -> None:
    assert refused({"model": MODEL, "input": value}).param == "input"


def test_input_is_required() -> None:
    assert refused({"model": MODEL}).param == "input"


def test_web_search_call_items_are_dropped_and_named() -> None:
    tr = tr_for(
        {
            "input": [
                user("q"),
                {"type": "web_search_call", "id": "ws_1", "status": "completed"},
                user("r"),
            ]
        }
    )
    assert "input[1]" in tr.ignored_params
    assert len(tr.body["messages"]) == 1


# -- reasoning items ---------------------------------------------------------------------


def reasoning(blob: str | None, text: str = "thought") -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": text}] if text else [],
    }
    if blob is not None:
        item["encrypted_content"] = blob
    return item


def test_reasoning_items_go_back_as_thinking_blocks_with_their_signature() -> None:
    body = body_for(
        {
            "input": [
                user("q"),
                reasoning("thinking:SIG", "let me see"),
                reasoning("redacted_thinking:DATA", ""),
                call("c1"),
                output("c1"),
            ],
            "reasoning": {"effort": "low"},
        }
    )
    assert body["messages"][1]["content"][:2] == [
        {"type": "thinking", "thinking": "let me see", "signature": "SIG"},
        {"type": "redacted_thinking", "data": "DATA"},
    ]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}


@pytest.mark.parametrize("blob", [None, "gAAAAABforeign", "thinking:", "redacted_thinking:"])
def test_reasoning_without_our_encrypted_content_is_dropped_and_named(blob: str | None) -> None:
    tr = tr_for(
        {
            "input": [user("q"), reasoning(blob), call("c1"), output("c1")],
            "reasoning": {"effort": "low"},
        }
    )
    assert tr.body["messages"][1]["content"] == [
        {"type": "tool_use", "id": "c1", "name": "get", "input": {}}
    ]
    assert "input[1]" in tr.ignored_params
    # Anthropic wants thinking to lead the turn whose results are returned: it is left off.
    assert "thinking" not in tr.body
    assert "reasoning.effort" in tr.ignored_params


# -- history and round trips -------------------------------------------------------------


def answer(
    tr: Any, message: dict[str, Any], response_id: str = "resp_" + "ab" * 24
) -> dict[str, Any]:
    codec = ResponsesCodec(tr, response_id=response_id, created_at=0)
    codec.reply(message, b"")
    final = codec.final
    assert final is not None
    return final


def test_a_response_fed_back_as_history_replays_thinking_calls_and_ids() -> None:
    first = tr_for(
        {
            "input": "weather?",
            "tools": [fn("get_weather")],
            "reasoning": {"effort": "low"},
            "store": True,
        }
    )
    final = answer(
        first,
        {
            "content": [
                {"type": "thinking", "thinking": "I should call it", "signature": "SIG=="},
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool_use",
                    "id": "toolu_01",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 1, "output_tokens": 1},
        },
    )
    history = first.input_items + final["output"]
    second = tr_for(
        {
            "input": [output("toolu_01", "sunny")],
            "previous_response_id": final["id"],
            "tools": [fn("get_weather")],
            "reasoning": {"effort": "low"},
        },
        history,
    )
    assert second.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "I should call it", "signature": "SIG=="},
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool_use",
                    "id": "toolu_01",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "sunny"}],
        },
    ]
    assert second.body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert second.previous_response_id == final["id"]
    assert [i["type"] for i in second.input_items] == ["function_call_output"]


def test_namespaced_calls_round_trip_through_history() -> None:
    tools = [{"type": "namespace", "name": "crm", "description": "CRM", "tools": [fn("lookup")]}]
    first = tr_for({"input": "find bob", "tools": tools})
    final = answer(
        first,
        {
            "content": [{"type": "tool_use", "id": "toolu_9", "name": "crm__lookup", "input": {}}],
            "stop_reason": "tool_use",
            "usage": {},
        },
    )
    assert final["output"][0]["name"] == "lookup" and final["output"][0]["namespace"] == "crm"
    second = tr_for(
        {"input": [output("toolu_9")], "tools": tools}, first.input_items + final["output"]
    )
    assert second.body["messages"][1]["content"][0]["name"] == "crm__lookup"


def test_item_reference_resolves_from_history() -> None:
    history = [
        {
            "type": "message",
            "id": "msg_old",
            "role": "user",
            "status": "completed",
            "content": [{"type": "input_text", "text": "remember me"}],
        }
    ]
    tr = tr_for({"input": [{"type": "item_reference", "id": "msg_old"}]}, history)
    assert tr.input_items[0]["id"] == "msg_old"
    texts = [b["text"] for m in tr.body["messages"] for b in m["content"]]
    assert texts == ["remember me", "remember me"]


def test_history_errors_name_previous_response_id() -> None:
    assert (
        refused({"model": MODEL, "input": "x"}, [{"type": "banana"}]).param
        == "previous_response_id"
    )


def test_instructions_are_not_carried_over_but_developer_items_are() -> None:
    first = tr_for(
        {"instructions": "old", "input": [{"role": "developer", "content": "dev"}, user("q")]}
    )
    history = [
        *first.input_items,
        {
            "type": "message",
            "id": "msg_a",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "a", "annotations": []}],
        },
    ]
    second = tr_for({"instructions": "new", "input": "next"}, history)
    assert second.body["system"] == [
        {"type": "text", "text": "new"},
        {"type": "text", "text": "dev"},
    ]


def test_a_final_assistant_message_is_a_prefill_only_where_the_model_takes_one() -> None:
    items = [user("q"), {"role": "assistant", "content": "Sure:  "}]
    assert body_for({"input": items})["messages"][-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Sure:"}],
    }
    assert refused({"model": "claude-sonnet-4-6", "input": items}).param == "input[1]"


# -- tools -------------------------------------------------------------------------------


SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "minLength": 1}},
    "required": ["city"],
}


def test_function_tools_are_strict_by_default_with_the_chat_paths_schema() -> None:
    body = body_for(
        {
            "input": "q",
            "tools": [
                fn("a", description="A", parameters=SCHEMA),
                fn("b", parameters=SCHEMA, strict=False),
            ],
        }
    )
    chat = chat_translate(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "q"}],
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "a",
                        "description": "A",
                        "parameters": SCHEMA,
                        "strict": True,
                    },
                },
                {
                    "type": "function",
                    "function": {"name": "b", "parameters": SCHEMA, "strict": False},
                },
            ],
        },
        OPTIONS,
    ).body
    assert body["tools"] == chat["tools"]
    assert body["tools"][0]["strict"] is True
    assert body["tools"][0]["input_schema"]["additionalProperties"] is False
    assert body["tools"][1]["input_schema"] == SCHEMA


def test_namespace_tools_are_flattened_with_mapped_names() -> None:
    tr = tr_for(
        {
            "input": "q",
            "tools": [
                fn("spawn"),
                {
                    "type": "namespace",
                    "name": "multi_agent_v1",
                    "description": "Agents",
                    "tools": [fn("spawn", description="Start one"), fn("wait")],
                },
            ],
        }
    )
    names = [t["name"] for t in tr.body["tools"]]
    assert names == ["spawn", "multi_agent_v1__spawn", "multi_agent_v1__wait"]
    assert (
        tr.body["tools"][1]["description"]
        == "Start one\n\n(One of the `multi_agent_v1` tools: Agents)"
    )
    assert tr.tool_names["multi_agent_v1__spawn"] == ("multi_agent_v1", "spawn")
    assert tr.tool_names["spawn"] == (None, "spawn")


def test_namespaced_names_too_long_or_taken_get_a_digest_and_still_map_back() -> None:
    long_ns = "n" * 40
    tr = tr_for(
        {
            "input": "q",
            "tools": [
                fn("a__b"),
                {"type": "namespace", "name": "a", "description": "", "tools": [fn("b")]},
                {"type": "namespace", "name": long_ns, "description": "", "tools": [fn("x" * 40)]},
            ],
        }
    )
    names = [t["name"] for t in tr.body["tools"]]
    assert names[0] == "a__b"
    assert len(set(names)) == 3
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", n) for n in names)
    assert tr.tool_names[names[1]] == ("a", "b")
    assert tr.tool_names[names[2]] == (long_ns, "x" * 40)


def test_inert_web_search_is_dropped_and_named() -> None:
    tr = tr_for(
        {"input": "q", "tools": [fn("a"), {"type": "web_search", "external_web_access": False}]}
    )
    assert [t["name"] for t in tr.body["tools"]] == ["a"]
    assert "tools[1]" in tr.ignored_params


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"type": "web_search"}, "tools[1].type"),
        ({"type": "web_search", "external_web_access": True}, "tools[1].type"),
        ({"type": "web_search_preview"}, "tools[1].type"),
        ({"type": "file_search", "vector_store_ids": []}, "tools[1].type"),
        ({"type": "computer_use_preview"}, "tools[1].type"),
        ({"type": "code_interpreter", "container": "auto"}, "tools[1].type"),
        ({"type": "image_generation"}, "tools[1].type"),
        ({"type": "mcp", "server_label": "x"}, "tools[1].type"),
        ({"type": "local_shell"}, "tools[1].type"),
        ({"type": "custom", "name": "apply_patch"}, "tools[1].type"),
        (
            {
                "type": "namespace",
                "name": "ns",
                "tools": [fn("a"), {"type": "custom", "name": "c"}],
            },
            "tools[1].tools[1].type",
        ),
        ({"type": "namespace", "name": "bad name", "tools": []}, "tools[1].name"),
        ({"type": "namespace", "name": "ns"}, "tools[1].tools"),
        ({"type": "function", "name": "has space"}, "tools[1].name"),
        ({"type": "function", "name": "a"}, "tools[1].name"),
        (
            {"type": "function", "name": "b", "parameters": {"type": "array"}},
            "tools[1].parameters.type",
        ),
        ({"type": "function", "name": "b", "parameters": "x"}, "tools[1].parameters"),
        ({"type": "function", "name": "b", "strict": "yes"}, "tools[1].strict"),
        ({"type": "function", "name": "b", "description": 3}, "tools[1].description"),
        ("function", "tools[1]"),
    ],
)
def test_tools_that_cannot_be_honoured_are_refused_by_path(tool: object, param: str) -> None:
    error = refused({"model": MODEL, "input": "q", "tools": [fn("a"), tool]})
    assert error.param == param
    assert "function." not in error.message


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", {"type": "auto"}),
        ("none", {"type": "none"}),
        ("required", {"type": "any"}),
        ({"type": "function", "name": "a"}, {"type": "tool", "name": "a"}),
        ({"type": "function", "name": "lookup"}, {"type": "tool", "name": "crm__lookup"}),
        (
            {
                "type": "allowed_tools",
                "mode": "required",
                "tools": [{"type": "function", "name": "a"}],
            },
            {"type": "any"},
        ),
    ],
)
def test_tool_choice(choice: object, expected: dict[str, Any]) -> None:
    tools = [
        fn("a"),
        fn("b"),
        {"type": "namespace", "name": "crm", "description": "", "tools": [fn("lookup")]},
    ]
    body = body_for({"input": "q", "tools": tools, "tool_choice": choice})
    assert body["tool_choice"] == expected
    if isinstance(choice, dict) and choice["type"] == "allowed_tools":
        assert [t["name"] for t in body["tools"]] == ["a"]


def test_parallel_tool_calls_false_disables_parallel_use() -> None:
    body = body_for({"input": "q", "tools": [fn("a")], "parallel_tool_calls": False})
    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}


@pytest.mark.parametrize(
    ("choice", "param"),
    [
        ({"type": "function", "name": "zzz"}, "tool_choice.name"),
        ({"type": "function"}, "tool_choice.name"),
        ({"type": "file_search"}, "tool_choice.type"),
        ({"type": "web_search_preview"}, "tool_choice.type"),
        (
            {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "web_search"}]},
            "tool_choice.tools[0]",
        ),
        (
            {
                "type": "allowed_tools",
                "mode": "sometimes",
                "tools": [{"type": "function", "name": "a"}],
            },
            "tool_choice.mode",
        ),
        ({"type": "allowed_tools", "mode": "auto"}, "tool_choice.tools"),
        ("sometimes", "tool_choice"),
    ],
)
def test_bad_tool_choices_are_refused_by_path(choice: object, param: str) -> None:
    assert (
        refused({"model": MODEL, "input": "q", "tools": [fn("a")], "tool_choice": choice}).param
        == param
    )


def test_required_without_tools_is_refused() -> None:
    assert refused({"model": MODEL, "input": "q", "tool_choice": "required"}).param == "tool_choice"


# -- text.format, reasoning, sampling, caps ----------------------------------------------


def chat_body(extra: dict[str, Any], model: str = MODEL) -> dict[str, Any]:
    payload = {"model": model, "messages": [{"role": "user", "content": "q"}], **extra}
    body: dict[str, Any] = chat_translate(payload, OPTIONS).body
    return body


def test_json_schema_format_is_chats_response_format() -> None:
    fmt = {"type": "json_schema", "name": "city", "schema": SCHEMA, "strict": True}
    body = body_for({"input": "q", "text": {"format": fmt}})
    chat = chat_body(
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "city", "schema": SCHEMA, "strict": True},
            }
        }
    )
    assert body["output_config"] == chat["output_config"]
    assert body["output_config"]["format"]["schema"]["additionalProperties"] is False


def test_json_object_format_is_an_instruction_and_text_is_nothing() -> None:
    assert body_for({"input": "q", "text": {"format": {"type": "json_object"}}})["system"] == [
        {"type": "text", "text": JSON_OBJECT_INSTRUCTION}
    ]
    body = body_for({"input": "q", "text": {"format": {"type": "text"}}})
    assert "system" not in body and "output_config" not in body


@pytest.mark.parametrize(
    ("text", "param"),
    [
        ({"format": {"type": "json_schema", "schema": SCHEMA}}, "text.format.name"),
        ({"format": {"type": "json_schema", "name": "x", "schema": 3}}, "text.format.schema"),
        ({"format": {"type": "yaml"}}, "text.format.type"),
        ({"format": "json"}, "text.format"),
        ({"verbosity": "loud"}, "text.verbosity"),
        ("json", "text"),
    ],
)
def test_bad_text_formats_are_refused(text: object, param: str) -> None:
    error = refused({"model": MODEL, "input": "q", "text": text})
    assert error.param == param
    assert "response_format" not in error.message


@pytest.mark.parametrize(
    "model",
    [
        "claude-sonnet-4-5",
        "claude-opus-4-6",
        "claude-opus-4-7",
        "claude-sonnet-5",
        "claude-3-7-sonnet-latest",
    ],
)
@pytest.mark.parametrize("effort", ["none", "minimal", "low", "medium", "high", "xhigh", "max"])
@pytest.mark.parametrize("cap", [None, 2000, 40000])
def test_reasoning_effort_thinks_exactly_as_chats_reasoning_effort(
    model: str, effort: str, cap: int | None
) -> None:
    ours: dict[str, Any] = {"input": "q", "reasoning": {"effort": effort, "summary": "auto"}}
    theirs: dict[str, Any] = {"reasoning_effort": effort}
    if cap is not None:
        ours["max_output_tokens"] = cap
        theirs["max_completion_tokens"] = cap
    body = body_for({**ours, "model": model})
    chat = chat_body(theirs, model)
    for key in ("thinking", "max_tokens", "output_config"):
        assert body.get(key) == chat.get(key), key


def test_bad_reasoning_is_refused() -> None:
    assert (
        refused({"model": MODEL, "input": "q", "reasoning": {"effort": "huge"}}).param
        == "reasoning.effort"
    )
    assert (
        refused({"model": MODEL, "input": "q", "reasoning": {"summary": "long"}}).param
        == "reasoning.summary"
    )
    assert refused({"model": MODEL, "input": "q", "reasoning": "high"}).param == "reasoning"


def test_max_output_tokens_is_the_cap_and_names_it() -> None:
    tr = tr_for({"input": "q", "max_output_tokens": 321})
    assert tr.body["max_tokens"] == 321 and tr.cap_param == "max_output_tokens"
    default = tr_for({"input": "q"})
    assert default.body["max_tokens"] == OPTIONS.default_max_tokens and default.cap_param is None
    assert (
        refused({"model": MODEL, "input": "q", "max_output_tokens": 0}).param == "max_output_tokens"
    )


@pytest.mark.parametrize(
    "extra",
    [
        {"temperature": 1.5},
        {"temperature": 0.2, "top_p": 0.5},
        {"top_p": 0.9},
        {"user": "u1"},
        {"safety_identifier": "s1", "user": "u1"},
        {"stop": ["END", " "]},
    ],
)
def test_sampling_user_and_stop_as_on_the_chat_path(extra: dict[str, Any]) -> None:
    body = body_for({"input": "q", **extra})
    chat = chat_body(extra)
    for key in ("temperature", "top_p", "metadata", "stop_sequences"):
        assert body.get(key) == chat.get(key), key


def test_the_default_model_alias_is_resolved() -> None:
    tr = translate_request({"model": "default", "input": "q"}, OPTIONS)
    assert tr.model == "default" and tr.upstream_model == tr.body["model"] == OPTIONS.default_model


# -- classification of top-level fields --------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"background": True, "store": False}, "background"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"conversation": {"id": "conv_1"}}, "conversation"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"include": ["message.output_text.logprobs"]}, "include[0]"),
        ({"include": "reasoning.encrypted_content"}, "include"),
        ({"metadata": {"a": 1}}, "metadata"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
        ({"truncation": "sometimes"}, "truncation"),
        ({"store": "yes"}, "store"),
        ({"stream": "yes"}, "stream"),
        ({"instructions": ["x"]}, "instructions"),
        ({"previous_response_id": 3}, "previous_response_id"),
        ({"temperature": 3}, "temperature"),
        ({"parallel_tool_calls": "no"}, "parallel_tool_calls"),
        ({"model": ""}, "model"),
    ],
)
def test_refused_fields(extra: dict[str, Any], param: str) -> None:
    assert refused({"model": MODEL, "input": "q", **extra}).param == param


def test_ignored_fields_are_named_in_request_order() -> None:
    tr = tr_for(
        {
            "prompt_cache_key": "k",
            "input": "q",
            "truncation": "auto",
            "client_metadata": {"a": "b"},
            "include": ["reasoning.encrypted_content", "file_search_call.results"],
            "service_tier": "flex",
            "max_tool_calls": 3,
            "top_logprobs": 0,
            "text": {"verbosity": "low"},
            "reasoning": {"effort": "low", "context": "auto"},
            "stream_options": {"include_obfuscation": False},
            "background": False,
            "some_future_field": 1,
        }
    )
    assert tr.ignored_params == (
        "prompt_cache_key",
        "truncation",
        "client_metadata",
        "include[1]",
        "service_tier",
        "max_tool_calls",
        "top_logprobs",
        "text.verbosity",
        "reasoning.context",
        "stream_options",
        "some_future_field",
    )
    assert tr.include == ("reasoning.encrypted_content",)
    assert set(tr.body) <= {"model", "max_tokens", "messages", "thinking", "stream"}


def test_what_codex_sends_is_accepted() -> None:
    tr = translate_request(
        {
            "model": "claude-sonnet-4-5",
            "instructions": None,
            "input": [
                {
                    "type": "message",
                    "id": "m1",
                    "role": "developer",
                    "content": [{"type": "input_text", "text": "You are Codex."}],
                },
                {
                    "type": "message",
                    "id": "m2",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "<environment_context/>"}],
                },
                {
                    "type": "message",
                    "id": "m3",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "list files"}],
                },
            ],
            "tools": [
                {
                    "type": "function",
                    "name": "shell",
                    "description": "Run",
                    "strict": False,
                    "parameters": {
                        "type": "object",
                        "properties": {"command": {"type": "array", "items": {"type": "string"}}},
                        "required": ["command"],
                        "additionalProperties": False,
                    },
                },
                {"type": "web_search", "external_web_access": False},
                {
                    "type": "namespace",
                    "name": "multi_agent_v1",
                    "description": "Agents",
                    "tools": [
                        {
                            "type": "function",
                            "name": "spawn_agent",
                            "strict": False,
                            "parameters": {"type": "object", "properties": {}},
                        }
                    ],
                },
            ],
            "tool_choice": "auto",
            "parallel_tool_calls": True,
            "reasoning": {"summary": "auto"},
            "store": False,
            "stream": True,
            "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": "0199-abc",
            "client_metadata": {"originator": "codex_exec"},
        },
        OPTIONS,
    )
    assert tr.stream and not tr.store
    assert tr.body["system"] == [{"type": "text", "text": "You are Codex."}]
    assert [t["name"] for t in tr.body["tools"]] == ["shell", "multi_agent_v1__spawn_agent"]
    assert tr.ignored_params == ("tools[1]", "prompt_cache_key", "client_metadata")
    assert [i["id"] for i in tr.input_items] == ["m1", "m2", "m3"]


def test_the_fifth_cache_breakpoint_is_named() -> None:
    mark = {"cache_control": {"type": "ephemeral"}}
    parts = [{"type": "input_text", "text": f"p{j}", **mark} for j in range(5)]
    error = refused({"model": MODEL, "input": [{"role": "user", "content": parts}]})
    assert error.param == "input[0].content[4]"


def test_echo_has_openai_defaults_and_validates_strictly() -> None:
    tr = tr_for({"input": "q"})
    assert tr.echo["tool_choice"] == "auto"
    assert tr.echo["parallel_tool_calls"] is True
    assert tr.echo["store"] is True and tr.store is True
    assert tr.echo["text"] == {"format": {"type": "text"}, "verbosity": "medium"}
    assert tr.echo["truncation"] == "disabled"
    assert tr.echo["metadata"] == {}
    full = tr_for(
        {
            "input": "q",
            "instructions": "i",
            "metadata": {"k": "v"},
            "tools": [
                fn("a", parameters=SCHEMA),
                {"type": "web_search", "external_web_access": False},
            ],
            "tool_choice": {"type": "function", "name": "a"},
            "text": {
                "format": {"type": "json_schema", "name": "n", "schema": SCHEMA, "strict": True}
            },
            "reasoning": {"effort": "high", "summary": "detailed"},
            "temperature": 0.5,
            "top_p": 0.5,
            "max_output_tokens": 9000,
            "previous_response_id": "resp_x",
            "user": "u",
            "truncation": "auto",
        },
        [],
    )
    for tr in (tr_for({"input": "q"}), full):
        skeleton = {
            "id": "resp_1",
            "object": "response",
            "created_at": 0,
            "model": MODEL,
            "output": [],
            **tr.echo,
        }
        Response.model_validate(skeleton, strict=True)


GARBAGE: list[object] = [
    None,
    0,
    -1,
    1.5,
    True,
    "",
    "x",
    [],
    [None],
    {},
    {"type": None},
    [[[]]],
    {"a": {"b": []}},
]


@pytest.mark.parametrize("value", GARBAGE)
@pytest.mark.parametrize(
    "field",
    [
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "text",
        "reasoning",
        "include",
        "metadata",
        "max_output_tokens",
        "temperature",
        "stop",
        "truncation",
        "parallel_tool_calls",
        "user",
    ],
)
def test_garbage_anywhere_is_a_400_or_accepted_never_a_crash(field: str, value: object) -> None:
    payloads = [
        {"model": MODEL, "input": "q", field: value},
        {"model": MODEL, "input": [user("q"), value]},
        {"model": MODEL, "input": [{"role": "user", "content": [value]}]},
        {
            "model": MODEL,
            "input": "q",
            "tools": [{"type": "namespace", "name": "n", "tools": [value]}],
        },
        {
            "model": MODEL,
            "input": [
                user("q"),
                {"type": "function_call", "call_id": value, "name": value, "arguments": value},
            ],
        },
        {
            "model": MODEL,
            "input": [
                user("q"),
                call("c"),
                {"type": "function_call_output", "call_id": "c", "output": [value]},
            ],
        },
    ]
    history: list[Any] = [value] if field == "input" else []
    for payload in payloads:
        try:
            translate_request(copy.deepcopy(payload), OPTIONS, history)
        except ProxyError as exc:
            assert exc.status == 400


RECURSIVE = {
    "type": "object",
    "properties": {"node": {"$ref": "#/$defs/n"}},
    "$defs": {
        "n": {
            "type": "object",
            "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/n"}}},
        }
    },
}


def test_a_schema_without_strict_form_is_sent_loose_only_when_strict_was_the_default() -> None:
    tr = tr_for({"input": "q", "tools": [fn("ok"), fn("tree", parameters=RECURSIVE)]})
    assert tr.body["tools"][0]["strict"] is True
    assert tr.body["tools"][1]["strict"] is False
    assert tr.body["tools"][1]["input_schema"] == RECURSIVE
    assert "tools[1].strict" in tr.ignored_params
    error = refused(
        {"model": MODEL, "input": "q", "tools": [fn("tree", parameters=RECURSIVE, strict=True)]}
    )
    assert error.param is not None and error.param.startswith("tools[0].parameters.$defs")
    nested = [
        {
            "type": "namespace",
            "name": "ns",
            "description": "",
            "tools": [fn("tree", parameters=RECURSIVE)],
        }
    ]
    assert "tools[0].tools[0].strict" in tr_for({"input": "q", "tools": nested}).ignored_params


@pytest.mark.parametrize(
    "name",
    [
        "prompt_cache_retention",
        "prompt_cache_options",
        "context_management",
        "background_options",
        "moderation",
        "image",
        "access_programs",
    ],
)
def test_hint_fields_with_no_upstream_meaning_are_ignored_and_named(name: str) -> None:
    tr = tr_for({"input": "q", name: {"x": 1} if name != "prompt_cache_retention" else "24h"})
    assert tr.ignored_params == (name,)
    assert name not in tr.body


def test_a_cache_breakpoint_on_a_tool_is_forwarded_and_counted() -> None:
    mark = {"cache_control": {"type": "ephemeral"}}
    tool = {"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": False}
    tr = tr_for({"input": "q", "tools": [{**tool, **mark}]})
    assert tr.body["tools"][0]["cache_control"] == {"type": "ephemeral"}
    parts = [{"type": "input_text", "text": f"p{j}", **mark} for j in range(4)]
    error = refused(
        {"model": MODEL, "input": [{"role": "user", "content": parts}], "tools": [{**tool, **mark}]}
    )
    assert error.param is not None  # the fifth breakpoint, counted with the tool's


@pytest.mark.parametrize("kind", [[], {}, ["message"]])
def test_an_item_whose_type_is_not_a_string_is_a_400_naming_it(kind: object) -> None:
    error = refused({"model": MODEL, "input": [{"type": kind, "role": "user", "content": "q"}]})
    assert error.param == "input[0].type"
    assert error.message.startswith("Unknown input item type")


def test_errors_quote_the_clients_own_names_as_written() -> None:
    # The shared rules take each dialect's paths; nothing rewrites a message after the fact,
    # so a client's media type or property name that looks like a Chat path stays as sent.
    image = {"type": "input_image", "image_url": "data:image/file.x;base64,AAAA"}
    error = refused({"model": MODEL, "input": [{"role": "user", "content": [image]}]})
    assert "'image/file.x'" in error.message
    assert error.param == "input[0].content[0].image_url"
    schema = {"type": "object", "properties": {"response_format": {"$ref": "#/x"}}}
    error = refused(
        {
            "model": MODEL,
            "input": "q",
            "text": {"format": {"type": "json_schema", "name": "n", "schema": schema}},
        }
    )
    assert error.message.startswith("Invalid schema at properties.response_format.$ref:")
    assert error.param == "text.format.schema.properties.response_format.$ref"
    tool = fn("f", strict=True, parameters={**schema, "properties": {"function.x": {"$ref": 1}}})
    error = refused({"model": MODEL, "input": "q", "tools": [tool]})
    assert "properties.function.x.$ref" in error.message
    assert error.param == "tools[0].parameters.properties.function.x.$ref"
