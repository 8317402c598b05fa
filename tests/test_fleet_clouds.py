"""A Bedrock-only and a Vertex-only gateway, live: every door, streamed or not, with tools.

The simulator plays the cloud and refuses what the cloud refuses: a request whose SigV4
signature botocore's own signer does not reproduce, a Vertex call without a token its
``/token`` endpoint issued. So a 200 here means the gateway signed (or authorized) every
call, with credentials it found through the standard chains (``fleet_support``).
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from cloud_support import ASK, WEATHER_TOOL
from fleet_support import MODELS, gateway_and_simulator

from trio_batcher.simulator import SimulatorConfig

CLOUDS = [pytest.param("bedrock", id="bedrock"), pytest.param("vertex", id="vertex")]
OPENAI_TOOL = {
    "type": "function",
    "function": {
        "name": WEATHER_TOOL["name"],
        "description": WEATHER_TOOL["description"],
        "parameters": WEATHER_TOOL["input_schema"],
    },
}


def _sse(text: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in text.split("\n\n"):
        name, data = "", ""
        for line in block.splitlines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data = line[5:].strip()
        if data and data != "[DONE]":
            events.append((name, json.loads(data)))
    return events


@pytest.mark.parametrize("kind", CLOUDS)
async def test_messages_and_chat_stream_or_not_with_tools_on_one_cloud(kind: str) -> None:
    async with (
        gateway_and_simulator(kind, SimulatorConfig(), metrics_enabled=True) as (url, sim),
        httpx2.AsyncClient(timeout=30) as http,
    ):
        headers = {"anthropic-version": "2023-06-01", "anthropic-beta": "context-1m-2025-08-07"}
        native = {"model": "claude-sonnet-4-5", "max_tokens": 256, "messages": ASK}
        native["tools"] = [WEATHER_TOOL]
        reply = await http.post(f"{url}/v1/messages", json=native, headers=headers)
        assert reply.status_code == 200, reply.text
        message = reply.json()
        assert message["stop_reason"] == "tool_use"
        assert any(
            b["type"] == "tool_use" and b["name"] == "get_weather" for b in message["content"]
        )

        streamed = await http.post(
            f"{url}/v1/messages", json={**native, "stream": True}, headers=headers
        )
        assert streamed.status_code == 200, streamed.text
        events = _sse(streamed.text)
        assert events[0][0] == "message_start" and events[-1][0] == "message_stop"
        starts = [d for n, d in events if n == "content_block_start"]
        assert any(d["content_block"]["type"] == "tool_use" for d in starts)

        chat = {
            "model": "claude-sonnet-4-5",
            "messages": [{"role": "user", "content": ASK[0]["content"]}],
            "tools": [OPENAI_TOOL],
        }
        answer = await http.post(f"{url}/v1/chat/completions", json=chat)
        assert answer.status_code == 200, answer.text
        choice = answer.json()["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        assert choice["message"]["tool_calls"][0]["function"]["name"] == "get_weather"

        chunks = await http.post(f"{url}/v1/chat/completions", json={**chat, "stream": True})
        assert chunks.status_code == 200, chunks.text
        assert chunks.text.rstrip().endswith("data: [DONE]")
        assert '"tool_calls"' in chunks.text

        plain = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]}
        for stream in (False, True):
            text = await http.post(f"{url}/v1/chat/completions", json={**plain, "stream": stream})
            assert text.status_code == 200, text.text
        metrics = (await http.get(f"{url}/metrics")).json()

        received = await sim.received()
        assert len(received) >= 6
        model = MODELS[kind]
        for entry in received:
            if entry["path"] == "/token":
                continue
            body = json.loads(entry["body"])
            assert "model" not in body  # in the path, as the cloud wants it
            assert model.replace(":", "%3A") in entry["path"] or model in entry["path"]
        stats = await sim.stats()
        assert set(stats["by_status"]) == {"200"}
        assert metrics["by_upstream"]["cloud"]["requests"] == 6
        assert metrics["requests"]["error"] == 0


@pytest.mark.parametrize("kind", CLOUDS)
async def test_a_model_the_cloud_does_not_map_is_refused_before_any_call(kind: str) -> None:
    async with (
        gateway_and_simulator(kind, SimulatorConfig()) as (url, sim),
        httpx2.AsyncClient(timeout=30) as http,
    ):
        body = {"model": "claude-opus-4-1", "max_tokens": 16, "messages": ASK}
        reply = await http.post(
            f"{url}/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"}
        )
        assert reply.status_code == 400, reply.text
        error = reply.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert "claude-opus-4-1" in error["message"]
        chat = await http.post(
            f"{url}/v1/chat/completions",
            json={"model": "claude-opus-4-1", "messages": [{"role": "user", "content": "x"}]},
        )
        assert chat.status_code == 400
        assert chat.json()["error"]["param"] == "model"
        assert [e for e in await sim.received() if e["path"] != "/token"] == []


@pytest.mark.parametrize("kind", CLOUDS)
async def test_count_tokens_goes_to_the_cloud(kind: str) -> None:
    async with (
        gateway_and_simulator(kind, SimulatorConfig()) as (url, _sim),
        httpx2.AsyncClient(timeout=30) as http,
    ):
        body = {"model": "claude-sonnet-4-5", "messages": ASK}
        reply = await http.post(
            f"{url}/v1/messages/count_tokens",
            json=body,
            headers={"anthropic-version": "2023-06-01"},
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["input_tokens"] > 0
