"""The simulated Anthropic upstream over real loopback HTTP, as the official SDK sees it."""

from __future__ import annotations

import gc
import json
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anthropic
import httpx2
import pytest
import trio

from trio_batcher.simulator import SimulatorConfig, run_simulator

MODEL = "claude-haiku-4-5"  # not in the SDK's deprecation list (warnings are errors here)
HEADERS = {"x-api-key": "sk-test", "anthropic-version": "2023-06-01"}
WEATHER: dict[str, Any] = {
    "name": "get_weather",
    "description": "Current weather",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"],
    },
}
TIME: dict[str, Any] = {
    "name": "get_time",
    "input_schema": {"type": "object", "properties": {"tz": {"type": "string"}}},
}


@asynccontextmanager
async def simulator(config: SimulatorConfig | None = None) -> AsyncIterator[str]:
    """A simulator on 127.0.0.1, shut down gracefully (not just cancelled) at exit."""
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(
            partial(run_simulator, config or SimulatorConfig(), shutdown=stop)
        )
        try:
            yield f"http://{host}:{port}"
        finally:
            stop.set()


# Building an SSL context costs ~50-100 ms; every HTTP client here shares one (the
# simulator is plain-HTTP loopback, but clients build a context regardless).
_SSL = ssl.create_default_context()


def http_client() -> httpx2.AsyncClient:
    return httpx2.AsyncClient(verify=_SSL)


@asynccontextmanager
async def sdk(url: str, **kwargs: Any) -> AsyncIterator[anthropic.AsyncAnthropic]:
    kwargs.setdefault("api_key", "sk-test")
    async with (
        http_client() as transport,
        anthropic.AsyncAnthropic(
            base_url=url, max_retries=0, http_client=transport, **kwargs
        ) as client,
    ):
        yield client


def ask(text: str = "Hello there, simulator", **changes: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": 256,
        "messages": [{"role": "user", "content": text}],
        **changes,
    }


# When an SSE ``error`` event makes the SDK raise, it leaves its SSE-decoding async
# generators suspended and trio warns when they are collected. That is the SDK's business,
# not the simulator's: tests that provoke it ignore exactly that warning and collect the
# generators before they end, so the warning cannot surface in a later test.
SDK_STREAM_LEFTOVERS = pytest.mark.filterwarnings(
    r"ignore:Async generator '(anthropic|httpx2|httpcore2)\.:ResourceWarning"
)


async def stats(url: str) -> dict[str, Any]:
    async with http_client() as http:
        data: dict[str, Any] = (await http.get(f"{url}/_sim/stats")).json()
        return data


async def settled_stats(url: str) -> dict[str, Any]:
    """Stats once nothing is in flight (an abandon is noticed within milliseconds)."""
    with trio.fail_after(5):
        while True:
            current = await stats(url)
            if not current["in_flight"]:
                return current
            await trio.sleep(0.01)


async def test_sdk_parses_a_message_with_anthropic_headers() -> None:
    async with simulator() as url, sdk(url) as client:
        raw = await client.messages.with_raw_response.create(**ask())
        message = await raw.parse()
        assert message.type == "message" and message.role == "assistant"
        assert message.id.startswith("msg_") and message.model == MODEL
        assert message.stop_reason == "end_turn" and message.stop_sequence is None
        (block,) = message.content
        assert block.type == "text"
        assert block.text.startswith("Simulated reply to 'Hello there, simulator':")
        assert message.usage.output_tokens == 24 and message.usage.input_tokens > 0
        assert message.usage.cache_read_input_tokens == 0
        assert raw.headers["request-id"].startswith("req_")
        assert raw.request_id == raw.headers["request-id"]
        for kind in ("requests", "tokens", "input-tokens", "output-tokens"):
            limit = int(raw.headers[f"anthropic-ratelimit-{kind}-limit"])
            assert 0 <= int(raw.headers[f"anthropic-ratelimit-{kind}-remaining"]) <= limit
            assert raw.headers[f"anthropic-ratelimit-{kind}-reset"].endswith("Z")


