"""The simulator's pure core, as data: validation, latency schedule, faults, replies, caching."""

from __future__ import annotations

import copy
import itertools
import json
import random
from typing import Any

import pytest

from trio_batcher.simulator import SimulatorConfig, SimulatorInvalidRequest, schedule
from trio_batcher.simulator.faults import (
    Faults,
    draw_status,
    embedded_faults,
    parse_faults,
    strip_directives,
)
from trio_batcher.simulator.latency import reply_delay
from trio_batcher.simulator.prompt import InputUsage, PromptCache, analyse_prompt
from trio_batcher.simulator.replies import Reply, build_reply
from trio_batcher.simulator.schemas import example_value
from trio_batcher.simulator.sse import render_stream
from trio_batcher.simulator.validation import (
    BLOCK_KEYS,
    COUNT_TOKENS_KEYS,
    CUSTOM_TOOL_KEYS,
    MESSAGES_KEYS,
    validate_count_tokens_request,
    validate_messages_request,
)

OLD, NEW = "2023-06-01", "2026-10-21"
USER = {"role": "user", "content": "hi"}
WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city"],
    },
}
# WEATHER's schema as structured outputs and strict tools need it (closed objects).
CLOSED_WEATHER = {**WEATHER["input_schema"], "additionalProperties": False}
TIME = {"name": "get_time", "input_schema": {"type": "object", "properties": {}}}
PNG = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}

PREFILL_REFUSED = (
    "This model does not support assistant message prefill. "
    "The conversation must end with a user message."
)
ADAPTIVE_ONLY = (
    '"thinking.type.{}" is not supported for this model. Use "thinking.type.adaptive" '
    'and "output_config.effort" to control thinking behavior.'
)
NO_ADAPTIVE = (
    '"thinking.type.adaptive" is not supported for this model. Use "thinking.type.enabled" '
    'and "thinking.budget_tokens" to control thinking behavior.'
)
NO_EFFORT = "output_config.effort: This model does not support the effort parameter."
NO_XHIGH = (
    "output_config.effort: 'xhigh' is not supported for this model; "
    "use 'low', 'medium', 'high' or 'max'"
)
OPEN_OBJECT = "For 'object' type, 'additionalProperties' must be explicitly set to false"
SCHEMA = "output_config.format.schema"


def body(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"model": "claude-haiku-4-5", "max_tokens": 64, "messages": [USER]}
    base.update(changes)
    return {k: v for k, v in base.items() if v is not ...}


def tool_use(tool_id: str = "toolu_1", name: str = "get_weather") -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": {"city": "Paris"}}


def tool_result(tool_id: str = "toolu_1", content: Any = "18C") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": content}


def roundtrip(*user_blocks: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        USER,
        {"role": "assistant", "content": [tool_use()]},
        {"role": "user", "content": list(user_blocks)},
    ]


def msgs(*contents: Any, role: str = "user") -> list[dict[str, Any]]:
    return [{"role": role, "content": c} for c in contents]


def prefilled(content: Any = "The answer is") -> list[dict[str, Any]]:
    return [USER, {"role": "assistant", "content": content}]


def json_output(schema: object, **changes: Any) -> dict[str, Any]:
    return body(output_config={"format": {"type": "json_schema", "schema": schema}}, **changes)


def closed(**properties: Any) -> dict[str, Any]:
    """An object schema as structured outputs accept it."""
    return {"type": "object", "properties": properties, "additionalProperties": False}


def strict_tools(*schemas: object) -> dict[str, Any]:
    return body(
        tools=[
            {"name": f"tool_{i}", "strict": True, "input_schema": schema}
            for i, schema in enumerate(schemas)
        ]
    )


