"""The proxy over real loopback HTTP (hypercorn) against the simulated upstream."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import httpx2
import openai
import pytest
import trio
from support import (
    SIM_KEY,
    openai_client,
    proxy_and_simulator,
    proxy_settings,
    running_proxy,
    running_simulator,
)

from trio_batcher import Settings
from trio_batcher.serving import serve_app
from trio_batcher.simulator import SimulatorConfig

HELLO = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "Hello there"}]}


def _client(url: str, **kwargs: Any) -> openai.AsyncOpenAI:
    return openai_client(url, **kwargs)


def _assert_openai_error(response: httpx2.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    error: dict[str, Any] = body["error"]
    return error


async def test_openai_sdk_gets_a_chat_completion_with_strict_validation() -> None:
    async with proxy_and_simulator() as (url, sim):
        client = _client(url)
        completion = await client.chat.completions.create(
            model="claude-sonnet-4-5",
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hello there"},
            ],
        )
        assert completion.object == "chat.completion"
        assert completion.id.startswith("chatcmpl-")
        assert completion.model == "claude-sonnet-4-5"
        choice = completion.choices[0]
        assert choice.finish_reason == "stop"
        assert choice.message.role == "assistant"
        assert choice.message.content and "Hello there" in choice.message.content
        assert completion.usage is not None and completion.usage.completion_tokens > 0
        assert (
            completion.usage.total_tokens
            == completion.usage.prompt_tokens + completion.usage.completion_tokens
        )
        stats = await sim.stats()
        assert stats["requests_total"] == 1


async def test_models_list_is_openai_shaped() -> None:
    async with proxy_and_simulator(default_model="claude-haiku-4-5") as (url, _sim):
        client = _client(url)
        models = [m async for m in client.models.list()]
        assert models[0].id == "claude-haiku-4-5"
        assert {m.object for m in models} == {"model"}
        assert "claude-sonnet-4-5" in {m.id for m in models}
        one = await client.models.retrieve("claude-sonnet-4-5")
        assert one.id == "claude-sonnet-4-5"
        with pytest.raises(openai.NotFoundError):
            await client.models.retrieve("gpt-nonexistent")


async def test_health_is_200_once_serving() -> None:
    async with proxy_and_simulator() as (url, _sim), httpx2.AsyncClient() as http:
        response = await http.get(f"{url}/health")
        assert response.status_code == 200
        assert response.json() == {"status": "ok"}


BAD_REQUESTS: list[tuple[str, bytes, int, str | None]] = [
    ("malformed json", b'{"model": "x", "messages": [', 400, None),
    ("empty body", b"", 400, None),
    ("not an object", b"[1, 2]", 400, None),
    ("missing messages", json.dumps({"model": "claude-sonnet-4-5"}).encode(), 400, "messages"),
    (
        "empty messages",
        json.dumps({"model": "claude-sonnet-4-5", "messages": []}).encode(),
        400,
        "messages",
    ),
    (
        "unknown role",
        json.dumps({"model": "m", "messages": [{"role": "robot", "content": "x"}]}).encode(),
        400,
        "messages[0].role",
    ),
]


@pytest.mark.parametrize(
    ("name", "body", "status", "param"), BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS]
)
async def test_bad_input_is_400_and_never_reaches_upstream(
    name: str, body: bytes, status: int, param: str | None
) -> None:
    async with proxy_and_simulator() as (url, sim), httpx2.AsyncClient() as http:
        response = await http.post(
            f"{url}/v1/chat/completions", content=body, headers={"content-type": "application/json"}
        )
        error = _assert_openai_error(response, status)
        assert error["type"] == "invalid_request_error"
        if param is not None:
            assert error["param"] == param
        assert (await sim.stats())["requests_total"] == 0


async def test_unknown_route_is_404_json_and_wrong_method_is_405() -> None:
    async with proxy_and_simulator() as (url, sim), httpx2.AsyncClient() as http:
        error = _assert_openai_error(await http.get(f"{url}/v1/nope"), 404)
        assert "/v1/nope" in error["message"]
        # A client that defaults to another OpenAI API is told where to go instead.
        error = _assert_openai_error(await http.post(f"{url}/v1/embeddings", json={}), 404)
        assert "Embeddings API" in error["message"]
        assert "/v1/chat/completions" in error["message"]
        assert "/v1/responses" in error["message"]
        response = await http.get(f"{url}/v1/chat/completions")
        _assert_openai_error(response, 405)
        assert "POST" in response.headers["allow"]
        assert (await sim.stats())["requests_total"] == 0


async def test_body_over_max_body_bytes_is_413_and_never_reaches_upstream() -> None:
    async with proxy_and_simulator(max_body_bytes=1000) as (url, sim), httpx2.AsyncClient() as http:
        big = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "x" * 2000}]}
        error = _assert_openai_error(await http.post(f"{url}/v1/chat/completions", json=big), 413)
        assert "MAX_BODY_BYTES" in error["message"]
        assert (await sim.stats())["requests_total"] == 0


async def test_proxy_api_keys_require_a_bearer_key() -> None:
    async with proxy_and_simulator(proxy_api_keys=("pk-one", "pk-two")) as (url, sim):
        with pytest.raises(openai.AuthenticationError):
            await _client(url, api_key="wrong").chat.completions.create(**HELLO)  # type: ignore[call-overload]
        async with httpx2.AsyncClient() as http:
            response = await http.post(f"{url}/v1/chat/completions", json=HELLO)
            error = _assert_openai_error(response, 401)
            assert error["type"] == "authentication_error"
            assert "pk-one" not in response.text
            assert (await http.get(f"{url}/health")).status_code == 200
        assert (await sim.stats())["requests_total"] == 0
        completion = await _client(url, api_key="pk-two").chat.completions.create(**HELLO)  # type: ignore[call-overload]
        assert completion.choices[0].message.content


async def test_unreachable_upstream_is_502() -> None:
    with trio.socket.socket() as sock:  # a port nothing listens on
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings = Settings(anthropic_base_url=f"http://127.0.0.1:{port}", anthropic_api_key=SIM_KEY)
    async with running_proxy(settings) as url, httpx2.AsyncClient() as http:
        error = _assert_openai_error(await http.post(f"{url}/v1/chat/completions", json=HELLO), 502)
        assert error["code"] == "upstream_connection_error"


async def test_upstream_that_never_answers_is_504_and_is_abandoned_upstream() -> None:
    async with (
        proxy_and_simulator(request_timeout_s=0.3) as (url, sim),
        httpx2.AsyncClient() as http,
    ):
        body = {**HELLO, "messages": [{"role": "user", "content": "wait [[sim:hang=1]]"}]}
        error = _assert_openai_error(await http.post(f"{url}/v1/chat/completions", json=body), 504)
        assert error["code"] == "request_timeout"
        with trio.fail_after(5):
            stats = await sim.wait_until(lambda s: s["in_flight"] == 0)
        assert stats["abandoned"] == 1


@pytest.mark.parametrize(
    ("fault", "status", "sdk_error"),
    [
        ("status=400", 400, openai.BadRequestError),
        ("status=429,retry_after=7", 429, openai.RateLimitError),
        ("status=529,retry_after=3", 503, openai.InternalServerError),
    ],
)
async def test_upstream_errors_keep_their_meaning(
    fault: str, status: int, sdk_error: type[openai.APIStatusError]
) -> None:
    async with proxy_and_simulator(upstream_max_retries=0, upstream_coordinated_backoff=False) as (
        url,
        _sim,
    ):
        body = {**HELLO, "messages": [{"role": "user", "content": f"fail please [[sim:{fault}]]"}]}
        async with httpx2.AsyncClient() as http:
            response = await http.post(f"{url}/v1/chat/completions", json=body)
            _assert_openai_error(response, status)
            assert response.headers["x-request-id"].startswith("req_")
            if status in (429, 503):
                assert int(response.headers["retry-after"]) >= 1
        with pytest.raises(sdk_error) as info:
            await _client(url).chat.completions.create(**body)
        assert info.value.status_code == status


Answer = tuple[int, bytes, bytes]  # status, content type, body


def _fake_upstream(answer: Callable[[dict[str, Any], dict[bytes, bytes]], Answer]) -> Any:
    """A misbehaving upstream: ``answer(request JSON, request headers)`` says what it sends."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        status, content_type, data = answer(json.loads(body), dict(scope["headers"]))
        headers = [(b"content-type", content_type)]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    return app


