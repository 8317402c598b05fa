"""The cloud upstream kinds' wire adapters (trio_batcher.upstream.kinds), tested as data.

Bodies, paths and signatures are compared with what the official SDK's own clients
(``AnthropicBedrock``, ``AnthropicVertex``) send for the same call; event-stream bytes are
built by a small encoder here and decoded back, cut anywhere; error answers are mapped
through the table and on to the resilience layer's signals; credentials are refreshed on
a virtual clock with fake providers, and google-auth exchanges a generated service
account's JWT at a token endpoint on loopback.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx2
import pytest
import trio
import trio.lowlevel
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_batcher.errors import ProxyError
from trio_batcher.upstream.kinds import (
    AwsCredentials,
    AwsKeys,
    BedrockTarget,
    CachedSecret,
    EventStreamDecoder,
    GoogleCredentials,
    MissingExtraError,
    VertexTarget,
    bedrock_body,
    bedrock_error,
    require_extra,
    sign,
    vertex_body,
    vertex_error,
)
from trio_batcher.upstream.resilience import classify

ROOT = Path(__file__).resolve().parent.parent
PROFILE_MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
KEYS = AwsKeys("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "session-token-1")
FIXED_NOW = datetime(2025, 9, 29, 12, 30, 45, tzinfo=UTC)
MESSAGE_REPLY = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [{"type": "text", "text": "hi"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


# ---------------------------------------------------------------------------- bodies


def test_bedrock_body_drops_model_and_stream_and_adds_version_and_betas() -> None:
    body = b'{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"h\xc3\xa9"}]}'
    out = json.loads(bedrock_body(body, "beta-a, beta-b,"))
    assert out == {
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "hé"}],
        "anthropic_version": "bedrock-2023-05-31",
        "anthropic_beta": ["beta-a", "beta-b"],
    }
    assert "hé".encode() in bedrock_body(body)  # UTF-8, not \u escapes
    assert b" " not in bedrock_body(body)  # serialised once, compact


def test_bedrock_body_keeps_a_version_and_betas_the_body_names() -> None:
    body = {"model": "m", "anthropic_version": "bedrock-x", "anthropic_beta": ["mine"]}
    out = json.loads(bedrock_body(body, ["theirs"]))
    assert out == {"anthropic_version": "bedrock-x", "anthropic_beta": ["mine"]}
    assert "anthropic_beta" not in json.loads(bedrock_body({"model": "m"}, ""))


@pytest.mark.parametrize(
    "raw", [b"[1]", b"{", b'{"max_tokens": 1e400}', b'{"x": NaN}', b'{"x": "\\ud800"}']
)
def test_a_body_that_cannot_be_rewritten_faithfully_is_a_400(raw: bytes) -> None:
    for transform in (bedrock_body, vertex_body):
        with pytest.raises(ProxyError) as caught:
            transform(raw)
        assert caught.value.status == 400
        assert caught.value.code == "invalid_json"


def test_vertex_body_drops_model_keeps_stream_and_sets_vertex_version() -> None:
    out = json.loads(vertex_body(b'{"model":"claude@1","stream":true,"max_tokens":3}'))
    assert out == {"stream": True, "max_tokens": 3, "anthropic_version": "vertex-2023-10-16"}
    counted = json.loads(vertex_body({"model": "claude@1", "messages": []}, count_tokens=True))
    assert counted["model"] == "claude@1"


# ------------------------------------------------------------- paths and the SDK


@pytest.mark.parametrize(
    ("model", "stream", "path"),
    [
        (PROFILE_MODEL, False, f"/model/{PROFILE_MODEL}/invoke"),
        (PROFILE_MODEL, True, f"/model/{PROFILE_MODEL}/invoke-with-response-stream"),
        (
            "arn:aws:bedrock:us-east-1:123:inference-profile/us.anthropic.x-v1:0",
            False,
            "/model/arn:aws:bedrock:us-east-1:123:inference-profile%2Fus.anthropic.x-v1:0/invoke",
        ),
        ("a b;c?d", False, "/model/a%20b;c%3Fd/invoke"),
    ],
)
def test_bedrock_paths_quote_the_model_id_as_the_sdk_does(
    model: str, stream: bool, path: str
) -> None:
    target = BedrockTarget("eu-west-3")
    assert target.path(model, stream=stream) == path
    assert (
        target.url(model, stream=stream) == f"https://bedrock-runtime.eu-west-3.amazonaws.com{path}"
    )
    assert BedrockTarget("x", "http://127.0.0.1:9/bedrock/").url(model, stream=stream) == (
        f"http://127.0.0.1:9/bedrock{path}"
    )


@pytest.mark.parametrize("model", ["", ".", "..", ";x", "..;x"])
def test_a_model_id_that_is_no_path_segment_is_a_400_naming_the_model(model: str) -> None:
    for call in (
        lambda: BedrockTarget("r").path(model, stream=False),
        lambda: VertexTarget("p", "r").path(model, stream=False),
    ):
        with pytest.raises(ProxyError) as caught:
            call()
        assert (caught.value.status, caught.value.param) == (400, "model")


def _capture(reply: dict[str, Any]) -> tuple[list[httpx2.Request], httpx2.Client]:
    seen: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        request.read()
        seen.append(request)
        return httpx2.Response(200, json=reply)

    return seen, httpx2.Client(transport=httpx2.MockTransport(handler))


@pytest.mark.parametrize(
    "model", [PROFILE_MODEL, "anthropic.claude-3-haiku-20240307-v1:0", "a b/c"]
)
def test_bedrock_request_matches_the_sdks_path_body_and_sigv4_signature(
    model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's AnthropicBedrock, with fixed keys and a fixed clock, sends a request; the
    same call made with our target, body and signer carries the same path, the same JSON
    and the same Authorization header."""
    from anthropic import AnthropicBedrock
    from anthropic._constants import ANTHROPIC_API_VERSION

    monkeypatch.setattr(
        "botocore.auth.get_current_datetime", lambda: FIXED_NOW.replace(tzinfo=None)
    )
    seen, http_client = _capture(MESSAGE_REPLY)
    client = AnthropicBedrock(
        aws_access_key=KEYS.access_key,
        aws_secret_key=KEYS.secret_key,
        aws_session_token=KEYS.token,
        aws_region="us-west-2",
        http_client=http_client,
        max_retries=0,
    )
    messages = [{"role": "user", "content": "Hello"}]
    client.messages.create(
        model=model,
        max_tokens=16,
        messages=messages,  # type: ignore[arg-type]
        extra_headers={"anthropic-beta": "b-1,b-2"},
    )
    (sent,) = seen
    target = BedrockTarget("us-west-2")
    assert sent.url.raw_path.decode() == target.path(model, stream=False)
    ours = bedrock_body(
        {"model": model, "max_tokens": 16, "messages": messages},
        "b-1,b-2",
        version=ANTHROPIC_API_VERSION,
    )
    assert json.loads(sent.content) == json.loads(ours)

    unsigned = {
        k: v
        for k, v in sent.headers.items()
        if k.lower() not in ("authorization", "x-amz-date", "x-amz-security-token")
    }
    signed = sign("POST", str(sent.url), unsigned, sent.content, KEYS, "us-west-2")
    assert signed["Authorization"] == sent.headers["authorization"]
    assert signed["X-Amz-Date"] == sent.headers["x-amz-date"] == "20250929T123045Z"
    assert signed["X-Amz-Security-Token"] == KEYS.token
    assert "SignedHeaders=" in signed["Authorization"]
    assert KEYS.secret_key not in json.dumps(signed)


