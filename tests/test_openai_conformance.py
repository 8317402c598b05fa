"""The proxy's OpenAI surface, as the official ``openai`` SDK sees it (issue 3's acceptance).

Every test runs the real proxy under hypercorn on loopback in front of the simulated
upstream and talks to it with ``AsyncOpenAI(_strict_response_validation=True,
max_retries=0)``: a field the SDK's models do not allow, or a missing one, fails the test.
The simulator derives reply content from the request alone, so a streamed and a non-streamed
request for the same body get the same upstream reply and can be compared field by field.
Timing-sensitive relay checks (no buffering) live in ``test_stream_relay.py``.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from typing import Any

import httpx2
import openai
import pytest
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionMessageFunctionToolCall,
)
from support import openai_client, proxy_and_simulator

MODEL = "claude-sonnet-4-5"

# The SDK's AsyncStream stops reading at ``[DONE]`` (or at an error) without closing its
# SSE-decoding async generators; under trio, collecting them mid-run warns. That is the
# SDK's business, not the proxy's: tests that stream through the SDK ignore exactly these
# three generator names (the connection pool's iterator under them is closed with the
# response, tests/closing_streams.py). Any still alive when the test's trio run ends are
# closed quietly by trio, so the warning cannot surface in a later test.
SDK_STREAM_LEFTOVERS = pytest.mark.filterwarnings(
    "ignore:Async generator '("
    r"openai\._streaming\.AsyncStream\._iter_events"
    r"|openai\._streaming\.SSEDecoder\.aiter_bytes"
    r"|httpx2\._models\.Response\.aiter_bytes"
    ")':ResourceWarning"
)


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def _tool(name: str, properties: dict[str, Any], description: str) -> dict[str, Any]:
    """A strict function tool (the SDK's stream helper only accepts strict tools)."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": sorted(properties),
                "additionalProperties": False,
            },
            "strict": True,
        },
    }


WEATHER = _tool(
    "get_weather",
    {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "Current weather in a city.",
)
TIME = _tool(
    "get_time",
    {"timezone": {"type": "string"}, "hour24": {"type": "boolean"}, "offset": {"type": "integer"}},
    "Current time in a time zone.",
)
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, TIME)}
_JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "boolean": bool,
    "integer": int,
    "number": (int, float),
    "object": dict,
    "array": list,
}


def _assert_arguments_match_schema(name: str, arguments: str) -> dict[str, Any]:
    """``arguments`` is a JSON object valid for the flat schema of tool ``name``."""
    value = json.loads(arguments)
    schema = SCHEMAS[name]
    assert isinstance(value, dict)
    assert set(value) == set(schema["required"])
    for key, item in value.items():
        spec = schema["properties"][key]
        assert isinstance(item, _JSON_TYPES[spec["type"]]), (key, item)
        if spec["type"] == "integer":
            assert not isinstance(item, bool)
        if "enum" in spec:
            assert item in spec["enum"]
    return value


