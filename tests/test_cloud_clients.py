"""The gateway's own Bedrock and Vertex clients against the simulator, over real loopback.

They must answer exactly as the Anthropic client does -- a message, a stream of Anthropic
events, a ``ProxyError`` whose status and type are Anthropic's -- while speaking each
cloud's wire: SigV4 and event-stream for Bedrock, a refreshed bearer token and SSE for
Vertex. The simulator checks the wire (signatures, tokens, body rules) as the clouds do.
"""

from __future__ import annotations

import importlib
import json
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from botocore.credentials import Credentials
from cloud_support import (
    ACCESS_KEY,
    ASK,
    BEDROCK_MODEL,
    PROJECT,
    REGION,
    SECRET_KEY,
    VERTEX_MODEL,
    VERTEX_REGION,
    WEATHER_TOOL,
    cloud_config,
    service_account_credentials,
)
from support import SIM_KEY, Sim, running_simulator

from trio_batcher.errors import ProxyError
from trio_batcher.settings import Settings
from trio_batcher.simulator import SimulatorConfig
from trio_batcher.simulator.eventstream import chunk_message
from trio_batcher.upstream.caller import MessagesCaller
from trio_batcher.upstream.client import UpstreamClient, new_upstream_pool
from trio_batcher.upstream.kinds import (
    AwsCredentials,
    BedrockClient,
    BedrockTarget,
    GoogleCredentials,
    VertexClient,
    VertexTarget,
)
from trio_batcher.upstream.kinds.bedrock_client import foundation_model
from trio_batcher.upstream.request import UpstreamRequest, outline

BETA = "interleaved-thinking-2025-05-14"
HELLO: dict[str, Any] = {
    "model": "claude-sonnet-4-5",  # the client's name: the router maps it to request.model
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "Say hello"}],
}
Kind = Callable[[Sim, Path], MessagesCaller]


class _Session:
    """A botocore session whose chain finds ``keys`` (the environment's, say)."""

    def __init__(self, keys: Credentials) -> None:
        self.keys = keys

    def get_credentials(self) -> Credentials:
        return self.keys


def bedrock_client(sim: Sim, _: Path, secret: str = SECRET_KEY) -> BedrockClient:
    keys = Credentials(ACCESS_KEY, secret)
    credentials = AwsCredentials(session_factory=lambda: _Session(keys))
    return BedrockClient.for_target(BedrockTarget(REGION, base_url=sim.url), credentials)


def google_credentials(sim: Sim, tmp_path: Path, **kwargs: Any) -> GoogleCredentials:
    return GoogleCredentials(load=lambda: service_account_credentials(sim.url, tmp_path), **kwargs)


def vertex_client(sim: Sim, tmp_path: Path, **kwargs: Any) -> VertexClient:
    target = VertexTarget(PROJECT, VERTEX_REGION, base_url=f"{sim.url}/v1")
    return VertexClient.for_target(target, google_credentials(sim, tmp_path, **kwargs))


KINDS: dict[str, tuple[Kind, str]] = {
    "bedrock": (bedrock_client, BEDROCK_MODEL),
    "vertex": (vertex_client, VERTEX_MODEL),
}


def request(
    body: dict[str, Any],
    model: str,
    *,
    stream: bool = False,
    headers: tuple[tuple[bytes, bytes], ...] = (),
) -> UpstreamRequest:
    """A request as the native door makes it: the client's bytes as ``content``, and only
    the body's outline parsed (so a client that used ``body`` would send no messages)."""
    full = {**body, "stream": True} if stream else body
    return UpstreamRequest(
        body=outline(full),
        model=model,
        stream=stream,
        surface="anthropic.messages",
        content=json.dumps(full).encode(),
        headers=headers,
    )


@asynccontextmanager
async def calling(
    kind: str, tmp_path: Path, config: SimulatorConfig | None = None
) -> AsyncIterator[tuple[MessagesCaller, str, Sim]]:
    make, model = KINDS[kind]
    async with running_simulator(config or cloud_config()) as sim:
        client = make(sim, tmp_path)
        try:
            yield client, model, sim
        finally:
            await client.aclose()


def said(events: list[tuple[str, dict[str, Any], str]]) -> str:
    return "".join(
        data["delta"].get("text", "") for name, data, _ in events if name == "content_block_delta"
    )


async def read_all(client: MessagesCaller, req: UpstreamRequest) -> list[Any]:
    stream = await client.open_stream(req)
    try:
        return [event async for event in stream.events()]
    finally:
        await stream.aclose()