STREAMED_EQUALS_WHOLE = [
    ask(),
    ask(max_tokens=7),
    ask(stop_sequences=["lorem", "ipsum", "dolor", "sit", "amet"], max_tokens=200),
    ask(tools=[WEATHER, TIME]),
    # Adaptive thinking starts with 4.6 models (Haiku 4.5, MODEL, rejects it).
    ask(model="claude-sonnet-4-6", tools=[WEATHER], max_tokens=4096, thinking={"type": "adaptive"}),
    ask(max_tokens=4096, thinking={"type": "enabled", "budget_tokens": 1024}),
    ask(
        output_config={
            "format": {
                "type": "json_schema",
                "schema": {**WEATHER["input_schema"], "additionalProperties": False},
            }
        }
    ),
]


@pytest.mark.parametrize(
    "request_body",
    STREAMED_EQUALS_WHOLE,
    ids=["text", "capped", "stop", "tools", "thinking tools", "thinking", "json"],
)
async def test_stream_reassembles_to_the_same_message(request_body: dict[str, Any]) -> None:
    async with simulator() as url, sdk(url) as client:
        whole = await client.messages.create(**request_body)
        async with client.messages.stream(**request_body) as stream:
            streamed = await stream.get_final_message()
        assert [b.to_dict() for b in streamed.content] == [b.to_dict() for b in whole.content]
        assert streamed.stop_reason == whole.stop_reason
        assert streamed.stop_sequence == whole.stop_sequence
        assert streamed.usage.to_dict() == whole.usage.to_dict()
        assert whole.content  # every case produces something to compare


async def test_parallel_tool_calls_when_two_tools_are_offered() -> None:
    async with simulator() as url, sdk(url) as client:
        message = await client.messages.create(
            **ask("What are the weather and the time in Oslo?", tools=[WEATHER, TIME])
        )
        assert message.stop_reason == "tool_use"
        uses = [b for b in message.content if b.type == "tool_use"]
        assert [u.name for u in uses] == ["get_weather", "get_time"]
        assert uses[0].input == {"city": "city value", "unit": "c"}
        assert uses[1].input == {"tz": "tz value"}
        assert all(u.id.startswith("toolu_") for u in uses) and uses[0].id != uses[1].id
        single = await client.messages.create(
            **ask(
                tools=[WEATHER, TIME],
                tool_choice={"type": "any", "disable_parallel_tool_use": True},
            )
        )
        assert [b.type for b in single.content] == ["tool_use"]


async def test_tool_results_get_a_text_reply_that_mentions_them() -> None:
    async with simulator() as url, sdk(url) as client:
        first = await client.messages.create(**ask("Weather in Oslo?", tools=[WEATHER]))
        use = next(b for b in first.content if b.type == "tool_use")
        messages = [
            {"role": "user", "content": "Weather in Oslo?"},
            first.to_param(),
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": use.id,
                        "content": "minus four and snowing",
                    }
                ],
            },
        ]
        second = await client.messages.create(**ask(tools=[WEATHER], messages=messages))
        assert second.stop_reason == "end_turn"
        assert second.content[0].type == "text"
        assert "'minus four and snowing'" in second.content[0].text


