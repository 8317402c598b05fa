"""The streams a gateway's anthropic-SDK tests need, event by event, over loopback.

What decides the content (``replies.py``): custom tools offered, ``tool_choice`` not
``none`` and a conversation that ends with a user turn holding no ``tool_result`` give
tool calls (``input_json_delta``); ``thinking`` enabled or adaptive gives a thinking block
first (``thinking_delta`` then ``signature_delta``); otherwise text. A ``ping`` follows
``message_start``, whose usage always carries the cache counters.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anthropic
import httpx2
import trio

from trio_batcher.simulator import SimulatorConfig, run_simulator

HEADERS = {"x-api-key": "sk-test", "anthropic-version": "2023-06-01"}
WEATHER = {
    "name": "get_weather",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@asynccontextmanager
async def simulator() -> AsyncIterator[str]:
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(partial(run_simulator, SimulatorConfig(), shutdown=stop))
        try:
            yield f"http://{host}:{port}"
        finally:
            stop.set()


def request(**changes: Any) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-6",
        "max_tokens": 4096,
        "stream": True,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        **changes,
    }


async def stream_events(url: str, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    async with httpx2.AsyncClient() as http:
        response = await http.post(f"{url}/v1/messages", json=body, headers=HEADERS)
    assert response.status_code == 200, response.text
    out = []
    for chunk in response.text.strip().split("\n\n"):
        name, data = chunk.split("\n")
        out.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return out


def deltas(events: list[tuple[str, dict[str, Any]]]) -> list[tuple[int, str]]:
    return [
        (data["index"], data["delta"]["type"])
        for name, data in events
        if name == "content_block_delta"
    ]


async def test_thinking_and_tool_use_stream_every_delta_type_in_order() -> None:
    body = request(tools=[WEATHER], thinking={"type": "adaptive"})
    async with simulator() as url:
        events = await stream_events(url, body)
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    starts = [data["content_block"] for name, data in events if name == "content_block_start"]
    assert [block["type"] for block in starts] == ["thinking", "text", "tool_use"]
    assert starts[0] == {"type": "thinking", "thinking": "", "signature": ""}
    assert starts[2]["name"] == "get_weather" and starts[2]["input"] == {}
    kinds = deltas(events)
    thinking = [kind for index, kind in kinds if index == 0]
    assert set(thinking[:-1]) == {"thinking_delta"} and thinking[-1] == "signature_delta"
    assert {kind for index, kind in kinds if index == 1} == {"text_delta"}
    assert {kind for index, kind in kinds if index == 2} == {"input_json_delta"}
    partial_json = "".join(
        data["delta"]["partial_json"]
        for name, data in events
        if name == "content_block_delta" and data["index"] == 2
    )
    assert json.loads(partial_json) == {"city": "city value"}
    usage = events[0][1]["message"]["usage"]
    assert {"input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"} <= set(usage)
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


async def test_message_start_reports_cache_writes_then_reads() -> None:
    system = [{"type": "text", "text": "Be brief. " * 200, "cache_control": {"type": "ephemeral"}}]
    async with simulator() as url:
        first = (await stream_events(url, request(system=system)))[0][1]["message"]["usage"]
        second = (await stream_events(url, request(system=system)))[0][1]["message"]["usage"]
    assert first["cache_creation_input_tokens"] > 0 and first["cache_read_input_tokens"] == 0
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    assert second["cache_creation_input_tokens"] == 0


async def test_no_tool_call_once_the_results_are_in_and_the_sdk_accumulates_it_all() -> None:
    async with (
        simulator() as url,
        httpx2.AsyncClient() as transport,
        anthropic.AsyncAnthropic(
            base_url=url, api_key="sk-test", max_retries=0, http_client=transport
        ) as client,
    ):
        body = request(tools=[WEATHER], thinking={"type": "enabled", "budget_tokens": 1024})
        del body["stream"]
        async with client.messages.stream(**body) as stream:
            first = await stream.get_final_message()
        thinking, text, tool_use = first.content
        assert thinking.type == "thinking" and thinking.signature and thinking.thinking
        assert text.type == "text" and tool_use.type == "tool_use"
        assert tool_use.input == {"city": "city value"}

        follow_up = {
            **body,
            "messages": [
                *body["messages"],
                {"role": "assistant", "content": [b.model_dump() for b in first.content]},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": tool_use.id, "content": "18C"}
                    ],
                },
            ],
        }
        async with client.messages.stream(**follow_up) as stream:
            second = await stream.get_final_message()
    assert [block.type for block in second.content] == ["thinking", "text"]
    assert second.stop_reason == "end_turn"