@pytest.mark.parametrize("kind", KINDS)
async def test_a_message_goes_on_the_clouds_wire_and_comes_back_as_anthropics(
    kind: str, tmp_path: Path
) -> None:
    headers = ((b"anthropic-version", b"2023-06-01"), (b"anthropic-beta", BETA.encode()))
    async with calling(kind, tmp_path) as (client, model, sim):
        reply = await client.create_message(request(HELLO, model, headers=headers))
        assert reply.message["type"] == "message"
        assert reply.message["content"][0]["type"] == "text" and reply.message["content"][0]["text"]
        assert json.loads(reply.raw) == reply.message
        assert reply.started_at <= reply.first_byte_at <= reply.finished_at
        assert await client.list_models() == []
        entry = (await sim.received())[-1]
    sent = {name.lower(): value for name, value in entry["headers"]}
    assert "anthropic-version" not in sent  # the cloud's version is in the body
    body = entry["json"]
    assert body["messages"] == HELLO["messages"]  # from the client's bytes, not the outline
    assert "model" not in body
    if kind == "bedrock":
        assert entry["path"] == f"/model/{BEDROCK_MODEL}/invoke"
        assert body["anthropic_version"] == "bedrock-2023-05-31"
        assert body["anthropic_beta"] == [BETA] and "anthropic-beta" not in sent
        assert sent["authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/")
    else:
        assert entry["path"].endswith(f"/publishers/anthropic/models/{VERTEX_MODEL}:rawPredict")
        assert body["anthropic_version"] == "vertex-2023-10-16"
        assert sent["anthropic-beta"] == BETA and "anthropic_beta" not in body
        assert sent["authorization"].startswith("Bearer ya29.sim")
    assert SECRET_KEY not in json.dumps(entry)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_stream_is_anthropics_events_in_order(kind: str, tmp_path: Path) -> None:
    async with calling(kind, tmp_path) as (client, model, sim):
        stream = await client.open_stream(request(HELLO, model, stream=True))
        try:
            assert stream.started_at <= stream.first_byte_at
            events = [event async for event in stream.events()]
        finally:
            await stream.aclose()
        path = (await sim.received())[-1]["path"]
    names = [name for name, _, _ in events]
    assert names[0] == "message_start" and names[-1] == "message_stop"
    assert names.index("content_block_start") < names.index("content_block_delta")
    assert "message_delta" in names and "error" not in names
    assert said(events)
    for name, data, raw in events:
        assert json.loads(raw) == data and data["type"] == name
    if kind == "bedrock":
        assert path.endswith("/invoke-with-response-stream")
        assert "amazon-bedrock-invocationMetrics" in events[-1][1]  # as Bedrock sent it
    else:
        assert path.endswith(":streamRawPredict")


@pytest.mark.parametrize("kind", KINDS)
async def test_tool_use_comes_back_whole_and_streamed(kind: str, tmp_path: Path) -> None:
    asked = {"model": "claude-sonnet-4-5", "max_tokens": 256, "messages": ASK}
    asked["tools"] = [WEATHER_TOOL]
    async with calling(kind, tmp_path) as (client, model, _):
        reply = await client.create_message(request(asked, model))
        events = await read_all(client, request(asked, model, stream=True))
    assert reply.message["stop_reason"] == "tool_use"
    (call,) = [block for block in reply.message["content"] if block["type"] == "tool_use"]
    assert call["name"] == "get_weather" and isinstance(call["input"]["city"], str)
    starts = [data["content_block"] for name, data, _ in events if name == "content_block_start"]
    assert any(block["type"] == "tool_use" and block["name"] == "get_weather" for block in starts)
    partial = "".join(
        data["delta"]["partial_json"]
        for name, data, _ in events
        if name == "content_block_delta" and data["delta"]["type"] == "input_json_delta"
    )
    assert isinstance(json.loads(partial)["city"], str)
    (delta,) = [data for name, data, _ in events if name == "message_delta"]
    assert delta["delta"]["stop_reason"] == "tool_use"


def _asking(fault: str) -> dict[str, Any]:
    return {**HELLO, "messages": [{"role": "user", "content": f"hi [[sim:{fault}]]"}]}


@pytest.mark.parametrize("kind", KINDS)
async def test_cloud_errors_mean_what_anthropics_mean(kind: str, tmp_path: Path) -> None:
    async with calling(kind, tmp_path) as (client, model, _):
        with pytest.raises(ProxyError) as overloaded:
            await client.create_message(request(_asking("status=529"), model))
        with pytest.raises(ProxyError) as throttled:
            await client.create_message(request(_asking("status=429"), model))
        with pytest.raises(ProxyError) as invalid:
            await client.create_message(request({**HELLO, "max_tokens": "many"}, model))
        with pytest.raises(ProxyError) as streamed:  # refused before the stream opens
            await client.open_stream(request(_asking("status=529"), model, stream=True))
    for error in (overloaded.value, streamed.value):
        assert error.upstream_status == 529 and error.code == "overloaded_error"
        assert error.status == 503  # what every client gets for an overloaded upstream
    assert throttled.value.upstream_status == 429 == throttled.value.status
    assert throttled.value.code == "rate_limit_error"
    assert throttled.value.headers["retry-after"] == "1"  # a limit that passes: retried
    assert invalid.value.status == 400 and invalid.value.code == "invalid_request_error"
    assert "max_tokens" in invalid.value.message


