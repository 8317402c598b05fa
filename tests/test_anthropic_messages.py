"""The native Messages door with the official ``anthropic`` SDK, over loopback.

The gateway relays this dialect instead of translating it, so the tests check the relay
itself: what the upstream (the simulator, which logs what it receives) got is what the
client sent, and what the client got is what the upstream sent -- while the SDK, with
strict response validation, parses every reply, stream and list.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from support import SIM_KEY, anthropic_client, proxy_and_simulator, running_simulator

from trio_batcher.simulator import SimulatorConfig

MODEL = "claude-sonnet-4-5"
HELLO: dict[str, Any] = {
    "model": MODEL,
    "max_tokens": 200,
    "messages": [{"role": "user", "content": "Hello there"}],
}
VERSION = {"anthropic-version": "2023-06-01"}
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def _last(received: list[dict[str, Any]], path: str = "/v1/messages") -> dict[str, Any]:
    return [entry for entry in received if entry["path"] == path][-1]


def _header(entry: dict[str, Any], name: str) -> list[str]:
    return [value for key, value in entry["headers"] if key == name]


async def test_messages_create_parses_in_the_sdk_with_the_upstreams_request_id() -> None:
    async with proxy_and_simulator() as (url, sim):
        client = anthropic_client(url)
        raw = await client.messages.with_raw_response.create(**HELLO)
        message = await raw.parse()
        assert message.type == "message"
        assert message.content[0].type == "text"
        assert "Hello" in message.content[0].text
        assert message.usage.input_tokens > 0
        upstream = _last(await sim.received())
        assert raw.headers["request-id"] == upstream["request_id"]


async def test_the_upstream_receives_the_clients_bytes_its_betas_and_our_key_only() -> None:
    """Unknown and beta fields included: the body goes up as the client's own bytes."""
    body = (
        b'{"model": "claude-sonnet-4-5",  "max_tokens": 64, "stream": false,\n'
        b' "messages": [{"role": "user", "content": [{"type": "text", "text": "caf\\u00e9 \xc3\xa9",'
        b' "cache_control": {"type": "ephemeral"}}]}],'
        b' "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},'
        b' "metadata": {"user_id": "u-1"}, "system": [{"type": "text", "text": "Be brief.",'
        b' "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}'
    )
    betas = "context-management-2025-06-27, interleaved-thinking-2025-05-14"
    async with (
        proxy_and_simulator(proxy_api_keys=("pk-client",)) as (url, sim),
        httpx2.AsyncClient() as http,
    ):
        response = await http.post(
            f"{url}/v1/messages?beta=true",
            content=body,
            headers={
                **VERSION,
                "content-type": "application/json",
                "x-api-key": "pk-client",
                "anthropic-beta": betas,
            },
        )
        assert response.status_code == 200, response.text
        upstream = _last(await sim.received())
    assert upstream["body"].encode() == body
    assert _header(upstream, "anthropic-beta") == [betas]
    assert _header(upstream, "anthropic-version") == ["2023-06-01"]
    assert _header(upstream, "x-api-key") == [SIM_KEY]
    assert "pk-client" not in json.dumps(upstream["headers"])
    assert _header(upstream, "authorization") == []


async def test_an_unknown_field_reaches_the_upstream_and_its_own_400_comes_back() -> None:
    """Next month's field is the upstream's to judge, not the gateway's: here the upstream
    refuses it, and the client reads the upstream's own words."""
    import anthropic

    async with proxy_and_simulator() as (url, sim):
        client = anthropic_client(url)
        with pytest.raises(anthropic.BadRequestError) as raised:
            await client.messages.create(**HELLO, extra_body={"next_months_field": {"x": 1}})
        upstream = _last(await sim.received())
    assert json.loads(upstream["body"])["next_months_field"] == {"x": 1}
    assert upstream["status"] == 400
    assert raised.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert "next_months_field" in raised.value.body["error"]["message"]  # type: ignore[index]
    assert raised.value.response.headers["request-id"] == upstream["request_id"]


async def test_a_repeated_beta_header_arrives_as_every_line_sent() -> None:
    async with proxy_and_simulator() as (url, sim), httpx2.AsyncClient() as http:
        headers = [
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "interleaved-thinking-2025-05-14"),
            ("anthropic-beta", "effort-2025-11-24"),
        ]
        response = await http.post(f"{url}/v1/messages", json=HELLO, headers=headers)
        assert response.status_code == 200, response.text
        upstream = _last(await sim.received())
    assert _header(upstream, "anthropic-beta") == [
        "interleaved-thinking-2025-05-14",
        "effort-2025-11-24",
    ]