# (name, body, api_version, text the error message must start with)
BAD: list[tuple[str, object, str, str]] = [
    ("not an object", [1, 2], OLD, "body"),
    ("unsupported version", body(), "2024-01-01", "anthropic-version"),
    ("missing model", body(model=...), OLD, "model: Field required"),
    ("model not a string", body(model=3), OLD, "model"),
    ("missing max_tokens", body(max_tokens=...), OLD, "max_tokens: Field required"),
    ("max_tokens a string", body(max_tokens="10"), OLD, "max_tokens"),
    ("max_tokens a bool", body(max_tokens=True), OLD, "max_tokens"),
    ("max_tokens negative", body(max_tokens=-1), OLD, "max_tokens"),
    ("missing messages", body(messages=...), OLD, "messages: Field required"),
    ("empty messages", body(messages=[]), OLD, "messages"),
    ("messages not a list", body(messages="hi"), OLD, "messages"),
    ("unknown role", body(messages=msgs("x", role="robot")), OLD, "messages.0.role"),
    ("tool role", body(messages=msgs("x", role="tool")), OLD, "messages.0.role"),
    ("extra message key", body(messages=[{**USER, "name": "bob"}]), OLD, "messages.0.name"),
    ("missing content", body(messages=[{"role": "user"}]), OLD, "messages.0.content"),
    ("empty user string", body(messages=msgs("")), OLD, "messages.0.content"),
    ("whitespace user string", body(messages=msgs("  \n")), OLD, "messages.0.content"),
    ("empty user list", body(messages=msgs([])), OLD, "messages.0.content"),
    (
        "empty non-final assistant",
        body(messages=[USER, {"role": "assistant", "content": ""}, USER]),
        OLD,
        "messages.1.content",
    ),
    ("content a number", body(messages=msgs(5)), OLD, "messages.0.content"),
    (
        "empty text block",
        body(messages=msgs([{"type": "text", "text": ""}])),
        OLD,
        "messages.0.content.0.text",
    ),
    (
        "whitespace text block",
        body(messages=msgs([{"type": "text", "text": " "}])),
        OLD,
        "messages.0.content.0.text",
    ),
    (
        "text not a string",
        body(messages=msgs([{"type": "text", "text": 1}])),
        OLD,
        "messages.0.content.0.text",
    ),
    (
        "unknown block type",
        body(messages=msgs([{"type": "video"}])),
        OLD,
        "messages.0.content.0.type",
    ),
    ("block without type", body(messages=msgs([{"text": "hi"}])), OLD, "messages.0.content.0.type"),
    (
        "OpenAI image_url part",
        body(messages=msgs([{"type": "image_url", "image_url": {}}])),
        OLD,
        "messages.0.content.0.type",
    ),
    (
        "extra text block key",
        body(messages=msgs([{"type": "text", "text": "a", "detail": 1}])),
        OLD,
        "messages.0.content.0.detail",
    ),
    (
        "image media type",
        body(messages=msgs([{"type": "image", "source": {**PNG, "media_type": "image/bmp"}}])),
        OLD,
        "messages.0.content.0.source.media_type",
    ),
    (
        "image without data",
        body(
            messages=msgs(
                [{"type": "image", "source": {"type": "base64", "media_type": "image/png"}}]
            )
        ),
        OLD,
        "messages.0.content.0.source.data",
    ),
    (
        "image source kind",
        body(messages=msgs([{"type": "image", "source": {"type": "data", "data": "x"}}])),
        OLD,
        "messages.0.content.0.source.type",
    ),
    (
        "image detail leaked from OpenAI",
        body(messages=msgs([{"type": "image", "source": PNG, "detail": "low"}])),
        OLD,
        "messages.0.content.0.detail",
    ),
    (
        "pdf with an image media type",
        body(messages=msgs([{"type": "document", "source": {**PNG}}])),
        OLD,
        "messages.0.content.0.source.media_type",
    ),
    ("tool_use from the user", body(messages=msgs([tool_use()])), OLD, "messages.0.content.0.type"),
    (
        "tool_result from the assistant",
        body(messages=[USER, {"role": "assistant", "content": [tool_result()]}]),
        OLD,
        "messages.1.content.0.type",
    ),
    (
        "tool_use id with a dot",
        body(messages=[USER, {"role": "assistant", "content": [tool_use("call.1")]}]),
        OLD,
        "messages.1.content.0.id",
    ),
    (
        "tool_use input a JSON string",
        body(messages=[USER, {"role": "assistant", "content": [{**tool_use(), "input": "{}"}]}]),
        OLD,
        "messages.1.content.0.input",
    ),
    (
        "tool_result without tool_use",
        body(messages=msgs([tool_result()])),
        OLD,
        "messages.0.content.0: unexpected `tool_use_id`",
    ),
    (
        "tool_result for another id",
        body(messages=roundtrip(tool_result("toolu_2"))),
        OLD,
        "messages.2.content.0: unexpected `tool_use_id`",
    ),
    (
        "tool_result two turns late",
        body(
            messages=[
                *roundtrip(tool_result()),
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": [tool_result()]},
            ]
        ),
        OLD,
        "messages.4.content.0: unexpected `tool_use_id`",
    ),
    (
        "tool_use left unanswered",
        body(messages=roundtrip({"type": "text", "text": "never mind"})),
        OLD,
        "messages.1: `tool_use` ids were found without `tool_result` blocks",
    ),
    (
        "text before tool_result",
        body(messages=roundtrip({"type": "text", "text": "here"}, tool_result())),
        OLD,
        "messages.2.content.1: `tool_result` blocks must come first",
    ),
    (
        "string turn before tool_result in the same turn",
        body(
            messages=[
                *roundtrip(tool_result())[:2],
                USER,
                {"role": "user", "content": [tool_result()]},
            ]
        ),
        OLD,
        "messages.3.content.0: `tool_result` blocks must come first",
    ),
    (
        "duplicate tool_use ids",
        body(messages=[*roundtrip(tool_result()), {"role": "assistant", "content": [tool_use()]}]),
        OLD,
        "messages.3.content.0: `tool_use` ids must be unique",
    ),
    (
        "tool_result content with a tool_use",
        body(messages=roundtrip(tool_result(content=[tool_use("toolu_9")]))),
        OLD,
        "messages.2.content.0.content.0.type",
    ),
    (
        "thinking block from the user",
        body(messages=msgs([{"type": "thinking", "thinking": "x", "signature": "s"}])),
        OLD,
        "messages.0.content.0.type",
    ),
    (
        "prefill with trailing whitespace",
        body(messages=[USER, {"role": "assistant", "content": "The answer is "}]),
        OLD,
        "messages.1.content: final assistant content cannot end with trailing whitespace",
    ),
    ("system a number", body(system=1), OLD, "system"),
    ("system image block", body(system=[{"type": "image", "source": PNG}]), OLD, "system.0.type"),
    ("system empty text block", body(system=[{"type": "text", "text": ""}]), OLD, "system.0.text"),
    ("stop_sequences a string", body(stop_sequences="END"), OLD, "stop_sequences"),
    (
        "empty stop sequence",
        body(stop_sequences=["END", ""]),
        OLD,
        "stop_sequences: each stop sequence must be non-empty",
    ),
    (
        "newline stop sequence",
        body(stop_sequences=["\n"]),
        OLD,
        "stop_sequences: each stop sequence must contain non-whitespace",
    ),
    ("stop sequence a number", body(stop_sequences=[1]), OLD, "stop_sequences.0"),
    ("temperature above 1", body(temperature=1.5), OLD, "temperature"),
    ("temperature a string", body(temperature="0.5"), OLD, "temperature"),
    ("temperature and top_p", body(temperature=0.5, top_p=0.9), OLD, "temperature"),
    ("top_p above 1", body(top_p=2), OLD, "top_p"),
    ("top_k negative", body(top_k=-1), OLD, "top_k"),
    ("top_k a float", body(top_k=2.5), OLD, "top_k"),
    ("temperature under 2026-10-21", body(temperature=1), NEW, "temperature"),
    ("top_p under 2026-10-21", body(top_p=1), NEW, "top_p"),
    ("top_k under 2026-10-21", body(top_k=5), NEW, "top_k"),
    ("tools not a list", body(tools=WEATHER), OLD, "tools"),
    (
        "tool name with a space",
        body(tools=[{**WEATHER, "name": "get weather"}]),
        OLD,
        "tools.0.name",
    ),
    ("tool name of 65 chars", body(tools=[{**WEATHER, "name": "a" * 65}]), OLD, "tools.0.name"),
    ("tool without input_schema", body(tools=[{"name": "x"}]), OLD, "tools.0.input_schema"),
    (
        "input_schema not an object schema",
        body(tools=[{**WEATHER, "input_schema": {"type": "array"}}]),
        OLD,
        "tools.0.input_schema.type",
    ),
    ("duplicate tool names", body(tools=[WEATHER, WEATHER]), OLD, "tools"),
    (
        "top-level anyOf in input_schema",
        body(
            tools=[
                {
                    **WEATHER,
                    "input_schema": {
                        "type": "object",
                        "anyOf": [{"required": ["a"]}, {"required": ["b"]}],
                    },
                }
            ]
        ),
        OLD,
        "tools.0.input_schema: input_schema does not support oneOf, allOf, or anyOf",
    ),
    (
        "OpenAI parameters leaked",
        body(tools=[{**WEATHER, "parameters": {}}]),
        OLD,
        "tools.0.parameters",
    ),
    (
        "OpenAI-shaped tool",
        body(tools=[{"type": "function", "function": {"name": "f"}}]),
        OLD,
        "tools.0.type",
    ),
    (
        "tool_choice required",
        body(tools=[WEATHER], tool_choice={"type": "required"}),
        OLD,
        "tool_choice.type",
    ),
    ("tool_choice a string", body(tools=[WEATHER], tool_choice="auto"), OLD, "tool_choice"),
    (
        "tool_choice unknown tool",
        body(tools=[WEATHER], tool_choice={"type": "tool", "name": "nope"}),
        OLD,
        "tool_choice.name",
    ),
    (
        "tool_choice tool without name",
        body(tools=[WEATHER], tool_choice={"type": "tool"}),
        OLD,
        "tool_choice.name",
    ),
    ("tool_choice any without tools", body(tool_choice={"type": "any"}), OLD, "tool_choice"),
    (
        "tool_choice extra key",
        body(tools=[WEATHER], tool_choice={"type": "auto", "name": "x"}),
        OLD,
        "tool_choice.name",
    ),
    (
        "disable_parallel not a bool",
        body(tools=[WEATHER], tool_choice={"type": "auto", "disable_parallel_tool_use": "yes"}),
        OLD,
        "tool_choice.disable_parallel_tool_use",
    ),
    (
        "thinking budget below 1024",
        body(max_tokens=4096, thinking={"type": "enabled", "budget_tokens": 1000}),
        OLD,
        "thinking.budget_tokens",
    ),
    (
        "thinking budget not below max_tokens",
        body(max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 2048}),
        OLD,
        "thinking.budget_tokens",
    ),
    (
        "thinking without budget",
        body(max_tokens=4096, thinking={"type": "enabled"}),
        OLD,
        "thinking.budget_tokens",
    ),
    ("thinking type on", body(thinking={"type": "on"}), OLD, "thinking.type"),
    (
        "adaptive thinking with a budget",
        body(thinking={"type": "adaptive", "budget_tokens": 2048}),
        OLD,
        "thinking.budget_tokens",
    ),
    (
        "thinking with forced tool use",
        body(
            model="claude-sonnet-4-6",
            tools=[WEATHER],
            tool_choice={"type": "any"},
            thinking={"type": "adaptive"},
        ),
        OLD,
        "tool_choice",
    ),
    (
        "thinking with temperature",
        body(model="claude-sonnet-4-6", temperature=0.5, thinking={"type": "adaptive"}),
        OLD,
        "temperature",
    ),
    (
        "thinking with top_k",
        body(model="claude-sonnet-4-6", top_k=5, thinking={"type": "adaptive"}),
        OLD,
        "top_k",
    ),
    (
        "output format json_object",
        body(output_config={"format": {"type": "json_object"}}),
        OLD,
        "output_config.format.type",
    ),
    (
        "output format without schema",
        body(output_config={"format": {"type": "json_schema"}}),
        OLD,
        "output_config.format.schema",
    ),
    (
        "output effort extreme",
        body(output_config={"effort": "extreme"}),
        OLD,
        "output_config.effort",
    ),
    ("metadata extra key", body(metadata={"session": "x"}), OLD, "metadata.session"),
    ("metadata user_id a number", body(metadata={"user_id": 7}), OLD, "metadata.user_id"),
    ("stream a string", body(stream="yes"), OLD, "stream"),
    ("OpenAI n", body(n=2), OLD, "n: Extra inputs are not permitted"),
    ("OpenAI user", body(user="u1"), OLD, "user: Extra inputs are not permitted"),
    ("OpenAI max_completion_tokens", body(max_completion_tokens=5), OLD, "max_completion_tokens"),
    ("service_tier priority", body(service_tier="priority"), OLD, "service_tier"),
    (
        "cache_control type",
        body(system=[{"type": "text", "text": "s", "cache_control": {"type": "persistent"}}]),
        OLD,
        "system.0.cache_control.type",
    ),
    (
        "cache_control ttl",
        body(
            system=[
                {"type": "text", "text": "s", "cache_control": {"type": "ephemeral", "ttl": "10m"}}
            ]
        ),
        OLD,
        "system.0.cache_control.ttl",
    ),
    (
        "five cache breakpoints",
        body(
            system=[
                {"type": "text", "text": f"s{i}", "cache_control": {"type": "ephemeral"}}
                for i in range(5)
            ]
        ),
        OLD,
        "A maximum of 4 blocks with cache_control",
    ),
    # Model rules: a field's shape is checked before the model's rule about it.
    (
        "prefill of a tool call on a 4.6 model",
        body(model="claude-opus-4-6", messages=prefilled([tool_use()])),
        OLD,
        PREFILL_REFUSED,
    ),
    (
        "empty prefill on a generation 5 model",
        body(model="claude-sonnet-5", messages=prefilled("")),
        OLD,
        PREFILL_REFUSED,
    ),
    (
        "prefill's trailing whitespace before the model's rule",
        body(model="claude-opus-4-7", messages=prefilled("The answer is ")),
        OLD,
        "messages.1.content: final assistant content cannot end with trailing whitespace",
    ),
    (
        "temperature's shape before the model's rule",
        body(model="claude-opus-4-7", temperature="hot"),
        OLD,
        "temperature: Input should be a valid number",
    ),
    (
        "the sampling parameter sent is the one named",
        body(model="claude-opus-5", top_k=3, max_tokens=10),
        OLD,
        "`top_k` is deprecated for this model.",
    ),
    (
        "sampling under 2026-10-21 is an extra input on any model",
        body(model="claude-opus-5", temperature=1),
        NEW,
        "temperature: Extra inputs are not permitted",
    ),
    (
        "thinking budget's range before the model's rule",
        body(
            model="claude-opus-4-7",
            max_tokens=4096,
            thinking={"type": "enabled", "budget_tokens": 100},
        ),
        OLD,
        "thinking.budget_tokens: Input should be greater than or equal to 1024",
    ),
    (
        "effort's value before the model's rule",
        body(output_config={"effort": "extreme"}),
        OLD,
        "output_config.effort: Input should be one of",
    ),
    # Structured outputs and strict tools: the schema subset the grammar compiler takes.
    (
        "open object",
        json_output({"type": "object", "properties": {"a": {"type": "string"}}}),
        OLD,
        f"{SCHEMA}: {OPEN_OBJECT}",
    ),
    (
        "additionalProperties true",
        json_output({**closed(), "additionalProperties": True}),
        OLD,
        f"{SCHEMA}: {OPEN_OBJECT}",
    ),
    (
        "additionalProperties a schema",
        json_output({**closed(), "additionalProperties": {"type": "string"}}),
        OLD,
        f"{SCHEMA}: {OPEN_OBJECT}",
    ),
    (
        "nested open object",
        json_output(closed(inner={"type": "object", "properties": {}})),
        OLD,
        f"{SCHEMA}: {OPEN_OBJECT} (at #/properties/inner)",
    ),
    (
        "open object in an array of an anyOf",
        json_output(
            closed(xs={"anyOf": [{"type": "null"}, {"type": "array", "items": {"type": "object"}}]})
        ),
        OLD,
        f"{SCHEMA}: {OPEN_OBJECT} (at #/properties/xs/anyOf/1/items)",
    ),
    (
        "integer minimum",
        json_output(closed(n={"type": "integer", "minimum": 1})),
        OLD,
        f"{SCHEMA}: For 'integer' type, property 'minimum' is not supported (at #/properties/n)",
    ),
    (
        "number multipleOf",
        json_output(closed(x={"type": "number", "multipleOf": 0.5})),
        OLD,
        f"{SCHEMA}: For 'number' type, property 'multipleOf' is not supported",
    ),
    (
        "string maxLength",
        json_output(closed(s={"type": "string", "maxLength": 5})),
        OLD,
        f"{SCHEMA}: For 'string' type, property 'maxLength' is not supported",
    ),
    (
        "array maxItems",
        json_output(closed(a={"type": "array", "items": {"type": "string"}, "maxItems": 3})),
        OLD,
        f"{SCHEMA}: For 'array' type, property 'maxItems' is not supported",
    ),
    (
        "array minItems 2",
        json_output(closed(a={"type": "array", "minItems": 2})),
        OLD,
        f"{SCHEMA}: For 'array' type, 'minItems' values other than 0 or 1 are not supported",
    ),
    (
        "object minProperties",
        json_output({**closed(), "minProperties": 1}),
        OLD,
        f"{SCHEMA}: For 'object' type, property 'minProperties' is not supported",
    ),
    (
        "patternProperties",
        json_output({**closed(), "patternProperties": {"^x": {"type": "string"}}}),
        OLD,
        f"{SCHEMA}: For 'object' type, property 'patternProperties' is not supported",
    ),
    (
        "oneOf",
        json_output(closed(v={"oneOf": [{"type": "string"}, {"type": "integer"}]})),
        OLD,
        f"{SCHEMA}: Property 'oneOf' is not supported without a 'type' (at #/properties/v)",
    ),
    (
        "not",
        json_output(closed(v={"type": "string", "not": {"const": "x"}})),
        OLD,
        f"{SCHEMA}: For 'string' type, property 'not' is not supported",
    ),
    (
        "unknown string format",
        json_output(closed(c={"type": "string", "format": "color"})),
        OLD,
        f"{SCHEMA}: For 'string' type, format 'color' is not supported",
    ),
    (
        "unknown type",
        json_output(closed(d={"type": "date"})),
        OLD,
        f"{SCHEMA}: Type 'date' is not supported",
    ),
    (
        "enum of objects",
        json_output(closed(e={"enum": [{"a": 1}]})),
        OLD,
        f"{SCHEMA}: 'enum' must be a non-empty list of strings, numbers, booleans or null",
    ),
    (
        "pattern with a backreference",
        json_output(closed(p={"type": "string", "pattern": r"^(a)\1$"})),
        OLD,
        f"{SCHEMA}: For 'string' type, pattern '^(a)\\\\1$' uses an unsupported regex feature",
    ),
    (
        "pattern with a lookahead",
        json_output(closed(p={"type": "string", "pattern": "^(?=a)"})),
        OLD,
        f"{SCHEMA}: For 'string' type, pattern '^(?=a)' uses an unsupported regex feature",
    ),
    (
        "pattern with a word boundary",
        json_output(closed(p={"type": "string", "pattern": r"\bx"})),
        OLD,
        f"{SCHEMA}: For 'string' type, pattern '\\\\bx' uses an unsupported regex feature",
    ),
    (
        "external $ref",
        json_output(closed(r={"$ref": "https://example.com/s.json"})),
        OLD,
        f"{SCHEMA}: $ref 'https://example.com/s.json' is not supported",
    ),
    (
        "$ref that does not resolve",
        json_output(closed(r={"$ref": "#/$defs/Missing"})),
        OLD,
        f"{SCHEMA}: $ref '#/$defs/Missing' does not resolve to a schema",
    ),
    (
        "recursive $ref",
        json_output(
            {
                "$defs": {
                    "Node": closed(children={"type": "array", "items": {"$ref": "#/$defs/Node"}})
                },
                "$ref": "#/$defs/Node",
            }
        ),
        OLD,
        f"{SCHEMA}: Recursive schemas are not supported: $ref '#/$defs/Node' refers to itself",
    ),
    (
        "open object in $defs",
        json_output({**closed(a={"$ref": "#/$defs/A"}), "$defs": {"A": {"type": "object"}}}),
        OLD,
        f"{SCHEMA}: {OPEN_OBJECT} (at #/$defs/A)",
    ),
    (
        "strict tool with an open object",
        strict_tools({"type": "object", "properties": {"city": {"type": "string"}}}),
        OLD,
        f"tools.0.input_schema: {OPEN_OBJECT}",
    ),
    (
        "second strict tool with a minimum",
        strict_tools(closed(), closed(n={"type": "integer", "minimum": 0})),
        OLD,
        "tools.1.input_schema: For 'integer' type, property 'minimum' is not supported "
        "(at #/properties/n)",
    ),
]


