"""The ASGI chat endpoint in front of Quart: the edges a Quart view used to handle for us.

In-memory ASGI calls where the test needs a pipeline that misbehaves; real loopback HTTP
against the simulator everywhere else.
"""

from __future__ import annotations

import gzip
import json
import logging
import re
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import httpx2
import pytest
import trio
from support import proxy_and_simulator

from trio_batcher.edge.endpoint import ApiEndpoint
from trio_batcher.edge.openai_chat import CHAT_PATH, OpenAIChatDoor
from trio_batcher.pipeline.core import Pipeline
from trio_batcher.settings import Settings
from trio_batcher.tenants import TenantDirectory, load_tenants

HELLO = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "Hello there"}]}

# No client keys: every caller is the anonymous tenant.
_ANYONE = load_tenants(None)


def _no_keys() -> TenantDirectory:
    return _ANYONE


class _Recorder:
    def __init__(self, body: bytes) -> None:
        self.messages: list[dict[str, Any]] = []
        self.incoming = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive(self) -> dict[str, Any]:
        if self.incoming:
            return self.incoming.pop(0)
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    @property
    def status(self) -> int:
        return int(self.messages[0]["status"])

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.messages[1:])


def _scope(path: str = "/v1/chat/completions", method: str = "POST") -> dict[str, Any]:
    return {"type": "http", "path": path, "method": method, "headers": []}


async def _inner(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 299, "headers": []})
    await send({"type": "http.response.body", "body": b"inner"})


_DOORS = {CHAT_PATH: OpenAIChatDoor(Settings())}


class _Broken:
    flex_ready = False  # no flex window: the doors translate as always

    async def handle(self, *args: Any) -> Any:
        raise RuntimeError("a bug")

    def route_facts(self, *args: Any) -> None:
        return None  # one upstream: nothing to work out for the router

    def record_refused(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("the request was not refused")


async def test_before_startup_the_endpoint_answers_503_starting() -> None:
    endpoint = ApiEndpoint(_inner, lambda: None, _DOORS, max_body_bytes=1000, tenants=_no_keys)
    call = _Recorder(b"{}")
    await endpoint(_scope(), call.receive, call.send)
    assert call.status == 503
    assert b'"code":"starting"' in call.body


async def test_other_paths_and_methods_go_to_the_inner_app() -> None:
    endpoint = ApiEndpoint(_inner, lambda: None, _DOORS, max_body_bytes=1000, tenants=_no_keys)
    for scope in (
        _scope("/v1/models", "GET"),
        _scope(method="GET"),
        _scope("/v1/chat/completion"),
        _scope("/v2/chat/completions"),
    ):
        call = _Recorder(b"")
        await endpoint(scope, call.receive, call.send)
        assert call.status == 299


async def test_an_unexpected_error_is_a_logged_openai_shaped_500(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken: Any = _Broken()

    def pipeline() -> Pipeline:
        return broken  # type: ignore[no-any-return]

    endpoint = ApiEndpoint(_inner, pipeline, _DOORS, max_body_bytes=1000, tenants=_no_keys)
    call = _Recorder(json.dumps(HELLO).encode())
    with caplog.at_level(logging.ERROR, logger="trio_batcher"):
        await endpoint(_scope(), call.receive, call.send)
    assert call.status == 500
    assert b'"message":"Internal proxy error."' in call.body
    assert "a bug" in caplog.text


async def test_chunked_body_over_max_body_bytes_is_413_without_an_upstream_call() -> None:
    async def chunks() -> AsyncIterator[
        bytes
    ]:  # no Content-Length: the limit applies as it arrives
        yield b'{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"'
        for _ in range(20):
            yield b"x" * 100
        yield b'"}]}'

    async with proxy_and_simulator(max_body_bytes=1000) as (url, sim), httpx2.AsyncClient() as http:
        response = await http.post(f"{url}/v1/chat/completions", content=chunks())
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "request_entity_too_large"
        assert (await sim.stats())["requests_total"] == 0


async def test_client_that_leaves_while_sending_its_body_gets_nothing_and_costs_nothing() -> None:
    handled: list[object] = []
    refused: list[int] = []

    class _Recording:
        async def handle(self, payload: object, arrived: float) -> Any:
            handled.append(payload)
            raise AssertionError("the pipeline must not run")

        def record_refused(self, status: int, arrived: float, **kwargs: Any) -> None:
            refused.append(status)  # still a request, for the metrics: a 499

    recording: Any = _Recording()
    endpoint = ApiEndpoint(_inner, lambda: recording, _DOORS, max_body_bytes=1000, tenants=_no_keys)
    call = _Recorder(b'{"model": "claude')
    call.incoming[0]["more_body"] = True  # the rest never comes: the client leaves
    call.incoming.append({"type": "http.disconnect"})
    with trio.fail_after(1):  # returns at once, rather than waiting for more body
        await endpoint(_scope(), call.receive, call.send)
    assert call.messages == []
    assert handled == []
    assert refused == [499]


async def test_stream_response_headers_and_request_field_names_in_headers_are_safe() -> None:
    body = {**HELLO, "stream": True, "ünknown\r\nx-injected": 1}
    async with proxy_and_simulator() as (url, _sim), httpx2.AsyncClient() as http:
        async with http.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
            assert response.status_code == 200
            assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
            assert response.headers["cache-control"] == "no-cache"
            assert response.headers["x-accel-buffering"] == "no"
            assert "x-injected" not in response.headers
            ignored = response.headers["x-trio-batcher-ignored-params"]
            assert ignored.isascii() and "\r" not in ignored and "nknown" in ignored
            text = (await response.aread()).decode()
        assert text.rstrip().endswith("data: [DONE]")


async def test_json_nested_too_deeply_is_a_400_not_a_crash() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    async with proxy_and_simulator() as (url, sim), httpx2.AsyncClient() as http:
        response = await http.post(f"{url}/v1/chat/completions", content=deep)
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "invalid_json"
        assert (await sim.stats())["requests_total"] == 0


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (rb'{"model":"m\udc80","messages":[{"role":"user","content":"hi"}]}', "model"),
        (
            rb'{"model":"m","messages":[{"role":"user","content":"a\ud800b"}]}',
            "messages[0].content",
        ),
        (rb'{"model":"m","messages":[],"\udfff":1}', "\\udfff"),
    ],
)
async def test_an_unpaired_surrogate_is_a_400_and_leaves_the_metrics_working(
    body: bytes, param: str
) -> None:
    async with (
        proxy_and_simulator(metrics_enabled=True) as (url, sim),
        httpx2.AsyncClient() as http,
    ):
        response = await http.post(f"{url}/v1/chat/completions", content=body)
        assert response.status_code == 400
        error = response.json()["error"]
        assert (error["code"], error["param"]) == ("invalid_json", param)
        assert (await http.get(f"{url}/metrics")).status_code == 200
        assert (await http.get(f"{url}/metrics/prometheus")).status_code == 200
        paired = (
            rb'{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"\ud83d\ude00"}]}'
        )
        assert (await http.post(f"{url}/v1/chat/completions", content=paired)).status_code == 200
        assert (await sim.stats())["requests_total"] == 1