async def _raw_stream(http: httpx2.AsyncClient, url: str, body: dict[str, Any]) -> bytes:
    async with http.stream(
        "POST", f"{url}/v1/messages", json=body, headers={**VERSION, "x-api-key": SIM_KEY}
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return await response.aread()


def _events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def _without_ids(events: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, Any]]:
    """The events with the message id blanked: the one thing two calls never share."""
    out = []
    for name, data in events:
        if name == "message_start":
            data = {**data, "message": {**data["message"], "id": "msg"}}
        out.append((name, data))
    return out


async def test_a_stream_is_every_upstream_event_in_order_pings_included() -> None:
    body = {**HELLO, "stream": True, "tools": [WEATHER_TOOL], "tool_choice": {"type": "auto"}}
    body["messages"] = [{"role": "user", "content": "How is the weather in Paris?"}]
    body["thinking"] = {"type": "enabled", "budget_tokens": 1024}
    body["max_tokens"] = 2048
    async with (
        proxy_and_simulator() as (url, sim),
        httpx2.AsyncClient(timeout=30) as http,
    ):
        direct = await _raw_stream(http, sim.url, body)
        relayed = await _raw_stream(http, url, body)
    names = [name for name, _ in _events(relayed)]
    assert "ping" in names
    assert names[0] == "message_start" and names[-1] == "message_stop"
    assert _without_ids(_events(relayed)) == _without_ids(_events(direct))
    deltas = {d["delta"]["type"] for name, d in _events(relayed) if name == "content_block_delta"}
    assert {"thinking_delta", "signature_delta", "input_json_delta"} <= deltas


async def test_the_sdk_streams_text_through_the_gateway() -> None:
    async with proxy_and_simulator() as (url, _sim):
        client = anthropic_client(url)
        async with client.messages.stream(**HELLO) as stream:
            text = "".join([piece async for piece in stream.text_stream])
            final = await stream.get_final_message()
    assert text and final.content[0].type == "text" and final.content[0].text == text
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens > 0


async def test_the_sdk_streams_a_tool_call_with_its_input_json() -> None:
    async with proxy_and_simulator() as (url, _sim):
        client = anthropic_client(url)
        async with client.messages.stream(
            **HELLO, tools=[WEATHER_TOOL], tool_choice={"type": "tool", "name": "get_weather"}
        ) as stream:
            kinds = [
                event.delta.type async for event in stream if event.type == "content_block_delta"
            ]
            final = await stream.get_final_message()
    assert "input_json_delta" in kinds
    call = next(block for block in final.content if block.type == "tool_use")
    assert call.name == "get_weather" and isinstance(call.input, dict) and "city" in call.input
    assert final.stop_reason == "tool_use"


async def test_the_sdk_streams_thinking_with_its_signature() -> None:
    async with proxy_and_simulator() as (url, _sim):
        client = anthropic_client(url)
        async with client.messages.stream(
            **{**HELLO, "max_tokens": 2048},
            thinking={"type": "enabled", "budget_tokens": 1024},
        ) as stream:
            kinds = [
                event.delta.type async for event in stream if event.type == "content_block_delta"
            ]
            final = await stream.get_final_message()
    assert {"thinking_delta", "signature_delta"} <= set(kinds)
    thinking = final.content[0]
    assert thinking.type == "thinking" and thinking.thinking and thinking.signature


async def test_count_tokens_is_forwarded_and_answers_as_the_upstream_does() -> None:
    request: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Count me, please."}],
        "tools": [WEATHER_TOOL],
    }
    async with proxy_and_simulator(metrics_enabled=True) as (url, sim):
        direct = await anthropic_client(sim.url, api_key=SIM_KEY).messages.count_tokens(**request)
        counted = await anthropic_client(url).messages.count_tokens(**request)
        upstream = _last(await sim.received(), "/v1/messages/count_tokens")
        async with httpx2.AsyncClient() as http:
            metrics = (await http.get(f"{url}/metrics")).json()
    assert counted.input_tokens == direct.input_tokens > 0
    assert _header(upstream, "x-api-key") == [SIM_KEY]
    surface = metrics["by_surface"]["anthropic.count_tokens"]
    assert surface["requests"]["by_status"] == {"200": 1}
    assert metrics["requests"]["total"] == 0  # it generated nothing, and cost nothing


