"""Upstream HTTP errors → ProxyError (status, OpenAI body, headers), and rate-limit headers."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from trio_batcher.upstream.errors import (
    go_duration,
    ratelimit_headers,
    status_for_error_type,
    upstream_error,
)


def anthropic_error(kind: str, message: str, request_id: str | None = None) -> bytes:
    error: dict[str, object] = {"type": "error", "error": {"type": kind, "message": message}}
    if request_id is not None:
        error["request_id"] = request_id
    return json.dumps(error).encode()


def body(message: str, kind: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


ERRORS = [
    # (id, upstream status, upstream body, upstream headers, our status, our body, our headers)
    (
        "400_kept",
        400,
        anthropic_error("invalid_request_error", "messages: bad"),
        {"request-id": "req_1"},
        400,
        body("messages: bad", "invalid_request_error", "invalid_request_error"),
        {"x-request-id": "req_1"},
    ),
    (
        "401_is_502_naming_the_gateways_key",
        401,
        anthropic_error("authentication_error", "invalid x-api-key"),
        {},
        502,
        body(
            "The upstream refused this gateway's API key (ANTHROPIC_API_KEY): invalid x-api-key",
            "upstream_error",
            "upstream_authentication_error",
        ),
        {},
    ),
    (
        "402_kept",
        402,
        anthropic_error("billing_error", "pay up"),
        {},
        402,
        body("pay up", "billing_error", "billing_error"),
        {},
    ),
    (
        "403_kept",
        403,
        anthropic_error("permission_error", "nope"),
        {},
        403,
        body("nope", "permission_error", "permission_error"),
        {},
    ),
    (
        "404_for_the_model_is_model_not_found",
        404,
        anthropic_error("not_found_error", "model: claude-x"),
        {},
        404,
        {
            "error": {
                "message": "The model 'claude-x' does not exist or the upstream key cannot use it.",
                "type": "invalid_request_error",
                "param": "model",
                "code": "model_not_found",
            }
        },
        {},
    ),
    (
        "404_kept",
        404,
        anthropic_error("not_found_error", "file: f_1 was not found"),
        {},
        404,
        body("file: f_1 was not found", "not_found_error", "not_found_error"),
        {},
    ),
    (
        "413_kept",
        413,
        anthropic_error("request_too_large", "too big"),
        {},
        413,
        body("too big", "request_too_large", "request_too_large"),
        {},
    ),
    (
        "429_kept_with_retry_headers",
        429,
        anthropic_error("rate_limit_error", "slow down"),
        {"Retry-After": "7", "retry-after-ms": "7000", "request-id": "req_2"},
        429,
        body("slow down", "rate_limit_error", "rate_limit_error"),
        {"retry-after": "7", "retry-after-ms": "7000", "x-request-id": "req_2"},
    ),
    (
        "500_is_502",
        500,
        anthropic_error("api_error", "Internal server error"),
        {},
        502,
        body("Internal server error", "api_error", "api_error"),
        {},
    ),
    (
        "529_is_503_with_upstream_retry_after",
        529,
        anthropic_error("overloaded_error", "Overloaded"),
        {"retry-after": "3"},
        503,
        body("Overloaded", "overloaded_error", "overloaded_error"),
        {"retry-after": "3"},
    ),
    (
        "529_is_503_with_default_retry_after",
        529,
        anthropic_error("overloaded_error", "Overloaded"),
        {},
        503,
        body("Overloaded", "overloaded_error", "overloaded_error"),
        {"retry-after": "1"},
    ),
    (
        "503_is_503_with_retry_after",
        503,
        b"<html>upstream connect error</html>",
        {},
        503,
        body("The upstream returned HTTP 503.", "service_unavailable", None),
        {"retry-after": "1"},
    ),
    (
        "request_id_from_the_body_when_the_header_is_missing",
        500,
        anthropic_error("api_error", "Internal server error", request_id="req_body"),
        {},
        502,
        body("Internal server error", "api_error", "api_error"),
        {"x-request-id": "req_body"},
    ),
    (
        "request_id_header_wins_over_the_body",
        400,
        anthropic_error("invalid_request_error", "bad", request_id="req_body"),
        {"request-id": "req_header"},
        400,
        body("bad", "invalid_request_error", "invalid_request_error"),
        {"x-request-id": "req_header"},
    ),
    (
        "504_kept",
        504,
        anthropic_error("timeout_error", "Request timed out"),
        {},
        504,
        body("Request timed out", "timeout_error", "timeout_error"),
        {},
    ),
    (
        "other_5xx_is_502",
        501,
        b"",
        {},
        502,
        body("The upstream returned HTTP 501.", "upstream_error", None),
        {},
    ),
    (
        "non_json_body_tolerated",
        400,
        b"Bad Request",
        {},
        400,
        body("The upstream returned HTTP 400.", "invalid_request_error", None),
        {},
    ),
    (
        "empty_body_tolerated",
        429,
        None,
        {},
        429,
        body("The upstream returned HTTP 429.", "rate_limit_error", None),
        {},
    ),
    (
        "parsed_body_accepted",
        404,
        {"type": "error", "error": {"type": "not_found_error", "message": "gone"}},
        {},
        404,
        body("gone", "not_found_error", "not_found_error"),
        {},
    ),
    (
        "unknown_type_kept_as_code",
        409,
        anthropic_error("memory_path_conflict_error", "conflict"),
        {},
        409,
        body("conflict", "invalid_request_error", "memory_path_conflict_error"),
        {},
    ),
    (
        "retry_after_not_forwarded_on_400",
        400,
        anthropic_error("invalid_request_error", "bad"),
        {"retry-after": "5"},
        400,
        body("bad", "invalid_request_error", "invalid_request_error"),
        {},
    ),
    (
        "x_should_retry_forwarded",
        500,
        anthropic_error("api_error", "broken"),
        {"x-should-retry": "false"},
        502,
        body("broken", "api_error", "api_error"),
        {"x-should-retry": "false"},
    ),
    (
        "prompt_too_long_is_context_length_exceeded",
        400,
        anthropic_error(
            "invalid_request_error", "prompt is too long: 250000 tokens > 200000 maximum"
        ),
        {},
        400,
        {
            "error": {
                "message": "prompt is too long: 250000 tokens > 200000 maximum",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        },
        {},
    ),
    (
        "redirect_is_502_naming_its_target",
        301,
        b"<html>Moved</html>",
        {"Location": "https://api.anthropic.com/v1/messages"},
        502,
        body(
            "The upstream answered HTTP 301, which is not a Messages API answer (a redirect "
            "to https://api.anthropic.com/v1/messages: check ANTHROPIC_BASE_URL).",
            "upstream_error",
            "upstream_protocol_error",
        ),
        {},
    ),
    (
        "2xx_other_than_200_is_502",
        204,
        b"",
        {},
        502,
        body(
            "The upstream answered HTTP 204, which is not a Messages API answer.",
            "upstream_error",
            "upstream_protocol_error",
        ),
        {},
    ),
    (
        "a_repeated_retry_after_is_read_as_its_first",
        429,
        anthropic_error("rate_limit_error", "slow"),
        {"retry-after": "2, 2"},
        429,
        body("slow", "rate_limit_error", "rate_limit_error"),
        {"retry-after": "2"},
    ),
    (
        "ratelimit_headers_mapped",
        429,
        anthropic_error("rate_limit_error", "slow"),
        {"anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": "0"},
        429,
        body("slow", "rate_limit_error", "rate_limit_error"),
        {"x-ratelimit-limit-requests": "50", "x-ratelimit-remaining-requests": "0"},
    ),
]


@pytest.mark.parametrize(
    ("status", "raw", "headers", "our_status", "our_body", "our_headers"),
    [r[1:] for r in ERRORS],
    ids=[r[0] for r in ERRORS],
)
def test_upstream_error_mapping(
    status: int,
    raw: Any,
    headers: dict[str, str],
    our_status: int,
    our_body: dict[str, Any],
    our_headers: dict[str, str],
) -> None:
    error = upstream_error(status, raw, headers)
    assert (error.status, error.body(), error.headers) == (our_status, our_body, our_headers)


NOW = datetime(2026, 11, 1, 12, 0, 0, tzinfo=UTC)

RATELIMITS = [
    # (id, upstream headers, expected headers)
    (
        "requests_and_tokens",
        {
            "anthropic-ratelimit-requests-limit": "1000",
            "anthropic-ratelimit-requests-remaining": "999",
            "anthropic-ratelimit-requests-reset": "2026-11-01T12:00:01Z",
            "anthropic-ratelimit-tokens-limit": "80000",
            "anthropic-ratelimit-tokens-remaining": "79000",
            "anthropic-ratelimit-tokens-reset": "2026-11-01T12:06:00Z",
        },
        {
            "x-ratelimit-limit-requests": "1000",
            "x-ratelimit-remaining-requests": "999",
            "x-ratelimit-reset-requests": "1s",
            "x-ratelimit-limit-tokens": "80000",
            "x-ratelimit-remaining-tokens": "79000",
            "x-ratelimit-reset-tokens": "6m0s",
        },
    ),
    (
        "input_output_tokens",
        {
            "anthropic-ratelimit-input-tokens-limit": "40000",
            "anthropic-ratelimit-output-tokens-remaining": "100",
            "anthropic-ratelimit-output-tokens-reset": "2026-11-01T12:00:00.020+00:00",
        },
        {
            "x-ratelimit-limit-input-tokens": "40000",
            "x-ratelimit-remaining-output-tokens": "100",
            "x-ratelimit-reset-output-tokens": "20ms",
        },
    ),
    (
        "case_insensitive",
        {"Anthropic-RateLimit-Requests-Limit": "5"},
        {"x-ratelimit-limit-requests": "5"},
    ),
    (
        "reset_in_the_past_is_zero",
        {"anthropic-ratelimit-requests-reset": "2026-11-01T11:59:00Z"},
        {"x-ratelimit-reset-requests": "0s"},
    ),
    (
        "unparseable_values_left_out",
        {
            "anthropic-ratelimit-requests-limit": "lots",
            "anthropic-ratelimit-requests-reset": "tomorrow",
        },
        {},
    ),
    ("unrelated_headers_ignored", {"content-type": "application/json", "request-id": "r"}, {}),
]


@pytest.mark.parametrize(
    ("headers", "expected"), [r[1:] for r in RATELIMITS], ids=[r[0] for r in RATELIMITS]
)
def test_ratelimit_headers(headers: dict[str, str], expected: dict[str, str]) -> None:
    assert ratelimit_headers(headers, now=NOW) == expected


DURATIONS = [
    (0, "0s"),
    (-5, "0s"),
    (0.0201, "21ms"),  # rounded up: a client never retries early
    (0.02, "20ms"),
    (0.999, "999ms"),
    (1, "1s"),
    (1.5, "1.5s"),
    (59.25, "59.25s"),
    (60, "1m0s"),
    (360, "6m0s"),
    (3725.5, "1h2m5.5s"),
]


@pytest.mark.parametrize(("seconds", "text"), DURATIONS, ids=[f"{s}s" for s, _ in DURATIONS])
def test_go_duration(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text


@pytest.mark.parametrize(
    ("kind", "status"),
    [
        ("invalid_request_error", 400),
        ("authentication_error", 401),  # upstream's status; client_status makes it 502
        ("billing_error", 402),
        ("permission_error", 403),
        ("not_found_error", 404),
        ("conflict_error", 409),
        ("request_too_large", 413),
        ("rate_limit_error", 429),
        ("api_error", 500),
        ("timeout_error", 504),
        ("overloaded_error", 529),
        ("something_new_error", 502),
        (None, 502),
        (["api_error"], 502),
    ],
)
def test_a_stream_error_events_type_stands_for_the_status_the_upstream_would_send(
    kind: object, status: int
) -> None:
    assert status_for_error_type(kind) == status


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "1, 1"}, 1.0),  # sent twice by a middlebox, joined
        ({"retry-after-ms": "1500, 1500"}, 1.5),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),  # a date keeps its comma
        ({"retry-after": "soon, later"}, None),
    ],
)
def test_retry_after_survives_a_repeated_header(headers: dict[str, str], seconds: float) -> None:
    error = upstream_error(429, anthropic_error("rate_limit_error", "slow"), headers)
    assert error.retry_after == seconds