async def test_base_url_spellings_reach_the_same_routes_and_the_same_auth() -> None:
    async with (
        proxy_and_simulator(proxy_api_keys=("k1",)) as (url, sim),
        httpx2.AsyncClient() as http,
    ):
        bearer = {"authorization": "Bearer k1"}
        for path in (
            "//v1/chat/completions",
            "/v1//chat/completions",
            "/v1/chat/completions/",
            "/chat/completions",
        ):
            refused = await http.post(f"{url}{path}", json=HELLO)
            assert refused.status_code == 401, path
            ok = await http.post(f"{url}{path}", json=HELLO, headers=bearer)
            assert ok.status_code == 200, path
            assert ok.json()["object"] == "chat.completion"
        assert (await http.get(f"{url}/models")).status_code == 401
        models = await http.get(f"{url}/models", headers=bearer)
        assert models.json()["object"] == "list"
        wrong_method = await http.get(f"{url}/chat/completions", headers=bearer)
        assert wrong_method.status_code == 405
        assert "POST" in wrong_method.headers["allow"]
        assert (await sim.stats())["requests_total"] == 4


@pytest.mark.parametrize("header", ["api-key", "x-api-key"])
async def test_azure_and_anthropic_style_key_headers_are_accepted(header: str) -> None:
    async with (
        proxy_and_simulator(proxy_api_keys=("k1",)) as (url, _sim),
        httpx2.AsyncClient() as http,
    ):
        chat = f"{url}/v1/chat/completions"
        assert (await http.post(chat, json=HELLO, headers={header: "k1"})).status_code == 200
        assert (await http.post(chat, json=HELLO, headers={header: "k2"})).status_code == 401
        models = await http.get(f"{url}/v1/models", headers={header: "k1"})
        assert models.status_code == 200


async def test_a_compressed_request_body_is_415_not_a_json_error() -> None:
    async with proxy_and_simulator() as (url, sim), httpx2.AsyncClient() as http:
        response = await http.post(
            f"{url}/v1/chat/completions",
            content=gzip.compress(json.dumps(HELLO).encode()),
            headers={"content-type": "application/json", "content-encoding": "gzip"},
        )
        assert response.status_code == 415
        assert response.json()["error"]["code"] == "unsupported_content_encoding"
        assert response.headers["accept-encoding"] == "identity"
        identity = await http.post(
            f"{url}/v1/chat/completions", json=HELLO, headers={"content-encoding": "identity"}
        )
        assert identity.status_code == 200
        assert (await sim.stats())["requests_total"] == 1


