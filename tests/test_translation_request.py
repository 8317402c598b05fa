"""OpenAI request → Anthropic body, as data: (request, expected body, expected ignored params).

Every table row is one rule of docs/compatibility.md. The property test at the end feeds
generated OpenAI requests through the translation and the simulator's strict validator.
"""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trio_batcher.errors import ProxyError
from trio_batcher.simulator.validation import validate_messages_request
from trio_batcher.translation._common.model_traits import CLASSIC, ModelTraits, traits_for
from trio_batcher.translation.openai_chat import (
    TranslatedRequest,
    TranslationOptions,
    translate_request,
)
from trio_batcher.translation.openai_chat.request import JSON_OBJECT_INSTRUCTION

OPTS = TranslationOptions(
    default_model="claude-default", default_max_tokens=1000, anthropic_version="2023-06-01"
)
OPTS_2026 = replace(OPTS, anthropic_version="2026-10-21")

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(8)).decode()
JPEG = base64.b64encode(b"\xff\xd8\xff\xe0" + bytes(8)).decode()
PDF = base64.b64encode(b"%PDF-1.4\n%\xe2\xe3\n").decode()
OPAQUE = base64.b64encode(b"not an image").decode()


# -- builders: OpenAI side ---------------------------------------------------------------


def user(content: Any, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": content, **extra}


def system(content: Any, role: str = "system") -> dict[str, Any]:
    return {"role": role, "content": content}


def assistant(content: Any = None, **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content, **extra}


def tool(call_id: str, content: Any) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def call(call_id: str, name: str = "get", arguments: str = "{}") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def part(text: str, **extra: Any) -> dict[str, Any]:
    return {"type": "text", "text": text, **extra}


def image_part(url: str, **extra: Any) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url, **extra}}


def fn_tool(name: str, **function: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, **function}}


# -- builders: Anthropic side ------------------------------------------------------------


def text(t: str, **extra: Any) -> dict[str, Any]:
    return {"type": "text", "text": t, **extra}


def a_user(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def a_assistant(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks)}


def tool_use(call_id: str, name: str = "get", input: Any = None) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": input or {}}


def tool_result(call_id: str, content: Any = None) -> dict[str, Any]:
    result = {"type": "tool_result", "tool_use_id": call_id}
    if content is not None:
        result["content"] = content
    return result


def image(source: dict[str, Any]) -> dict[str, Any]:
    return {"type": "image", "source": source}


def b64(media_type: str, data: str) -> dict[str, Any]:
    return {"type": "base64", "media_type": media_type, "data": data}


HI = user("hi")
A_HI = a_user(text("hi"))
AUTO_SCHEMA = {"type": "object", "properties": {}}


def request(**fields: Any) -> dict[str, Any]:
    return {"model": "claude-x", "messages": [HI], **fields}


def expected_body(**fields: Any) -> dict[str, Any]:
    return {"model": "claude-x", "max_tokens": 1000, "messages": [A_HI], **fields}


def translate(payload: object, options: TranslationOptions = OPTS) -> TranslatedRequest:
    result = translate_request(payload, options)
    validate_messages_request(result.body, api_version=options.anthropic_version)
    return result


# -- top-level parameters ----------------------------------------------------------------

PARAMS = [
    # (id, extra request fields, extra body fields, ignored params)
    ("max_tokens_default", {}, {}, ()),
    ("max_tokens", {"max_tokens": 50}, {"max_tokens": 50}, ()),
    ("max_completion_tokens", {"max_completion_tokens": 70}, {"max_tokens": 70}, ()),
    (
        "max_completion_tokens_wins",
        {"max_completion_tokens": 70, "max_tokens": 50},
        {"max_tokens": 70},
        ("max_tokens",),
    ),
    ("null_means_unset", {"max_tokens": None, "temperature": None, "stop": None}, {}, ()),
    ("stop_string", {"stop": "END"}, {"stop_sequences": ["END"]}, ()),
    (
        "stop_list_drops_empty_blank_duplicates_and_names_the_blank_ones",
        {"stop": ["a", "", " \n", "a", "b"]},
        {"stop_sequences": ["a", "b"]},
        ("stop[1]", "stop[2]"),
    ),
    ("stop_only_empty", {"stop": [""]}, {}, ("stop[0]",)),
    ("stop_newline_is_named_not_sent", {"stop": "\n"}, {}, ("stop[0]",)),
    (
        "stop_more_than_four_accepted",
        {"stop": ["1", "2", "3", "4", "5", "6"]},
        {"stop_sequences": ["1", "2", "3", "4", "5", "6"]},
        (),
    ),
    ("user", {"user": "u-1"}, {"metadata": {"user_id": "u-1"}}, ()),
    ("safety_identifier", {"safety_identifier": "s-1"}, {"metadata": {"user_id": "s-1"}}, ()),
    (
        "safety_identifier_wins_over_user",
        {"user": "u-1", "safety_identifier": "s-1"},
        {"metadata": {"user_id": "s-1"}},
        ("user",),
    ),
    ("empty_user_not_sent", {"user": ""}, {}, ()),
    ("temperature", {"temperature": 0.7}, {"temperature": 0.7}, ()),
    ("temperature_zero", {"temperature": 0}, {"temperature": 0}, ()),
    ("temperature_clamped_not_rescaled", {"temperature": 1.6}, {"temperature": 1}, ()),
    ("top_p", {"top_p": 0.9}, {"top_p": 0.9}, ()),
    (
        "temperature_and_top_p_send_temperature_only",
        {"temperature": 0.5, "top_p": 0.9},
        {"temperature": 0.5},
        ("top_p",),
    ),
    ("top_k_extension", {"top_k": 40}, {"top_k": 40}, ()),
    ("top_k_zero_is_unset", {"top_k": 0}, {}, ()),
    ("stream", {"stream": True}, {"stream": True}, ()),
    ("stream_false", {"stream": False}, {}, ()),
    (
        "stream_options_without_stream_ignored",
        {"stream_options": {"include_usage": True}},
        {},
        ("stream_options",),
    ),
    ("n_1", {"n": 1}, {}, ()),
    ("logprobs_false", {"logprobs": False}, {}, ()),
    ("top_logprobs_zero_ignored", {"top_logprobs": 0}, {}, ("top_logprobs",)),
    ("modalities_text", {"modalities": ["text"]}, {}, ()),
    ("response_format_text", {"response_format": {"type": "text"}}, {}, ()),
    (
        "response_format_json_object_instructs",
        {"response_format": {"type": "json_object"}},
        {"system": [text(JSON_OBJECT_INSTRUCTION)]},
        (),
    ),
    (
        "response_format_json_schema",
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": "answer",
                    "strict": True,
                    "schema": {
                        "type": "object",
                        "properties": {"n": {"type": "integer"}},
                        "additionalProperties": False,
                    },
                },
            }
        },
        {
            "output_config": {
                "format": {
                    "type": "json_schema",
                    "schema": {
                        "type": "object",
                        "properties": {"n": {"type": "integer"}},
                        "additionalProperties": False,
                    },
                }
            }
        },
        (),
    ),
    (
        "response_format_json_schema_without_schema",
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
        {"system": [{"type": "text", "text": JSON_OBJECT_INSTRUCTION}]},
        (),
    ),
    (
        "response_format_json_schema_of_any_object",
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "object", "description": "d"}},
            }
        },
        {"system": [{"type": "text", "text": JSON_OBJECT_INSTRUCTION}]},
        (),
    ),
    (
        "response_format_json_schema_in_the_compilable_subset",
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": "person",
                    "strict": False,
                    "schema": {
                        "type": "object",
                        "properties": {
                            "age": {"type": "integer", "minimum": 0, "maximum": 150},
                            "nick": {"type": ["string", "null"]},
                        },
                        "required": ["age"],
                    },
                },
            }
        },
        {
            "output_config": {
                "format": {
                    "type": "json_schema",
                    "schema": {
                        "type": "object",
                        "properties": {
                            "age": {
                                "type": "integer",
                                "description": '{"minimum": 0, "maximum": 150}',
                            },
                            "nick": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                        },
                        "required": ["age"],
                        "additionalProperties": False,
                    },
                }
            }
        },
        (),
    ),
    *[
        (f"ignored_{name}", {name: value}, {}, (name,))
        for name, value in [
            ("seed", 7),
            ("presence_penalty", 0.5),
            ("frequency_penalty", 0.5),
            ("logit_bias", {"50256": -100}),
            ("store", True),
            ("metadata", {"k": "v"}),
            ("service_tier", "auto"),
            ("prediction", {"type": "content", "content": "x"}),
            ("web_search_options", {}),
            ("verbosity", "low"),
            ("prompt_cache_key", "k"),
            ("prompt_cache_retention", "24h"),
            ("prompt_cache_options", {"mode": "implicit"}),
            ("moderation", {"model": "omni-moderation-latest"}),
        ]
    ],
    ("unknown_field_ignored_and_listed", {"x_custom": 1}, {}, ("x_custom",)),
    (
        "ignored_in_request_order",
        {"zzz": 2, "logit_bias": {}, "top_p": 0.5, "seed": 1, "temperature": 0.5},
        {"temperature": 0.5},
        ("zzz", "logit_bias", "top_p", "seed"),
    ),
]