@pytest.mark.parametrize(
    ("name", "request_body", "version", "prefix"), BAD, ids=[b[0] for b in BAD]
)
def test_invalid_request_is_rejected_naming_the_field(
    name: str, request_body: object, version: str, prefix: str
) -> None:
    with pytest.raises(SimulatorInvalidRequest) as info:
        validate_messages_request(request_body, api_version=version)
    assert str(info.value).startswith(prefix), str(info.value)
    assert info.value.status == 400 and info.value.type == "invalid_request_error"


GOOD: list[tuple[str, dict[str, Any], str]] = [
    ("minimal", body(), OLD),
    ("minimal, new version", body(), NEW),
    ("max_tokens 0 pre-warms the cache", body(max_tokens=0), OLD),
    ("leading assistant turn", body(messages=[{"role": "assistant", "content": "Hi!"}, USER]), OLD),
    ("consecutive user turns", body(messages=[USER, USER]), OLD),
    (
        "mid-conversation system message",
        body(model="claude-opus-4-8", messages=[USER, {"role": "system", "content": "Be brief."}]),
        OLD,
    ),
    ("empty prefill", body(messages=[USER, {"role": "assistant", "content": ""}]), OLD),
    ("empty prefill list", body(messages=[USER, {"role": "assistant", "content": []}]), OLD),
    ("prefill", body(messages=[USER, {"role": "assistant", "content": "The answer is"}]), OLD),
    ("empty system string", body(system=""), OLD),
    (
        "system blocks with cache_control",
        body(
            system=[
                {"type": "text", "text": "a", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
                {"type": "text", "text": "b", "cache_control": None},
            ]
        ),
        OLD,
    ),
    (
        "images and documents",
        body(
            messages=msgs(
                [
                    {"type": "text", "text": "look"},
                    {"type": "image", "source": PNG},
                    {
                        "type": "image",
                        "source": {"type": "url", "url": "https://example.com/a.png"},
                    },
                    {
                        "type": "document",
                        "source": {
                            "type": "base64",
                            "media_type": "application/pdf",
                            "data": "JVBERi0=",
                        },
                        "title": "t",
                    },
                    {
                        "type": "document",
                        "source": {"type": "text", "media_type": "text/plain", "data": ""},
                    },
                    {
                        "type": "document",
                        "source": {"type": "url", "url": "https://example.com/a.pdf"},
                        "citations": {"enabled": True},
                    },
                ]
            )
        ),
        OLD,
    ),
    (
        "parallel tool round trip",
        body(
            tools=[WEATHER, TIME],
            messages=[
                USER,
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Calling."},
                        tool_use(),
                        tool_use("call_abc-2", "get_time"),
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        tool_result(),
                        {
                            "type": "tool_result",
                            "tool_use_id": "call_abc-2",
                            "is_error": True,
                            "content": [
                                {"type": "text", "text": "boom"},
                                {"type": "image", "source": PNG},
                            ],
                        },
                        {"type": "text", "text": "and?"},
                    ],
                },
            ],
        ),
        OLD,
    ),
    (
        "tool results split across merged user messages",
        body(
            messages=[
                USER,
                {"role": "assistant", "content": [tool_use("toolu_a"), tool_use("toolu_b")]},
                {"role": "user", "content": [tool_result("toolu_a")]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_b"}]},
            ]
        ),
        OLD,
    ),
    (
        "unanswered tool_use as the final turn",
        body(messages=[USER, {"role": "assistant", "content": [tool_use()]}]),
        OLD,
    ),
    (
        "thinking history and budget",
        body(
            max_tokens=2048,
            thinking={"type": "enabled", "budget_tokens": 1024},
            tools=[WEATHER],
            tool_choice={"type": "auto"},
            messages=[
                USER,
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "hmm", "signature": "c2ln"},
                        {"type": "redacted_thinking", "data": "opaque"},
                        tool_use(),
                    ],
                },
                {"role": "user", "content": [tool_result()]},
            ],
        ),
        OLD,
    ),
    (
        "adaptive thinking with temperature 1",
        body(
            model="claude-sonnet-4-6",
            thinking={"type": "adaptive", "display": "omitted"},
            temperature=1,
        ),
        OLD,
    ),
    (
        "disabled thinking with temperature",
        body(thinking={"type": "disabled"}, temperature=0.2),
        OLD,
    ),
    ("sampling under the classic version", body(temperature=0, top_k=5), OLD),
    ("null sampling parameters", body(temperature=None, top_p=None), OLD),
    ("top_p alone", body(top_p=0.9), OLD),
    ("tool_choice none without tools", body(tool_choice={"type": "none"}), OLD),
    ("tool_choice auto without tools", body(tool_choice={"type": "auto"}), OLD),
    (
        "named tool_choice",
        body(
            tools=[WEATHER],
            tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
        ),
        OLD,
    ),
    (
        "server tool",
        body(tools=[{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]),
        OLD,
    ),
    (
        "custom tool with every field",
        body(
            tools=[
                {
                    **WEATHER,
                    "input_schema": CLOSED_WEATHER,
                    "type": "custom",
                    "strict": True,
                    "cache_control": {"type": "ephemeral"},
                    "input_examples": [{"city": "Oslo"}],
                }
            ]
        ),
        OLD,
    ),
    (
        "structured output",
        body(
            model="claude-sonnet-4-6",
            output_config={
                "effort": "high",
                "format": {
                    "type": "json_schema",
                    "schema": {"type": "object", "additionalProperties": False},
                },
            },
        ),
        NEW,
    ),
    ("metadata", body(metadata={"user_id": "u-1"}), OLD),
    ("null metadata user", body(metadata={"user_id": None}), OLD),
    ("automatic cache_control", body(cache_control={"type": "ephemeral"}), NEW),
    ("stop sequences", body(stop_sequences=["\n\nHuman:", " END"]), OLD),
    ("stream", body(stream=True, service_tier="standard_only"), OLD),
    ("unicode", body(messages=msgs("こんにちは 👋")), OLD),
    (
        "four cache breakpoints",
        body(
            system=[
                {"type": "text", "text": f"s{i}", "cache_control": {"type": "ephemeral"}}
                for i in range(4)
            ]
        ),
        OLD,
    ),
    ("null sampling parameters on Opus 4.7", body(model="claude-opus-4-7", temperature=None), OLD),
    (
        "adaptive thinking with xhigh effort on a future Opus",
        body(
            model="claude-opus-4-9-20270101",
            thinking={"type": "adaptive"},
            output_config={"effort": "xhigh"},
        ),
        NEW,
    ),
    (
        "a 4.6 conversation ending in tool results",
        body(model="claude-opus-4-6", tools=[WEATHER], messages=roundtrip(tool_result())),
        OLD,
    ),
    (
        "prefill on an old-style id",
        body(model="claude-3-7-sonnet-latest", messages=prefilled()),
        OLD,
    ),
    (
        "sampling and manual thinking on an id the table cannot place",
        body(
            model="claude-next",
            max_tokens=2048,
            thinking={"type": "enabled", "budget_tokens": 1024},
            temperature=1,
            messages=prefilled(),
        ),
        OLD,
    ),
    (
        "non-strict tools keep any schema",
        body(
            tools=[
                {
                    "name": "free",
                    "strict": False,
                    "input_schema": {
                        "type": "object",
                        "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9}},
                    },
                },
                {**WEATHER, "input_schema": {**CLOSED_WEATHER, "additionalProperties": True}},
            ]
        ),
        OLD,
    ),
    (
        "structured output using the whole subset",
        json_output(
            {
                **closed(
                    id={"type": "string", "format": "uuid", "description": "id", "title": "Id"},
                    when={"type": "string", "format": "date-time"},
                    took={"type": "string", "format": "duration"},
                    sku={"type": "string", "pattern": r"^SKU-\d{5}$"},
                    kind={"type": "string", "enum": ["a", "b"]},
                    fixed={"const": 3},
                    maybe={"anyOf": [{"type": "null"}, {"type": "integer"}]},
                    nullable={"type": ["string", "null"], "default": None},
                    tags={"type": "array", "items": {"type": "string"}, "minItems": 1},
                    more={"type": "array", "items": {"$ref": "#/definitions/Tag"}, "minItems": 0},
                    home={"$ref": "#/$defs/Place"},
                    work={"$ref": "#/$defs/Place", "description": "same shape, twice"},
                    both={"allOf": [{"$ref": "#/$defs/Place"}]},
                ),
                "required": ["id", "when", "home"],
                "$defs": {"Place": closed(city={"type": "string"})},
                "definitions": {"Tag": closed(name={"type": "string"})},
            },
            model="claude-sonnet-5",
        ),
        OLD,
    ),
    (
        "structured output rooted at a $ref, as pydantic RootModel emits",
        json_output({"$ref": "#/$defs/A", "$defs": {"A": closed(x={"type": "boolean"})}}),
        OLD,
    ),
    (
        "structured output of a bare type",
        json_output({"type": "array", "items": {"type": "number"}}),
        OLD,
    ),
    (
        "strict tool in the subset",
        strict_tools(CLOSED_WEATHER, {**closed(), "required": []}),
        OLD,
    ),
]