def _echo_the_key(body: dict[str, Any], headers: dict[bytes, bytes]) -> Answer:
    key = headers.get(b"x-api-key", b"").decode()
    error = {"type": "error", "error": {"type": "invalid_request_error", "message": f"bad {key}"}}
    if body.get("stream"):
        # Named as Anthropic sends it, or data-only (as some relays pass events on).
        named = "unnamed" not in json.dumps(body["messages"])
        event = ("event: error\n" if named else "") + f"data: {json.dumps(error)}\n\n"
        return 200, b"text/event-stream", event.encode()
    return 400, b"application/json", json.dumps(error).encode()


@asynccontextmanager
async def _proxy_before(upstream: Any) -> AsyncIterator[str]:
    async with trio.open_nursery() as nursery:
        stop = trio.Event()
        host, port = await nursery.start(
            partial(serve_app, upstream, "127.0.0.1", 0, shutdown=stop)
        )
        settings = Settings(anthropic_base_url=f"http://{host}:{port}", anthropic_api_key=SIM_KEY)
        try:
            async with running_proxy(settings) as url:
                yield url
        finally:
            stop.set()


async def test_a_200_that_is_not_a_message_is_a_502_not_an_empty_completion() -> None:
    def portal(body: dict[str, Any], headers: dict[bytes, bytes]) -> Answer:
        return 200, b"application/json", b'{"ok": true}'

    async with _proxy_before(_fake_upstream(portal)) as url, httpx2.AsyncClient() as http:
        response = await http.post(f"{url}/v1/chat/completions", json=HELLO)
        assert response.status_code == 502
        assert response.json()["error"]["code"] == "upstream_protocol_error"


