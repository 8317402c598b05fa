"""A Bedrock-only and a Vertex-only gateway, live: every door, streamed or not, with tools.

The simulator plays the cloud and refuses what the cloud refuses: a request whose SigV4
signature botocore's own signer does not reproduce, a Vertex call without a token its
``/token`` endpoint issued. So a 200 here means the gateway signed (or authorized) every
call, with credentials it found through the standard chains (``fleet_support``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest
from cloud_support import ASK, WEATHER_TOOL, cloud_config
from fleet_support import (
    MODELS,
    cloud_environment,
    cloud_upstream,
    environment,
    gateway_and_simulator,
)
from support import SIM_KEY, running_proxy, running_simulator

from trio_batcher.settings import Settings
from trio_batcher.simulator import SimulatorConfig
from trio_batcher.upstreams.facts import anthropic_only

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


FILE_SOURCE = {
    "role": "user",
    "content": [
        {
            "type": "document",
            "source": {"type": "file", "file_id": "file_011CNha8iCJcU1wXNR6q4V8w"},
        },
        {"type": "text", "text": "Summarise the document."},
    ],
}


def test_features_only_anthropic_carries_are_found_where_they_hide() -> None:
    assert anthropic_only({"messages": [FILE_SOURCE]}) == "the Files API (a file_id source)"
    nested = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "t", "content": FILE_SOURCE["content"]}],
    }
    assert anthropic_only({"messages": [nested]}) == "the Files API (a file_id source)"
    assert anthropic_only({"messages": [], "mcp_servers": [{"type": "url"}]}) is not None
    assert anthropic_only({"messages": [], "container": "container_1"}) is not None
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "x"}}
    assert anthropic_only({"messages": [{"role": "user", "content": [image]}]}) is None
    assert anthropic_only({"messages": ASK, "mcp_servers": []}) is None


@pytest.mark.parametrize("kind", CLOUDS)
async def test_a_feature_only_anthropic_carries_is_refused_by_a_cloud_only_gateway(
    kind: str,
) -> None:
    """The MCP connector is Anthropic's API's alone: a gateway of clouds says so, before
    any call. (A file source is checked first against the caller's own files: an id the
    gateway did not see uploaded is a 404 for an unknown file, test_anthropic_files.py.)"""
    async with (
        gateway_and_simulator(kind, SimulatorConfig()) as (url, sim),
        httpx2.AsyncClient(timeout=30) as http,
    ):
        body = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 64,
            "messages": ASK,
            "mcp_servers": [{"type": "url", "url": "https://mcp.example/sse", "name": "x"}],
        }
        reply = await http.post(
            f"{url}/v1/messages",
            json=body,
            headers={"anthropic-version": "2023-06-01", "anthropic-beta": "mcp-client-2025-04-04"},
        )
        assert reply.status_code == 400, reply.text
        error = reply.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert "MCP connector" in error["message"]
        assert [e for e in await sim.received() if e["path"] != "/token"] == []


async def test_a_mixed_fleet_sends_anthropic_only_features_to_the_anthropic_upstream(
    tmp_path: Path,
) -> None:
    """One simulator speaks both wires: an anthropic and a bedrock upstream on it, weights
    equal. Plain requests spread over both; every request with a file source reaches the
    anthropic wire (``/v1/messages``), never Bedrock's (``/model/...``)."""
    async with running_simulator(cloud_config()) as sim:
        anthropic = (
            f'[[upstream]]\nname = "anthropic"\nkind = "anthropic"\nbase_url = "{sim.url}"\n'
            'api_key_env = "MIXED_KEY"\n\n'
        )
        path = tmp_path / "upstreams.toml"
        path.write_text(anthropic + cloud_upstream("bedrock", sim.url))
        variables = {**cloud_environment(tmp_path, sim.url), "MIXED_KEY": SIM_KEY}
        with environment(variables):
            settings = Settings(upstreams_file=str(path), data_dir=str(tmp_path / "data"))
            async with running_proxy(settings) as url, httpx2.AsyncClient(timeout=30) as http:
                beta = {"anthropic-version": "2023-06-01", "anthropic-beta": "files-api-2025-04-14"}
                uploaded = await http.post(
                    f"{url}/v1/files",
                    headers=beta,
                    files={"file": ("notes.txt", b"some notes", "text/plain")},
                )
                assert uploaded.status_code == 200, uploaded.text
                file_id = uploaded.json()["id"]
                source = {
                    "role": "user",
                    "content": [
                        {"type": "document", "source": {"type": "file", "file_id": file_id}},
                        {"type": "text", "text": "Summarise the document."},
                    ],
                }
                headers = beta
                for n in range(4):
                    body = {
                        "model": "claude-sonnet-4-5",
                        "max_tokens": 16,
                        "messages": [
                            source,
                            {"role": "assistant", "content": f"{n}"},
                            {"role": "user", "content": "go on"},
                        ],
                    }
                    await http.post(f"{url}/v1/messages", json=body, headers=headers)
                    plain = {
                        "model": "claude-sonnet-4-5",
                        "max_tokens": 16,
                        "messages": [{"role": "user", "content": f"plain {n}"}],
                    }
                    ok = await http.post(f"{url}/v1/messages", json=plain, headers=headers)
                    assert ok.status_code == 200, ok.text
                received = await sim.received()
    calls = [e for e in received if not e["path"].startswith("/v1/files")]
    paths = [(e["path"], "file_id" in e["body"]) for e in calls]
    assert all(path == "/v1/messages" for path, has_file in paths if has_file)
    assert sum(1 for _, has_file in paths if has_file) == 4
    assert any(path.startswith("/model/") for path, _ in paths)  # plain ones used Bedrock


@pytest.mark.parametrize("kind", CLOUDS)
async def test_the_batch_api_says_it_needs_an_anthropic_upstream(kind: str) -> None:
    """Message Batches live in an Anthropic organisation: a gateway of clouds only
    refuses a batch at creation, in OpenAI's shape, and never sends it anywhere."""
    async with (
        gateway_and_simulator(kind, SimulatorConfig()) as (url, sim),
        httpx2.AsyncClient(timeout=30) as http,
    ):
        line = {
            "custom_id": "1",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "x"}]},
        }
        uploaded = await http.post(
            f"{url}/v1/files",
            files={"file": ("in.jsonl", json.dumps(line).encode() + b"\n")},
            data={"purpose": "batch"},
        )
        assert uploaded.status_code == 200, uploaded.text
        created = await http.post(
            f"{url}/v1/batches",
            json={
                "input_file_id": uploaded.json()["id"],
                "endpoint": "/v1/chat/completions",
                "completion_window": "24h",
            },
        )
        assert created.status_code == 400, created.text
        error = created.json()["error"]
        assert error["code"] == "unsupported_by_upstream"
        assert "anthropic upstream" in error["message"]
        assert [e for e in await sim.received() if e["path"] != "/token"] == []