@pytest.mark.parametrize(("name", "request_body", "version"), GOOD, ids=[g[0] for g in GOOD])
def test_valid_edge_request_is_accepted(
    name: str, request_body: dict[str, Any], version: str
) -> None:
    snapshot = copy.deepcopy(request_body)
    validate_messages_request(request_body, api_version=version)
    assert request_body == snapshot  # pure: never mutates


def test_count_tokens_accepts_its_own_shape_only() -> None:
    validate_count_tokens_request(
        {"model": "m", "messages": [USER], "tools": [WEATHER]}, api_version=NEW
    )
    with pytest.raises(SimulatorInvalidRequest, match=r"^max_tokens: Extra inputs"):
        validate_count_tokens_request(body(), api_version=NEW)


def test_allowed_fields_mirror_the_installed_sdk() -> None:
    """Every field the SDK can send is allowed; nothing else is (drift detector)."""
    from anthropic.types import (
        DocumentBlockParam,
        ImageBlockParam,
        RedactedThinkingBlockParam,
        TextBlockParam,
        ThinkingBlockParam,
        ToolParam,
        ToolResultBlockParam,
        ToolUseBlockParam,
        message_count_tokens_params,
        message_create_params,
    )

    sdk_blocks = {
        "text": TextBlockParam,
        "image": ImageBlockParam,
        "document": DocumentBlockParam,
        "tool_use": ToolUseBlockParam,
        "tool_result": ToolResultBlockParam,
        "thinking": ThinkingBlockParam,
        "redacted_thinking": RedactedThinkingBlockParam,
    }
    for kind, typed in sdk_blocks.items():
        assert BLOCK_KEYS[kind] == set(typed.__annotations__), kind
    assert set(ToolParam.__annotations__) == CUSTOM_TOOL_KEYS
    create = set(message_create_params.MessageCreateParamsNonStreaming.__annotations__)
    sent_as_headers = {"user_profile_id", "workspace_id"}
    legacy_sampling = {"temperature", "top_p", "top_k"}
    assert (create - sent_as_headers) | legacy_sampling == MESSAGES_KEYS
    counting = set(message_count_tokens_params.MessageCountTokensParams.__annotations__)
    assert counting - sent_as_headers - {"output_format"} == COUNT_TOKENS_KEYS