def test_sign_leaves_connection_unsigned() -> None:
    signed = sign(
        "post", "https://h/model/x/invoke", {"connection": "keep-alive"}, b"{}", KEYS, "r"
    )
    assert "connection" not in {k.lower() for k in signed}
    assert "connection" not in signed["Authorization"]
    assert "bedrock/aws4_request" in signed["Authorization"]


@pytest.mark.parametrize(
    ("region", "base"),
    [
        ("us-east5", "https://us-east5-aiplatform.googleapis.com/v1"),
        ("global", "https://aiplatform.googleapis.com/v1"),
        ("eu", "https://aiplatform.eu.rep.googleapis.com/v1"),
    ],
)
@pytest.mark.parametrize("model", ["claude-sonnet-4-5@20250929", "odd;model name"])
@pytest.mark.parametrize("stream", [False, True])
def test_vertex_urls_and_body_match_the_sdks(
    region: str, base: str, model: str, stream: bool
) -> None:
    from anthropic import AnthropicVertex
    from anthropic._constants import ANTHROPIC_API_VERSION

    sse = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    seen: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        request.read()
        seen.append(request)
        if stream:
            return httpx2.Response(200, content=sse, headers={"content-type": "text/event-stream"})
        return httpx2.Response(200, json=MESSAGE_REPLY)

    client = AnthropicVertex(
        region=region,
        project_id="my-project",
        access_token="tok",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
        max_retries=0,
    )
    messages = [{"role": "user", "content": "Hi"}]
    reply = client.messages.create(model=model, max_tokens=8, messages=messages, stream=stream)  # type: ignore[call-overload]
    if stream:
        list(reply)
    (sent,) = seen
    target = VertexTarget("my-project", region)
    assert str(sent.url).startswith(base)
    assert (
        target.url(model, stream=stream)
        == f"{sent.url.scheme}://{sent.url.host}{sent.url.raw_path.decode()}"
    )
    body = {"model": model, "max_tokens": 8, "messages": messages, "stream": stream}
    assert json.loads(sent.content) == json.loads(vertex_body(body, version=ANTHROPIC_API_VERSION))
    assert sent.headers["authorization"] == "Bearer tok"