@pytest.mark.parametrize(
    ("fault", "error_class", "retry_after"),
    [
        ("status=529,retry_after=3", anthropic.OverloadedError, "3"),
        ("status=429,retry_after=7", anthropic.RateLimitError, "7"),
        ("status=429", anthropic.RateLimitError, "1"),
        ("status=500", anthropic.InternalServerError, None),
        ("status=400", anthropic.BadRequestError, None),
        ("status=503", anthropic.ServiceUnavailableError, None),
    ],
)
async def test_fault_header_maps_to_the_sdk_error_class(
    fault: str, error_class: type[anthropic.APIStatusError], retry_after: str | None
) -> None:
    async with simulator() as url, sdk(url) as client:
        with pytest.raises(error_class) as info:
            await client.messages.create(**ask(), extra_headers={"x-sim-fault": fault})
        error = info.value
        assert type(error) is error_class  # the most specific class the SDK has
        assert error.response.headers.get("retry-after") == retry_after
        assert isinstance(error.body, dict)
        assert error.body["type"] == "error" and error.body["error"]["message"]
        assert error.body["request_id"] == error.response.headers["request-id"]
        assert error.request_id == error.body["request_id"]
        assert (await stats(url))["by_status"] == {fault[7:10]: 1}


async def test_embedded_directive_survives_in_the_text_and_is_not_echoed() -> None:
    async with simulator() as url, sdk(url) as client:
        with pytest.raises(anthropic.OverloadedError):
            await client.messages.create(**ask("please [[sim:status=529]] fail"))
        message = await client.messages.create(**ask("Count [[sim:tokens=6]] to six"))
        text = message.content[0].text
        assert text == "Simulated reply to 'Count to six':"  # 6 tokens, no directive
        assert message.usage.output_tokens == 6
        header_and_text = await client.messages.create(
            **ask("short [[sim:tokens=3]]"), extra_headers={"x-sim-fault": "tokens=9"}
        )
        assert header_and_text.usage.output_tokens == 3  # the embedded directive wins
        recent = (await stats(url))["recent"]
        assert [t["fault"] for t in recent] == ["status=529", "tokens=6", "tokens=3"]
        assert [t["outcome"] for t in recent] == ["error", "completed", "completed"]


async def test_bad_fault_directive_is_a_400() -> None:
    async with simulator() as url, sdk(url) as client:
        with pytest.raises(anthropic.BadRequestError, match="x-sim-fault: unknown fault"):
            await client.messages.create(**ask(), extra_headers={"x-sim-fault": "stauts=429"})


async def test_configured_rates_fault_requests_from_a_seeded_rng() -> None:
    async with simulator(SimulatorConfig(rate_529=1.0, retry_after_s=2.5)) as url, sdk(url) as c:
        with pytest.raises(anthropic.OverloadedError) as info:
            await c.messages.create(**ask())
        assert info.value.response.headers["retry-after"] == "2.5"

    async def outcomes() -> list[int]:
        config = SimulatorConfig(error_rate=0.3, rate_429=0.3, seed=11)
        statuses = []
        async with simulator(config) as url, http_client() as http:
            for _ in range(20):
                response = await http.post(f"{url}/v1/messages", json=ask(), headers=HEADERS)
                statuses.append(response.status_code)
        return statuses

    first = await outcomes()
    assert first == await outcomes()
    assert {200, 429, 500} <= set(first)


async def test_hang_then_client_disconnect_is_abandoned() -> None:
    async with simulator() as url, http_client() as http:
        with trio.move_on_after(0.3) as scope:
            await http.post(f"{url}/v1/messages", json=ask("wait [[sim:hang=1]]"), headers=HEADERS)
        assert scope.cancelled_caught
        current = await settled_stats(url)
        assert current["in_flight"] == 0 and current["max_in_flight"] == 1
        assert current["abandoned"] == 1 and current["completed"] == 0
        (trace,) = current["recent"]
        assert trace["outcome"] == "abandoned" and trace["status"] is None
        assert trace["finished_at"] - trace["started_at"] > 0.2  # it waited, then was cut