# --------------------------------------------------------------------------- model rules

# feature -> (a request that uses it, the message when the model refuses it)
FEATURES: dict[str, tuple[dict[str, Any], str]] = {
    "prefill": (body(messages=prefilled()), PREFILL_REFUSED),
    "enabled thinking": (
        body(max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 1024}),
        ADAPTIVE_ONLY.format("enabled"),
    ),
    "disabled thinking": (body(thinking={"type": "disabled"}), ADAPTIVE_ONLY.format("disabled")),
    "adaptive thinking": (body(thinking={"type": "adaptive"}), NO_ADAPTIVE),
    "effort": (body(output_config={"effort": "max"}), NO_EFFORT),
    "xhigh effort": (body(output_config={"effort": "xhigh"}), NO_XHIGH),
    "temperature": (body(temperature=0.5), "`temperature` is deprecated for this model."),
    "top_p": (body(top_p=0.9), "`top_p` is deprecated for this model."),
    "top_k": (body(top_k=40), "`top_k` is deprecated for this model."),
    "system message": (
        body(messages=[USER, {"role": "system", "content": "Be brief."}]),
        "messages.1.role: Input should be 'user' or 'assistant'",
    ),
}
BEFORE_4_6 = frozenset({"adaptive thinking", "effort", "xhigh effort", "system message"})
OPUS_4_5 = frozenset({"adaptive thinking", "xhigh effort", "system message"})
FROM_4_6 = frozenset({"prefill", "xhigh effort", "system message"})
ADAPTIVE_ONLY_MODELS = frozenset(
    {"prefill", "enabled thinking", "disabled thinking", "temperature", "top_p", "top_k"}
)
OPUS_4_7 = ADAPTIVE_ONLY_MODELS | {"system message"}  # they came with Opus 4.8
# model -> the features it refuses; (future) marks ids no model has yet.
MODEL_RULES: dict[str, frozenset[str]] = {
    "claude-haiku-4-5": BEFORE_4_6,
    "claude-haiku-4-5-20251001": BEFORE_4_6,
    "claude-sonnet-4-5-20250929": BEFORE_4_6,
    "claude-sonnet-4-20250514": BEFORE_4_6,
    "claude-opus-4-1": BEFORE_4_6,
    "claude-opus-4-5": OPUS_4_5,
    "claude-opus-4-5-20251101": OPUS_4_5,
    "claude-opus-4-6": FROM_4_6,
    "claude-sonnet-4-6": FROM_4_6,
    "claude-sonnet-4-6-20260217": FROM_4_6,
    "claude-haiku-4-6": FROM_4_6,  # (future)
    "claude-sonnet-4-7": FROM_4_6,  # (future) only Opus went adaptive-only in 4.x
    "claude-opus-4-7": OPUS_4_7,
    "claude-opus-4-7-20260416": OPUS_4_7,
    "claude-opus-4-8": ADAPTIVE_ONLY_MODELS,
    "claude-opus-4-9": ADAPTIVE_ONLY_MODELS,  # (future)
    "claude-sonnet-5": ADAPTIVE_ONLY_MODELS,
    "claude-opus-5": ADAPTIVE_ONLY_MODELS,
    "claude-opus-5-20260930": ADAPTIVE_ONLY_MODELS,
    "claude-sonnet-5-1": ADAPTIVE_ONLY_MODELS,  # (future)
    "claude-haiku-5": ADAPTIVE_ONLY_MODELS,  # (future)
    "claude-opus-6": ADAPTIVE_ONLY_MODELS,  # (future)
    "claude-3-7-sonnet-latest": frozenset(),  # old-style ids: nothing model-specific
    "claude-3-5-haiku-20241022": frozenset(),
    "claude-next": frozenset(),
    "claude-opus-4-6-preview": frozenset(),  # a suffix the table cannot read
}