async def test_models_list_and_retrieve_in_anthropics_shape_for_anthropic_clients() -> None:
    async with (
        proxy_and_simulator(default_model="claude-sonnet-4-5") as (url, _sim),
        httpx2.AsyncClient() as http,
    ):
        client = anthropic_client(url)
        page = await client.models.list(limit=3)
        assert [model.type for model in page.data] == ["model"] * 3
        assert page.data[0].id == "claude-sonnet-4-5"
        assert page.has_more and page.first_id == page.data[0].id
        assert page.last_id == page.data[-1].id
        everything = [model.id async for model in client.models.list(limit=2)]
        assert everything[:3] == [m.id for m in page.data]
        assert len(everything) == len(set(everything)) > 3
        one = await client.models.retrieve("claude-sonnet-4-5")
        assert one.id == "claude-sonnet-4-5" and one.display_name
        openai_shape = (await http.get(f"{url}/v1/models")).json()
        assert openai_shape["object"] == "list"
        assert openai_shape["data"][0]["object"] == "model"


async def test_usage_tokens_and_cost_are_counted_per_surface() -> None:
    """Cache reads and writes included; the OpenAI door keeps its own entry."""
    system = [
        {
            "type": "text",
            "text": "A long shared prefix. " * 300,
            "cache_control": {"type": "ephemeral"},
        }
    ]
    async with (
        proxy_and_simulator(metrics_enabled=True) as (url, _sim),
        httpx2.AsyncClient() as http,
    ):
        client = anthropic_client(url)
        first = await client.messages.create(**HELLO, system=system)
        second = await client.messages.create(**HELLO, system=system)
        async with client.messages.stream(**HELLO, system=system) as stream:
            await stream.get_final_message()
        chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
        assert (await http.post(f"{url}/v1/chat/completions", json=chat)).status_code == 200
        metrics = (await http.get(f"{url}/metrics")).json()
        prometheus = (await http.get(f"{url}/metrics/prometheus")).text
    assert first.usage.cache_creation_input_tokens and second.usage.cache_read_input_tokens
    anthropic_surface = metrics["by_surface"]["anthropic.messages"]
    assert anthropic_surface["requests"]["by_status"] == {"200": 3}
    assert anthropic_surface["requests"]["stream"] == 1
    assert anthropic_surface["tokens"]["cache_write"] == first.usage.cache_creation_input_tokens
    assert anthropic_surface["tokens"]["cache_read"] >= second.usage.cache_read_input_tokens
    assert anthropic_surface["estimated_cost_usd"] > 0
    assert anthropic_surface["timing"]["overhead_ms"]["sample_count"] == 3
    assert metrics["by_surface"]["openai.chat"]["requests"]["total"] == 1
    assert metrics["requests"]["total"] == 4  # today's fields count every door
    assert (
        'trio_batcher_surface_requests_total{status="200",surface="anthropic.messages"} 3.0'
        in prometheus
    )


async def test_claude_code_shaped_requests_with_a_query_and_a_bearer_key() -> None:
    """Claude Code posts to ``/v1/messages?beta=true``; with ``ANTHROPIC_AUTH_TOKEN`` its key
    comes as a bearer token. A base URL ending in /v1 doubles it: that is found too."""
    async with (
        proxy_and_simulator(proxy_api_keys=("pk-cc",)) as (url, sim),
        httpx2.AsyncClient() as http,
    ):
        for path in ("/v1/messages?beta=true", "/v1/v1/messages", "/messages"):
            response = await http.post(
                f"{url}{path}",
                json=HELLO,
                headers={**VERSION, "authorization": "Bearer pk-cc"},
            )
            assert response.status_code == 200, (path, response.text)
        received = await sim.received()
    assert all(_header(entry, "authorization") == [] for entry in received)


@pytest.mark.parametrize("stream", [False, True])
async def test_an_upstream_overload_before_the_first_byte_is_retried_invisibly(
    stream: bool,
) -> None:
    async with proxy_and_simulator(upstream_max_retries=2) as (url, sim):
        client = anthropic_client(url)
        body = {
            **HELLO,
            "messages": [
                {"role": "user", "content": "[[sim:status=529,times=1,retry_after=0]] hi"}
            ],
        }
        if stream:
            async with client.messages.stream(**body) as events:
                final = await events.get_final_message()
        else:
            final = await client.messages.create(**body)
        assert final.stop_reason == "end_turn"
        statuses = [entry["status"] for entry in await sim.received()]
    assert statuses == [529, 200]


async def test_a_simulator_alone_is_still_what_the_sdk_accepts() -> None:
    """The door relays the simulator's bytes, so the simulator must parse on its own too."""
    async with running_simulator(SimulatorConfig()) as sim:
        message = await anthropic_client(sim.url, api_key=SIM_KEY).messages.create(**HELLO)
        assert message.content