@pytest.mark.parametrize(
    ("fields", "body", "ignored"), [row[1:] for row in PARAMS], ids=[row[0] for row in PARAMS]
)
def test_top_level_parameter_translation(
    fields: dict[str, Any], body: dict[str, Any], ignored: tuple[str, ...]
) -> None:
    result = translate(request(**fields))
    assert result.body == expected_body(**body)
    assert result.ignored_params == ignored


def test_default_model_alias_resolves_upstream_but_echoes_as_sent() -> None:
    result = translate({"model": "default", "messages": [HI]})
    assert result.body["model"] == "claude-default"
    assert result.model == "default"


def test_model_is_forwarded_verbatim_and_echoed() -> None:
    result = translate({"model": "gpt-4o", "messages": [HI]})
    assert (result.body["model"], result.model) == ("gpt-4o", "gpt-4o")


@pytest.mark.parametrize(
    ("fields", "stream", "include_usage"),
    [
        ({}, False, False),
        ({"stream": True}, True, False),
        ({"stream": True, "stream_options": {"include_usage": True}}, True, True),
        ({"stream": True, "stream_options": {"include_usage": False}}, True, False),
        ({"stream": True, "stream_options": {"include_obfuscation": False}}, True, False),
        ({"stream_options": {"include_usage": True}}, False, False),
    ],
    ids=["default", "stream", "include_usage", "include_usage_false", "obfuscation", "no_stream"],
)
def test_stream_flags(fields: dict[str, Any], stream: bool, include_usage: bool) -> None:
    result = translate(request(**fields))
    assert (result.stream, result.include_usage) == (stream, include_usage)


def test_version_2026_omits_every_sampling_parameter() -> None:
    result = translate(request(temperature=0.5, top_p=0.9, top_k=5), OPTS_2026)
    assert result.body == expected_body()
    assert result.ignored_params == ("temperature", "top_p", "top_k")


# -- tools and tool_choice ---------------------------------------------------------------