@pytest.mark.parametrize(
    ("model", "feature"),
    [(m, f) for m in MODEL_RULES for f in FEATURES],
    ids=[f"{m}-{f.replace(' ', '_')}" for m in MODEL_RULES for f in FEATURES],
)
def test_model_rules_follow_the_family_and_version(model: str, feature: str) -> None:
    request, message = FEATURES[feature]
    refused = MODEL_RULES[model]
    if feature == "xhigh effort" and "effort" in refused:
        message = NO_EFFORT  # no effort at all: the value is never looked at
    request = {**request, "model": model}
    if feature not in refused:
        validate_messages_request(request, api_version=OLD)
        return
    with pytest.raises(SimulatorInvalidRequest) as info:
        validate_messages_request(request, api_version=OLD)
    assert str(info.value) == message
    assert info.value.status == 400 and info.value.type == "invalid_request_error"


def test_count_tokens_holds_requests_to_their_shape_only() -> None:
    """Whether count_tokens applies model rules and the schema subset is undocumented, so
    the simulator accepts there what only those rules would refuse."""
    validate_count_tokens_request(
        {
            "model": "claude-opus-4-7",
            "messages": prefilled(),
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "output_config": {
                "effort": "xhigh",
                "format": {"type": "json_schema", "schema": {"type": "object"}},
            },
            "tools": [{**WEATHER, "strict": True}],
        },
        api_version=NEW,
    )


def test_sdk_transformed_schemas_are_accepted_and_answered_with_valid_values() -> None:
    """The SDK's own ``transform_schema`` output passes the subset check, and the simulated
    structured output validates back into the pydantic type (as ``messages.parse`` does)."""
    import datetime
    import enum
    import uuid
    from typing import Literal

    import pydantic
    from anthropic.lib._parse._transform import transform_schema

    class Colour(enum.Enum):
        RED = "red"
        BLUE = "blue"

    class Address(pydantic.BaseModel):
        street: str
        postcode: str | None = None

    class Person(pydantic.BaseModel):
        """A person."""

        name: str = pydantic.Field(description="Full name", min_length=1)
        age: int = pydantic.Field(ge=0, le=150)
        born: datetime.date
        seen: datetime.datetime
        waited: datetime.timedelta
        id: uuid.UUID
        role: Literal["admin", "user"]
        colour: Colour
        home: Address
        previous: list[Address] = pydantic.Field(min_length=1)
        score: float | None
        extra: dict[str, str] = {}
        nick: str = pydantic.Field(default="x", pattern=r"^[a-z]+$")

    for typed in (Person, list[Person], Address | Colour):
        schema = transform_schema(pydantic.TypeAdapter(typed).json_schema())
        request = json_output(schema, model="claude-opus-5", max_tokens=4096)
        validate_messages_request(request, api_version=NEW)
        reply = json.loads(reply_for(request).blocks[0].text)
        pydantic.TypeAdapter(typed).validate_python(reply)


# --------------------------------------------------------------------------- latency


@pytest.mark.parametrize(
    ("n", "ttft_ms", "tokens_per_s", "expected"),
    [
        (0, 100, 10, []),
        (1, 0, 0, [0.0]),
        (3, 100, 0, [0.1, 0.1, 0.1]),
        (4, 250, 20, [0.25, 0.25 + 1 / 20, 0.25 + 2 / 20, 0.25 + 3 / 20]),
        (3, 0, 1000, [0.0, 0.001, 0.002]),
    ],
)
def test_schedule_without_jitter_is_ttft_then_one_token_per_interval(
    n: int, ttft_ms: float, tokens_per_s: float, expected: list[float]
) -> None:
    config = SimulatorConfig(ttft_ms=ttft_ms, tokens_per_s=tokens_per_s)
    rng = random.Random(1)
    state = rng.getstate()
    assert schedule(n, config, rng) == expected
    assert rng.getstate() == state  # no jitter, no draws


def test_schedule_jitter_is_seeded_and_bounded() -> None:
    config = SimulatorConfig(ttft_ms=200, tokens_per_s=50, jitter=0.25)
    offsets = schedule(50, config, random.Random(7))
    assert offsets == schedule(50, config, random.Random(7))
    assert offsets != schedule(50, config, random.Random(8))
    assert 0.2 * 0.75 <= offsets[0] <= 0.2 * 1.25
    steps = [b - a for a, b in itertools.pairwise(offsets)]
    assert all(0.02 * 0.75 <= s <= 0.02 * 1.25 for s in steps)
    assert len(set(steps)) > 1


def test_non_streamed_reply_waits_for_its_last_token() -> None:
    config = SimulatorConfig(ttft_ms=300)
    assert reply_delay([0.3, 0.4, 0.5], config) == 0.5
    assert reply_delay([], config) == 0.3


# --------------------------------------------------------------------------- faults


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("", Faults()),
        ("status=429,retry_after=7", Faults(status=429, retry_after=7)),
        (" status = 529 , retry_after=0.5 ", Faults(status=529, retry_after=0.5)),
        ("ttft_ms=150,tokens_per_s=40,tokens=3", Faults(ttft_ms=150, tokens_per_s=40, tokens=3)),
        ("hang=1", Faults(hang=True)),
        ("stream_error_after=0", Faults(stream_error_after=0)),
        ("stream_error_first=true", Faults(stream_error_first=True)),
    ],
)
def test_fault_directive_parses(spec: str, expected: Faults) -> None:
    assert parse_faults(spec) == expected
    assert parse_faults(expected.describe()) == expected


@pytest.mark.parametrize(
    "spec", ["status=abc", "status=700", "colour=red", "hang", "tokens=-1", "ttft_ms=nan"]
)
def test_bad_fault_directive_is_a_400_naming_the_source(spec: str) -> None:
    with pytest.raises(SimulatorInvalidRequest, match=r"^x-sim-fault: "):
        parse_faults(spec)


def test_embedded_directive_in_last_user_message_overrides_and_is_stripped() -> None:
    request = body(
        messages=[
            {"role": "user", "content": "old [[sim:status=500]]"},
            {"role": "assistant", "content": "ok"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "go [[sim:status=429]] now"},
                    {"type": "text", "text": "[[sim:retry_after=2,status=529]]"},
                ],
            },
        ]
    )
    assert embedded_faults(request) == Faults(status=529, retry_after=2)
    assert strip_directives("go [[sim:status=429]] now") == "go  now"
    header = parse_faults("status=500,tokens=3")
    assert header.merged(embedded_faults(request)) == Faults(status=529, retry_after=2, tokens=3)


def test_configured_fault_rates_are_seeded_draws() -> None:
    config = SimulatorConfig(rate_429=0.2, rate_529=0.1, error_rate=0.1, seed=3)
    rng = random.Random(3)
    draws = [draw_status(config, rng) for _ in range(10_000)]
    rng = random.Random(3)
    assert draws == [draw_status(config, rng) for _ in range(10_000)]
    assert 1800 < draws.count(429) < 2200
    assert 850 < draws.count(529) < 1150
    assert 850 < draws.count(500) < 1150
    rng = random.Random(3)
    assert draw_status(SimulatorConfig(), rng) is None
    assert rng.random() == random.Random(3).random()  # no rates, no draw


# --------------------------------------------------------------------------- replies


def reply_for(request: dict[str, Any], reply_tokens: int = 24, seed: int = 0) -> Reply:
    validate_messages_request(request, api_version=OLD)
    prompt = analyse_prompt(request, seed=seed)
    return build_reply(
        request,
        digest=prompt.digest,
        input_usage=InputUsage(prompt.input_tokens),
        reply_tokens=reply_tokens,
    )