def _png() -> bytes:
    """A valid 1×1 RGB PNG, built from its chunks."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x80\x00")  # filter byte + one orange pixel
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


async def _requests_total(sim: Any) -> int:
    total: int = (await sim.stats())["requests_total"]
    return total


# -- plain completions ----------------------------------------------------------------------


async def test_text_completion_validates_strictly_and_reports_the_upstream_usage() -> None:
    async with proxy_and_simulator() as (url, sim):
        completion = await openai_client(url).chat.completions.create(
            model=MODEL, messages=_user("Describe the harbour at dawn")
        )
        assert completion.object == "chat.completion"
        assert completion.id.startswith("chatcmpl-")
        assert completion.model == MODEL
        assert len(completion.choices) == 1
        choice = completion.choices[0]
        assert choice.index == 0
        assert choice.finish_reason == "stop"
        assert choice.message.role == "assistant"
        assert choice.message.tool_calls is None
        assert choice.message.content is not None
        assert choice.message.content.startswith(
            "Simulated reply to 'Describe the harbour at dawn'"
        )
        trace = (await sim.stats())["recent"][-1]
        assert completion.usage is not None
        assert completion.usage.completion_tokens == trace["output_tokens"]
        assert completion.usage.total_tokens == (
            completion.usage.prompt_tokens + completion.usage.completion_tokens
        )


async def test_system_and_developer_messages_all_reach_the_upstream_system_prompt() -> None:
    # The simulator counts one input token per four characters of tools + system +
    # messages and refuses a "system" role inside messages: a 200 with about 200 more prompt
    # tokens shows both instructions were moved to the top-level system prompt.
    rules = "Answer in the style of a ship's log, terse and factual. " * 7  # ~400 chars
    async with proxy_and_simulator() as (url, _sim):
        client = openai_client(url)
        bare = await client.chat.completions.create(model=MODEL, messages=_user("Status report"))
        instructed = await client.chat.completions.create(
            model=MODEL,
            messages=[
                {"role": "system", "content": rules},
                {"role": "user", "content": "Status report"},
                {"role": "developer", "content": [{"type": "text", "text": rules}]},
            ],
        )
        assert bare.usage is not None and instructed.usage is not None
        extra = instructed.usage.prompt_tokens - bare.usage.prompt_tokens
        assert 2 * len(rules) // 4 - 10 <= extra <= 2 * len(rules) // 4 + 20
        assert instructed.choices[0].finish_reason == "stop"


async def test_stop_sequence_ends_the_reply_just_before_it() -> None:
    async with proxy_and_simulator() as (url, _sim):
        client = openai_client(url)
        messages = _user("Tell me about zebras please")
        natural = await client.chat.completions.create(model=MODEL, messages=messages)
        stopped = await client.chat.completions.create(
            model=MODEL, messages=messages, stop=["never-said", "zebras"]
        )
        text = natural.choices[0].message.content
        assert text is not None and "zebras" in text
        assert stopped.choices[0].finish_reason == "stop"
        assert stopped.choices[0].message.content == text[: text.index("zebras")]
        assert stopped.usage is not None and natural.usage is not None
        assert stopped.usage.completion_tokens < natural.usage.completion_tokens


@pytest.mark.parametrize("key", ["max_tokens", "max_completion_tokens"])
async def test_small_token_limit_is_finish_reason_length(key: str) -> None:
    async with proxy_and_simulator() as (url, _sim):
        client = openai_client(url)
        messages = _user("Write a long saga about the sea")
        natural = await client.chat.completions.create(model=MODEL, messages=messages)
        limited = await client.chat.completions.create(model=MODEL, messages=messages, **{key: 3})
        assert limited.choices[0].finish_reason == "length"
        assert limited.usage is not None and limited.usage.completion_tokens == 3
        full = natural.choices[0].message.content
        assert full is not None
        assert limited.choices[0].message.content == " ".join(full.split(" ")[:3])


# -- tools ----------------------------------------------------------------------------------


async def test_tool_call_reply_has_null_content_and_arguments_valid_for_the_schema() -> None:
    async with proxy_and_simulator() as (url, _sim):
        completion = await openai_client(url).chat.completions.create(
            model=MODEL,
            messages=_user("What is the weather in Oslo?"),
            tools=[WEATHER],
            tool_choice="required",
        )
        choice = completion.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content is None
        assert choice.message.tool_calls is not None and len(choice.message.tool_calls) == 1
        call = choice.message.tool_calls[0]
        assert call.type == "function"
        assert call.id
        assert call.function.name == "get_weather"
        _assert_arguments_match_schema("get_weather", call.function.arguments)


async def test_two_offered_tools_give_two_parallel_calls_with_distinct_ids_in_order() -> None:
    async with proxy_and_simulator() as (url, _sim):
        completion = await openai_client(url).chat.completions.create(
            model=MODEL,
            messages=_user("Weather and time in Oslo?"),
            tools=[WEATHER, TIME],
            tool_choice="required",
        )
        choice = completion.choices[0]
        assert choice.finish_reason == "tool_calls"
        calls = choice.message.tool_calls
        assert calls is not None
        assert [c.function.name for c in calls] == ["get_weather", "get_time"]
        assert len({c.id for c in calls}) == 2
        for call in calls:
            _assert_arguments_match_schema(call.function.name, call.function.arguments)


async def test_parallel_tool_calls_false_gives_a_single_call() -> None:
    async with proxy_and_simulator() as (url, _sim):
        completion = await openai_client(url).chat.completions.create(
            model=MODEL,
            messages=_user("Weather and time in Oslo?"),
            tools=[WEATHER, TIME],
            tool_choice="required",
            parallel_tool_calls=False,
        )
        calls = completion.choices[0].message.tool_calls
        assert calls is not None and [c.function.name for c in calls] == ["get_weather"]
        assert completion.choices[0].finish_reason == "tool_calls"


async def test_named_tool_choice_calls_exactly_that_tool() -> None:
    async with proxy_and_simulator() as (url, _sim):
        completion = await openai_client(url).chat.completions.create(
            model=MODEL,
            messages=_user("Weather and time in Oslo?"),
            tools=[WEATHER, TIME],
            tool_choice={"type": "function", "function": {"name": "get_time"}},
        )
        choice = completion.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content is None
        calls = choice.message.tool_calls
        assert calls is not None and [c.function.name for c in calls] == ["get_time"]
        _assert_arguments_match_schema("get_time", calls[0].function.arguments)


async def test_tool_results_round_trip_to_a_text_answer_that_uses_them() -> None:
    async with proxy_and_simulator() as (url, sim):
        client = openai_client(url)
        messages: list[dict[str, Any]] = _user("Weather and time in Oslo?")
        first = await client.chat.completions.create(
            model=MODEL,
            messages=messages,
            tools=[WEATHER, TIME],
        )
        assert first.choices[0].finish_reason == "tool_calls"
        assistant = first.choices[0].message
        assert assistant.tool_calls is not None and len(assistant.tool_calls) == 2
        results = {"get_weather": "drizzle, 9 degrees", "get_time": "14:05 CET"}
        messages.append(assistant.model_dump(exclude_none=True))
        for call in assistant.tool_calls:
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": results[call.function.name]}
            )
        second = await client.chat.completions.create(
            model=MODEL,
            messages=messages,
            tools=[WEATHER, TIME],
        )
        choice = second.choices[0]
        assert choice.finish_reason == "stop"
        assert choice.message.tool_calls is None
        assert choice.message.content is not None
        assert choice.message.content.startswith(
            "Simulated reply using 2 tool result(s): 'drizzle, 9 degrees 14:05 CET':"
        )
        assert await _requests_total(sim) == 2


# -- images ---------------------------------------------------------------------------------


async def test_png_data_url_and_https_image_parts_are_accepted() -> None:
    png = base64.b64encode(_png()).decode()
    async with proxy_and_simulator() as (url, sim):
        completion = await openai_client(url).chat.completions.create(
            model=MODEL,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Compare these two pictures"},
                        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
                        {
                            "type": "image_url",
                            "image_url": {
                                "url": "https://images.example.com/harbour.jpg",
                                "detail": "high",
                            },
                        },
                    ],
                }
            ],
        )
        assert completion.choices[0].finish_reason == "stop"
        assert completion.choices[0].message.content is not None
        assert "Compare these two pictures" in completion.choices[0].message.content
        stats = await sim.stats()
        assert stats["requests_total"] == 1 and stats["by_status"] == {"200": 1}


async def test_unsupported_image_type_is_bad_request_naming_the_part_and_never_sent() -> None:
    bmp = base64.b64encode(b"BM" + bytes(60)).decode()
    async with proxy_and_simulator() as (url, sim):
        with pytest.raises(openai.BadRequestError) as info:
            await openai_client(url).chat.completions.create(
                model=MODEL,
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "What is this?"},
                            {
                                "type": "image_url",
                                "image_url": {"url": f"data:image/bmp;base64,{bmp}"},
                            },
                        ],
                    }
                ],
            )
        assert info.value.status_code == 400
        assert info.value.param == "messages[0].content[1].image_url.url"
        assert "image/bmp" in info.value.message
        assert await _requests_total(sim) == 0


# -- streaming ------------------------------------------------------------------------------


async def _chunks(client: openai.AsyncOpenAI, **request: Any) -> list[ChatCompletionChunk]:
    stream = await client.chat.completions.create(stream=True, **request)
    return [chunk async for chunk in stream]


@SDK_STREAM_LEFTOVERS
async def test_stream_sends_role_once_content_deltas_and_one_finish_reason() -> None:
    request: dict[str, Any] = {"model": MODEL, "messages": _user("Sing about the tides")}
    async with proxy_and_simulator() as (url, _sim):
        client = openai_client(url)
        whole = await client.chat.completions.create(**request)
        chunks = await _chunks(client, **request)
        assert {c.id for c in chunks} == {chunks[0].id}
        assert {(c.object, c.model, c.created) for c in chunks} == {
            ("chat.completion.chunk", MODEL, chunks[0].created)
        }
        assert all(len(c.choices) == 1 and c.usage is None for c in chunks)
        deltas = [c.choices[0].delta for c in chunks]
        assert [d.role for d in deltas] == ["assistant"] + [None] * (len(deltas) - 1)
        assert [c.choices[0].finish_reason for c in chunks] == [None] * (len(chunks) - 1) + ["stop"]
        pieces = [d.content or "" for d in deltas[1:-1]]
        # Deltas read together are one chunk (the simulator sends the reply at once).
        assert all(pieces) and 1 <= len(pieces) <= whole.usage.completion_tokens
        assert "".join(pieces) == whole.choices[0].message.content
        # On the wire: one data line per chunk the SDK yielded, then the [DONE] terminator.
        async with httpx2.AsyncClient() as http:
            raw = await http.post(f"{url}/v1/chat/completions", json={**request, "stream": True})
        events = raw.text.split("\n\n")
        assert events[-2:] == ["data: [DONE]", ""]
        assert len(events) == len(chunks) + 2
        assert all(e.startswith("data: {") for e in events[:-2])


@SDK_STREAM_LEFTOVERS
async def test_include_usage_adds_a_final_usage_chunk_equal_to_the_non_streamed_usage() -> None:
    request: dict[str, Any] = {"model": MODEL, "messages": _user("Count the gulls")}
    async with proxy_and_simulator() as (url, _sim):
        client = openai_client(url)
        whole = await client.chat.completions.create(**request)
        chunks = await _chunks(client, stream_options={"include_usage": True}, **request)
        *content, last = chunks
        assert last.choices == []
        assert last.usage is not None
        assert last.usage == whole.usage
        assert all(c.usage is None for c in content)
        assert content[-1].choices[0].finish_reason == "stop"


async def _stream_helper(client: openai.AsyncOpenAI, **request: Any) -> Any:
    async with client.chat.completions.stream(
        stream_options={"include_usage": True}, **request
    ) as stream:
        return await stream.get_final_completion()


def _message_view(completion: ChatCompletion) -> dict[str, Any]:
    """What must agree between streamed and non-streamed replies to the same request."""
    choice = completion.choices[0]
    calls = choice.message.tool_calls or []
    assert all(isinstance(c, ChatCompletionMessageFunctionToolCall) for c in calls)
    return {
        "role": choice.message.role,
        "content": choice.message.content,
        "tool_calls": [
            (c.id, c.type, c.function.name, json.loads(c.function.arguments))
            for c in calls
            if isinstance(c, ChatCompletionMessageFunctionToolCall)
        ],
        "finish_reason": choice.finish_reason,
        "usage": completion.usage,
    }


@SDK_STREAM_LEFTOVERS
async def test_stream_helper_accumulates_the_same_text_message_as_non_streamed() -> None:
    request: dict[str, Any] = {"model": MODEL, "messages": _user("Describe a lighthouse")}
    async with proxy_and_simulator() as (url, _sim):
        client = openai_client(url)
        whole = await client.chat.completions.create(**request)
        final = await _stream_helper(client, **request)
        assert _message_view(final) == _message_view(whole)
        assert whole.choices[0].message.content


@SDK_STREAM_LEFTOVERS
@pytest.mark.parametrize("tool_choice", ["auto", "required"])
async def test_stream_helper_accumulates_the_same_parallel_tool_calls_as_non_streamed(
    tool_choice: str,
) -> None:
    request: dict[str, Any] = {
        "model": MODEL,
        "messages": _user("Weather and time in Oslo?"),
        "tools": [WEATHER, TIME],
        "tool_choice": tool_choice,
    }
    async with proxy_and_simulator() as (url, _sim):
        client = openai_client(url)
        whole = await client.chat.completions.create(**request)
        final = await _stream_helper(client, **request)
    view = _message_view(whole)
    assert [name for _, _, name, _ in view["tool_calls"]] == ["get_weather", "get_time"]
    assert view["finish_reason"] == "tool_calls"
    assert (view["content"] is None) == (tool_choice == "required")
    for call in final.choices[0].message.tool_calls:
        assert call.function.parsed_arguments == json.loads(call.function.arguments)
    # With "required" the reply is tool calls only: OpenAI streams `content: null` then,
    # so the SDK accumulates None, exactly as the non-streamed message has.
    assert _message_view(final) == view


@SDK_STREAM_LEFTOVERS
async def test_streamed_tool_calls_carry_index_id_and_name_once_each() -> None:
    request: dict[str, Any] = {
        "model": MODEL,
        "messages": _user("Weather and time in Oslo?"),
        "tools": [WEATHER, TIME],
        "tool_choice": "required",
    }
    async with proxy_and_simulator() as (url, _sim):
        chunks = await _chunks(openai_client(url), **request)
        first = chunks[0].choices[0].delta
        assert (first.role, first.content) == ("assistant", None)  # as OpenAI: no text coming
        fragments = [call for c in chunks for call in (c.choices[0].delta.tool_calls or [])]
        firsts = [f for f in fragments if f.id is not None]
        assert [(f.index, f.type, f.function and f.function.name) for f in firsts] == [
            (0, "function", "get_weather"),
            (1, "function", "get_time"),
        ]
        assert all(f.function is None or f.function.name is None for f in fragments if f.id is None)
        indexes = [f.index for f in fragments]
        assert indexes == sorted(indexes)


# -- structured output ----------------------------------------------------------------------


@SDK_STREAM_LEFTOVERS
@pytest.mark.parametrize("stream", [False, True])
async def test_json_mode_and_json_schema_replies_parse_as_json(stream: bool) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
        "additionalProperties": False,
    }
    formats: list[Any] = [
        {"type": "json_object"},
        {"type": "json_schema", "json_schema": {"name": "trip", "schema": schema}},
    ]
    async with proxy_and_simulator() as (url, _sim):
        client = openai_client(url)
        for response_format in formats:
            kwargs: Any = {
                "model": MODEL,
                "messages": _user("Plan a trip, in JSON"),
                "response_format": response_format,
            }
            if stream:
                text = ""
                async for chunk in await client.chat.completions.create(**kwargs, stream=True):
                    text += (chunk.choices[0].delta.content or "") if chunk.choices else ""
            else:
                reply = await client.chat.completions.create(**kwargs)
                text = reply.choices[0].message.content or ""
            parsed = json.loads(text)
            assert isinstance(parsed, dict)
            if response_format["type"] == "json_schema":
                assert set(parsed) == {"city", "days"}


async def test_parse_with_pydantic_constraints_reaches_a_model_that_compiles_schemas() -> None:
    """pydantic writes bounds (ge/le), nullable fields and nested models, which Anthropic's
    grammar compiler refuses as written; reshaped, the call goes through on a current
    model and the reply parses back into the type, constraints and all."""
    from pydantic import BaseModel, Field

    class Address(BaseModel):
        city: str
        postcode: str | None

    class Person(BaseModel):
        name: str
        age: int = Field(ge=0, le=150)
        address: Address

    async with proxy_and_simulator() as (url, sim):
        client = openai_client(url)
        for model in ("claude-sonnet-4-6", "claude-opus-4-8"):
            reply = await client.chat.completions.parse(
                model=model,
                messages=_user("Invent a person"),
                response_format=Person,
                reasoning_effort="low",
            )
            person = reply.choices[0].message.parsed
            assert isinstance(person, Person)
            assert 0 <= person.age <= 150
        sent = (await sim.stats())["recent"][-1]
        assert sent["status"] == 200


# -- errors ---------------------------------------------------------------------------------


async def test_n_above_one_is_bad_request_naming_n() -> None:
    async with proxy_and_simulator() as (url, sim):
        with pytest.raises(openai.BadRequestError) as info:
            await openai_client(url).chat.completions.create(
                model=MODEL, messages=_user("Two answers please"), n=2
            )
        assert info.value.param == "n"
        assert info.value.type == "invalid_request_error"
        assert await _requests_total(sim) == 0


@pytest.mark.parametrize("stream", [False, True])
async def test_another_vendors_model_is_not_found_with_openais_model_not_found(
    stream: bool,
) -> None:
    async with proxy_and_simulator() as (url, _sim):
        with pytest.raises(openai.NotFoundError) as info:
            await openai_client(url).chat.completions.create(
                model="gpt-4o", messages=_user("Hi"), stream=stream
            )
        assert (info.value.code, info.value.param, info.value.type) == (
            "model_not_found",
            "model",
            "invalid_request_error",
        )
        assert "gpt-4o" in info.value.message


async def test_upstream_429_is_rate_limit_error_with_the_upstream_retry_after() -> None:
    async with proxy_and_simulator(upstream_max_retries=0, upstream_coordinated_backoff=False) as (
        url,
        sim,
    ):
        with pytest.raises(openai.RateLimitError) as info:
            await openai_client(url).chat.completions.create(
                model=MODEL, messages=_user("Busy? [[sim:status=429,retry_after=2]]")
            )
        assert info.value.status_code == 429
        assert info.value.response.headers["retry-after"] == "2"
        assert info.value.request_id == (await sim.stats())["recent"][-1]["request_id"]


async def test_upstream_529_is_internal_server_error_503_with_retry_after() -> None:
    async with proxy_and_simulator(upstream_max_retries=0, upstream_coordinated_backoff=False) as (
        url,
        _sim,
    ):
        with pytest.raises(openai.InternalServerError) as info:
            await openai_client(url).chat.completions.create(
                model=MODEL, messages=_user("Overloaded? [[sim:status=529,retry_after=4]]")
            )
        assert info.value.status_code == 503
        assert info.value.response.headers["retry-after"] == "4"
        assert info.value.code == "overloaded_error"


@pytest.mark.parametrize(
    ("fault", "error", "status"),
    [
        ("stream_error_first=1", openai.InternalServerError, 503),
        ("stream_error_after=0", openai.InternalServerError, 503),
        ("status=429,retry_after=2", openai.RateLimitError, 429),
        ("status=529", openai.InternalServerError, 503),
        ("status=500", openai.InternalServerError, 502),
    ],
)
async def test_stream_failing_before_any_content_is_an_http_error_status(
    fault: str, error: type[openai.APIStatusError], status: int
) -> None:
    async with proxy_and_simulator(upstream_max_retries=0, upstream_coordinated_backoff=False) as (
        url,
        _sim,
    ):
        with pytest.raises(error) as info:
            stream = await openai_client(url).chat.completions.create(
                model=MODEL, messages=_user(f"Hello [[sim:{fault}]]"), stream=True
            )
            await stream.close()  # reached only if the proxy wrongly answered 200
        assert info.value.status_code == status
        assert info.value.response.headers["content-type"].startswith("application/json")


@SDK_STREAM_LEFTOVERS
async def test_stream_failing_midway_raises_api_error_after_the_content_so_far() -> None:
    async with proxy_and_simulator(metrics_enabled=True) as (url, _sim):
        client = openai_client(url)
        whole = await client.chat.completions.create(model=MODEL, messages=_user("Long tale"))
        stream = await client.chat.completions.create(
            model=MODEL, messages=_user("Long tale [[sim:stream_error_after=3]]"), stream=True
        )
        pieces: list[str] = []
        with pytest.raises(openai.APIError) as info:
            async for chunk in stream:
                assert chunk.choices[0].finish_reason is None
                pieces.append(chunk.choices[0].delta.content or "")
        assert not isinstance(info.value, openai.APIStatusError)
        assert info.value.code == "overloaded_error"
        assert "".join(pieces) == " ".join(whole.choices[0].message.content.split(" ")[:3])
        async with httpx2.AsyncClient() as http:
            metrics = (await http.get(f"{url}/metrics")).json()
        # Counted as what the overload would have been before the first byte.
        assert metrics["requests"]["by_status"] == {"200": 1, "503": 1}


@SDK_STREAM_LEFTOVERS
async def test_a_stream_cut_before_any_content_is_retried_or_an_http_error() -> None:
    async with proxy_and_simulator(metrics_enabled=True) as (url, sim):
        client = openai_client(url)
        # Cut once: retried before the client saw anything; the stream is whole.
        stream = await client.chat.completions.create(
            model=MODEL, messages=_user("Hi [[sim:stream_end_after=0,times=1]]"), stream=True
        )
        finishes = [c.choices[0].finish_reason async for c in stream if c.choices]
        assert finishes[-1] == "stop"
        # Cut every time: an HTTP error status, as for a dropped connection.
        with pytest.raises(openai.APIStatusError) as info:
            await client.with_options(max_retries=0).chat.completions.create(
                model=MODEL, messages=_user("Hi [[sim:stream_end_after=0]]"), stream=True
            )
        assert info.value.status_code == 502
        # 1 + 1 retry, then 1 + 1: the retry budget allows two retries in its first 10 s.
        assert (await sim.stats())["requests_total"] == 4


async def test_stream_the_upstream_cut_short_is_an_error_never_a_clean_finish() -> None:
    async with proxy_and_simulator(metrics_enabled=True) as (url, _sim):
        client = openai_client(url)
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=_user("Long tale [[sim:stream_end_after=3]]"),
            stream=True,
            stream_options={"include_usage": True},
        )
        pieces: list[str] = []
        with pytest.raises(openai.APIError) as info:
            async for chunk in stream:
                assert chunk.choices[0].finish_reason is None
                pieces.append(chunk.choices[0].delta.content or "")
        assert info.value.code == "upstream_stream_truncated"
        assert len("".join(pieces).split(" ")) == 3
        async with httpx2.AsyncClient() as http:
            metrics = (await http.get(f"{url}/metrics")).json()
        assert metrics["requests"]["by_status"] == {"502": 1}


# -- headers --------------------------------------------------------------------------------


@SDK_STREAM_LEFTOVERS
async def test_request_id_is_the_upstream_request_id_for_replies_and_streams() -> None:
    async with proxy_and_simulator() as (url, sim):
        client = openai_client(url)
        completion = await client.chat.completions.create(model=MODEL, messages=_user("Hi"))
        assert completion._request_id == (await sim.stats())["recent"][-1]["request_id"]
        stream = await client.chat.completions.create(
            model=MODEL, messages=_user("Hi"), stream=True
        )
        async for _ in stream:
            pass
        request_id = stream.response.headers["x-request-id"]
        assert request_id == (await sim.stats())["recent"][-1]["request_id"]
        assert request_id != completion._request_id


@SDK_STREAM_LEFTOVERS
@pytest.mark.parametrize("stream", [False, True])
async def test_ratelimit_ignored_params_and_server_timing_headers(stream: bool) -> None:
    async with proxy_and_simulator() as (url, _sim):
        raw = await openai_client(url).chat.completions.with_raw_response.create(
            model=MODEL,
            messages=_user("Hello"),
            seed=7,
            presence_penalty=0.5,
            stream=stream,
        )
        headers = raw.headers
        for kind in ("limit", "remaining", "reset"):
            for resource in ("requests", "tokens", "input-tokens", "output-tokens"):
                assert headers[f"x-ratelimit-{kind}-{resource}"]
        assert int(headers["x-ratelimit-limit-requests"]) > 0
        assert headers["x-ratelimit-reset-requests"].endswith("s")
        # Named once each, in the order of the request body the SDK built.
        assert headers["x-trio-batcher-ignored-params"] == "presence_penalty,seed"
        timing = headers["server-timing"]
        assert "total;dur=" in timing
        parsed: Any = raw.parse()
        if stream:
            assert [c async for c in parsed]
        else:
            assert parsed.choices[0].message.content


async def test_no_ignored_params_header_when_nothing_was_ignored() -> None:
    async with proxy_and_simulator() as (url, _sim):
        raw = await openai_client(url).chat.completions.with_raw_response.create(
            model=MODEL, messages=_user("Hello"), temperature=0.2
        )
        assert "x-trio-batcher-ignored-params" not in raw.headers