async def test_a_bedrock_error_mid_stream_is_an_anthropic_error_event(tmp_path: Path) -> None:
    async with calling("bedrock", tmp_path) as (client, model, _):
        events = await read_all(
            client, request(_asking("stream_error_after=2"), model, stream=True)
        )
    name, data, _ = events[-1]
    assert name == "error" and data["error"]["type"] == "overloaded_error"
    assert [n for n, _, _ in events].count("content_block_delta") == 2


async def test_a_refused_signature_is_the_gateways_problem_and_names_no_secret(
    tmp_path: Path,
) -> None:
    async with running_simulator(cloud_config()) as sim:
        client = bedrock_client(sim, tmp_path, secret="not-the-secret-either")
        try:
            with pytest.raises(ProxyError) as refused:
                await client.create_message(request(HELLO, BEDROCK_MODEL))
        finally:
            await client.aclose()
    error = refused.value
    assert error.status == 502 and error.code == "upstream_authentication_error"
    assert "AWS credentials" in error.message and "signature" in error.message
    assert "not-the-secret-either" not in error.message and SECRET_KEY not in error.message


async def test_an_expired_vertex_token_is_refused_as_the_gateways(tmp_path: Path) -> None:
    # Tokens issued with no lifetime are expired as they are issued.
    config = cloud_config(vertex_token_lifetime_s=0.0)
    async with calling("vertex", tmp_path, config) as (client, model, _):
        with pytest.raises(ProxyError) as refused:
            await client.create_message(request(HELLO, model))
    error = refused.value
    assert error.status == 502 and error.code == "upstream_authentication_error"
    assert "Google credentials" in error.message and "expired" in error.message
    assert "ya29" not in error.message


@pytest.fixture
def wall_clock() -> trio.testing.MockClock:
    """Trio time that runs as the wall clock does, and can be jumped ahead."""
    return trio.testing.MockClock(rate=1.0)


async def test_a_vertex_token_is_refreshed_before_it_expires(
    tmp_path: Path, wall_clock: trio.testing.MockClock
) -> None:
    # Tokens last 301 s and are refreshed 300 s early -- but no sooner than the cache's
    # retry interval (10 s) after the last refresh.
    config = cloud_config(vertex_token_lifetime_s=301.0)
    async with running_simulator(config) as sim:
        client = vertex_client(sim, tmp_path, early_s=300)
        try:
            await client.create_message(request(HELLO, VERTEX_MODEL))
            await client.count_tokens(request({"messages": ASK}, VERTEX_MODEL))  # same token
            wall_clock.jump(11)
            await client.create_message(request(HELLO, VERTEX_MODEL))
        finally:
            await client.aclose()
        entries = await sim.received()
    assert [entry["path"] for entry in entries].count("/token") == 2
    tokens = [
        dict(entry["headers"]).get("authorization")
        for entry in entries
        if entry["path"] != "/token"
    ]
    assert tokens[0] == tokens[1] != tokens[2]
    assert all(entry["status"] == 200 for entry in entries)


async def test_both_clouds_count_tokens_as_anthropic_does(tmp_path: Path) -> None:
    counted = {"model": "claude-sonnet-4-5", "messages": ASK, "tools": [WEATHER_TOOL]}
    async with running_simulator(cloud_config()) as sim:
        bedrock = bedrock_client(sim, tmp_path)
        vertex = vertex_client(sim, tmp_path)
        anthropic = UpstreamClient(
            Settings(anthropic_base_url=sim.url, anthropic_api_key=SIM_KEY),
            new_upstream_pool(Settings(anthropic_base_url=sim.url)),
        )
        try:
            on_bedrock = await bedrock.count_tokens(request(counted, BEDROCK_MODEL))
            on_vertex = await vertex.count_tokens(request(counted, VERTEX_MODEL))
            first_party = await anthropic.count_tokens(
                request({**counted, "model": "claude-sonnet-4-5-20250929"}, "")
            )
        finally:
            for client in (bedrock, vertex, anthropic):
                await client.aclose()
        entries = await sim.received()
    assert on_bedrock.message == on_vertex.message == first_party.message
    assert on_bedrock.message["input_tokens"] > 0
    assert json.loads(on_bedrock.raw) == on_bedrock.message
    (bedrock_entry,) = [e for e in entries if e["path"].endswith("/count-tokens")]
    (vertex_entry,) = [e for e in entries if e["path"].endswith("/count-tokens:rawPredict")]
    # Bedrock counts by the foundation model behind the inference profile.
    assert bedrock_entry["path"] == "/model/anthropic.claude-sonnet-4-5-20250929-v1:0/count-tokens"
    assert vertex_entry["path"].endswith("/models/count-tokens:rawPredict")
    assert vertex_entry["json"]["model"] == VERTEX_MODEL
    assert vertex_entry["json"]["anthropic_version"] == "vertex-2023-10-16"


