"""The simulator as Amazon Bedrock and Google Vertex AI, checked with the ``anthropic`` SDK's
own cloud clients (``AnthropicBedrock``, ``AnthropicVertex``) over real loopback: if they
work against it, it speaks the clouds' wire; if the simulator refuses what they refuse
(bad signatures, expired tokens, ``model`` in the body), it is strict where they are.
"""

from __future__ import annotations

import base64
import datetime
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anthropic
import httpx2
import pytest
import trio
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.eventstream import EventStreamBuffer
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
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from support import running_simulator

from trio_batcher.simulator.cloud_models import bedrock_model, vertex_model
from trio_batcher.simulator.eventstream import chunk_message, exception_message

T = TypeVar("T")


def bedrock(url: str, **kwargs: Any) -> anthropic.AnthropicBedrock:
    return anthropic.AnthropicBedrock(
        aws_access_key=kwargs.pop("aws_access_key", ACCESS_KEY),
        aws_secret_key=kwargs.pop("aws_secret_key", SECRET_KEY),
        aws_region=REGION,
        base_url=url,
        max_retries=0,
        **kwargs,
    )


def vertex(url: str, credentials: Any) -> anthropic.AnthropicVertex:
    return anthropic.AnthropicVertex(
        region=VERTEX_REGION,
        project_id=PROJECT,
        base_url=f"{url}/v1",
        credentials=credentials,
        max_retries=0,
    )


async def in_thread(fn: Callable[[], T]) -> T:
    """Run a blocking SDK call off the trio thread (the simulator runs on it)."""
    return await trio.to_thread.run_sync(fn)


def _tool_use(message: Any) -> Any:
    (call,) = [block for block in message.content if block.type == "tool_use"]
    return call


# ---------------------------------------------------------------- Bedrock


async def test_bedrock_sdk_client_invokes_with_a_tool_call() -> None:
    async with running_simulator(cloud_config()) as sim:
        with bedrock(sim.url) as client:
            message = await in_thread(
                lambda: client.messages.create(
                    model=BEDROCK_MODEL, max_tokens=256, messages=ASK, tools=[WEATHER_TOOL]
                )
            )
        assert message.stop_reason == "tool_use"
        call = _tool_use(message)
        assert call.name == "get_weather" and isinstance(call.input["city"], str)
        (entry,) = await sim.received()
        # The model is in the URL, quoted as the SDK does; the body has no model or stream.
        assert entry["path"] == "/model/us.anthropic.claude-sonnet-4-5-20250929-v1:0/invoke"
        assert "model" not in entry["json"] and "stream" not in entry["json"]
        headers = {name.lower(): value for name, value in entry["headers"]}
        assert headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=" + ACCESS_KEY)
        assert SECRET_KEY not in json.dumps(entry)


async def test_bedrock_sdk_client_streams_from_the_event_stream() -> None:
    async with running_simulator(cloud_config()) as sim:
        with bedrock(sim.url) as client:

            def run() -> tuple[list[str], Any]:
                with client.messages.stream(
                    model=BEDROCK_MODEL, max_tokens=256, messages=ASK, tools=[WEATHER_TOOL]
                ) as stream:
                    kinds = [event.type for event in stream]
                    return kinds, stream.get_final_message()

            kinds, message = await in_thread(run)
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
        assert message.stop_reason == "tool_use"
        assert _tool_use(message).name == "get_weather"
        (entry,) = await sim.received()
        assert entry["path"].endswith("/invoke-with-response-stream")


async def test_async_bedrock_client_creates_and_streams() -> None:
    async with running_simulator(cloud_config()) as sim:
        client = anthropic.AsyncAnthropicBedrock(
            aws_access_key=ACCESS_KEY,
            aws_secret_key=SECRET_KEY,
            aws_region=REGION,
            base_url=sim.url,
            max_retries=0,
        )
        async with client:
            message = await client.messages.create(
                model=BEDROCK_MODEL,
                max_tokens=64,
                messages=[{"role": "user", "content": "Say hello"}],
            )
            assert message.content[0].type == "text" and message.content[0].text
            assert message.model == "claude-sonnet-4-5-20250929"
            async with client.messages.stream(
                model=BEDROCK_MODEL, max_tokens=256, messages=ASK, tools=[WEATHER_TOOL]
            ) as stream:
                final = await stream.get_final_message()
        assert _tool_use(final).name == "get_weather"