def test_vertex_count_tokens_url_matches_the_sdks() -> None:
    from anthropic import AnthropicVertex

    seen, http_client = _capture({"input_tokens": 3})
    client = AnthropicVertex(
        region="us-east5", project_id="p", access_token="t", http_client=http_client, max_retries=0
    )
    client.messages.count_tokens(model="claude@1", messages=[{"role": "user", "content": "x"}])
    (sent,) = seen
    assert str(sent.url) == VertexTarget("p", "us-east5").count_tokens_url()


# ------------------------------------------------------------------ event stream


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    return (
        bytes([len(raw_name)]) + raw_name + b"\x07" + struct.pack(">H", len(raw_value)) + raw_value
    )


def encode_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One AWS event-stream message: prelude (total, headers length, CRC32), headers (all
    strings, type 7), payload, CRC32 of everything before it."""
    header_bytes = b"".join(_header(k, v) for k, v in headers.items())
    total = 12 + len(header_bytes) + len(payload) + 4
    prelude = struct.pack(">II", total, len(header_bytes))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    message = prelude + header_bytes + payload
    return message + struct.pack(">I", binascii.crc32(message))


def chunk(event: dict[str, Any]) -> bytes:
    raw = json.dumps(event).encode()
    payload = json.dumps({"bytes": base64.b64encode(raw).decode()}).encode()
    return encode_message(
        {":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"},
        payload,
    )


def exception(kind: str, message: str) -> bytes:
    return encode_message(
        {
            ":exception-type": kind,
            ":content-type": "application/json",
            ":message-type": "exception",
        },
        json.dumps({"message": message}).encode(),
    )


STREAM_EVENTS: list[dict[str, Any]] = [
    {"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 3}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "héllo"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}},
    {
        "type": "message_stop",
        "amazon-bedrock-invocationMetrics": {"inputTokenCount": 3, "outputTokenCount": 2},
    },
]
STREAM_BYTES = b"".join(chunk(event) for event in STREAM_EVENTS)


def _decode(pieces: list[bytes]) -> list[tuple[str, dict[str, Any], str]]:
    decoder = EventStreamDecoder()
    out = [event for piece in pieces for event in decoder.feed(piece)]
    assert not decoder.pending
    return out


def test_event_stream_chunks_decode_into_the_anthropic_events() -> None:
    events = _decode([STREAM_BYTES])
    assert [(name, data) for name, data, _ in events] == [(e["type"], e) for e in STREAM_EVENTS]
    assert all(json.loads(raw) == data for _, data, raw in events)


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(0, len(STREAM_BYTES)), max_size=12))
def test_event_stream_decodes_the_same_whatever_the_chunk_boundaries(cuts: list[int]) -> None:
    bounds = sorted({0, len(STREAM_BYTES), *cuts})
    pieces = [STREAM_BYTES[a:b] for a, b in itertools.pairwise(bounds)]
    assert [data for _, data, _ in _decode(pieces)] == STREAM_EVENTS


def test_a_half_message_is_pending() -> None:
    decoder = EventStreamDecoder()
    assert decoder.feed(STREAM_BYTES[:-3]) != []
    assert decoder.pending
    assert len(decoder.feed(STREAM_BYTES[-3:])) == 1
    assert not decoder.pending


@pytest.mark.parametrize(
    ("kind", "error_type"),
    [
        ("throttlingException", "rate_limit_error"),
        ("serviceUnavailableException", "overloaded_error"),
        ("modelTimeoutException", "timeout_error"),
        ("validationException", "invalid_request_error"),
        ("modelStreamErrorException", "api_error"),
        ("somethingNewException", "api_error"),
    ],
)
def test_an_exception_message_becomes_an_anthropic_error_event(kind: str, error_type: str) -> None:
    events = _decode([chunk(STREAM_EVENTS[0]) + exception(kind, "Bedrock says no")])
    assert events[-1][0] == "error"
    assert events[-1][1] == {
        "type": "error",
        "error": {"type": error_type, "message": "Bedrock says no"},
    }
    assert json.loads(events[-1][2]) == events[-1][1]


def test_broken_event_stream_framing_is_a_502_protocol_error() -> None:
    corrupt = bytearray(chunk(STREAM_EVENTS[0]))
    corrupt[-1] ^= 0xFF  # the message CRC
    not_base64 = encode_message(
        {":event-type": "chunk", ":message-type": "event"}, b'{"bytes":"%%"}'
    )
    for raw in (bytes(corrupt), not_base64):
        with pytest.raises(ProxyError) as caught:
            EventStreamDecoder().feed(raw)
        assert (caught.value.status, caught.value.code) == (502, "upstream_protocol_error")


# ------------------------------------------------------------------ error tables


@pytest.mark.parametrize(
    ("status", "error_type_header", "ours", "upstream", "anthropic_type", "retry_after", "signal"),
    [
        (
            429,
            "ThrottlingException:http://internal.amazon.com/coral/",
            429,
            429,
            "rate_limit_error",
            1.0,
            "rate_limited",
        ),
        (400, "ServiceQuotaExceededException", 429, 429, "rate_limit_error", None, "spend_limited"),
        (503, "ServiceUnavailableException", 503, 529, "overloaded_error", None, "overloaded"),
        (429, "ModelNotReadyException", 503, 529, "overloaded_error", None, "overloaded"),
        (400, "ValidationException", 400, 400, "invalid_request_error", None, "rejected"),
        (403, "AccessDeniedException", 403, 403, "permission_error", None, "rejected"),
        (404, "ResourceNotFoundException", 404, 404, "not_found_error", None, "rejected"),
        (408, "ModelTimeoutException", 504, 504, "timeout_error", None, "timeout"),
        (500, "InternalServerException", 502, 500, "api_error", None, "server_error"),
        (503, "", 503, 529, "overloaded_error", None, "overloaded"),
        (418, "", 418, 418, "invalid_request_error", None, "rejected"),
    ],
)
def test_bedrock_errors_map_to_anthropic_statuses_and_resilience_signals(
    status: int,
    error_type_header: str,
    ours: int,
    upstream: int,
    anthropic_type: str,
    retry_after: float | None,
    signal: str,
) -> None:
    headers = {"x-amzn-RequestId": "req-123"}
    if error_type_header:
        headers["x-amzn-ErrorType"] = error_type_header
    exc = bedrock_error(status, headers, b'{"message":"What Bedrock said"}')
    assert (exc.status, exc.upstream_status) == (ours, upstream)
    assert exc.message == "What Bedrock said"
    assert exc.headers["x-request-id"] == "req-123"
    assert exc.retry_after == retry_after
    assert exc.upstream_body is not None
    assert json.loads(exc.upstream_body) == {
        "type": "error",
        "error": {"type": anthropic_type, "message": "What Bedrock said"},
    }
    assert classify(exc).signal == signal


def test_bedrock_model_error_keeps_the_models_own_status() -> None:
    body = {"message": "bad", "originalStatusCode": 529, "originalMessage": "overloaded"}
    exc = bedrock_error(424, {"x-amzn-ErrorType": "ModelErrorException"}, body)
    assert exc.upstream_status == 529


@pytest.mark.parametrize(
    "kind", ["UnrecognizedClientException", "InvalidSignatureException", "ExpiredTokenException"]
)
def test_refused_aws_credentials_are_the_gateways_502(kind: str) -> None:
    exc = bedrock_error(
        403, {"x-amzn-ErrorType": kind}, b'{"Message":"The security token is invalid."}'
    )
    assert (exc.status, exc.code, exc.upstream_status) == (
        502,
        "upstream_authentication_error",
        401,
    )
    assert "AWS credentials" in exc.message
    assert "ANTHROPIC_API_KEY" not in exc.message


def test_an_opaque_bedrock_error_still_gets_a_message() -> None:
    exc = bedrock_error(500, {}, b"<html>")
    assert exc.message == "Bedrock answered HTTP 500."


def _google(code: int, status: str, message: str = "Google said") -> bytes:
    return json.dumps({"error": {"code": code, "message": message, "status": status}}).encode()


@pytest.mark.parametrize(
    ("status", "body", "ours", "upstream", "retry_after", "signal"),
    [
        (429, _google(429, "RESOURCE_EXHAUSTED"), 429, 429, 1.0, "rate_limited"),
        (503, _google(503, "UNAVAILABLE"), 503, 529, None, "overloaded"),
        (400, _google(400, "INVALID_ARGUMENT"), 400, 400, None, "rejected"),
        (403, _google(403, "PERMISSION_DENIED"), 403, 403, None, "rejected"),
        (404, _google(404, "NOT_FOUND"), 404, 404, None, "rejected"),
        (504, _google(504, "DEADLINE_EXCEEDED"), 504, 504, None, "timeout"),
        (500, _google(500, "INTERNAL"), 502, 500, None, "server_error"),
        (
            529,
            b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
            503,
            529,
            None,
            "overloaded",
        ),
        (
            400,
            b'{"type":"error","error":{"type":"invalid_request_error","message":"Google said"}}',
            400,
            400,
            None,
            "rejected",
        ),
    ],
)
def test_vertex_errors_map_to_anthropic_statuses_and_resilience_signals(
    status: int, body: bytes, ours: int, upstream: int, retry_after: float | None, signal: str
) -> None:
    exc = vertex_error(status, {}, body)
    assert (exc.status, exc.upstream_status, exc.retry_after) == (ours, upstream, retry_after)
    assert classify(exc).signal == signal
    assert exc.upstream_body is not None
    assert json.loads(exc.upstream_body)["type"] == "error"


def test_a_refused_google_token_is_the_gateways_502() -> None:
    exc = vertex_error(401, {}, _google(401, "UNAUTHENTICATED", "Request had invalid credentials."))
    assert (exc.status, exc.code) == (502, "upstream_authentication_error")
    assert "Google credentials" in exc.message


# ------------------------------------------------------------------ credentials


async def _call(fetch: Callable[[], Any]) -> Any:
    await trio.lowlevel.checkpoint()
    return fetch()


async def test_a_secret_is_refreshed_early_once_for_many_callers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls: list[float] = []

    async def slow_call(fetch: Callable[[], Any]) -> Any:
        calls.append(trio.current_time())
        await trio.sleep(2)  # the token endpoint takes 2 s
        return fetch()

    cache: CachedSecret[str] = CachedSecret(
        lambda: (f"token-{len(calls)}", 3600.0), early_s=300, run_sync=slow_call
    )
    got: list[str] = []

    async def caller() -> None:
        got.append(await cache.get())

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(caller)
    assert got == ["token-1"] * 5 and calls == [0.0]
    assert cache.refresh_at == 2 + 3600 - 300
    await trio.sleep_until(cache.refresh_at - 1)
    assert await cache.get() == "token-1" and len(calls) == 1
    await trio.sleep(1)
    assert await cache.get() == "token-2" and calls == [0.0, 3302.0]


async def test_a_failed_refresh_serves_the_still_valid_secret_until_it_expires(
    autojump_clock: trio.testing.MockClock,
) -> None:
    results: list[Any] = [("a", 100.0), RuntimeError("down"), RuntimeError("down"), ("b", 100.0)]

    def fetch() -> tuple[str, float]:
        result = results.pop(0)
        if isinstance(result, Exception):
            raise result
        return result  # type: ignore[no-any-return]

    cache: CachedSecret[str] = CachedSecret(fetch, early_s=30, retry_s=10, run_sync=_call)
    assert await cache.get() == "a"
    await trio.sleep(71)
    assert await cache.get() == "a"  # the refresh failed; "a" is good for 29 s more
    assert await cache.get() == "a"  # and is not retried for retry_s
    await trio.sleep(10)
    assert await cache.get() == "a"  # failed again
    await trio.sleep(10)
    assert await cache.get() == "b"
    assert results == []


async def test_an_expired_secret_whose_refresh_fails_raises(
    autojump_clock: trio.testing.MockClock,
) -> None:
    results: list[Any] = [("a", 10.0), RuntimeError("down")]

    def fetch() -> tuple[str, float]:
        result = results.pop(0)
        if isinstance(result, Exception):
            raise result
        return result  # type: ignore[no-any-return]

    cache: CachedSecret[str] = CachedSecret(fetch, early_s=5, run_sync=_call)
    await cache.get()
    await trio.sleep(11)
    with pytest.raises(RuntimeError, match="down"):
        await cache.get()


class _FakeRefreshable:
    """botocore's RefreshableCredentials as AwsCredentials uses it."""

    def __init__(self) -> None:
        self.frozen = 0
        self._expiry_time = datetime.now(UTC) + timedelta(hours=1)

    def get_frozen_credentials(self) -> Any:
        from botocore.credentials import ReadOnlyCredentials

        self.frozen += 1
        self._expiry_time = datetime.now(UTC) + timedelta(hours=1)
        return ReadOnlyCredentials(f"AKID{self.frozen}", "fake-secret-value", "fake-token")