WEATHER = fn_tool(
    "weather",
    description="Weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
A_WEATHER = {
    "name": "weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
CLOCK = fn_tool("clock")
A_CLOCK = {"name": "clock", "input_schema": AUTO_SCHEMA}

TOOLS = [
    # (id, extra request fields, extra body fields)
    ("function_tool", {"tools": [WEATHER]}, {"tools": [A_WEATHER]}),
    ("no_parameters_means_empty_object", {"tools": [CLOCK]}, {"tools": [A_CLOCK]}),
    (
        "empty_parameters_means_empty_object",
        {"tools": [fn_tool("clock", parameters={})]},
        {"tools": [A_CLOCK]},
    ),
    (
        "parameters_without_type_become_object",
        {"tools": [fn_tool("f", parameters={"properties": {"a": {"type": "string"}}})]},
        {
            "tools": [
                {
                    "name": "f",
                    "input_schema": {"type": "object", "properties": {"a": {"type": "string"}}},
                }
            ]
        },
    ),
    (
        "strict_forwarded",
        {"tools": [fn_tool("clock", strict=True)]},
        {
            "tools": [
                {
                    **A_CLOCK,
                    "input_schema": {**A_CLOCK["input_schema"], "additionalProperties": False},
                    "strict": True,
                }
            ]
        },
    ),
    (
        "strict_tool_schema_in_the_compilable_subset",
        {
            "tools": [
                fn_tool(
                    "add",
                    strict=True,
                    parameters={
                        "type": "object",
                        "properties": {"n": {"type": "number", "exclusiveMinimum": 0}},
                        "required": ["n"],
                    },
                ),
                fn_tool(
                    "loose",
                    parameters={"type": "object", "properties": {"n": {"minimum": 1}}},
                ),
            ]
        },
        {
            "tools": [
                {
                    "name": "add",
                    "input_schema": {
                        "type": "object",
                        "properties": {
                            "n": {"type": "number", "description": '{"exclusiveMinimum": 0}'}
                        },
                        "required": ["n"],
                        "additionalProperties": False,
                    },
                    "strict": True,
                },
                {  # not strict: any JSON Schema goes, as the client wrote it
                    "name": "loose",
                    "input_schema": {"type": "object", "properties": {"n": {"minimum": 1}}},
                },
            ]
        },
    ),
    (
        "empty_description_omitted",
        {"tools": [fn_tool("clock", description="")]},
        {"tools": [A_CLOCK]},
    ),
    (
        "tool_cache_control_forwarded",
        {"tools": [{**CLOCK, "cache_control": {"type": "ephemeral"}}]},
        {"tools": [{**A_CLOCK, "cache_control": {"type": "ephemeral"}}]},
    ),
    ("empty_tools_not_sent", {"tools": []}, {}),
    (
        "tool_choice_auto",
        {"tools": [CLOCK], "tool_choice": "auto"},
        {"tools": [A_CLOCK], "tool_choice": {"type": "auto"}},
    ),
    (
        "tool_choice_none",
        {"tools": [CLOCK], "tool_choice": "none"},
        {"tools": [A_CLOCK], "tool_choice": {"type": "none"}},
    ),
    (
        "tool_choice_required_is_any",
        {"tools": [CLOCK], "tool_choice": "required"},
        {"tools": [A_CLOCK], "tool_choice": {"type": "any"}},
    ),
    (
        "tool_choice_named",
        {
            "tools": [CLOCK, WEATHER],
            "tool_choice": {"type": "function", "function": {"name": "weather"}},
        },
        {"tools": [A_CLOCK, A_WEATHER], "tool_choice": {"type": "tool", "name": "weather"}},
    ),
    (
        "parallel_false_creates_auto",
        {"tools": [CLOCK], "parallel_tool_calls": False},
        {"tools": [A_CLOCK], "tool_choice": {"type": "auto", "disable_parallel_tool_use": True}},
    ),
    (
        "parallel_false_on_required",
        {"tools": [CLOCK], "tool_choice": "required", "parallel_tool_calls": False},
        {"tools": [A_CLOCK], "tool_choice": {"type": "any", "disable_parallel_tool_use": True}},
    ),
    (
        "parallel_false_on_none_is_just_none",
        {"tools": [CLOCK], "tool_choice": "none", "parallel_tool_calls": False},
        {"tools": [A_CLOCK], "tool_choice": {"type": "none"}},
    ),
    (
        "parallel_true_is_default",
        {"tools": [CLOCK], "parallel_tool_calls": True},
        {"tools": [A_CLOCK]},
    ),
    ("parallel_false_without_tools", {"parallel_tool_calls": False}, {}),
    ("tool_choice_auto_without_tools_dropped", {"tool_choice": "auto"}, {}),
    ("tool_choice_none_without_tools_dropped", {"tool_choice": "none"}, {}),
    (
        "allowed_tools_auto_restricts_tools",
        {
            "tools": [CLOCK, WEATHER],
            "tool_choice": {
                "type": "allowed_tools",
                "allowed_tools": {
                    "mode": "auto",
                    "tools": [{"type": "function", "function": {"name": "weather"}}],
                },
            },
        },
        {"tools": [A_WEATHER], "tool_choice": {"type": "auto"}},
    ),
    (
        "allowed_tools_required_is_any",
        {
            "tools": [CLOCK, WEATHER],
            "tool_choice": {
                "type": "allowed_tools",
                "allowed_tools": {
                    "mode": "required",
                    "tools": [{"type": "function", "function": {"name": "clock"}}],
                },
            },
        },
        {"tools": [A_CLOCK], "tool_choice": {"type": "any"}},
    ),
]


@pytest.mark.parametrize(("fields", "body"), [r[1:] for r in TOOLS], ids=[r[0] for r in TOOLS])
def test_tools_and_tool_choice(fields: dict[str, Any], body: dict[str, Any]) -> None:
    result = translate(request(**fields))
    assert result.body == expected_body(**body)
    assert result.ignored_params == ()


# -- reasoning_effort → thinking ---------------------------------------------------------

TOOL_LOOP = [HI, assistant(tool_calls=[call("c1")]), tool("c1", "42")]
TOOL_LOOP_WITH_THINKING = [
    HI,
    assistant(
        tool_calls=[call("c1")],
        thinking_blocks=[{"type": "thinking", "thinking": "hmm", "signature": "sig"}],
    ),
    tool("c1", "42"),
]

THINKING = [
    # (id, request fields, expected max_tokens, expected thinking (None: absent), ignored)
    ("low_without_cap_adds_budget", {"reasoning_effort": "low"}, 2024, 1024, ()),
    ("medium_without_cap", {"reasoning_effort": "medium"}, 5096, 4096, ()),
    ("high_without_cap", {"reasoning_effort": "high"}, 17384, 16384, ()),
    ("xhigh_without_cap", {"reasoning_effort": "xhigh"}, 33768, 32768, ()),
    ("max_without_cap", {"reasoning_effort": "max"}, 50152, 49152, ()),
    (
        "cap_is_kept_budget_fits",
        {"reasoning_effort": "medium", "max_completion_tokens": 10000},
        10000,
        4096,
        (),
    ),
    (
        "budget_shrinks_under_cap",
        {"reasoning_effort": "high", "max_tokens": 5000},
        5000,
        4999,
        (),
    ),
    (
        "cap_too_small_to_think",
        {"reasoning_effort": "low", "max_tokens": 1024},
        1024,
        None,
        ("reasoning_effort",),
    ),
    ("none_means_no_thinking", {"reasoning_effort": "none"}, 1000, None, ()),
    ("minimal_means_no_thinking", {"reasoning_effort": "minimal"}, 1000, None, ()),
    (
        "thinking_drops_sampling_params",
        {"reasoning_effort": "low", "temperature": 0.2, "top_p": 0.5, "top_k": 3},
        2024,
        1024,
        ("temperature", "top_p", "top_k"),
    ),
    (
        "forced_tool_wins_over_thinking",
        {"reasoning_effort": "low", "tools": [CLOCK], "tool_choice": "required"},
        1000,
        None,
        ("reasoning_effort",),
    ),
    (
        "tool_loop_without_thinking_blocks_cannot_think",
        {"reasoning_effort": "low", "messages": TOOL_LOOP},
        1000,
        None,
        ("reasoning_effort",),
    ),
    (
        "tool_loop_with_thinking_blocks_thinks",
        {"reasoning_effort": "low", "messages": TOOL_LOOP_WITH_THINKING},
        2024,
        1024,
        (),
    ),
    (
        "prefill_without_thinking_cannot_think",
        {"reasoning_effort": "low", "messages": [HI, assistant("Sure")]},
        1000,
        None,
        ("reasoning_effort",),
    ),
]


@pytest.mark.parametrize(
    ("fields", "max_tokens", "budget", "ignored"),
    [r[1:] for r in THINKING],
    ids=[r[0] for r in THINKING],
)
def test_reasoning_effort_becomes_thinking(
    fields: dict[str, Any], max_tokens: int, budget: int | None, ignored: tuple[str, ...]
) -> None:
    result = translate(request(**fields))
    assert result.body["max_tokens"] == max_tokens
    if budget is None:
        assert "thinking" not in result.body
    else:
        assert result.body["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert not {"temperature", "top_p", "top_k"} & result.body.keys() or budget is None
    assert result.ignored_params == ignored


# -- messages ----------------------------------------------------------------------------

MESSAGES = [
    # (id, OpenAI messages, expected system (None: absent), expected Anthropic messages)
    ("system_string", [system("Be brief."), HI], [text("Be brief.")], [A_HI]),
    ("developer_is_system", [system("Be brief.", "developer"), HI], [text("Be brief.")], [A_HI]),
    (
        "system_anywhere_lifted_and_turns_merged",
        [system("A"), user("one"), system("B", "developer"), user("two")],
        [text("A"), text("B")],
        [a_user(text("one"), text("two"))],
    ),
    (
        "system_parts_keep_cache_control",
        [system([part("A"), part("B", cache_control={"type": "ephemeral"})]), HI],
        [text("A"), text("B", cache_control={"type": "ephemeral"})],
        [A_HI],
    ),
    ("blank_system_skipped", [system("  "), HI], None, [A_HI]),
    (
        "consecutive_users_merged",
        [user("a"), user([part("b")])],
        None,
        [a_user(text("a"), text("b"))],
    ),
    (
        "consecutive_assistants_merged",
        [HI, assistant("a"), assistant("b"), user("c")],
        None,
        [A_HI, a_assistant(text("a"), text("b")), a_user(text("c"))],
    ),
    (
        "tool_results_one_user_turn_results_first",
        [
            HI,
            assistant("Checking.", tool_calls=[call("c1"), call("c2", "put", '{"a": [1]}')]),
            tool("c1", "one"),
            user("thanks"),
            tool("c2", [part("two"), part("three")]),
        ],
        None,
        [
            A_HI,
            a_assistant(text("Checking."), tool_use("c1"), tool_use("c2", "put", {"a": [1]})),
            a_user(
                tool_result("c1", "one"),
                tool_result("c2", [text("two"), text("three")]),
                text("thanks"),
            ),
        ],
    ),
    (
        "empty_tool_content_omitted",
        [HI, assistant(tool_calls=[call("c1")]), tool("c1", ""), user("ok")],
        None,
        [A_HI, a_assistant(tool_use("c1")), a_user(tool_result("c1"), text("ok"))],
    ),
    (
        "tool_content_image_allowed",
        [
            HI,
            assistant(tool_calls=[call("c1")]),
            tool("c1", [image_part("https://example.com/x/y.png")]),
        ],
        None,
        [
            A_HI,
            a_assistant(tool_use("c1")),
            a_user(
                tool_result("c1", [image({"type": "url", "url": "https://example.com/x/y.png"})])
            ),
        ],
    ),
    (
        "empty_arguments_are_empty_object",
        [HI, assistant(tool_calls=[call("c1", arguments="")]), tool("c1", "r")],
        None,
        [A_HI, a_assistant(tool_use("c1")), a_user(tool_result("c1", "r"))],
    ),
    (
        "tool_call_ids_sanitised_consistently",
        [HI, assistant(tool_calls=[call("functions.get:0")]), tool("functions.get:0", "r")],
        None,
        [
            A_HI,
            a_assistant(tool_use("functions_get_0_62a8242d")),
            a_user(tool_result("functions_get_0_62a8242d", "r")),
        ],
    ),
    (
        "tool_call_ids_distinct_before_sanitising_stay_distinct",
        [
            HI,
            assistant(tool_calls=[call("call:1"), call("call_1")]),
            tool("call:1", "r1"),
            tool("call_1", "r2"),
        ],
        None,
        [
            A_HI,
            a_assistant(tool_use("call_1_f1d92e31"), tool_use("call_1")),
            a_user(tool_result("call_1_f1d92e31", "r1"), tool_result("call_1", "r2")),
        ],
    ),
    (
        "tool_call_without_type_is_function",
        [
            HI,
            assistant(tool_calls=[{"id": "c1", "function": {"name": "get", "arguments": "{}"}}]),
            tool("c1", "r"),
        ],
        None,
        [A_HI, a_assistant(tool_use("c1")), a_user(tool_result("c1", "r"))],
    ),
    (
        "legacy_function_call_and_function_message",
        [
            HI,
            assistant(function_call={"name": "get", "arguments": '{"q": 1}'}),
            {"role": "function", "name": "get", "content": "r"},
        ],
        None,
        [
            A_HI,
            a_assistant(tool_use("call_legacy_0", "get", {"q": 1})),
            a_user(tool_result("call_legacy_0", "r")),
        ],
    ),
    (
        "thinking_blocks_lead_the_assistant_turn",
        [
            HI,
            assistant(
                "Let me check.",
                tool_calls=[call("c1")],
                reasoning_content="hmm",
                thinking_blocks=[
                    {"type": "thinking", "thinking": "hmm", "signature": "sig", "index": 0},
                    {"type": "redacted_thinking", "data": "opaque"},
                ],
            ),
            tool("c1", "r"),
        ],
        None,
        [
            A_HI,
            a_assistant(
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "redacted_thinking", "data": "opaque"},
                text("Let me check."),
                tool_use("c1"),
            ),
            a_user(tool_result("c1", "r")),
        ],
    ),
    (
        "reasoning_content_without_signature_dropped",
        [HI, assistant("a", reasoning_content="thoughts"), user("b")],
        None,
        [A_HI, a_assistant(text("a")), a_user(text("b"))],
    ),
    (
        "empty_assistant_dropped",
        [user("a"), assistant(""), user("b")],
        None,
        [a_user(text("a"), text("b"))],
    ),
    (
        "null_assistant_dropped",
        [user("a"), assistant(None), user("b")],
        None,
        [a_user(text("a"), text("b"))],
    ),
    (
        "final_assistant_is_prefill",
        [HI, assistant("Sure:")],
        None,
        [A_HI, a_assistant(text("Sure:"))],
    ),
    (
        "prefill_trailing_whitespace_stripped",
        [HI, assistant("Sure: \n")],
        None,
        [A_HI, a_assistant(text("Sure:"))],
    ),
    ("blank_prefill_dropped", [HI, assistant("  ")], None, [A_HI]),
    ("empty_prefill_dropped", [HI, assistant("")], None, [A_HI]),
    (
        "prefill_before_trailing_system",
        [HI, assistant("Sure:"), system("S")],
        [text("S")],
        [A_HI, a_assistant(text("Sure:"))],
    ),
    (
        "refusal_part_is_text",
        [HI, assistant([{"type": "refusal", "refusal": "No."}]), user("ok")],
        None,
        [A_HI, a_assistant(text("No.")), a_user(text("ok"))],
    ),
    (
        "refusal_field_is_text_when_no_content",
        [HI, assistant(None, refusal="No."), user("ok")],
        None,
        [A_HI, a_assistant(text("No.")), a_user(text("ok"))],
    ),
    (
        "assistant_text_parts",
        [HI, assistant([part("a"), part("")]), user("ok")],
        None,
        [A_HI, a_assistant(text("a")), a_user(text("ok"))],
    ),
    (
        "empty_user_message_skipped_when_turn_has_content",
        [user(""), user("b")],
        None,
        [a_user(text("b"))],
    ),
    (
        "blank_text_parts_skipped",
        [user([part(" "), part("x"), part("")])],
        None,
        [a_user(text("x"))],
    ),
    (
        "leading_assistant_kept",
        [assistant("Hello!"), HI],
        None,
        [a_assistant(text("Hello!")), A_HI],
    ),
]


@pytest.mark.parametrize(
    ("messages", "system_blocks", "anthropic"),
    [r[1:] for r in MESSAGES],
    ids=[r[0] for r in MESSAGES],
)
def test_messages_translation(
    messages: list[dict[str, Any]],
    system_blocks: list[dict[str, Any]] | None,
    anthropic: list[dict[str, Any]],
) -> None:
    body = translate(request(messages=messages)).body
    assert body.get("system") == system_blocks
    assert body["messages"] == anthropic


def test_message_names_are_dropped_and_reported() -> None:
    result = translate(request(messages=[user("hi", name="alice")]))
    assert result.body["messages"] == [A_HI]
    assert result.ignored_params == ("messages[].name",)


def test_tool_message_names_are_not_reported() -> None:
    messages = [HI, assistant(tool_calls=[call("c1")]), {**tool("c1", "r"), "name": "get"}]
    assert translate(request(messages=messages)).ignored_params == ()


# -- content parts -----------------------------------------------------------------------

CONTENT = [
    # (id, user content, expected blocks)
    ("string", "hello", [text("hello")]),
    ("text_part", [part("hello")], [text("hello")]),
    (
        "cache_control_kept",
        [part("hello", cache_control={"type": "ephemeral", "ttl": "1h"})],
        [text("hello", cache_control={"type": "ephemeral", "ttl": "1h"})],
    ),
    (
        "prompt_cache_breakpoint_30m_is_default_ttl",
        [part("hello", prompt_cache_breakpoint={"mode": "explicit", "ttl": "30m"})],
        [text("hello", cache_control={"type": "ephemeral"})],
    ),
    (
        "prompt_cache_breakpoint_12h_is_1h",
        [part("hello", prompt_cache_breakpoint={"mode": "explicit", "ttl": "12h"})],
        [text("hello", cache_control={"type": "ephemeral", "ttl": "1h"})],
    ),
    (
        "cache_control_wins_over_breakpoint",
        [
            part(
                "hello",
                cache_control={"type": "ephemeral"},
                prompt_cache_breakpoint={"mode": "explicit", "ttl": "12h"},
            )
        ],
        [text("hello", cache_control={"type": "ephemeral"})],
    ),
    (
        "image_data_url",
        [image_part(f"data:image/png;base64,{PNG}")],
        [image(b64("image/png", PNG))],
    ),
    (
        "image_base64_line_breaks_removed",
        [image_part(f"data:image/png;base64,{PNG[:8]}\n{PNG[8:]}\n")],
        [image(b64("image/png", PNG))],
    ),
    (
        "image_jpg_alias",
        [image_part(f"data:image/jpg;base64,{JPEG}")],
        [image(b64("image/jpeg", JPEG))],
    ),
    (
        "image_media_type_corrected_from_bytes",
        [image_part(f"data:image/jpeg;base64,{PNG}")],
        [image(b64("image/png", PNG))],
    ),
    (
        "image_unrecognised_bytes_keep_declared_type",
        [image_part(f"data:image/webp;base64,{OPAQUE}")],
        [image(b64("image/webp", OPAQUE))],
    ),
    (
        "image_https_url_detail_dropped",
        [image_part("https://example.com/cat.png", detail="high")],
        [image({"type": "url", "url": "https://example.com/cat.png"})],
    ),
    (
        "image_http_url",
        [image_part("http://example.com/cat.png")],
        [image({"type": "url", "url": "http://example.com/cat.png"})],
    ),
    (
        "image_cache_control",
        [{**image_part("https://example.com/x/c.png"), "cache_control": {"type": "ephemeral"}}],
        [
            {
                **image({"type": "url", "url": "https://example.com/x/c.png"}),
                "cache_control": {"type": "ephemeral"},
            }
        ],
    ),
    (
        "pdf_data_url_with_filename_title",
        [
            {
                "type": "file",
                "file": {"file_data": f"data:application/pdf;base64,{PDF}", "filename": "a.pdf"},
            }
        ],
        [
            {
                "type": "document",
                "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
                "title": "a.pdf",
            }
        ],
    ),
    (
        "pdf_bare_base64",
        [{"type": "file", "file": {"file_data": PDF}}],
        [
            {
                "type": "document",
                "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
            }
        ],
    ),
    (
        "text_and_image_in_order",
        [part("Look:"), image_part("https://example.com/x/c.png")],
        [text("Look:"), image({"type": "url", "url": "https://example.com/x/c.png"})],
    ),
]


@pytest.mark.parametrize(
    ("content", "blocks"), [r[1:] for r in CONTENT], ids=[r[0] for r in CONTENT]
)
def test_user_content_parts(content: Any, blocks: list[dict[str, Any]]) -> None:
    body = translate(request(messages=[user(content)])).body
    assert body["messages"] == [{"role": "user", "content": blocks}]


# -- validation errors -------------------------------------------------------------------

TOOL_CALL_TURN = [HI, assistant(tool_calls=[call("c1")])]

ERRORS = [
    # (id, payload, expected param)
    ("body_not_object", ["not", "an", "object"], None),
    ("model_missing", {"messages": [HI]}, "model"),
    ("model_not_string", {"model": 4, "messages": [HI]}, "model"),
    ("model_empty", {"model": "", "messages": [HI]}, "model"),
    ("messages_missing", {"model": "m"}, "messages"),
    ("messages_not_list", request(messages="hi"), "messages"),
    ("messages_empty", request(messages=[]), "messages"),
    ("message_not_object", request(messages=["hi"]), "messages[0]"),
    ("unknown_role", request(messages=[{"role": "bot", "content": "x"}]), "messages[0].role"),
    ("content_missing", request(messages=[{"role": "user"}]), "messages[0].content"),
    ("content_wrong_type", request(messages=[user(5)]), "messages[0].content"),
    ("part_not_object", request(messages=[user(["x"])]), "messages[0].content[0]"),
    (
        "part_unknown_type",
        request(messages=[user([{"type": "video"}])]),
        "messages[0].content[0].type",
    ),
    (
        "input_audio_unsupported",
        request(
            messages=[user([{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}])]
        ),
        "messages[0].content[0].type",
    ),
    (
        "text_part_not_string",
        request(messages=[user([{"type": "text", "text": 1}])]),
        "messages[0].content[0].text",
    ),
    (
        "image_in_system_rejected",
        request(messages=[system([image_part("https://example.com/x/y.png")]), HI]),
        "messages[0].content[0].type",
    ),
    (
        "image_in_assistant_rejected",
        request(messages=[HI, assistant([image_part("https://example.com/x/y.png")]), user("x")]),
        "messages[1].content[0].type",
    ),
    (
        "image_url_not_object",
        request(messages=[user([{"type": "image_url", "image_url": "https://example.com/x"}])]),
        "messages[0].content[0].image_url",
    ),
    (
        "image_unsupported_media_type",
        request(messages=[HI, user([image_part(f"data:image/svg+xml;base64,{PNG}")])]),
        "messages[1].content[0].image_url.url",
    ),
    (
        "image_data_url_not_base64",
        request(messages=[user([image_part("data:image/png,rawbytes")])]),
        "messages[0].content[0].image_url.url",
    ),
    (
        "image_invalid_base64",
        request(messages=[user([image_part("data:image/png;base64,@@@")])]),
        "messages[0].content[0].image_url.url",
    ),
    (
        "image_empty_base64",
        request(messages=[user([image_part("data:image/png;base64,")])]),
        "messages[0].content[0].image_url.url",
    ),
    (
        "file_empty_base64",
        request(
            messages=[
                user([{"type": "file", "file": {"file_data": "data:application/pdf;base64,"}}])
            ]
        ),
        "messages[0].content[0].file.file_data",
    ),
    (
        "image_ftp_url",
        request(messages=[user([image_part("ftp://x/y.png")])]),
        "messages[0].content[0].image_url.url",
    ),
    (
        "file_id_cannot_be_resolved",
        request(messages=[user([{"type": "file", "file": {"file_id": "file-1"}}])]),
        "messages[0].content[0].file.file_id",
    ),
    (
        "file_not_pdf",
        request(
            messages=[
                user([{"type": "file", "file": {"file_data": f"data:text/plain;base64,{OPAQUE}"}}])
            ]
        ),
        "messages[0].content[0].file.file_data",
    ),
    (
        "file_bare_base64_not_pdf",
        request(messages=[user([{"type": "file", "file": {"file_data": OPAQUE}}])]),
        "messages[0].content[0].file.file_data",
    ),
    (
        "cache_control_bad_type",
        request(messages=[user([part("x", cache_control={"type": "forever"})])]),
        "messages[0].content[0].cache_control",
    ),
    (
        "cache_control_bad_ttl",
        request(messages=[user([part("x", cache_control={"type": "ephemeral", "ttl": "1d"})])]),
        "messages[0].content[0].cache_control.ttl",
    ),
    (
        "prompt_cache_breakpoint_bad_ttl",
        request(
            messages=[user([part("x", prompt_cache_breakpoint={"mode": "explicit", "ttl": "1y"})])]
        ),
        "messages[0].content[0].prompt_cache_breakpoint.ttl",
    ),
    (
        "too_many_cache_breakpoints",
        request(
            messages=[user([part(str(i), cache_control={"type": "ephemeral"}) for i in range(5)])]
        ),
        "messages[0].content[4]",
    ),
    (
        "too_many_cache_breakpoints_names_the_first_past_the_limit",
        request(
            messages=[
                user([part("a", prompt_cache_breakpoint={"mode": "explicit"}), part(" ")]),
                assistant("ok"),
                user([part(str(i), cache_control={"type": "ephemeral"}) for i in range(4)]),
            ],
            tools=[{**CLOCK, "cache_control": {"type": "ephemeral"}}],
        ),
        "messages[2].content[2]",
    ),
    ("only_system_messages", request(messages=[system("S")]), "messages"),
    ("only_empty_user", request(messages=[system("S"), user("")]), "messages[1].content"),
    ("only_blank_parts", request(messages=[user([part(" ")])]), "messages[0].content"),
    (
        "tool_without_call_id",
        request(messages=[*TOOL_CALL_TURN, {"role": "tool", "content": "r"}]),
        "messages[2].tool_call_id",
    ),
    (
        "tool_result_unknown_id",
        request(messages=[*TOOL_CALL_TURN, tool("c1", "r"), tool("zz", "r")]),
        "messages[3].tool_call_id",
    ),
    (
        "tool_result_without_any_call",
        request(messages=[HI, tool("c1", "r")]),
        "messages[1].tool_call_id",
    ),
    (
        "tool_result_for_older_turn",
        request(messages=[*TOOL_CALL_TURN, tool("c1", "r"), assistant("ok"), tool("c1", "r")]),
        "messages[4].tool_call_id",
    ),
    (
        "tool_result_twice",
        request(messages=[*TOOL_CALL_TURN, tool("c1", "r"), tool("c1", "r")]),
        "messages[3].tool_call_id",
    ),
    (
        "tool_call_unanswered",
        request(
            messages=[
                HI,
                assistant(tool_calls=[call("c1"), call("c2")]),
                tool("c1", "r"),
                user("x"),
                assistant("y"),
            ]
        ),
        "messages[1].tool_calls[1]",
    ),
    ("tool_call_last_message", request(messages=TOOL_CALL_TURN), "messages[1].tool_calls[0]"),
    (
        "tool_call_id_repeated_across_turns",
        request(
            messages=[
                *TOOL_CALL_TURN,
                tool("c1", "r"),
                assistant(tool_calls=[call("c1")]),
                tool("c1", "r"),
            ]
        ),
        "messages[3].tool_calls[0].id",
    ),
    (
        "arguments_invalid_json",
        request(
            messages=[HI, assistant(tool_calls=[call("c1", arguments="{oops")]), tool("c1", "r")]
        ),
        "messages[1].tool_calls[0].function.arguments",
    ),
    (
        "arguments_not_object",
        request(
            messages=[HI, assistant(tool_calls=[call("c1", arguments="[1]")]), tool("c1", "r")]
        ),
        "messages[1].tool_calls[0].function.arguments",
    ),
    (
        "arguments_not_string",
        request(
            messages=[
                HI,
                assistant(
                    tool_calls=[
                        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {}}}
                    ]
                ),
                tool("c1", "r"),
            ]
        ),
        "messages[1].tool_calls[0].function.arguments",
    ),
    (
        "tool_call_without_id",
        request(
            messages=[
                HI,
                assistant(
                    tool_calls=[{"type": "function", "function": {"name": "f", "arguments": "{}"}}]
                ),
            ]
        ),
        "messages[1].tool_calls[0].id",
    ),
    (
        "tool_call_without_name",
        request(
            messages=[
                HI,
                assistant(
                    tool_calls=[{"id": "c1", "type": "function", "function": {"arguments": "{}"}}]
                ),
            ]
        ),
        "messages[1].tool_calls[0].function.name",
    ),
    (
        "custom_tool_call_unsupported",
        request(
            messages=[
                HI,
                assistant(
                    tool_calls=[
                        {"id": "c1", "type": "custom", "custom": {"name": "f", "input": "x"}}
                    ]
                ),
            ]
        ),
        "messages[1].tool_calls[0].type",
    ),
    (
        "tool_calls_not_list",
        request(messages=[HI, assistant(tool_calls={})]),
        "messages[1].tool_calls",
    ),
    (
        "function_message_without_call",
        request(messages=[HI, {"role": "function", "name": "get", "content": "r"}]),
        "messages[1].name",
    ),
    (
        "thinking_block_malformed",
        request(
            messages=[
                HI,
                assistant("a", thinking_blocks=[{"type": "thinking", "thinking": "x"}]),
                user("b"),
            ]
        ),
        "messages[1].thinking_blocks[0]",
    ),
    (
        "assistant_audio",
        request(messages=[HI, assistant(audio={"id": "a1"}), user("b")]),
        "messages[1].audio",
    ),
    ("stream_not_bool", request(stream="yes"), "stream"),
    ("stream_options_not_object", request(stream=True, stream_options=True), "stream_options"),
    (
        "include_usage_not_bool",
        request(stream=True, stream_options={"include_usage": 1}),
        "stream_options.include_usage",
    ),
    ("max_tokens_zero", request(max_tokens=0), "max_tokens"),
    ("max_tokens_string", request(max_tokens="5"), "max_tokens"),
    ("max_tokens_bool", request(max_tokens=True), "max_tokens"),
    ("max_tokens_float", request(max_tokens=5.0), "max_tokens"),
    ("max_completion_tokens_negative", request(max_completion_tokens=-1), "max_completion_tokens"),
    ("temperature_above_2", request(temperature=2.5), "temperature"),
    ("temperature_negative", request(temperature=-0.1), "temperature"),
    ("temperature_string", request(temperature="1"), "temperature"),
    ("top_p_above_1", request(top_p=1.5), "top_p"),
    ("top_k_float", request(top_k=1.5), "top_k"),
    ("n_above_1", request(n=2), "n"),
    ("n_zero", request(n=0), "n"),
    ("n_string", request(n="1"), "n"),
    ("logprobs_true", request(logprobs=True), "logprobs"),
    ("top_logprobs_positive", request(top_logprobs=2), "top_logprobs"),
    ("audio_output", request(audio={"voice": "alloy", "format": "mp3"}), "audio"),
    ("modalities_audio", request(modalities=["text", "audio"]), "modalities"),
    ("modalities_not_list", request(modalities="text"), "modalities"),
    ("legacy_functions", request(functions=[{"name": "f"}]), "functions"),
    ("legacy_function_call", request(function_call="auto"), "function_call"),
    ("stop_not_string_or_list", request(stop=5), "stop"),
    ("stop_item_not_string", request(stop=["a", 1]), "stop[1]"),
    ("user_not_string", request(user=5), "user"),
    ("tools_not_list", request(tools={}), "tools"),
    ("tool_not_object", request(tools=["f"]), "tools[0]"),
    (
        "tool_custom_type",
        request(tools=[{"type": "custom", "custom": {"name": "f"}}]),
        "tools[0].type",
    ),
    ("tool_without_function", request(tools=[{"type": "function"}]), "tools[0].function"),
    ("tool_name_invalid", request(tools=[fn_tool("bad name")]), "tools[0].function.name"),
    ("tool_name_too_long", request(tools=[fn_tool("x" * 65)]), "tools[0].function.name"),
    ("tool_name_duplicate", request(tools=[CLOCK, CLOCK]), "tools[1].function.name"),
    (
        "tool_description_not_string",
        request(tools=[fn_tool("f", description=1)]),
        "tools[0].function.description",
    ),
    (
        "tool_parameters_not_object",
        request(tools=[fn_tool("f", parameters=[])]),
        "tools[0].function.parameters",
    ),
    (
        "tool_parameters_top_level_any_of",
        request(tools=[fn_tool("f", parameters={"anyOf": [{"type": "object"}]})]),
        "tools[0].function.parameters.anyOf",
    ),
    (
        "tool_parameters_top_level_one_of",
        request(tools=[fn_tool("f", parameters={"type": "object", "oneOf": []})]),
        "tools[0].function.parameters.oneOf",
    ),
    (
        "tool_parameters_not_object_type",
        request(tools=[fn_tool("f", parameters={"type": "array"})]),
        "tools[0].function.parameters.type",
    ),
    (
        "tool_strict_not_bool",
        request(tools=[fn_tool("f", strict="yes")]),
        "tools[0].function.strict",
    ),
    (
        "tool_cache_control_bad",
        request(tools=[{**CLOCK, "cache_control": {"type": "x"}}]),
        "tools[0].cache_control",
    ),
    ("tool_choice_unknown_string", request(tools=[CLOCK], tool_choice="any"), "tool_choice"),
    (
        "tool_choice_named_not_offered",
        request(tools=[CLOCK], tool_choice={"type": "function", "function": {"name": "nope"}}),
        "tool_choice.function.name",
    ),
    (
        "tool_choice_named_without_name",
        request(tools=[CLOCK], tool_choice={"type": "function"}),
        "tool_choice.function.name",
    ),
    ("tool_choice_required_without_tools", request(tool_choice="required"), "tool_choice"),
    (
        "tool_choice_named_without_tools",
        request(tool_choice={"type": "function", "function": {"name": "f"}}),
        "tool_choice.function.name",
    ),
    (
        "tool_choice_custom",
        request(tools=[CLOCK], tool_choice={"type": "custom", "custom": {"name": "clock"}}),
        "tool_choice",
    ),
    (
        "allowed_tools_names_unknown_tool",
        request(
            tools=[CLOCK],
            tool_choice={
                "type": "allowed_tools",
                "allowed_tools": {
                    "mode": "auto",
                    "tools": [{"type": "function", "function": {"name": "x"}}],
                },
            },
        ),
        "tool_choice.allowed_tools.tools[0]",
    ),
    (
        "allowed_tools_bad_mode",
        request(
            tools=[CLOCK],
            tool_choice={"type": "allowed_tools", "allowed_tools": {"mode": "some", "tools": []}},
        ),
        "tool_choice.allowed_tools",
    ),
    (
        "parallel_tool_calls_not_bool",
        request(tools=[CLOCK], parallel_tool_calls="no"),
        "parallel_tool_calls",
    ),
    ("response_format_unknown", request(response_format={"type": "yaml"}), "response_format.type"),
    ("response_format_not_object", request(response_format="json"), "response_format.type"),
    (
        "json_schema_without_name",
        request(response_format={"type": "json_schema", "json_schema": {"schema": {}}}),
        "response_format.json_schema.name",
    ),
    (
        "json_schema_schema_not_object",
        request(
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": []}}
        ),
        "response_format.json_schema.schema",
    ),
    ("reasoning_effort_unknown", request(reasoning_effort="extreme"), "reasoning_effort"),
]