async def test_stream_cut_by_the_client_is_abandoned_mid_stream() -> None:
    config = SimulatorConfig(tokens_per_s=20, reply_tokens=40)  # a full reply takes 2 s
    async with simulator(config) as url:
        host, port = url.removeprefix("http://").split(":")
        payload = json.dumps(ask(stream=True)).encode()
        head = (
            f"POST /v1/messages HTTP/1.1\r\nhost: {host}\r\nx-api-key: k\r\n"
            f"anthropic-version: 2023-06-01\r\ncontent-type: application/json\r\n"
            f"content-length: {len(payload)}\r\n\r\n"
        ).encode()
        # A raw socket: we hang up mid-stream without leaving client generators behind.
        async with await trio.open_tcp_stream(host, int(port)) as conn:
            await conn.send_all(head + payload)
            received = b""
            while b"text_delta" not in received:
                received += await conn.receive_some()
        assert received.startswith(b"HTTP/1.1 200")
        current = await settled_stats(url)
        (trace,) = current["recent"]
        assert (trace["outcome"], trace["status"], trace["stream"]) == ("abandoned", 200, True)
        assert trace["first_token_at"] is not None
        assert trace["finished_at"] - trace["started_at"] < 1.0
        assert current["abandoned"] == 1 and current["in_flight"] == 0


@SDK_STREAM_LEFTOVERS
async def test_stream_error_after_n_deltas_raises_in_the_sdk() -> None:
    async with simulator() as url, sdk(url) as client:
        texts: list[str] = []
        with pytest.raises(anthropic.APIStatusError) as info:
            async with client.messages.stream(**ask("[[sim:stream_error_after=3]] hi")) as stream:
                async for event in stream:
                    if event.type == "content_block_delta" and event.delta.type == "text_delta":
                        texts.append(event.delta.text)
        assert texts == ["Simulated", " reply", " to"]
        assert isinstance(info.value.body, dict)
        assert info.value.body["error"]["type"] == "overloaded_error"
        del info, stream
        gc.collect()
        (trace,) = (await stats(url))["recent"]
        assert (trace["status"], trace["outcome"]) == (200, "error")


@pytest.mark.parametrize(
    ("fault", "names"),
    [
        ("stream_error_first=1", ["error"]),
        ("stream_error_after=0", ["message_start", "ping", "error"]),
        (
            "stream_error_after=1",
            ["message_start", "ping", "content_block_start", "content_block_delta", "error"],
        ),
        (
            "tokens=1,stream_error_after=5",
            [
                "message_start",
                "ping",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "error",
            ],
        ),
    ],
)
async def test_stream_error_replaces_the_next_content_event(fault: str, names: list[str]) -> None:
    async with simulator() as url, http_client() as http:
        response = await http.post(
            f"{url}/v1/messages", json=ask(stream=True), headers={**HEADERS, "x-sim-fault": fault}
        )
        assert response.status_code == 200
        assert [
            line[7:] for line in response.text.splitlines() if line.startswith("event: ")
        ] == names
        error = json.loads(response.text.rstrip().rsplit("data: ", 1)[1])
        assert error["error"] == {"type": "overloaded_error", "message": "Overloaded"}


@SDK_STREAM_LEFTOVERS
async def test_stream_error_first_comes_before_message_start() -> None:
    async with simulator() as url, http_client() as http:
        response = await http.post(
            f"{url}/v1/messages",
            json=ask(stream=True),
            headers={**HEADERS, "x-sim-fault": "stream_error_first=1"},
        )
        assert response.status_code == 200
        assert response.text.startswith("event: error\ndata: ")
        assert response.text.count("event:") == 1
        async with sdk(url) as client:
            with pytest.raises(anthropic.APIStatusError, match="overloaded_error") as info:
                async with client.messages.stream(**ask("[[sim:stream_error_first=1]]")) as s:
                    await s.get_final_message()
            del info, s
            gc.collect()