async def test_bedrock_refuses_a_wrong_secret_and_an_unknown_key() -> None:
    async with running_simulator(cloud_config()) as sim:
        with (
            bedrock(sim.url, aws_secret_key="not-the-secret") as client,
            pytest.raises(anthropic.PermissionDeniedError) as wrong,
        ):
            await in_thread(
                lambda: client.messages.create(model=BEDROCK_MODEL, max_tokens=16, messages=ASK)
            )
        assert wrong.value.response.headers["x-amzn-ErrorType"] == "InvalidSignatureException"
        assert "signature we calculated does not match" in wrong.value.response.json()["message"]
        with (
            bedrock(sim.url, aws_access_key="AKIAUNKNOWN") as client,
            pytest.raises(anthropic.PermissionDeniedError) as unknown,
        ):
            await in_thread(
                lambda: client.messages.create(model=BEDROCK_MODEL, max_tokens=16, messages=ASK)
            )
        assert unknown.value.response.headers["x-amzn-ErrorType"] == "UnrecognizedClientException"
        async with httpx2.AsyncClient() as raw:
            unsigned = await raw.post(f"{sim.url}/model/{BEDROCK_MODEL}/invoke", json={})
        assert unsigned.status_code == 403
        assert unsigned.headers["x-amzn-ErrorType"] == "MissingAuthenticationTokenException"


def _signed(
    url: str, body: dict[str, Any], *, when: datetime.datetime | None = None
) -> tuple[bytes, dict[str, str]]:
    """A body and botocore-signed headers for a raw POST to the simulated Bedrock."""
    data = json.dumps(body).encode()
    request = AWSRequest(
        method="POST", url=url, data=data, headers={"content-type": "application/json"}
    )
    signer = SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "bedrock", REGION)
    if when is None:
        signer.add_auth(request)
    else:
        request.context["timestamp"] = when.strftime("%Y%m%dT%H%M%SZ")
        request.headers["X-Amz-Date"] = request.context["timestamp"]
        signer._inject_signature_to_request(
            request,
            signer.signature(
                signer.string_to_sign(request, signer.canonical_request(request)), request
            ),
        )
    return data, dict(request.headers.items())


async def _post_signed(url: str, body: dict[str, Any], **kwargs: Any) -> httpx2.Response:
    data, headers = _signed(url, body, **kwargs)
    async with httpx2.AsyncClient() as raw:
        return await raw.post(url, content=data, headers=headers)


BEDROCK_BODY: dict[str, Any] = {
    "anthropic_version": "bedrock-2023-05-31",
    "max_tokens": 16,
    "messages": [{"role": "user", "content": "hi"}],
}


async def test_bedrock_refuses_model_or_stream_in_the_body_and_requires_a_version() -> None:
    async with running_simulator(cloud_config()) as sim:
        url = f"{sim.url}/model/anthropic.claude-sonnet-4-5-20250929-v1:0/invoke"
        ok = await _post_signed(url, BEDROCK_BODY)
        assert ok.status_code == 200, ok.text
        assert ok.headers["X-Amzn-Bedrock-Output-Token-Count"] == str(
            ok.json()["usage"]["output_tokens"]
        )
        for key, value in (("model", "claude-sonnet-4-5-20250929"), ("stream", True)):
            refused = await _post_signed(url, {**BEDROCK_BODY, key: value})
            assert refused.status_code == 400
            assert refused.headers["x-amzn-ErrorType"] == "ValidationException"
            assert f"extraneous key [{key}] is not permitted" in refused.json()["message"]
        unversioned = {k: v for k, v in BEDROCK_BODY.items() if k != "anthropic_version"}
        refused = await _post_signed(url, unversioned)
        assert refused.status_code == 400
        assert "required key [anthropic_version] not found" in refused.json()["message"]
        # The Messages validation applies as on Anthropic's API, in Bedrock's dialect.
        refused = await _post_signed(url, {**BEDROCK_BODY, "max_tokens": "many"})
        assert refused.status_code == 400 and refused.json()["message"].startswith("max_tokens:")
        unknown = await _post_signed(
            f"{sim.url}/model/meta.llama3-70b-instruct-v1:0/invoke", BEDROCK_BODY
        )
        assert unknown.status_code == 400
        assert unknown.json() == {"message": "The provided model identifier is invalid."}