@pytest.mark.parametrize(("payload", "param"), [r[1:] for r in ERRORS], ids=[r[0] for r in ERRORS])
def test_invalid_requests_are_400_naming_the_field(payload: object, param: str | None) -> None:
    with pytest.raises(ProxyError) as caught:
        translate_request(payload, OPTS)
    error = caught.value
    assert (error.status, error.type, error.param) == (400, "invalid_request_error", param)
    assert error.message


def test_body_never_carries_openai_only_fields() -> None:
    everything = request(
        stream=True,
        stream_options={"include_usage": True},
        n=1,
        logprobs=False,
        top_logprobs=0,
        seed=1,
        user="u",
        parallel_tool_calls=False,
        tools=[CLOCK],
        response_format={"type": "json_object"},
        reasoning_effort="none",
        modalities=["text"],
        max_completion_tokens=10,
        store=False,
        metadata={"a": "b"},
        something_new=True,
    )
    body = translate(everything).body
    assert set(body) <= {
        "model", "max_tokens", "messages", "system", "stop_sequences", "temperature", "top_p",
        "top_k", "metadata", "stream", "tools", "tool_choice", "thinking", "output_config",
    }  # fmt: skip
    assert body["metadata"] == {"user_id": "u"}


# -- property: any valid OpenAI request translates into a body Anthropic accepts ----------