def _fn_tool(parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": "f", "parameters": parameters}}


def _with_deep_tool_schema(depth: int) -> bytes:
    # Spelled out: json.dumps itself would fail on it, deep in pytest's stack.
    schema = '{"type":"array","items":' * depth + '{"type":"string"}' + "}" * depth
    tools = '[{"type":"function","function":{"name":"f","parameters":{"type":"object",'
    tools += '"properties":{"x":' + schema + "}}}}]"
    return (json.dumps(HELLO)[:-1] + ',"tools":' + tools + "}").encode()


def _nested_schema(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return {"type": "object", "properties": {"x": schema}}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        # A surrogate encoded as UTF-8 bytes, and a UTF-16 body: JSON is UTF-8 only.
        (
            b'{"model":"claude-x\xed\xa0\x80","messages":[{"role":"user","content":"hi"}]}',
            "not UTF-8",
        ),
        (json.dumps({**HELLO, "model": "m\ud800"}).encode("utf-16-le"), "could not parse"),
        # Deep enough to pass json.loads but break re-serialising the upstream body.
        (_with_deep_tool_schema(250), "more than 200 levels"),
    ],
    ids=["utf8-surrogate", "utf16", "deep-tool-schema"],
)
async def test_bodies_that_would_fail_later_are_400s_at_the_door(body: bytes, message: str) -> None:
    async with (
        proxy_and_simulator(metrics_enabled=True) as (url, sim),
        httpx2.AsyncClient() as http,
    ):
        response = await http.post(f"{url}/v1/chat/completions", content=body)
        assert response.status_code == 400
        assert message in response.json()["error"]["message"]
        assert (await http.get(f"{url}/metrics/prometheus")).status_code == 200
        # A schema nested as deep as real ones get is fine, and so is a UTF-8 BOM.
        tools = [_fn_tool(_nested_schema(40))]
        fine = await http.post(
            f"{url}/v1/chat/completions",
            content=b"\xef\xbb\xbf" + json.dumps({**HELLO, "tools": tools}).encode(),
        )
        assert fine.status_code == 200
        assert (await sim.stats())["requests_total"] == 1


async def test_error_answers_carry_server_timing_too() -> None:
    """A refused body, a validation error and a shed request say where their time went."""
    pattern = r"^queue;dur=[\d.]+, overhead;dur=[\d.]+, total;dur=[\d.]+$"
    async with (
        proxy_and_simulator(max_inflight=1, max_queue=0) as (url, sim),
        httpx2.AsyncClient(timeout=10) as http,
    ):
        chat = f"{url}/v1/chat/completions"
        unreadable = await http.post(
            chat, content=b"{", headers={"content-type": "application/json"}
        )
        invalid = await http.post(chat, json={**HELLO, "temperature": "hot"})
        async with trio.open_nursery() as nursery:
            slow = {**HELLO, "messages": [{"role": "user", "content": "[[sim:ttft_ms=500]]"}]}
            nursery.start_soon(partial(http.post, chat, json=slow))
            with trio.fail_after(5):  # the only slot is taken
                await sim.wait_until(lambda stats: stats["in_flight"] == 1)
            shed = await http.post(chat, json=HELLO)
        for response, status in ((unreadable, 400), (invalid, 400), (shed, 429)):
            assert response.status_code == status
            assert re.match(pattern, response.headers["server-timing"]), response.headers