def test_an_inference_profile_is_counted_by_its_foundation_model() -> None:
    assert foundation_model(BEDROCK_MODEL) == "anthropic.claude-sonnet-4-5-20250929-v1:0"
    assert foundation_model("global.anthropic.claude-haiku-4-5-20251001-v1:0") == (
        "anthropic.claude-haiku-4-5-20251001-v1:0"
    )
    arn = "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/abc123"
    assert foundation_model(arn) == arn


@pytest.mark.parametrize("kind", KINDS)
async def test_closing_a_stream_midway_abandons_the_call_upstream(
    kind: str, tmp_path: Path
) -> None:
    slow = _asking("tokens_per_s=20,tokens=400")
    async with calling(kind, tmp_path) as (client, model, sim):
        stream = await client.open_stream(request(slow, model, stream=True))
        seen = 0
        try:
            async with aclosing(stream.events()) as events:
                async for name, _, _ in events:
                    seen += name == "content_block_delta"
                    if seen == 2:
                        break
        finally:
            await stream.aclose()
        with trio.fail_after(5):
            stats = await sim.wait_until(lambda s: s["in_flight"] == 0)
    assert stats["abandoned"] == 1 and stats["completed"] == 0


async def _serve_once(body: bytes, task_status: trio.TaskStatus[int]) -> None:
    """Answer one HTTP request with a 200 event-stream whose body is ``body``, then close."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    stream = await listeners[0].accept()
    async with stream:
        received = b""
        while b"\r\n\r\n" not in received:
            received += await stream.receive_some()
        head, _, rest = received.partition(b"\r\n\r\n")
        length = int(
            next(
                line.split(b":")[1]
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
        )
        while len(rest) < length:
            rest += await stream.receive_some()
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/vnd.amazon.eventstream\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body) + body
        )
    await listeners[0].aclose()


async def test_a_bedrock_stream_cut_inside_a_message_is_a_protocol_error(
    tmp_path: Path,
) -> None:
    start = json.dumps({"type": "message_start", "message": {"usage": {}}}).encode()
    whole = chunk_message(start)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(_serve_once, whole + whole[: len(whole) // 2])
        target = BedrockTarget(REGION, base_url=f"http://127.0.0.1:{port}")
        credentials = AwsCredentials(session_factory=lambda: _Session(Credentials("AK", "SK")))
        client = BedrockClient.for_target(target, credentials)
        seen: list[str] = []
        with pytest.raises(ProxyError) as cut:
            stream = await client.open_stream(request(HELLO, BEDROCK_MODEL, stream=True))
            try:
                async for name, _, _ in stream.events():
                    seen.append(name)
            finally:
                await stream.aclose()
        await client.aclose()
    assert seen == ["message_start"]
    assert cut.value.status == 502 and cut.value.code == "upstream_protocol_error"


async def test_the_anthropic_client_closes_its_pool() -> None:
    async with running_simulator() as sim:
        settings = Settings(anthropic_base_url=sim.url, anthropic_api_key=SIM_KEY)
        client = UpstreamClient(settings, new_upstream_pool(settings))
        await client.create_message(request({**HELLO, "model": "claude-sonnet-4-5"}, ""))
        await client.aclose()
        with pytest.raises(ProxyError) as closed:
            await client.create_message(request(HELLO, ""))
    assert closed.value.status == 502 and closed.value.code == "upstream_connection_error"


@pytest.mark.parametrize(
    ("kind", "builder"), [("bedrock", "bedrock_body"), ("vertex", "vertex_body")]
)
async def test_a_large_body_is_rewritten_and_signed_off_the_event_loop(
    kind: str, builder: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Parsing, re-serialising and hashing 30 MB takes a large fraction of a second: on the
    # loop it would stall every other request.
    module = f"trio_batcher.upstream.kinds.{kind}_client"
    original = getattr(importlib.import_module(module), builder)
    on_loop: list[bool] = []

    def watched(*args: Any, **kwargs: Any) -> bytes:
        on_loop.append(threading.current_thread() is threading.main_thread())
        result: bytes = original(*args, **kwargs)
        return result

    monkeypatch.setattr(f"{module}.{builder}", watched)
    large = {**HELLO, "messages": [{"role": "user", "content": "word " * 60_000}]}
    async with calling(kind, tmp_path) as (client, model, _):
        await client.create_message(request(HELLO, model))
        await client.create_message(request(large, model))
    assert on_loop == [True, False]