async def test_bedrock_refuses_a_stale_signature() -> None:
    async with running_simulator(cloud_config()) as sim:
        url = f"{sim.url}/model/{BEDROCK_MODEL}/invoke"
        old = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=6)
        refused = await _post_signed(url, BEDROCK_BODY, when=old)
        assert refused.status_code == 403
        assert refused.headers["x-amzn-ErrorType"] == "InvalidSignatureException"
        assert refused.json()["message"].startswith("Signature expired:")


async def test_bedrock_stream_is_framed_as_botocore_decodes_it() -> None:
    async with running_simulator(cloud_config()) as sim:
        url = f"{sim.url}/model/{BEDROCK_MODEL}/invoke-with-response-stream"
        response = await _post_signed(url, BEDROCK_BODY)
        assert response.headers["content-type"] == "application/vnd.amazon.eventstream"
    buffer = EventStreamBuffer()
    buffer.add_data(response.content)
    messages = list(buffer)  # checks every length and both CRCs of every message
    assert messages and all(m.headers[":event-type"] == "chunk" for m in messages)
    assert all(m.headers[":message-type"] == "event" for m in messages)
    events = [json.loads(base64.b64decode(json.loads(m.payload)["bytes"])) for m in messages]
    assert events[0]["type"] == "message_start" and events[-1]["type"] == "message_stop"
    metrics = events[-1]["amazon-bedrock-invocationMetrics"]
    assert metrics["inputTokenCount"] == events[0]["message"]["usage"]["input_tokens"]
    delta = next(e for e in events if e["type"] == "message_delta")
    assert metrics["outputTokenCount"] == delta["usage"]["output_tokens"] > 0
    assert metrics["invocationLatency"] >= metrics["firstByteLatency"] >= 0


def test_event_stream_frames_round_trip_through_botocore() -> None:
    buffer = EventStreamBuffer()
    buffer.add_data(chunk_message(b'{"type": "ping"}'))
    buffer.add_data(exception_message("throttlingException", {"message": "slow down"}))
    chunk, error = list(buffer)
    assert json.loads(chunk.payload) == {"bytes": base64.b64encode(b'{"type": "ping"}').decode()}
    assert error.headers[":message-type"] == "exception"
    assert error.headers[":exception-type"] == "throttlingException"
    assert error.to_response_dict()["status_code"] == 400


async def test_bedrock_faults_map_to_bedrock_errors() -> None:
    async with running_simulator(cloud_config()) as sim:
        url = f"{sim.url}/model/{BEDROCK_MODEL}/invoke"
        expected = {
            429: (429, "ThrottlingException"),
            529: (503, "ServiceUnavailableException"),
            504: (408, "ModelTimeoutException"),
            500: (500, "InternalServerException"),
        }
        for fault, (status, name) in expected.items():
            body = {
                **BEDROCK_BODY,
                "messages": [{"role": "user", "content": f"hi [[sim:status={fault}]]"}],
            }
            response = await _post_signed(url, body)
            assert (response.status_code, response.headers["x-amzn-ErrorType"]) == (status, name)
            assert set(response.json()) == {"message"}
            assert "retry-after" not in response.headers


async def test_bedrock_mid_stream_overload_is_an_exception_message() -> None:
    async with running_simulator(cloud_config()) as sim:
        with bedrock(sim.url) as client:

            def run() -> list[str]:
                seen: list[str] = []
                with client.messages.stream(
                    model=BEDROCK_MODEL,
                    max_tokens=64,
                    messages=[{"role": "user", "content": "hi [[sim:stream_error_after=2]]"}],
                ) as stream:
                    for event in stream:
                        seen.append(event.type)
                return seen

            with pytest.raises(anthropic.APIStatusError) as failed:
                await in_thread(run)
        assert "modelStreamErrorException" in str(failed.value)


