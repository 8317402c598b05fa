"""What every route does with Quart's request: credentials, headers, the JSON body, replies.

The real API checks a request in a fixed order -- auth, then ``anthropic-version``, then
the body (size, JSON, nesting) -- and answers every failure as an ``error`` object with the
request's id; these helpers give each route that order and that shape. They read Quart's
request context, so they run only inside a route. The keys under which ``SimulatorApp``
leaves the request's id and trace in the ASGI scope are defined here, beside their readers.
"""

from __future__ import annotations

import json
from typing import Any, Final, cast

from quart import Response, request
from werkzeug.exceptions import RequestEntityTooLarge

from ..json_text import deeper_than
from .betas import parse_betas
from .config import API_VERSIONS, SimulatorConfig
from .errors import SimulatorError, error_json

# Where ``SimulatorApp`` leaves the request's ``Trace`` and id in the ASGI scope.
TRACE_KEY: Final = "trio_batcher.sim.trace"
REQUEST_ID_KEY: Final = "trio_batcher.sim.request_id"
_JSON: Final = "application/json"
# Nesting the simulator accepts: more than the gateway passes on (200), and far enough
# below Python's recursion limit that validating and rendering the request stays safe.
_MAX_JSON_DEPTH: Final = 256


def check_auth(config: SimulatorConfig) -> None:
    key = request.headers.get("x-api-key", "")
    if not key:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            key = token.strip()
    if not key:
        raise SimulatorError(401, "x-api-key header or Authorization: Bearer is required")
    if config.api_keys and key not in config.api_keys:
        raise SimulatorError(401, "invalid x-api-key")


def check_headers(config: SimulatorConfig) -> str:
    """Auth, then ``anthropic-version``; returns the version."""
    check_auth(config)
    version = request.headers.get("anthropic-version")
    if not version:
        raise SimulatorError(400, "anthropic-version: header is required")
    if version not in API_VERSIONS:
        raise SimulatorError(400, f"anthropic-version: {version!r} is not a valid version")
    return version


def request_betas() -> frozenset[str]:
    """The betas the request's ``anthropic-beta`` headers name (repeats and lists folded)."""
    return parse_betas(request.headers.getlist("anthropic-beta"))


async def read_json(config: SimulatorConfig) -> tuple[bytes, Any]:
    """The raw body and its decoded JSON."""
    try:
        raw = await request.get_data(cache=False, as_text=False, parse_form_data=False)
    except RequestEntityTooLarge:
        raise SimulatorError(
            413,
            f"Request exceeds the maximum allowed number of bytes ({config.max_request_bytes}).",
        ) from None
    if not raw:
        raise SimulatorError(400, "body: request body is empty")
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # ValueError includes UnicodeDecodeError
        raise SimulatorError(400, "body: There was an error parsing the body as JSON") from None
    if deeper_than(raw.decode(json.detect_encoding(raw), "replace"), _MAX_JSON_DEPTH):
        raise SimulatorError(400, f"body: JSON nesting exceeds {_MAX_JSON_DEPTH} levels")
    return raw, body


def json_response(payload: object, status: int = 200) -> Response:
    return Response(json.dumps(payload).encode(), status=status, content_type=_JSON)


def error_response(error: SimulatorError, headers: Any = None) -> Response:
    request_id = cast(dict[str, Any], request.scope).get(REQUEST_ID_KEY)
    response = Response(
        error_json(error.type, error.message, request_id, error.details),
        status=error.status,
        content_type=_JSON,
    )
    for name, value in error.headers.items():
        response.headers[name] = value
    if headers:
        for name, value in headers:
            if name.lower() != "content-type":
                response.headers[name] = value
    return response