async def test_a_body_still_arriving_at_the_deadline_is_a_408_that_closes_the_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A slow drip (a byte now and then) must not hold a connection and a buffer for ever."""
    refused: list[int] = []

    class _Counting:
        async def handle(self, payload: object, arrived: float) -> Any:
            raise AssertionError("the pipeline must not run")

        def record_refused(self, status: int, arrived: float, **kwargs: Any) -> Any:
            refused.append(status)
            from trio_batcher.observatory.metrics import Timing

            return Timing(total=trio.current_time() - arrived)

    counting: Any = _Counting()
    endpoint = ApiEndpoint(
        _inner, lambda: counting, _DOORS, max_body_bytes=1000, tenants=_no_keys, body_timeout=30.0
    )
    call = _Recorder(b'{"model": "claude')
    call.incoming[0]["more_body"] = True  # ...and the rest never comes
    await endpoint(_scope(), call.receive, call.send)
    assert trio.current_time() == 30.0
    assert call.status == 408
    headers = dict(call.messages[0]["headers"])
    assert headers[b"connection"] == b"close"
    assert b'"code":"request_timeout"' in call.body
    assert refused == [408]


async def test_other_routes_get_their_body_read_first_and_a_large_one_is_413() -> None:
    """No route but the chat POST takes a body; hypercorn can leave a connection whose
    body was never read stuck for good, so the body is read before the route answers."""
    seen: list[bytes] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        seen.append((await receive())["body"])
        await _inner(scope, receive, send)

    endpoint = ApiEndpoint(inner, lambda: None, _DOORS, max_body_bytes=1000, tenants=_no_keys)
    with_body = {**_scope("/health", "GET"), "headers": [(b"content-length", b"3")]}
    small = _Recorder(b"abc")
    await endpoint(with_body, small.receive, small.send)
    assert (small.status, seen) == (299, [b""])

    large = _Recorder(b"x" * 65_537)
    await endpoint(
        {**with_body, "headers": [(b"content-length", b"65537")]}, large.receive, large.send
    )
    assert large.status == 413
    assert dict(large.messages[0]["headers"])[b"connection"] == b"close"
    assert seen == [b""]  # the route never ran


async def test_large_bodies_are_parsed_and_translated_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Same answers, same errors, whichever side of the size line a body falls."""
    monkeypatch.setattr("trio_batcher.edge.endpoint.LARGE_BODY_BYTES", 10)
    async with proxy_and_simulator() as (url, sim), httpx2.AsyncClient(timeout=10) as http:
        chat = f"{url}/v1/chat/completions"
        fine = await http.post(chat, json=HELLO)
        assert fine.status_code == 200
        assert fine.json()["choices"][0]["message"]["content"]
        bad = await http.post(chat, json={**HELLO, "temperature": "hot"})
        assert (bad.status_code, bad.json()["error"]["param"]) == (400, "temperature")
        unparsable = await http.post(chat, content=b"{" * 20)
        assert unparsable.json()["error"]["code"] == "invalid_json"
        assert (await sim.stats())["requests_total"] == 1


async def test_a_request_too_large_once_translated_is_413_and_never_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("trio_batcher.upstream.exchange.MAX_REQUEST_BYTES", 1000)
    async with proxy_and_simulator() as (url, sim), httpx2.AsyncClient(timeout=10) as http:
        body = {**HELLO, "messages": [{"role": "user", "content": "x" * 2000}]}
        response = await http.post(f"{url}/v1/chat/completions", json=body)
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "request_too_large"
        assert (await sim.stats())["requests_total"] == 0


@pytest.mark.parametrize(
    ("target", "route"),
    [
        ("http:/v1/chat/completions", "/v1/chat/completions"),
        ("http://gateway:8000/v1/models", "/v1/models"),
        ("x:/v1/models", "/v1/models"),
        ("", "/"),
    ],
)
def test_an_absolute_or_empty_request_target_is_reduced_to_its_path(
    target: str, route: str
) -> None:
    from trio_batcher.edge.http import normalize_path

    assert normalize_path(target) == route


async def test_a_visuals_name_the_file_system_cannot_take_is_a_404() -> None:
    async with proxy_and_simulator() as (url, _sim), httpx2.AsyncClient() as http:
        for name in ("%00x", "%00%0d2026-01-01 INFO forged", "x" * 300):
            response = await http.get(f"{url}/visuals/{name}")
            assert response.status_code == 404, name[:20]


async def test_only_the_pages_and_their_assets_are_served_from_visuals() -> None:
    async with proxy_and_simulator() as (url, _sim), httpx2.AsyncClient() as http:
        assert (await http.get(f"{url}/visuals/results.html")).status_code == 200
        assert (await http.get(f"{url}/visuals/assets/style.css")).status_code == 200
        for script in ("build_data.py", "record_metrics.py"):
            assert (await http.get(f"{url}/visuals/{script}")).status_code == 404


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ([(b"content-length", b"3"), (b"transfer-encoding", b"chunked")], 400),
        ([(b"x-filler-%d" % i, b"x") for i in range(101)], 431),
    ],
    ids=["length_and_chunked", "header_flood"],
)
async def test_requests_no_client_sends_are_refused_and_the_connection_closed(
    headers: list[tuple[bytes, bytes]], status: int
) -> None:
    called: list[bool] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        called.append(True)

    endpoint = ApiEndpoint(inner, lambda: None, _DOORS, max_body_bytes=1000, tenants=_no_keys)
    for scope in (_scope(), _scope("/health", "GET")):
        call = _Recorder(b"abc")
        await endpoint({**scope, "headers": headers}, call.receive, call.send)
        assert call.status == status
        assert dict(call.messages[0]["headers"])[b"connection"] == b"close"
    assert called == []