def test_cloud_model_ids_map_to_anthropic_ids() -> None:
    assert (
        bedrock_model("anthropic.claude-sonnet-4-5-20250929-v1:0") == "claude-sonnet-4-5-20250929"
    )
    assert bedrock_model("global.anthropic.claude-haiku-4-5-20251001-v1:0") == (
        "claude-haiku-4-5-20251001"
    )
    arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-opus-4-1-20250805-v1:0"
    assert bedrock_model(arn) == "claude-opus-4-1-20250805"
    assert bedrock_model("meta.llama3-70b-instruct-v1:0") is None
    assert vertex_model("claude-sonnet-4-5@20250929") == "claude-sonnet-4-5-20250929"
    assert vertex_model("claude-opus-4-1") == "claude-opus-4-1"
    assert vertex_model("gemini-2.5-pro") is None


# ---------------------------------------------------------------- Vertex AI


async def test_vertex_sdk_client_with_service_account_creates_and_streams(tmp_path: Path) -> None:
    async with running_simulator(cloud_config()) as sim:
        credentials = service_account_credentials(sim.url, tmp_path)
        with vertex(sim.url, credentials) as client:
            message = await in_thread(
                lambda: client.messages.create(
                    model=VERTEX_MODEL, max_tokens=256, messages=ASK, tools=[WEATHER_TOOL]
                )
            )

            def run() -> Any:
                with client.messages.stream(
                    model=VERTEX_MODEL, max_tokens=256, messages=ASK, tools=[WEATHER_TOOL]
                ) as stream:
                    return stream.get_final_message()

            streamed = await in_thread(run)
            counted = await in_thread(
                lambda: client.messages.count_tokens(model=VERTEX_MODEL, messages=ASK)
            )
        assert _tool_use(message).name == "get_weather"
        assert _tool_use(streamed).name == "get_weather"
        assert counted.input_tokens > 0
        paths = [entry["path"] for entry in await sim.received()]
        prefix = f"/v1/projects/{PROJECT}/locations/{VERTEX_REGION}/publishers/anthropic/models/"
        assert paths == [
            "/token",
            prefix + VERTEX_MODEL + ":rawPredict",
            prefix + VERTEX_MODEL + ":streamRawPredict",
            prefix + "count-tokens:rawPredict",
        ]


async def test_async_vertex_client_streams(tmp_path: Path) -> None:
    async with running_simulator(cloud_config()) as sim:
        credentials = service_account_credentials(sim.url, tmp_path)
        await in_thread(lambda: credentials.refresh(_google_request()))
        client = anthropic.AsyncAnthropicVertex(
            region=VERTEX_REGION,
            project_id=PROJECT,
            base_url=f"{sim.url}/v1",
            credentials=credentials,
            max_retries=0,
        )
        async with (
            client,
            client.messages.stream(
                model=VERTEX_MODEL, max_tokens=256, messages=ASK, tools=[WEATHER_TOOL]
            ) as stream,
        ):
            final = await stream.get_final_message()
        assert _tool_use(final).name == "get_weather"


def _google_request() -> Any:
    from google.auth.transport.requests import Request

    return Request()


VERTEX_BODY: dict[str, Any] = {
    "anthropic_version": "vertex-2023-10-16",
    "max_tokens": 16,
    "messages": [{"role": "user", "content": "hi"}],
}


