"""The Anthropic dialect's pure parts, as data: checks, the relay encoding, error shapes,
the model list, and what the pipeline reads off a stream."""

from __future__ import annotations

import json

import pytest

from trio_batcher.edge.anthropic_models import anthropic_model_list, display_name
from trio_batcher.errors import ProxyError
from trio_batcher.pipeline.tally import StreamTally
from trio_batcher.translation.anthropic_messages import (
    AnthropicMessagesStream,
    check_messages,
    encode_event,
    error_reply,
    forwarded_headers,
)
from trio_batcher.upstream.errors import upstream_error


def test_an_event_is_encoded_as_it_came_multi_line_data_included() -> None:
    raw = '{"type":"ping"}'
    assert encode_event("ping", raw) == b'event: ping\ndata: {"type":"ping"}\n\n'
    assert encode_event("x", "a\nb") == b"event: x\ndata: a\ndata: b\n\n"
    stream = AnthropicMessagesStream()
    assert stream.feed("", {"type": "message_stop"}, raw) == [
        b'event: message_stop\ndata: {"type":"ping"}\n\n'
    ]
    assert stream.finish() == [] and stream.terminator == b""


@pytest.mark.parametrize(
    ("status", "code", "expected_status", "expected_type", "final"),
    [
        (400, "invalid_json", 400, "invalid_request_error", True),
        (401, "invalid_api_key", 401, "authentication_error", True),
        (413, "request_entity_too_large", 413, "request_too_large", True),
        (429, "queue_full", 429, "rate_limit_error", False),
        (503, "shutdown", 529, "overloaded_error", False),
        (503, "upstream_cooldown", 529, "overloaded_error", False),
        (504, "request_timeout", 504, "timeout_error", False),
        (502, "upstream_connection_error", 502, "api_error", False),
        (408, "request_timeout", 408, "timeout_error", False),
    ],
)
def test_gateway_errors_take_anthropics_status_and_type(
    status: int, code: str, expected_status: int, expected_type: str, final: bool
) -> None:
    exc = ProxyError(status, "Something.", code=code, headers={"Retry-After": "3"})
    got_status, body, headers = error_reply(exc)
    assert got_status == expected_status
    assert json.loads(body) == {
        "type": "error",
        "error": {"type": expected_type, "message": "Something."},
    }
    assert headers["retry-after"] == "3"
    assert (headers.get("x-should-retry") == "false") is final


def test_an_upstream_error_is_relayed_with_its_body_and_headers() -> None:
    body = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_1"}'
    headers = {
        "request-id": "req_1",
        "retry-after": "7",
        "anthropic-ratelimit-requests-remaining": "0",
        "x-internal": "no",
    }
    exc = upstream_error(529, body, headers)
    status, relayed, out = error_reply(exc)
    assert (status, relayed) == (529, body)
    assert out == {
        "request-id": "req_1",
        "retry-after": "7",
        "anthropic-ratelimit-requests-remaining": "0",
    }


def test_the_upstream_refusing_our_key_is_not_relayed_as_the_clients_401() -> None:
    body = b'{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}'
    status, relayed, _ = error_reply(upstream_error(401, body, {}))
    assert status == 502
    assert json.loads(relayed)["error"]["type"] == "api_error"


def test_an_opaque_upstream_error_body_becomes_ours() -> None:
    status, relayed, _ = error_reply(upstream_error(500, b"<html>oops</html>", {}))
    assert status == 502
    assert json.loads(relayed)["error"]["type"] == "api_error"


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ([], "object"),
        ({"messages": [], "max_tokens": 1}, "model: Field required"),
        ({"model": "", "messages": [], "max_tokens": 1}, "model:"),
        ({"model": "m", "max_tokens": 1}, "messages: Field required"),
        ({"model": "m", "messages": {}, "max_tokens": 1}, "messages: Input should be"),
        ({"model": "m", "messages": []}, "max_tokens: Field required"),
        ({"model": "m", "messages": [], "max_tokens": True}, "max_tokens: Input should be"),
        ({"model": "m", "messages": [], "max_tokens": 1, "stream": "yes"}, "stream:"),
    ],
)
def test_only_what_the_gateway_needs_is_checked(payload: object, field: str) -> None:
    with pytest.raises(ProxyError) as raised:
        check_messages(payload)
    assert raised.value.status == 400 and field in raised.value.message


def test_everything_else_is_the_upstreams_to_judge() -> None:
    body = {"model": "m", "messages": [], "max_tokens": 1, "stream": True, "anything": {}}
    assert check_messages(body) == ("m", True)


def test_version_and_every_beta_line_are_forwarded_and_nothing_else() -> None:
    headers = [
        (b"anthropic-version", b"2023-06-01"),
        (b"x-api-key", b"pk-client"),
        (b"anthropic-beta", b"a,b"),
        (b"authorization", b"Bearer pk"),
        (b"anthropic-beta", b"c"),
    ]
    assert forwarded_headers(headers) == (
        (b"anthropic-version", b"2023-06-01"),
        (b"anthropic-beta", b"a,b"),
        (b"anthropic-beta", b"c"),
    )


def test_display_names_read_like_anthropics() -> None:
    assert display_name("claude-sonnet-4-5-20250929") == "Claude Sonnet 4.5"
    assert display_name("claude-opus-5") == "Claude Opus 5"
    assert display_name("claude-3-7-sonnet-latest") == "Claude 3.7 Sonnet (latest)"


def test_the_model_list_pages_like_anthropics() -> None:
    items = [{"id": f"claude-{i}", "created": 0} for i in range(5)]
    first = anthropic_model_list(items, {"limit": "2"})
    assert [m["id"] for m in first["data"]] == ["claude-0", "claude-1"]
    assert (first["has_more"], first["first_id"], first["last_id"]) == (
        True,
        "claude-0",
        "claude-1",
    )
    rest = anthropic_model_list(items, {"limit": "10", "after_id": "claude-1"})
    assert [m["id"] for m in rest["data"]] == ["claude-2", "claude-3", "claude-4"]
    assert rest["has_more"] is False
    back = anthropic_model_list(items, {"limit": "2", "before_id": "claude-3"})
    assert [m["id"] for m in back["data"]] == ["claude-1", "claude-2"]
    assert back["has_more"] is True
    assert anthropic_model_list(items, {})["data"][0]["lifecycle"] == "active"
    with pytest.raises(ProxyError):
        anthropic_model_list(items, {"limit": "0"})


def test_the_tally_reads_usage_and_completeness_off_the_events() -> None:
    tally = StreamTally()
    tally.observe(
        "message_start",
        {
            "message": {
                "usage": {"input_tokens": 10, "cache_read_input_tokens": 5, "output_tokens": 1}
            }
        },
    )
    tally.observe("content_block_delta", {})
    tally.observe("content_block_delta", {})
    assert not tally.complete and tally.deltas == 2
    tally.observe(
        "message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 7}}
    )
    assert tally.complete and not tally.stopped
    assert tally.usage == {"input_tokens": 10, "cache_read_input_tokens": 5, "output_tokens": 7}
    tally.observe("message_stop", {})
    assert tally.stopped
