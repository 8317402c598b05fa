"""Errors the gateway makes, and those it relays, as the ``anthropic`` SDK reads them.

Every answer is turned into an exception by the SDK's own mapping
(``client._make_status_error_from_response``, what ``messages.create`` raises), so the
assertions are on the exception class a user catches and on ``error.type`` in the body.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import anthropic
import httpx2
import pytest
import trio
from support import (
    SIM_KEY,
    anthropic_client,
    proxy_and_simulator,
    proxy_settings,
    running_simulator,
)

from trio_batcher import Settings, create_app
from trio_batcher.serving import serve_app
from trio_batcher.simulator import SimulatorConfig

HELLO: dict[str, Any] = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 100,
    "messages": [{"role": "user", "content": "Hello"}],
}
HEADERS = {"anthropic-version": "2023-06-01", "content-type": "application/json"}


def _said(text: str, **changes: Any) -> dict[str, Any]:
    return {**HELLO, "messages": [{"role": "user", "content": text}], **changes}


def _as_sdk_error(response: httpx2.Response) -> anthropic.APIStatusError:
    sdk = anthropic.AsyncAnthropic(api_key="unused", base_url="http://unused")
    return sdk._make_status_error_from_response(response)


def _error_type(exc: anthropic.APIStatusError) -> str:
    assert isinstance(exc.body, dict) and exc.body["type"] == "error", exc.body
    return str(exc.body["error"]["type"])


@pytest.mark.parametrize(
    ("content", "names"),
    [
        pytest.param(b"{not json", "parse", id="bad-json"),
        pytest.param(b"[1, 2]", "object", id="not-an-object"),
        pytest.param(json.dumps({**HELLO, "model": None}).encode(), "model", id="model-null"),
        pytest.param(
            json.dumps({k: v for k, v in HELLO.items() if k != "model"}).encode(),
            "model",
            id="no-model",
        ),
        pytest.param(
            json.dumps({k: v for k, v in HELLO.items() if k != "messages"}).encode(),
            "messages",
            id="no-messages",
        ),
        pytest.param(
            json.dumps({k: v for k, v in HELLO.items() if k != "max_tokens"}).encode(),
            "max_tokens",
            id="no-max_tokens",
        ),
    ],
)
async def test_bad_input_is_a_400_invalid_request_error_with_no_upstream_call(
    content: bytes, names: str
) -> None:
    async with proxy_and_simulator() as (url, sim), httpx2.AsyncClient() as http:
        response = await http.post(f"{url}/v1/messages", content=content, headers=HEADERS)
        assert (await sim.stats())["requests_total"] == 0
    error = _as_sdk_error(response)
    assert isinstance(error, anthropic.BadRequestError)
    assert _error_type(error) == "invalid_request_error"
    assert names in error.body["error"]["message"].lower()  # type: ignore[index]
    assert response.headers["x-should-retry"] == "false"


async def test_a_wrong_proxy_key_is_401_authentication_error_not_to_be_retried() -> None:
    async with proxy_and_simulator(proxy_api_keys=("pk-right",)) as (url, sim):
        with pytest.raises(anthropic.AuthenticationError) as raised:
            await anthropic_client(url, api_key="pk-wrong").messages.create(**HELLO)
        assert (await sim.stats())["requests_total"] == 0
    assert _error_type(raised.value) == "authentication_error"
    assert raised.value.response.headers["x-should-retry"] == "false"
    assert "pk-wrong" not in raised.value.response.text


async def test_a_body_over_max_body_bytes_is_413_request_too_large() -> None:
    async with proxy_and_simulator(max_body_bytes=2000) as (url, _sim):
        with pytest.raises(anthropic.ContentTooLargeError) as raised:
            await anthropic_client(url).messages.create(**_said("x" * 5000))
    assert _error_type(raised.value) == "request_too_large"


async def test_shed_by_the_gate_is_429_rate_limit_error_with_retry_after() -> None:
    async with (
        proxy_and_simulator(max_inflight=1, max_queue=0) as (url, sim),
        httpx2.AsyncClient(timeout=10) as http,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(
            partial(http.post, f"{url}/v1/messages", json=_said("[[sim:hang=1]]"), headers=HEADERS)
        )
        with trio.fail_after(5):
            await sim.wait_until(lambda s: s["in_flight"] == 1)
        with pytest.raises(anthropic.RateLimitError) as raised:
            await anthropic_client(url).messages.create(**HELLO)
        nursery.cancel_scope.cancel()
    assert _error_type(raised.value) == "rate_limit_error"
    assert int(raised.value.response.headers["retry-after"]) >= 1


async def test_an_upstream_cooldown_longer_than_the_deadline_is_529_overloaded() -> None:
    async with proxy_and_simulator(request_timeout_s=5, upstream_max_retries=0) as (url, sim):
        client = anthropic_client(url)
        with pytest.raises(anthropic.OverloadedError):  # the upstream's own 529, relayed
            await client.messages.create(**_said("[[sim:status=529,retry_after=60]] a"))
        with pytest.raises(anthropic.OverloadedError) as raised:  # held by the cooldown
            await client.messages.create(**HELLO)
        assert (await sim.stats())["requests_total"] == 1
    assert _error_type(raised.value) == "overloaded_error"
    assert int(raised.value.response.headers["retry-after"]) > 5


async def test_shutting_down_is_529_overloaded_with_retry_after() -> None:
    config = SimulatorConfig(ttft_ms=0)
    async with running_simulator(config) as sim, httpx2.AsyncClient(timeout=10) as http:
        stop = trio.Event()
        app = create_app(proxy_settings(sim, shutdown_grace_s=2))
        async with trio.open_nursery() as nursery:
            host, port = await nursery.start(partial(serve_app, app, "127.0.0.1", 0, shutdown=stop))
            url = f"http://{host}:{port}"
            hold = partial(
                http.post, f"{url}/v1/messages", json=_said("[[sim:hang=1]]"), headers=HEADERS
            )
            nursery.start_soon(hold)
            with trio.fail_after(5):
                await sim.wait_until(lambda s: s["in_flight"] == 1)
            stop.set()
            with trio.fail_after(5):
                while app.runtime is None or not app.runtime.draining:
                    await trio.lowlevel.checkpoint()
            late = await http.post(f"{url}/v1/messages", json=HELLO, headers=HEADERS)
    error = _as_sdk_error(late)
    assert isinstance(error, anthropic.OverloadedError)
    assert _error_type(error) == "overloaded_error"
    assert late.headers["retry-after"]


async def test_the_request_deadline_is_504_timeout_error() -> None:
    async with proxy_and_simulator(request_timeout_s=0.5) as (url, _sim):
        with pytest.raises(anthropic.GatewayTimeoutError) as raised:
            await anthropic_client(url).messages.create(**_said("[[sim:hang=1]]"))
    assert _error_type(raised.value) == "timeout_error"


async def test_an_unreachable_upstream_is_502_api_error() -> None:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    await listener.aclose()  # nothing listens there now
    settings = Settings(anthropic_base_url=f"http://127.0.0.1:{port}", anthropic_api_key=SIM_KEY)
    from support import running_proxy

    async with running_proxy(settings.replace(upstream_max_retries=0)) as url:
        with pytest.raises(anthropic.InternalServerError) as raised:
            await anthropic_client(url).messages.create(**HELLO)
    assert raised.value.status_code == 502
    assert _error_type(raised.value) == "api_error"


async def test_the_upstream_refusing_our_key_is_502_not_the_clients_401() -> None:
    async with running_simulator(SimulatorConfig(api_keys=("sk-ant-other",))) as sim:
        from support import running_proxy

        async with running_proxy(proxy_settings(sim)) as url:
            with pytest.raises(anthropic.InternalServerError) as raised:
                await anthropic_client(url).messages.create(**HELLO)
    assert raised.value.status_code == 502
    assert _error_type(raised.value) == "api_error"
    assert "ANTHROPIC_API_KEY" in raised.value.body["error"]["message"]  # type: ignore[index]
    assert SIM_KEY not in raised.value.response.text


async def test_an_upstream_rate_limit_is_relayed_as_it_was_sent() -> None:
    async with proxy_and_simulator(upstream_max_retries=0) as (url, sim):
        with pytest.raises(anthropic.RateLimitError) as raised:
            await anthropic_client(url).messages.create(
                **_said("[[sim:status=429,retry_after=1]] hi")
            )
        upstream = (await sim.received())[-1]
    assert raised.value.response.headers["request-id"] == upstream["request_id"]
    assert raised.value.response.headers["retry-after"] == "1"
    assert _error_type(raised.value) == "rate_limit_error"


async def _error_event(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    client = anthropic_client(url)
    with pytest.raises(anthropic.APIStatusError) as raised:
        async with client.messages.stream(**body) as stream:
            async for _ in stream:
                pass
    return raised.value.status_code, raised.value.body  # type: ignore[return-value]


async def test_a_deadline_mid_stream_is_an_error_event_of_type_timeout_error() -> None:
    config = SimulatorConfig(ttft_ms=0, tokens_per_s=10, reply_tokens=100)
    async with proxy_and_simulator(config, request_timeout_s=0.5) as (url, _sim):
        status, body = await _error_event(url, _said("long"))
    assert status == 200  # the stream had started
    assert body == {
        "type": "error",
        "error": {"type": "timeout_error", "message": body["error"]["message"]},
    }
    assert "REQUEST_TIMEOUT_S" in body["error"]["message"]


async def test_an_upstream_error_event_mid_stream_is_relayed_as_it_was_sent() -> None:
    async with proxy_and_simulator() as (url, _sim):
        status, body = await _error_event(url, _said("[[sim:stream_error_after=2]] hi"))
    assert status == 200
    assert body["error"]["type"] == "overloaded_error"


async def test_other_routes_answer_anthropic_clients_in_their_shape() -> None:
    async with proxy_and_simulator() as (url, _sim), httpx2.AsyncClient() as http:
        wrong_method = await http.get(f"{url}/v1/messages", headers=HEADERS)
        unknown = await http.get(f"{url}/v1/embeddings", headers=HEADERS)
        missing_model = await http.get(f"{url}/v1/models/gpt-4o", headers=HEADERS)
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"]["type"] == "invalid_request_error"
    assert "POST" in wrong_method.headers["allow"]
    assert isinstance(_as_sdk_error(unknown), anthropic.NotFoundError)
    assert _error_type(_as_sdk_error(missing_model)) == "not_found_error"