async def test_vertex_refuses_missing_unknown_and_expired_tokens(tmp_path: Path) -> None:
    # Tokens issued with no lifetime are expired as they are issued: no clock to wait on.
    # (A live token is accepted: the SDK tests above use the default lifetime.)
    async with running_simulator(cloud_config(vertex_token_lifetime_s=0.0)) as sim:
        url = (
            f"{sim.url}/v1/projects/{PROJECT}/locations/{VERTEX_REGION}/publishers/anthropic/"
            f"models/{VERTEX_MODEL}:rawPredict"
        )
        credentials = service_account_credentials(sim.url, tmp_path)
        await in_thread(lambda: credentials.refresh(_google_request()))
        token = credentials.token
        async with httpx2.AsyncClient() as raw:
            missing = await raw.post(url, json=VERTEX_BODY)
            unknown = await raw.post(
                url, json=VERTEX_BODY, headers={"authorization": "Bearer ya29.forged"}
            )
            expired = await raw.post(
                url, json=VERTEX_BODY, headers={"authorization": f"Bearer {token}"}
            )
        for response in (missing, unknown, expired):
            assert response.status_code == 401
            error = response.json()["error"]
            assert error["code"] == 401 and error["status"] == "UNAUTHENTICATED"
        assert "expired" in expired.json()["error"]["message"]
        assert "expired" not in unknown.json()["error"]["message"]


async def test_vertex_token_endpoint_refuses_a_foreign_key(tmp_path: Path) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    other_pem = other.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    async with running_simulator(cloud_config(vertex_public_key_pem=other_pem.decode())) as sim:
        credentials = service_account_credentials(sim.url, tmp_path)
        from google.auth.exceptions import RefreshError

        with pytest.raises(RefreshError, match="Invalid JWT Signature"):
            await in_thread(lambda: credentials.refresh(_google_request()))


async def test_vertex_refuses_model_in_the_body_and_requires_a_version(tmp_path: Path) -> None:
    async with running_simulator(cloud_config()) as sim:
        credentials = service_account_credentials(sim.url, tmp_path)
        await in_thread(lambda: credentials.refresh(_google_request()))
        auth = {"authorization": f"Bearer {credentials.token}"}
        base = f"{sim.url}/v1/projects/{PROJECT}/locations/{VERTEX_REGION}/publishers/anthropic/models/"
        async with httpx2.AsyncClient() as raw:
            with_model = await raw.post(
                base + VERTEX_MODEL + ":rawPredict",
                json={**VERTEX_BODY, "model": VERTEX_MODEL},
                headers=auth,
            )
            unversioned = await raw.post(
                base + VERTEX_MODEL + ":rawPredict",
                json={k: v for k, v in VERTEX_BODY.items() if k != "anthropic_version"},
                headers=auth,
            )
            other_project = await raw.post(
                base.replace(PROJECT, "someone-else") + VERTEX_MODEL + ":rawPredict",
                json=VERTEX_BODY,
                headers=auth,
            )
            unknown_model = await raw.post(
                base + "gemini-2.5-pro:rawPredict", json=VERTEX_BODY, headers=auth
            )
            throttled = await raw.post(
                base + VERTEX_MODEL + ":rawPredict",
                json={
                    **VERTEX_BODY,
                    "messages": [{"role": "user", "content": "[[sim:status=429]]"}],
                },
                headers=auth,
            )
            overloaded = await raw.post(
                base + VERTEX_MODEL + ":rawPredict",
                json={
                    **VERTEX_BODY,
                    "messages": [{"role": "user", "content": "[[sim:status=529]]"}],
                },
                headers=auth,
            )
        assert with_model.status_code == 400
        assert with_model.json()["error"] == {
            "type": "invalid_request_error",
            "message": "model: Extra inputs are not permitted",
        }
        assert unversioned.status_code == 400
        assert unversioned.json()["error"]["message"] == "anthropic_version: Field required"
        assert other_project.status_code == 403
        assert other_project.json()["error"]["status"] == "PERMISSION_DENIED"
        assert unknown_model.status_code == 404
        assert unknown_model.json()["error"]["status"] == "NOT_FOUND"
        assert throttled.status_code == 429
        assert throttled.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
        assert overloaded.status_code == 529
        assert overloaded.json()["error"]["type"] == "overloaded_error"


async def test_cloud_calls_count_in_the_simulator_stats(tmp_path: Path) -> None:
    async with running_simulator(cloud_config()) as sim:
        url = f"{sim.url}/model/{BEDROCK_MODEL}/invoke"
        assert (await _post_signed(url, BEDROCK_BODY)).status_code == 200
        stats = await sim.wait_until(lambda s: s["completed"] >= 1)
        assert stats["completed"] == 1