def _whole_stream(text: str = "Hi") -> list[tuple[str, dict[str, Any]]]:
    """The events of a complete one-block Messages stream."""
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }
    return [
        ("message_start", {"type": "message_start", "message": message}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": text},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 2},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


def _sse(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    return b"".join(f"event: {n}\ndata: {json.dumps(d)}\n\n".encode() for n, d in events)


async def test_a_stream_answered_with_a_json_body_is_a_502_and_not_retried() -> None:
    """A gateway that ignored "stream" generated (and billed) the answer once; retrying
    would bill it again and still not give the client a stream."""
    calls: list[bool] = []

    def ignores_stream(body: dict[str, Any], headers: dict[bytes, bytes]) -> Answer:
        calls.append(bool(body.get("stream")))
        message = {**_whole_stream()[0][1]["message"], "content": [{"type": "text", "text": "x"}]}
        return 200, b"application/json", json.dumps(message).encode()

    async with (
        _proxy_before(_fake_upstream(ignores_stream)) as url,
        httpx2.AsyncClient() as http,
    ):
        response = await http.post(f"{url}/v1/chat/completions", json={**HELLO, "stream": True})
        assert response.status_code == 502
        error = response.json()["error"]
        assert error["code"] == "upstream_protocol_error"
        assert "application/json" in error["message"]
        assert calls == [True]


async def test_events_a_stream_does_not_use_are_skipped_whatever_their_data() -> None:
    """Keep-alives and vendor events (ignored by the SSE rules and by Anthropic's SDK) must
    not break a stream, even when their data is not JSON."""
    events = _whole_stream("fine")
    sse = (
        b"event: ping\ndata:\n\n"
        + _sse(events[:3])
        + b"event: vendor_keepalive\ndata: keepalive\n\n"
        + b"event: ping\ndata: [1, 2]\n\n"
        + _sse(events[3:])
    )

    def with_extras(body: dict[str, Any], headers: dict[bytes, bytes]) -> Answer:
        return 200, b"text/event-stream", sse

    async with _proxy_before(_fake_upstream(with_extras)) as url, httpx2.AsyncClient() as http:
        response = await http.post(f"{url}/v1/chat/completions", json={**HELLO, "stream": True})
        assert response.status_code == 200
        lines = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
        assert lines[-1] == "[DONE]"
        chunks = [json.loads(line) for line in lines[:-1]]
        assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "fine"
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


async def test_upstream_bodies_are_read_only_as_far_as_they_can_be_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A runaway error page or answer must not fill the proxy's memory: an error is read up
    to its first 64 KiB (enough for any JSON message), an answer up to MAX_REPLY_BYTES."""
    monkeypatch.setattr("trio_batcher.upstream.exchange.MAX_REPLY_BYTES", 10_000)
    padded = {"type": "error", "error": {"type": "api_error", "message": "x" * 70_000}}
    message = {**_whole_stream()[0][1]["message"], "content": [{"type": "text", "text": "y"}]}

    def oversized(body: dict[str, Any], headers: dict[bytes, bytes]) -> Answer:
        text = json.dumps(body["messages"])
        if "error" in text:
            return 400, b"application/json", json.dumps(padded).encode()
        message["content"][0]["text"] = "y" * (20_000 if "big" in text else 9_000)
        return 200, b"application/json", json.dumps(message).encode()

    async with (
        _proxy_before(_fake_upstream(oversized)) as url,
        httpx2.AsyncClient() as http,
    ):
        chat = f"{url}/v1/chat/completions"

        async def ask(text: str) -> httpx2.Response:
            return await http.post(
                chat, json={**HELLO, "messages": [{"role": "user", "content": text}]}
            )

        error = (await ask("error")).json()["error"]
        assert error["message"] == "The upstream returned HTTP 400."  # cut, so not parsed
        too_big = await ask("big")
        assert too_big.status_code == 502
        assert too_big.json()["error"]["code"] == "upstream_protocol_error"
        assert (await ask("small")).status_code == 200  # just under the cap: fine


async def test_an_event_stream_too_large_to_buffer_is_a_502_or_an_error_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from trio_batcher.upstream.sse import SSEDecoder

    monkeypatch.setattr(
        "trio_batcher.upstream.exchange.SSEDecoder", partial(SSEDecoder, max_event_bytes=1000)
    )
    endless_line = b"data: " + b"x" * 5000
    content_seen = trio.Event()

    async def runaway(scope: Any, receive: Any, send: Any) -> None:
        """Before content: a line too long to buffer. After: the same, once the client has
        the first token (so the two parts cannot arrive in one read)."""
        if scope["type"] == "lifespan":
            await _fake_upstream(_echo_the_key)(scope, receive, send)
            return
        late = b"late" in (await receive())["body"]
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if late:
            await send(
                {"type": "http.response.body", "body": _sse(_whole_stream()[:3]), "more_body": True}
            )
            await content_seen.wait()
        await send({"type": "http.response.body", "body": endless_line})

    async with _proxy_before(runaway) as url, httpx2.AsyncClient() as http:
        chat = f"{url}/v1/chat/completions"
        early = await http.post(chat, json={**HELLO, "stream": True})
        assert early.status_code == 502
        assert early.json()["error"]["code"] == "upstream_protocol_error"
        late_body = {**HELLO, "stream": True, "messages": [{"role": "user", "content": "late"}]}
        async with http.stream("POST", chat, json=late_body) as late:
            assert late.status_code == 200
            data = [line async for line in _data_lines(late, content_seen)]
        assert json.loads(data[-1])["error"]["code"] == "upstream_protocol_error"


async def _data_lines(response: httpx2.Response, content_seen: trio.Event) -> AsyncIterator[str]:
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            if '"content":' in line:
                content_seen.set()
            yield line[6:]


def _lingering_upstream(hung_up: trio.Event) -> Any:
    """A whole stream, message_stop included, on a body it never ends; ``hung_up`` is set
    when the proxy closes the connection."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await _fake_upstream(_echo_the_key)(scope, receive, send)
            return
        await receive()
        sse = _sse(_whole_stream())
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": sse, "more_body": True})
        while (await receive())["type"] != "http.disconnect":  # until the proxy hangs up
            pass
        hung_up.set()

    return app


async def test_a_stream_is_whole_at_message_stop_even_if_the_upstream_lingers() -> None:
    """The client's stream ends at message_stop: the proxy does not wait for the upstream
    body's end (read afterwards, for connection reuse) before writing [DONE]."""
    hung_up = trio.Event()
    async with (
        _proxy_before(_lingering_upstream(hung_up)) as url,
        httpx2.AsyncClient(timeout=30) as http,
    ):
        body = {**HELLO, "stream": True}
        with trio.fail_after(10):  # not REQUEST_TIMEOUT_S (600 s): a hang is a failure
            async with http.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
                text = (await response.aread()).decode()
        # The whole answer arrived while the upstream connection was still open.
        assert not hung_up.is_set()
        assert text.rstrip().endswith("data: [DONE]")
        assert '"finish_reason":"stop"' in text
        with trio.fail_after(10):  # and the linger is bounded: the proxy hangs up in time
            await hung_up.wait()


async def test_an_upstream_that_echoes_the_key_does_not_leak_it() -> None:
    upstream = _fake_upstream(_echo_the_key)
    async with _proxy_before(upstream) as url, httpx2.AsyncClient() as http:
        for stream, text in ((False, "hi"), (True, "named"), (True, "unnamed")):
            body = {**HELLO, "messages": [{"role": "user", "content": text}], "stream": stream}
            response = await http.post(f"{url}/v1/chat/completions", json=body)
            assert response.status_code == 400
            assert response.json()["error"]["message"] == "bad [redacted]"
            assert SIM_KEY not in response.text


async def test_upstream_key_is_never_echoed_or_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    config = SimulatorConfig(api_keys=frozenset({"the-right-key"}))
    async with running_simulator(config) as sim:
        settings = proxy_settings(sim)  # sends SIM_KEY, which this simulator refuses
        async with running_proxy(settings) as url, httpx2.AsyncClient() as http:
            response = await http.post(f"{url}/v1/chat/completions", json=HELLO)
            _assert_openai_error(response, 502)  # the gateway's key, not the client's
            assert response.json()["error"]["code"] == "upstream_authentication_error"
            assert SIM_KEY not in response.text
            ok = await http.post(f"{url}/v1/chat/completions", json={**HELLO, "messages": "bad"})
            assert SIM_KEY not in ok.text
    assert SIM_KEY not in caplog.text


@pytest.mark.parametrize(
    ("fields", "settings", "param", "starts"),
    [
        ({"max_completion_tokens": 10**6}, {}, "max_completion_tokens", "max_completion_tokens: "),
        ({"max_tokens": 10**6}, {}, "max_tokens", "max_tokens: "),
        ({}, {"default_max_tokens": 10**6}, "max_completion_tokens", "max_tokens: "),
    ],
    ids=["max_completion_tokens", "max_tokens", "the_gateways_default"],
)
async def test_an_output_cap_past_the_models_limit_names_the_clients_field(
    fields: dict[str, Any], settings: dict[str, Any], param: str, starts: str
) -> None:
    async with proxy_and_simulator(**settings) as (url, _), httpx2.AsyncClient() as http:
        for stream in (False, True):
            body = {**HELLO, **fields, "stream": stream}
            error = _assert_openai_error(
                await http.post(f"{url}/v1/chat/completions", json=body), 400
            )
            assert error["param"] == param
            assert error["message"].startswith(starts), error["message"]
            assert ("DEFAULT_MAX_TOKENS" in error["message"]) == (not fields)