async def test_authentication_errors() -> None:
    config = SimulatorConfig(api_keys=frozenset({"sk-right"}))
    async with simulator(config) as url:
        async with sdk(url, api_key="sk-wrong") as client:
            with pytest.raises(anthropic.AuthenticationError) as info:
                await client.messages.create(**ask())
            assert "sk-wrong" not in info.value.response.text
        async with sdk(url, api_key="sk-right") as client:
            assert (await client.messages.create(**ask())).content
        async with http_client() as http:
            missing = await http.post(
                f"{url}/v1/messages", json=ask(), headers={"anthropic-version": "2023-06-01"}
            )
            assert missing.status_code == 401
            assert missing.json()["error"]["type"] == "authentication_error"
            keyed = await http.post(
                f"{url}/v1/messages", json=ask(), headers={**HEADERS, "x-api-key": "sk-right"}
            )
            assert keyed.status_code == 200


async def test_both_api_versions_and_both_auth_styles() -> None:
    async with simulator() as url:
        async with sdk(url) as client:  # Bearer auth, anthropic-version 2026-10-21
            assert (await client.messages.create(**ask())).content
            with pytest.raises(anthropic.BadRequestError, match="temperature"):
                await client.messages.create(**ask(), extra_body={"temperature": 0.5})
        async with sdk(url, default_headers={"anthropic-version": "2023-06-01"}) as client:
            raw = await client.messages.with_raw_response.create(
                **ask(), extra_body={"temperature": 0.5}
            )
            assert raw.http_request.headers["anthropic-version"] == "2023-06-01"
            assert (await raw.parse()).content
        async with http_client() as http:
            keyed = await http.post(f"{url}/v1/messages", json=ask(), headers=HEADERS)
            assert keyed.status_code == 200
            for version in (None, "2024-01-01"):
                headers = {"x-api-key": "k"} | ({"anthropic-version": version} if version else {})
                bad = await http.post(f"{url}/v1/messages", json=ask(), headers=headers)
                assert bad.status_code == 400
                assert bad.json()["error"]["message"].startswith("anthropic-version")


async def test_another_vendors_model_is_404_and_max_tokens_has_the_models_limit() -> None:
    hi: Any = [{"role": "user", "content": "Hi"}]
    async with simulator() as url, sdk(url) as client, http_client() as http:
        with pytest.raises(anthropic.NotFoundError) as missing:
            await client.messages.create(model="gpt-4o", max_tokens=10, messages=hi)
        assert isinstance(missing.value.body, dict)
        assert missing.value.body["error"] == {
            "type": "not_found_error",
            "message": "model: gpt-4o",
        }
        # Raw HTTP: the SDK itself refuses such a max_tokens without streaming.
        for model, max_tokens, limit in (
            ("claude-haiku-4-5", 64_001, 64_000),
            ("claude-next", 10**9, 128_000),
        ):
            body = {"model": model, "max_tokens": max_tokens, "messages": hi}
            too_many = await http.post(f"{url}/v1/messages", json=body, headers=HEADERS)
            assert too_many.status_code == 400
            assert too_many.json()["error"]["message"].startswith(
                f"max_tokens: {max_tokens} > {limit}, which is the maximum"
            )
        # Any claude-* id is served: the simulator need not change with each release.
        reply = await client.messages.create(model="claude-next", max_tokens=10, messages=hi)
        assert reply.content


async def test_model_rules_reach_the_sdk_as_bad_requests() -> None:
    prefill: Any = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    classic = {"anthropic-version": "2023-06-01"}
    async with simulator() as url, sdk(url, default_headers=classic) as client:
        refusals = [
            (
                {"model": "claude-opus-4-6-20260205", "messages": prefill},
                "This model does not support assistant message prefill. "
                "The conversation must end with a user message.",
            ),
            (
                {"model": "claude-opus-5", "extra_body": {"temperature": 0.5}},
                "`temperature` is deprecated for this model.",
            ),
            (
                {"model": "claude-opus-4-8", "thinking": {"type": "disabled"}},
                '"thinking.type.disabled" is not supported for this model. Use '
                '"thinking.type.adaptive" and "output_config.effort" to control thinking '
                "behavior.",
            ),
        ]
        for request, message in refusals:
            request = {"max_tokens": 10, "messages": prefill[:1], **request}
            with pytest.raises(anthropic.BadRequestError) as info:
                await client.messages.create(**request)
            assert isinstance(info.value.body, dict)
            assert info.value.body["error"] == {"type": "invalid_request_error", "message": message}
        # Haiku 4.5 still continues a prefill.
        assert (await client.messages.create(model=MODEL, max_tokens=10, messages=prefill)).content