def test_text_reply_echoes_the_last_user_text_without_directives() -> None:
    reply = reply_for(
        body(messages=msgs("What is the capital of France, please? [[sim:tokens=9]]")),
        reply_tokens=9,
    )
    text = reply.blocks[0].text
    assert text.startswith("Simulated reply to 'What is the capital of France,':")
    assert "sim:" not in text
    assert (reply.stop_reason, reply.output_tokens, len(reply.blocks[0].pieces)) == (
        "end_turn",
        9,
        9,
    )


def test_reply_is_a_function_of_request_and_seed() -> None:
    request = body(messages=msgs("hello"))
    assert reply_for(request).blocks == reply_for(copy.deepcopy(request)).blocks
    assert reply_for(request).blocks == reply_for({**request, "stream": True}).blocks
    assert reply_for(request).blocks != reply_for(request, seed=1).blocks
    assert reply_for(request).blocks != reply_for(body(messages=msgs("hello!"))).blocks


@pytest.mark.parametrize(
    ("max_tokens", "reply_tokens", "stop_reason", "output_tokens"),
    [
        (64, 24, "end_turn", 24),
        (10, 24, "max_tokens", 10),
        (24, 24, "end_turn", 24),
        (0, 24, "max_tokens", 0),
        (64, 0, "end_turn", 1),
    ],
)
def test_reply_length_is_capped_by_max_tokens(
    max_tokens: int, reply_tokens: int, stop_reason: str, output_tokens: int
) -> None:
    reply = reply_for(body(max_tokens=max_tokens), reply_tokens=reply_tokens)
    assert (reply.stop_reason, reply.output_tokens) == (stop_reason, output_tokens)
    assert reply.token_pieces == min(max_tokens, reply_tokens)


def test_stop_sequence_cuts_the_text_before_it() -> None:
    reply = reply_for(body(stop_sequences=["zzz", "to 'h"]))
    assert reply.blocks[0].text == "Simulated reply "
    assert (reply.stop_reason, reply.stop_sequence) == ("stop_sequence", "to 'h")
    assert reply.output_tokens == 3  # "Simulated", " reply", " " (part of " to")
    earliest = reply_for(body(stop_sequences=["reply", "Sim"]))
    assert earliest.blocks == () and earliest.stop_sequence == "Sim"
    capped = reply_for(body(max_tokens=1, stop_sequences=["to"]))
    assert (capped.stop_reason, capped.stop_sequence) == ("max_tokens", None)


ASKS_FOR_BOTH = [{"role": "user", "content": "The weather, and the time, please."}]
ASKS_FOR_WEATHER = [{"role": "user", "content": "Is the weather nice in Paris?"}]


def test_tool_calls_follow_tool_choice() -> None:
    def tool_names(**changes: Any) -> list[str]:
        reply = reply_for(body(tools=[WEATHER, TIME], messages=ASKS_FOR_BOTH, **changes))
        assert reply.stop_reason == "tool_use"
        uses = [b for b in reply.blocks if b.type == "tool_use"]
        assert all(b.id.startswith("toolu_01") and len(b.id) == 30 for b in uses)
        assert len({b.id for b in uses}) == len(uses)
        return [b.name for b in uses]

    assert tool_names() == ["get_weather", "get_time"]
    assert tool_names(tool_choice={"type": "any"}) == ["get_weather", "get_time"]
    assert tool_names(tool_choice={"type": "auto", "disable_parallel_tool_use": True}) == [
        "get_weather"
    ]
    assert tool_names(tool_choice={"type": "tool", "name": "get_time"}) == ["get_time"]
    auto = reply_for(body(tools=[WEATHER], messages=ASKS_FOR_WEATHER))
    assert [b.type for b in auto.blocks] == ["text", "tool_use"]
    assert auto.blocks[1].input == {"city": "city value"}
    forced = reply_for(body(tools=[WEATHER], tool_choice={"type": "any"}))
    assert [b.type for b in forced.blocks] == ["tool_use"]


def test_under_auto_only_the_tools_the_user_asks_for_are_called() -> None:
    """A model handed a toolbox and a greeting answers the greeting (an agent harness such
    as Claude Code offers a dozen tools on every turn); asked about the weather, it calls
    the weather tool, whatever the harness wrote around the question."""
    greeting = reply_for(body(tools=[WEATHER, TIME]))
    assert (greeting.stop_reason, [b.type for b in greeting.blocks]) == ("end_turn", ["text"])
    reminder = "<system-reminder>Tools you can use: get_weather, get_time.</system-reminder>"
    wrapped = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": reminder},
                {"type": "text", "text": "What is the time in Lima?"},
            ],
        }
    ]
    names = [
        b.name
        for b in reply_for(body(tools=[WEATHER, TIME], messages=wrapped)).blocks
        if b.type == "tool_use"
    ]
    assert names == ["get_time"]
    camel = {**TIME, "name": "ListAgents"}
    asked = reply_for(
        body(tools=[camel], messages=[{"role": "user", "content": "list the agents"}])
    )
    assert [b.name for b in asked.blocks if b.type == "tool_use"] == ["ListAgents"]


def test_a_deferred_tool_is_never_called_until_it_is_loaded() -> None:
    deferred = {**WEATHER, "defer_loading": True}
    reply = reply_for(
        body(tools=[deferred], tool_choice={"type": "any"}, messages=ASKS_FOR_WEATHER)
    )
    assert [b.type for b in reply.blocks] == ["text"]


def test_no_tool_call_when_choice_is_none_or_results_are_in() -> None:
    none = reply_for(body(tools=[WEATHER], tool_choice={"type": "none"}))
    assert (none.stop_reason, [b.type for b in none.blocks]) == ("end_turn", ["text"])
    after = reply_for(body(tools=[WEATHER], messages=roundtrip(tool_result(content="18C sunny"))))
    assert after.stop_reason == "end_turn"
    assert after.blocks[0].text.startswith("Simulated reply using 1 tool result(s): '18C sunny':")
    image_only = reply_for(
        body(
            tools=[WEATHER],
            messages=roundtrip(tool_result(content=[{"type": "image", "source": PNG}])),
        )
    )
    assert image_only.blocks[0].text.startswith("Simulated reply using 1 tool result(s): '(no")


def test_thinking_block_comes_first_with_a_signature() -> None:
    reply = reply_for(body(max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 1024}))
    thinking, text = reply.blocks
    assert text.type == "text"
    assert thinking.type == "thinking" and thinking.text.startswith("Simulated reasoning")
    assert len(thinking.signature) > 40
    assert reply.output_tokens == 16 + 24