_names = st.sampled_from(["get_weather", "lookup", "calc-2", "x"])
_texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
_args = st.dictionaries(
    st.sampled_from(["a", "b", "city"]), st.integers() | st.text(max_size=5), max_size=2
)


@st.composite
def _user_content(draw: st.DrawFn) -> Any:
    if draw(st.booleans()):
        return draw(_texts)
    kinds = st.sampled_from(["text", "text", "image_data", "image_url", "pdf"])
    parts: list[dict[str, Any]] = []
    for kind in draw(st.lists(kinds, max_size=3)):
        if kind == "text":
            extra = {"cache_control": {"type": "ephemeral"}} if draw(st.booleans()) else {}
            parts.append(part(draw(_texts), **extra))
        elif kind == "image_data":
            parts.append(image_part(f"data:image/png;base64,{PNG}", detail="low"))
        elif kind == "image_url":
            parts.append(image_part("https://example.com/a.png"))
        else:
            parts.append(
                {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{PDF}"}}
            )
    return parts


@st.composite
def _conversation(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    next_id = 0
    for _ in range(draw(st.integers(1, 5))):
        if draw(st.booleans()):
            role = draw(st.sampled_from(["system", "developer"]))
            messages.append(system(draw(_texts), role))
        kind = draw(st.sampled_from(["user", "user", "assistant", "tool_round"]))
        if kind == "user":  # non-empty: a turn of only empty user messages is a 400
            content = draw(_user_content())
            content = content + "!" if isinstance(content, str) else [*content, part("!")]
            messages.append(user(content))
        elif kind == "assistant":
            messages.append(assistant(draw(st.none() | _texts)))
        else:
            calls = []
            for _ in range(draw(st.integers(1, 3))):
                args = json.dumps(draw(_args)) if draw(st.booleans()) else ""
                calls.append(call(f"call_{next_id}", draw(_names), args))
                next_id += 1
            messages.append(assistant(draw(st.none() | _texts), tool_calls=calls))
            results = [
                tool(c["id"], draw(_texts | st.lists(st.builds(part, _texts), max_size=2)))
                for c in calls
            ]
            messages.extend(draw(st.permutations(results)))
            if draw(st.booleans()):
                messages.append(user(draw(_texts) + "?"))
    # a conversation needs one non-empty user or assistant message
    messages.append(user(draw(_texts) + "."))
    if draw(st.booleans()):
        messages.append(assistant(draw(_texts)))
    return messages


@st.composite
def _openai_requests(draw: st.DrawFn) -> dict[str, Any]:
    payload: dict[str, Any] = {"model": "claude-x", "messages": draw(_conversation())}
    tools = [
        fn_tool(name, parameters={"type": "object", "properties": {}})
        for name in draw(st.lists(_names, unique=True, max_size=3))
    ]
    if tools:
        payload["tools"] = tools
        payload["tool_choice"] = draw(
            st.sampled_from(
                [
                    "auto",
                    "none",
                    "required",
                    {"type": "function", "function": {"name": tools[0]["function"]["name"]}},
                ]
            )
        )
        payload["parallel_tool_calls"] = draw(st.booleans())
    optional = {
        "stop": st.text(max_size=3) | st.lists(st.text(max_size=3), max_size=5),
        "temperature": st.floats(0, 2),
        "top_p": st.floats(0, 1),
        "max_completion_tokens": st.integers(1, 50_000),
        "max_tokens": st.integers(1, 50_000),
        "stream": st.booleans(),
        "user": st.text(max_size=8),
        "seed": st.integers(),
        "reasoning_effort": st.sampled_from(
            ["none", "minimal", "low", "medium", "high", "xhigh", "max"]
        ),
        "response_format": st.sampled_from(
            [
                {"type": "text"},
                {"type": "json_object"},
                {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}},
            ]
        ),
    }
    for key, strategy in optional.items():
        if draw(st.booleans()):
            payload[key] = draw(strategy)
    return payload


@pytest.mark.parametrize("version", ["2023-06-01", "2026-10-21"])
@settings(
    max_examples=150, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(payload=_openai_requests())
def test_valid_openai_requests_translate_to_bodies_anthropic_accepts(
    version: str, payload: dict[str, Any]
) -> None:
    result = translate_request(payload, replace(OPTS, anthropic_version=version))
    validate_messages_request(result.body, api_version=version)


# -- every field of a full request, replaced by a wrong value -----------------------------

_FULL_REQUEST: dict[str, Any] = {
    "model": "claude-x",
    "messages": [
        system(
            [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral", "ttl": "5m"}}]
        ),
        user(
            [
                {
                    "type": "text",
                    "text": "hi",
                    "prompt_cache_breakpoint": {"mode": "explicit", "ttl": "30m"},
                },
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{PDF}"}},
            ],
            name="n",
        ),
        assistant(
            "a",
            tool_calls=[
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        ),
        tool("c1", [{"type": "text", "text": "r"}]),
    ],
    "tools": [fn_tool("f", parameters={"type": "object", "properties": {}})],
    "tool_choice": {"type": "function", "function": {"name": "f"}},
    "parallel_tool_calls": False,
    "stop": ["x"],
    "max_completion_tokens": 3000,
    "temperature": 0.5,
    "top_p": 0.9,
    "user": "u",
    "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {}}},
    "reasoning_effort": "low",
    "stream": True,
    "stream_options": {"include_usage": True},
}
_WRONG_VALUES: list[Any] = [[], {}, None, 1.5, True, "", " ", ["x"], {"a": 1}, -1, 0, "high"]


def _leaf_paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path] if path else []
    children = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, child in children:
        found.extend(_leaf_paths(child, (*path, key)))
    return found


@pytest.mark.parametrize("version", ["2023-06-01", "2026-10-21"])
def test_any_field_with_a_wrong_value_is_a_400_or_a_body_anthropic_accepts(version: str) -> None:
    """No value in any position may crash the translation (a 500) or slip past it upstream."""
    options = replace(OPTS, anthropic_version=version)
    validate_messages_request(translate_request(_FULL_REQUEST, options).body, api_version=version)
    for path in _leaf_paths(_FULL_REQUEST):
        for wrong in _WRONG_VALUES:
            payload = json.loads(json.dumps(_FULL_REQUEST))
            target = payload
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = wrong
            try:
                result = translate_request(payload, options)
            except ProxyError as exc:
                assert exc.status == 400, (path, wrong, exc.message)
                continue
            validate_messages_request(result.body, api_version=version)


# -- what each model accepts ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "traits"),
    [
        ("claude-sonnet-4-5", CLASSIC),
        ("claude-sonnet-4-5-20250929", CLASSIC),
        ("claude-opus-4-20250514", CLASSIC),
        ("claude-3-7-sonnet-latest", CLASSIC),
        ("gpt-4o", CLASSIC),
        ("claude-haiku-4-5", CLASSIC),
        (
            "claude-sonnet-4-6",
            ModelTraits(
                prefill=False, adaptive_thinking=True, efforts=frozenset({"low", "medium", "high"})
            ),
        ),
        (
            "claude-opus-4-6-20260205",
            ModelTraits(
                prefill=False,
                adaptive_thinking=True,
                efforts=frozenset({"low", "medium", "high", "max"}),
            ),
        ),
        ("claude-haiku-4-6", ModelTraits(prefill=False)),  # no adaptive thinking below Opus/Sonnet
        *[
            (
                model,
                ModelTraits(
                    prefill=False,
                    adaptive_thinking=True,
                    sampling=False,
                    efforts=frozenset({"low", "medium", "high", "xhigh", "max"}),
                ),
            )
            for model in (
                "claude-opus-4-8",
                "claude-opus-4-9",
                "claude-sonnet-5",
                "claude-haiku-5-1",
            )
        ],
    ],
)
def test_model_traits_follow_the_generation(model: str, traits: ModelTraits) -> None:
    assert traits_for(model) == traits


@pytest.mark.parametrize(
    ("model", "effort", "thinking", "output_config", "max_tokens"),
    [
        ("claude-opus-4-8", "high", {"type": "adaptive"}, {"effort": "high"}, 1000 + 16384),
        ("claude-sonnet-5", "xhigh", {"type": "adaptive"}, {"effort": "xhigh"}, 1000 + 32768),
        ("claude-opus-4-6", "xhigh", {"type": "adaptive"}, {"effort": "max"}, 1000 + 32768),
        ("claude-sonnet-4-6", "max", {"type": "adaptive"}, {"effort": "high"}, 1000 + 49152),
        ("claude-haiku-4-5", "high", {"type": "enabled", "budget_tokens": 16384}, None, 17384),
        (
            "claude-opus-4-5-20251101",
            "low",
            {"type": "enabled", "budget_tokens": 1024},
            None,
            2024,
        ),
    ],
)
def test_reasoning_effort_is_adaptive_thinking_where_the_model_thinks_adaptively(
    model: str,
    effort: str,
    thinking: dict[str, Any],
    output_config: dict[str, Any] | None,
    max_tokens: int,
) -> None:
    body = translate(request(model=model, reasoning_effort=effort)).body
    assert body["thinking"] == thinking
    assert body.get("output_config") == output_config
    assert body["max_tokens"] == max_tokens


def test_adaptive_effort_sits_beside_a_structured_output_format() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    body = translate(
        request(model="claude-opus-4-8", reasoning_effort="low", response_format=fmt)
    ).body
    assert body["output_config"]["effort"] == "low"
    assert body["output_config"]["format"]["schema"]["additionalProperties"] is False


@pytest.mark.parametrize(
    ("model", "sent"),
    [
        ("claude-sonnet-4-6", True),
        ("claude-opus-4-6", True),
        ("claude-opus-4-7", False),
        ("claude-opus-4-8-20260615", False),
        ("claude-sonnet-5", False),
    ],
)
def test_sampling_parameters_go_only_to_models_that_take_them(model: str, sent: bool) -> None:
    result = translate(request(model=model, temperature=0.2, top_k=5))
    assert ("temperature" in result.body) == sent
    assert ("top_k" in result.body) == sent
    assert result.ignored_params == (() if sent else ("temperature", "top_k"))


@pytest.mark.parametrize("model", ["claude-sonnet-4-6", "claude-opus-4-8", "claude-sonnet-5"])
def test_a_prefill_to_a_model_that_takes_none_is_a_400_naming_the_message(model: str) -> None:
    with pytest.raises(ProxyError) as info:
        translate_request(
            request(model=model, messages=[HI, assistant("Sure"), system("late")]), OPTS
        )
    assert (info.value.status, info.value.param) == (400, "messages[1]")
    assert "end it with a user message" in info.value.message
    # Older models still continue a prefill.
    body = translate(request(model="claude-sonnet-4-5", messages=[HI, assistant("Sure")])).body
    assert body["messages"][-1] == {"role": "assistant", "content": [text("Sure")]}