class _FakeSession:
    def __init__(self, source: Any) -> None:
        self.source = source

    def get_credentials(self) -> Any:
        return self.source


async def test_aws_role_credentials_are_refreshed_five_minutes_before_expiry(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = _FakeRefreshable()
    credentials = AwsCredentials(session_factory=lambda: _FakeSession(source), run_sync=_call)
    keys = await credentials.get()
    assert keys.access_key == "AKID1"
    # an hour of wall time from now, less five minutes, on the trio clock
    assert 3299 < credentials.cache.refresh_at <= 3300
    await trio.sleep(3290)
    assert (await credentials.get()).access_key == "AKID1"
    await trio.sleep(15)
    assert (await credentials.get()).access_key == "AKID2"
    assert "fake-secret-value" not in repr(keys) and "fake-token" not in repr(keys)


async def test_static_aws_keys_from_the_environment_resolve_once_in_a_thread(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _isolate_aws(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    credentials = AwsCredentials()
    assert await credentials.get() == AwsKeys("AKIDENV", "env-secret", None)
    assert credentials.cache.refresh_at == float("inf")


async def test_no_aws_credentials_is_a_502_naming_no_secret(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _isolate_aws(monkeypatch, tmp_path)
    with pytest.raises(ProxyError) as caught:
        await AwsCredentials().get()
    assert (caught.value.status, caught.value.code) == (502, "upstream_credentials_error")


def _isolate_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ROLE_ARN",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


# ------------------------------------------------------ google-auth on loopback


@pytest.fixture
def token_server() -> Iterator[tuple[str, list[dict[str, list[str]]]]]:
    """A Google OAuth token endpoint on loopback: records each form, answers a token."""
    grants: list[dict[str, list[str]]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["content-length"])
            grants.append(parse_qs(self.rfile.read(length).decode()))
            body = json.dumps(
                {
                    "access_token": f"ya29.token-{len(grants)}",
                    "expires_in": 3600,
                    "token_type": "Bearer",
                }
            ).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/token", grants
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _service_account_file(tmp_path: Path, token_uri: str) -> Path:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    path = tmp_path / "service-account.json"
    path.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": "my-project",
                "private_key_id": "key-1",
                "private_key": pem,
                "client_email": "gateway@my-project.iam.gserviceaccount.com",
                "client_id": "1",
                "token_uri": token_uri,
            }
        )
    )
    return path


async def test_google_adc_service_account_token_is_fetched_once_and_cached(
    token_server: tuple[str, list[dict[str, list[str]]]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    token_uri, grants = token_server
    monkeypatch.setenv(
        "GOOGLE_APPLICATION_CREDENTIALS", str(_service_account_file(tmp_path, token_uri))
    )
    credentials = GoogleCredentials()
    headers: list[dict[str, str]] = []

    async def caller() -> None:
        headers.append(await credentials.headers())

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(caller)
    assert headers == [{"authorization": "Bearer ya29.token-1"}] * 4
    (grant,) = grants
    assert grant["grant_type"] == ["urn:ietf:params:oauth:grant-type:jwt-bearer"]
    claims = json.loads(base64.urlsafe_b64decode(grant["assertion"][0].split(".")[1] + "=="))
    assert claims["iss"] == "gateway@my-project.iam.gserviceaccount.com"
    assert claims["scope"] == "https://www.googleapis.com/auth/cloud-platform"
    # google-auth's expiry (its own clock skew taken off) less our five minutes
    assert 3000 < credentials.cache.refresh_at - trio.current_time() <= 3300


async def test_google_token_refresh_schedule_with_a_fake_provider(
    autojump_clock: trio.testing.MockClock,
) -> None:
    class Fake:
        token: str | None = None
        expiry: datetime | None = None
        refreshed = 0

    fake = Fake()

    def refresh(credentials: Any) -> None:
        credentials.refreshed += 1
        credentials.token = f"t{credentials.refreshed}"
        credentials.expiry = datetime.now(UTC).replace(tzinfo=None) + timedelta(seconds=1000)

    credentials = GoogleCredentials(load=lambda: fake, refresh=refresh, early_s=300, run_sync=_call)
    assert await credentials.token() == "t1"
    await trio.sleep(699)
    assert await credentials.token() == "t1"
    await trio.sleep(2)
    assert await credentials.token() == "t2"


async def test_no_google_credentials_is_a_502(monkeypatch: pytest.MonkeyPatch) -> None:
    from google.auth.exceptions import DefaultCredentialsError

    def load() -> Any:
        raise DefaultCredentialsError("none")

    with pytest.raises(ProxyError) as caught:
        await GoogleCredentials(load=load, run_sync=_call).token()
    assert (caught.value.status, caught.value.code) == (502, "upstream_credentials_error")


# --------------------------------------------------------------------- extras


@pytest.mark.parametrize(
    ("kind", "module", "command"),
    [
        ("bedrock", "botocore.auth", "pip install 'trio-batcher[bedrock]'"),
        ("vertex", "google.auth", "pip install 'trio-batcher[vertex]'"),
    ],
)
def test_a_kind_whose_extra_is_missing_fails_naming_the_pip_command(
    kind: str, module: str, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_extra(kind)  # installed here
    monkeypatch.setitem(sys.modules, module, None)  # as if it were not
    with pytest.raises(MissingExtraError) as caught:
        require_extra(kind)
    assert caught.value.command == command
    assert command in str(caught.value)
    require_extra("anthropic")  # needs nothing


def test_importing_the_app_and_the_kinds_loads_no_cloud_sdk() -> None:
    code = (
        "import json, sys\n"
        "import trio_batcher.asgi, trio_batcher.upstream.kinds\n"
        "print(json.dumps(sorted(m for m in sys.modules"
        " if m.split('.')[0] in ('botocore', 'boto3', 'google'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert json.loads(done.stdout) == []