async def test_sdk_parse_gets_a_value_of_the_requested_type() -> None:
    """``messages.parse`` sends the SDK's transformed schema (the subset check accepts it)
    and validates the simulated JSON into the type."""
    import datetime
    from typing import Literal

    import pydantic

    class Forecast(pydantic.BaseModel):
        city: str
        day: datetime.date
        high_c: int = pydantic.Field(ge=-90, le=60)
        sky: Literal["sun", "rain"]
        wind_kmh: float | None

    async with simulator() as url, sdk(url) as client:
        for model in (MODEL, "claude-sonnet-5"):
            message = await client.messages.parse(**ask(model=model), output_format=Forecast)
            assert isinstance(message.parsed_output, Forecast)
            assert message.parsed_output.sky == "sun"


async def test_a_body_nested_past_the_limit_is_a_bad_request_not_a_crash() -> None:
    deep = '{"a":' * 300 + "1" + "}" * 300
    body = '{"model":"claude-x","max_tokens":5,"messages":[{"role":"user","content":"hi"}],'
    body += '"metadata":' + deep + "}"
    async with simulator() as url, http_client() as http:
        response = await http.post(f"{url}/v1/messages", content=body, headers=HEADERS)
        assert response.status_code == 400
        assert response.json()["error"]["message"] == "body: JSON nesting exceeds 256 levels"


async def test_invalid_body_is_a_bad_request_naming_the_field() -> None:
    async with simulator() as url, sdk(url) as client:
        with pytest.raises(anthropic.BadRequestError) as info:
            await client.messages.create(
                model=MODEL,
                max_tokens=10,
                messages=[{"role": "user", "content": [{"type": "text", "text": ""}]}],
            )
        assert isinstance(info.value.body, dict)
        assert info.value.body["error"]["type"] == "invalid_request_error"
        assert info.value.body["error"]["message"].startswith("messages.0.content.0.text")
        async with http_client() as http:
            for content in (b"{not json", b"", b"[]"):
                response = await http.post(f"{url}/v1/messages", content=content, headers=HEADERS)
                assert response.status_code == 400
                assert response.json()["error"]["type"] == "invalid_request_error"
        assert (await stats(url))["by_status"] == {"400": 4}


async def test_oversized_body_is_413_request_too_large() -> None:
    async with simulator(SimulatorConfig(max_request_bytes=1000)) as url, sdk(url) as client:
        with pytest.raises(anthropic.ContentTooLargeError) as info:
            await client.messages.create(**ask("x" * 2000))
        assert isinstance(info.value.body, dict)
        assert info.value.body["error"]["type"] == "request_too_large"


async def test_unknown_route_is_a_json_404() -> None:
    async with simulator() as url, http_client() as http:
        response = await http.get(f"{url}/v1/nope", headers=HEADERS)
        assert response.status_code == 404
        body = response.json()
        assert body["type"] == "error" and body["error"]["type"] == "not_found_error"
        assert body["request_id"] == response.headers["request-id"]
        assert (await stats(url))["requests_total"] == 0  # only /v1/messages is counted


async def test_models_and_count_tokens() -> None:
    async with simulator() as url, sdk(url) as client:
        models = [m async for m in client.models.list()]
        ids = {m.id for m in models}
        assert {"claude-sonnet-5", "claude-haiku-4-5-20251001"} <= ids
        assert all(m.type == "model" and m.display_name for m in models)
        assert (await client.models.retrieve("claude-haiku-4-5")).id == "claude-haiku-4-5-20251001"
        with pytest.raises(anthropic.NotFoundError):
            await client.models.retrieve("claude-nonexistent")
        counted = await client.messages.count_tokens(model=MODEL, messages=ask()["messages"])
        message = await client.messages.create(**ask())
        assert counted.input_tokens == message.usage.input_tokens