def test_structured_output_is_json_valid_for_the_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "answer": {"type": "string"},
            "score": {"anyOf": [{"type": "null"}, {"type": "integer"}]},
        },
        "required": ["answer", "score"],
        "additionalProperties": False,
    }
    reply = reply_for(
        body(max_tokens=500, output_config={"format": {"type": "json_schema", "schema": schema}})
    )
    assert json.loads(reply.blocks[0].text) == {"answer": "answer value", "score": 42}


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "string"}, "value value"),
        ({"type": "string", "format": "date"}, "2026-01-01"),
        ({"type": "string", "format": "duration"}, "P1D"),
        ({"type": "string", "minLength": 20}, "value valuexxxxxxxxx"),
        ({"type": "string", "maxLength": 3}, "val"),
        ({"type": "integer"}, 42),
        ({"type": "integer", "minimum": 100}, 100),
        ({"type": "integer", "exclusiveMaximum": 5}, 4),
        ({"type": "number", "minimum": 0, "maximum": 1}, 0.5),
        ({"type": "number"}, 4.2),
        ({"type": "string", "pattern": r"^SKU-\d{5}$"}, "SKU-00000"),
        ({"type": "string", "pattern": r"^(EUR|USD) [1-9][0-9]*(\.\d{2})?$"}, "EUR 1"),
        ({"type": "string", "pattern": r"^[^@\s]+@[^@\s]+\.[a-z]{2,}$"}, "a@a.aa"),
        ({"type": "string", "pattern": "value"}, "value value"),  # already matches
        ({"type": "string", "pattern": r"^\p{L}+$"}, "value value"),  # beyond it: unchanged
        ({"type": "boolean"}, True),
        ({"type": "null"}, None),
        ({"type": ["null", "integer"]}, 42),
        ({"enum": ["b", "a"]}, "b"),
        ({"const": 7}, 7),
        ({"type": "string", "default": "d"}, "d"),
        ({"anyOf": [{"type": "null"}, {"type": "boolean"}]}, True),
        ({"type": "array", "items": {"type": "integer"}, "minItems": 2}, [42, 42]),
        (
            {
                "type": "array",
                "prefixItems": [{"type": "string"}, {"type": "boolean"}],
                "items": False,
            },
            ["value value", True],
        ),
        (
            {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}},
            {"a": 42, "b": "b value"},
        ),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
                "required": ["b"],
            },
            {"b": "b value"},
        ),
        (
            {
                "type": "object",
                "properties": {"p": {"$ref": "#/$defs/P"}},
                "$defs": {"P": {"type": "object", "properties": {"x": {"type": "number"}}}},
            },
            {"p": {"x": 4.2}},
        ),
        (
            {
                "allOf": [
                    {"type": "object", "properties": {"a": {"type": "boolean"}}},
                    {"properties": {"b": {"type": "integer"}}},
                ]
            },
            {"a": True, "b": 42},
        ),
        (  # closed parts: only the properties every closed part lists
            {
                "allOf": [
                    closed(a={"type": "boolean"}, b={"type": "integer"}),
                    closed(b={"type": "integer"}, c={"type": "string"}),
                ]
            },
            {"b": 42},
        ),
        (
            {"type": "object", "properties": {"self": {"$ref": "#"}}},
            {"self": {"self": {"self": {"self": {"self": {"self": {"self": {"self": {}}}}}}}}},
        ),
    ],
)
def test_example_value_is_valid_for_its_schema(schema: dict[str, Any], expected: Any) -> None:
    assert example_value(schema) == expected


# --------------------------------------------------------------------------- streams


def parse_sse(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for chunk in data.decode().split("\n\n"):
        if not chunk:
            continue
        name_line, data_line = chunk.split("\n")
        assert name_line.startswith("event: ") and data_line.startswith("data: ")
        payload = json.loads(data_line.removeprefix("data: "))
        assert payload["type"] == name_line.removeprefix("event: ")
        events.append((payload["type"], payload))
    return events


def reassemble(events: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """A minimal accumulator: what a client rebuilds from the events."""
    message: dict[str, Any] = {}
    partial_json: dict[int, str] = {}
    for kind, event in events:
        if kind == "message_start":
            message = event["message"]
        elif kind == "content_block_start":
            message["content"].append(dict(event["content_block"]))
        elif kind == "content_block_delta":
            block, delta = message["content"][event["index"]], event["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] = delta["signature"]
            else:
                partial_json[event["index"]] = (
                    partial_json.get(event["index"], "") + delta["partial_json"]
                )
        elif kind == "content_block_stop" and event["index"] in partial_json:
            message["content"][event["index"]]["input"] = json.loads(partial_json[event["index"]])
        elif kind == "message_delta":
            message.update(event["delta"])
            message["usage"].update(event["usage"])
    return message


@pytest.mark.parametrize(
    "request_body",
    [
        body(),
        body(max_tokens=5),
        body(stop_sequences=["dolor"]),
        body(
            tools=[WEATHER, TIME],
            max_tokens=2048,
            thinking={"type": "enabled", "budget_tokens": 1024},
        ),
        body(output_config={"format": {"type": "json_schema", "schema": CLOSED_WEATHER}}),
    ],
    ids=["text", "capped", "stop sequence", "thinking and tools", "json"],
)
def test_stream_reassembles_to_the_message(request_body: dict[str, Any]) -> None:
    reply = reply_for(request_body)
    events = render_stream(reply, "msg_1")
    parsed = parse_sse(b"".join(e.data for e in events))
    kinds = [k for k, _ in parsed]
    assert kinds[:2] == ["message_start", "ping"] and kinds[-2:] == [
        "message_delta",
        "message_stop",
    ]
    assert parsed[0][1]["message"]["usage"]["output_tokens"] == 1
    assert reassemble(parsed) == reply.message_json("msg_1")
    assert sum(e.token for e in events) == reply.token_pieces
    for kind, event in parsed:
        if kind == "content_block_delta" and event["delta"]["type"] == "input_json_delta":
            assert event["delta"]["partial_json"] == ""  # the first piece is empty
            break


# --------------------------------------------------------------------------- prompt cache


def test_cached_prefix_is_written_once_then_read_until_it_expires() -> None:
    cached = body(
        system=[
            {"type": "text", "text": "You are terse. " * 50, "cache_control": {"type": "ephemeral"}}
        ]
    )
    prompt = analyse_prompt(cached, seed=0)
    assert prompt.cache_point is not None
    prefix = prompt.cache_point.tokens
    assert 0 < prefix < prompt.input_tokens
    cache = PromptCache(8)
    first = cache.usage(prompt, now=0)
    assert first == InputUsage(
        prompt.input_tokens - prefix,
        cache_creation_input_tokens=prefix,
        ephemeral_5m_input_tokens=prefix,
    )
    again = cache.usage(analyse_prompt({**cached, "messages": msgs("other")}, seed=0), now=299)
    assert again.cache_read_input_tokens == prefix and again.cache_creation_input_tokens == 0
    assert cache.usage(prompt, now=299 + 300).cache_creation_input_tokens == prefix  # expired


def test_cache_is_lru_bounded_and_keyed_by_model_and_ttl_aware() -> None:
    def cached(text: str, **changes: Any) -> Any:
        return analyse_prompt(
            body(
                system=[
                    {
                        "type": "text",
                        "text": text,
                        "cache_control": {"type": "ephemeral", "ttl": "1h"},
                    }
                ],
                **changes,
            ),
            seed=0,
        )

    cache = PromptCache(1)
    assert cache.usage(cached("a"), now=0).ephemeral_1h_input_tokens > 0
    assert cache.usage(cached("a"), now=3000).cache_read_input_tokens > 0
    assert cache.usage(cached("a", model="claude-opus-5"), now=1).cache_read_input_tokens == 0
    assert cache.usage(cached("a"), now=2).cache_read_input_tokens == 0  # evicted
    assert len(cache) == 1


def test_no_cache_control_means_no_cache_tokens() -> None:
    prompt = analyse_prompt(body(), seed=0)
    assert prompt.cache_point is None
    assert PromptCache(8).usage(prompt, now=0) == InputUsage(prompt.input_tokens)
    automatic = analyse_prompt(body(cache_control={"type": "ephemeral"}), seed=0)
    assert automatic.cache_point is not None


def test_input_tokens_ignore_key_order_and_parameters() -> None:
    a = analyse_prompt(body(), seed=0)
    b = analyse_prompt(dict(reversed(list(body(max_tokens=9, stream=True).items()))), seed=0)
    assert a.input_tokens == b.input_tokens
    assert a.digest != b.digest  # max_tokens changes the reply
    assert a.digest == analyse_prompt({**body(), "stream": True}, seed=0).digest


def test_a_json_only_prompt_that_spells_out_a_schema_gets_an_example_of_it() -> None:
    """JSON-mode clients (instructor, pydantic-ai's prompted output) put the schema in the
    prompt and validate the reply against it, as a model would follow it."""
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    }
    system = f"Answer in JSON matching this json_schema:\n\n{json.dumps(schema, indent=2)}\n"
    reply = reply_for(body(system=system, messages=msgs("Invent someone")), reply_tokens=500)
    assert json.loads(reply.blocks[0].text) == {"name": "name value", "age": 42}
    # No schema in sight (or only JSON that is no schema): a JSON object all the same.
    plain = reply_for(body(system='Reply only in JSON, like {"a": 1}.', messages=msgs("hi")))
    assert set(json.loads(plain.blocks[0].text)) == {"reply"}