async def test_prompt_cache_is_written_then_read() -> None:
    system = [
        {
            "type": "text",
            "text": "You are a careful assistant. " * 40,
            "cache_control": {"type": "ephemeral"},
        }
    ]
    async with simulator() as url, sdk(url) as client:
        first = await client.messages.create(**ask("one"), system=system)  # type: ignore[arg-type]
        second = await client.messages.create(**ask("two"), system=system)  # type: ignore[arg-type]
        written = first.usage.cache_creation_input_tokens
        assert written and written > 200 and first.usage.cache_read_input_tokens == 0
        assert first.usage.cache_creation is not None
        assert first.usage.cache_creation.ephemeral_5m_input_tokens == written
        assert second.usage.cache_read_input_tokens == written
        assert second.usage.cache_creation_input_tokens == 0
        async with http_client() as http:
            await http.post(f"{url}/_sim/reset")
        third = await client.messages.create(**ask("two"), system=system)  # type: ignore[arg-type]
        assert third.usage.cache_creation_input_tokens == written  # reset empties the cache


async def test_latency_model_shapes_the_trace() -> None:
    config = SimulatorConfig(ttft_ms=100, tokens_per_s=50, reply_tokens=5)
    async with simulator(config) as url, sdk(url) as client:
        async with client.messages.stream(**ask()) as stream:
            await stream.get_final_message()
        await client.messages.create(**ask())
        streamed, whole = (await settled_stats(url))["recent"]
    offsets = [0.1, 0.12, 0.14, 0.16, 0.18]  # ttft, then 1/50 s per token
    slack = 0.002  # trio's clock and time.monotonic() are read at slightly different times
    start = streamed["started_at"]
    assert streamed["event_times"][0] - start < 0.05  # message_start before the first token
    token_times = [t - start for t in streamed["event_times"][1:]]
    assert len(token_times) == 5
    assert all(t >= o - slack for t, o in zip(token_times, offsets, strict=True))
    assert streamed["first_token_at"] - start == pytest.approx(0.1, abs=0.05)
    assert streamed["finished_at"] - start == pytest.approx(0.18, abs=0.05)
    assert whole["first_token_at"] - whole["started_at"] == pytest.approx(0.18, abs=0.05)
    assert whole["first_token_at"] - whole["started_at"] >= 0.18 - slack


async def test_in_flight_gauge_and_reset() -> None:
    config = SimulatorConfig(ttft_ms=300)
    async with simulator(config) as url, http_client() as http:

        async def one() -> None:
            response = await http.post(f"{url}/v1/messages", json=ask(), headers=HEADERS)
            assert response.status_code == 200

        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(one)
            await trio.sleep(0.15)
            assert (await stats(url))["in_flight"] == 5
        current = await settled_stats(url)
        assert current["max_in_flight"] == 5 and current["completed"] == 5
        assert current["requests_total"] == 5 and current["by_status"] == {"200": 5}
        assert len(current["recent"]) == 5
        assert json.loads((await http.post(f"{url}/_sim/reset")).text) == {"ok": True}
        cleared = await stats(url)
        assert {
            k: cleared[k]
            for k in (
                "requests_total",
                "max_in_flight",
                "completed",
                "abandoned",
                "streams",
                "recent",
                "by_status",
            )
        } == {
            "requests_total": 0,
            "max_in_flight": 0,
            "completed": 0,
            "abandoned": 0,
            "streams": 0,
            "recent": [],
            "by_status": {},
        }
        assert (await http.get(f"{url}/_sim/stats?recent=0")).json()["recent"] == []
