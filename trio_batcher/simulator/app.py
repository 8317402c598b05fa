"""The simulated Anthropic Messages API as a quart-trio app.

Theory of operation: ``SimulatorApp.asgi_app`` wraps Quart for every HTTP request. It picks
the ``request-id``, records the request in the received-requests log (``received.py``:
headers at once, then the whole body, read before the route runs and replayed to it),
appends the ``request-id`` and the ``anthropic-ratelimit-*`` headers to whatever response
goes out, and, for ``POST /v1/messages``, opens the request's ``Trace`` and guarantees in
its ``finally`` that the trace is closed -- as ``abandoned`` when nothing else closed it,
i.e. when the client disconnected and quart-trio cancelled the handler or the stream body
(``delivery.py``). ``/_sim/`` requests get none of this. The handler does the rest in this
order: auth, ``anthropic-version``, body size and JSON, validation (against the betas of
``anthropic-beta``, ``betas.py``), fault directive syntax, the enforced rate limits
(``ratelimit.py``: 429, nothing charged) and overload windows (``overload.py``: 529),
fault directives and draws, then the reply (pure, ``replies.py``), sent on the latency
model's schedule either as one JSON body or as SSE events. Shared state
(``state.py``) is only touched between checkpoints, so a request's rate-limit check and
charge happen at once, and the headers sent with its response show the bucket it left.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final, cast, final

import trio
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, ASGISendEvent, Scope
from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from ..edge.json_depth import deeper_than
from ..serving import serve_app
from .betas import parse_betas
from .config import API_VERSIONS, SimulatorConfig
from .delivery import stream_body
from .errors import DEFAULT_MESSAGES, SimulatorError, error_json, error_type_for
from .faults import FAULT_HEADER, NO_FAULTS, Faults, draw_status, embedded_faults, parse_faults
from .latency import reply_delay, schedule
from .models import DEFAULT_MAX_OUTPUT_TOKENS, find_model, list_models
from .prompt import InputUsage, analyse_prompt
from .received import read_body
from .replies import Reply
from .sse import render_stream
from .state import SimulatorState
from .stats import Trace
from .validation import validate_count_tokens_request, validate_messages_request

_TRACE: Final = "trio_batcher.sim.trace"
_REQUEST_ID: Final = "trio_batcher.sim.request_id"
_JSON: Final = "application/json"
# Nesting the simulator accepts: more than the gateway passes on (200), and far enough
# below Python's recursion limit that validating and rendering the request stays safe.
_MAX_JSON_DEPTH: Final = 256


@final
class SimulatorApp(QuartTrio):
    """QuartTrio plus the simulator's per-request bookkeeping around every HTTP request.

    ``asgi_app`` picks the request id, logs the request (``sim.received``), appends the id
    and the rate-limit headers to whatever response goes out, and for ``POST /v1/messages``
    opens the trace and closes it in ``finally`` as ``abandoned`` unless the handler
    already closed it. ``sim`` is the state, for in-process tests.
    """

    def __init__(self, import_name: str, state: SimulatorState) -> None:
        super().__init__(import_name)
        self.sim = state

    async def asgi_app(
        self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        if scope["type"] != "http" or scope["path"].startswith("/_sim/"):
            await super().asgi_app(scope, receive, send)
            return
        state = self.sim
        request_id = "req_sim" + os.urandom(12).hex()
        extras = cast(dict[str, Any], scope)
        extras[_REQUEST_ID] = request_id
        entry = state.received.record(scope, request_id)
        tracked = scope["method"] == "POST" and scope["path"] == "/v1/messages"
        trace = Trace(request_id, time.monotonic())
        if tracked:
            extras[_TRACE] = trace
            state.stats.begin(trace)

        async def send_with_headers(message: ASGISendEvent) -> None:
            if message["type"] == "http.response.start":
                status = message["status"]
                trace.status = status
                if entry is not None:
                    entry.status = status
                extra = state.response_headers(request_id, status)
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        try:
            if entry is not None:
                receive = await read_body(receive, entry)
            await super().asgi_app(scope, receive, send_with_headers)
        finally:
            if tracked:
                state.stats.finish(trace, "abandoned")


def create_simulator_app(config: SimulatorConfig) -> SimulatorApp:
    """The simulated upstream as an ASGI app; host it with ``serving.serve_app``.

    Routes: ``POST /v1/messages``, ``POST /v1/messages/count_tokens``, ``GET /v1/models``,
    ``GET /v1/models/<id>`` (any query string, such as Claude Code's ``?beta=true``, is
    ignored), and the introspection endpoints:

    * ``GET /_sim/stats``: counters and traces (``?recent=N`` limits the traces returned);
    * ``GET /_sim/requests``: the received-requests log, ``{"requests": [...]}`` oldest
      first (``?recent=N``: the newest N), each entry as ``ReceivedRequest.to_json``
      gives it -- ``seq``, ``received_at``, ``request_id``, ``method``, ``path``,
      ``query``, ``headers`` (every ``[name, value]`` pair, credentials included),
      ``body`` (text), ``json`` (the parsed body or null), ``body_truncated``, ``status``;
    * ``POST /_sim/requests/reset``: empty that log;
    * ``POST /_sim/reset``: reset everything (counters, log, cache, limits, RNG).

    In process, ``app.sim.received`` is the same log (``ReceivedLog``).
    """
    state = SimulatorState(config)
    app = SimulatorApp(__name__, state)
    app.config["RESPONSE_TIMEOUT"] = None  # streams may outlive Quart's 60 s default
    app.config["MAX_CONTENT_LENGTH"] = config.max_request_bytes

    @app.post("/v1/messages")
    async def messages() -> Response:
        return await _messages(state)

    @app.post("/v1/messages/count_tokens")
    async def count_tokens() -> Response:
        try:
            api_version = _check_headers(config)
            _, body = await _read_json(config)
            validate_count_tokens_request(body, api_version=api_version, betas=_betas())
            prompt = analyse_prompt(body, seed=config.seed, cache_hint=False)
            counted: dict[str, Any] = {"input_tokens": prompt.input_tokens}
            if body.get("context_management") is not None:
                # the beta reports the count before its edits; the simulator applies none
                counted["context_management"] = {"original_input_tokens": prompt.input_tokens}
            return _json_response(counted)
        except SimulatorError as error:
            return _error_response(error)

    @app.get("/v1/models")
    async def models() -> Response:
        try:
            _check_auth(config)
            args = request.args
            limit = args.get("limit", default=20, type=int) or 20
            page = list_models(
                limit=max(1, min(limit, 1000)),
                after_id=args.get("after_id"),
                before_id=args.get("before_id"),
            )
            return _json_response(page)
        except SimulatorError as error:
            return _error_response(error)

    @app.get("/v1/models/<path:model_id>")
    async def model(model_id: str) -> Response:
        try:
            _check_auth(config)
            found = find_model(model_id)
            if found is None:
                raise SimulatorError(404, f"model: {model_id}")
            return _json_response(found)
        except SimulatorError as error:
            return _error_response(error)

    @app.get("/_sim/stats")
    async def stats() -> Response:
        recent = request.args.get("recent", default=None, type=int)
        return _json_response(state.stats.snapshot(recent))

    @app.post("/_sim/reset")
    async def reset() -> Response:
        state.reset()
        return _json_response({"ok": True})

    @app.get("/_sim/requests")
    async def received() -> Response:
        recent = request.args.get("recent", default=None, type=int)
        return _json_response(state.received.snapshot(recent))

    @app.post("/_sim/requests/reset")
    async def reset_received() -> Response:
        state.received.clear()
        return _json_response({"ok": True})

    @app.errorhandler(HTTPException)
    async def http_error(error: HTTPException) -> Response:
        status = error.code or 500
        message = f"{request.method} {request.path}: {error.name}"
        if status == 404:
            message = f"Not found: {request.path}"
        return _error_response(SimulatorError(status, message), headers=error.get_headers())

    @app.errorhandler(Exception)
    async def unexpected(error: Exception) -> Response:
        app.logger.exception("simulator bug", exc_info=error)
        trace = cast(dict[str, Any], request.scope).get(_TRACE)
        if trace is not None:
            state.stats.finish(trace, "error", 500)
        return _error_response(SimulatorError(500, "Simulated upstream internal error"))

    return app


async def run_simulator(
    config: SimulatorConfig,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    shutdown: trio.Event | None = None,
    graceful_timeout: float = 5.0,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the simulator until ``shutdown`` is set; reports ``(host, port)`` when bound.

    ``graceful_timeout`` bounds how long shutdown waits for in-flight requests (a
    ``hang=1`` request never finishes by itself).
    """
    await serve_app(
        create_simulator_app(config),
        host,
        port,
        shutdown=shutdown,
        graceful_timeout=graceful_timeout,
        task_status=task_status,
    )


# --------------------------------------------------------------------------- request handling


def _check_auth(config: SimulatorConfig) -> None:
    key = request.headers.get("x-api-key", "")
    if not key:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            key = token.strip()
    if not key:
        raise SimulatorError(401, "x-api-key header or Authorization: Bearer is required")
    if config.api_keys and key not in config.api_keys:
        raise SimulatorError(401, "invalid x-api-key")


def _check_headers(config: SimulatorConfig) -> str:
    """Auth, then ``anthropic-version``; returns the version."""
    _check_auth(config)
    version = request.headers.get("anthropic-version")
    if not version:
        raise SimulatorError(400, "anthropic-version: header is required")
    if version not in API_VERSIONS:
        raise SimulatorError(400, f"anthropic-version: {version!r} is not a valid version")
    return version


def _betas() -> frozenset[str]:
    """The betas the request's ``anthropic-beta`` headers name (repeats and lists folded)."""
    return parse_betas(request.headers.getlist("anthropic-beta"))


def _check_model(body: Mapping[str, Any]) -> None:
    """The checks the real API makes against its model table, after validation.

    Any ``claude-*`` id is served (the simulator need not change with each release), but
    a name from another vendor is a 404, as upstream, so that a misconfigured
    ``DEFAULT_MODEL`` or a client's ``gpt-4o`` fails under ``--simulate`` too; and
    ``max_tokens`` may not pass the model's output limit.
    """
    model = body["model"]
    if not model.startswith("claude-"):
        raise SimulatorError(404, f"model: {model}")
    info = find_model(model)
    limit = info["max_tokens"] if info is not None else DEFAULT_MAX_OUTPUT_TOKENS
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, int) and max_tokens > limit:
        raise SimulatorError(
            400,
            f"max_tokens: {max_tokens} > {limit}, which is the maximum allowed number of "
            f"output tokens for {model}",
        )


async def _read_json(config: SimulatorConfig) -> tuple[bytes, Any]:
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


async def _messages(state: SimulatorState) -> Response:
    """``POST /v1/messages``: checks in the API's order (auth, version, body, validation,
    fault directive syntax), then the enforced rate limits (429), an overload window (529),
    then faults (directives, then one draw from the configured rates), then the reply on the
    latency model's schedule. Every way out closes the trace."""
    config = state.config
    trace: Trace = cast(dict[str, Any], request.scope)[_TRACE]
    # The latency model counts from the request's arrival, on trio's clock.
    base = trio.current_time() - (time.monotonic() - trace.started_at)
    try:
        api_version = _check_headers(config)
        raw, body = await _read_json(config)
        validate_messages_request(body, api_version=api_version, betas=_betas())
        _check_model(body)
        header = request.headers.get(FAULT_HEADER)
        faults = parse_faults(header) if header else NO_FAULTS
        faults = faults.merged(embedded_faults(body))
        trace.stream = body.get("stream") is True
        if state.transient_spent(faults):
            faults = NO_FAULTS
        prompt = analyse_prompt(body, seed=config.seed, cache_hint=b"cache_control" in raw)
        reply_tokens = config.reply_tokens if faults.tokens is None else faults.tokens
        reply, content = state.reply(body, prompt, InputUsage(prompt.input_tokens), reply_tokens)
        _check_pressure(state, trace, prompt.input_tokens + reply.output_tokens)
        state.use_transient(faults)
        drawn = draw_status(config, state.rng)
        if faults is not NO_FAULTS:
            trace.fault = faults.describe()
        elif drawn:
            trace.fault = f"status={drawn}"
        if faults.hang:
            await trio.sleep_forever()
        status = faults.status or drawn
        if status:
            error = _fault_error(status, faults, config)
            trace.retry_after = _retry_after_of(error)
            raise error

        usage = state.cache.usage(prompt, now=time.monotonic())
        reply = replace(reply, input_usage=usage)
        trace.output_tokens = reply.output_tokens
        latency = faults.latency_config(config)
        offsets = schedule(reply.token_pieces, latency, state.rng)
        message_id = "msg_sim" + os.urandom(12).hex()
        if trace.stream:
            events = render_stream(reply, message_id, content())
            trace.status = 200
            body_iter = stream_body(state.stats, trace, events, offsets, base, faults)
            response = Response(
                body_iter, status=200, content_type="text/event-stream; charset=utf-8"
            )
            response.headers["cache-control"] = "no-cache"
            response.timeout = None
            return response
        deadline = base + reply_delay(offsets, latency)
        if deadline > trio.current_time():
            await trio.sleep_until(deadline)
        return _reply_response(state, trace, reply, message_id)
    except SimulatorError as error:
        state.stats.finish(trace, "error", error.status)
        return _error_response(error)


def _check_pressure(state: SimulatorState, trace: Trace, cost: int) -> None:
    """The enforced rate limits, then the overload schedule.

    Raises:
      SimulatorError: 429 ``rate_limit_error`` when a bucket has no room (nothing is
        charged), or 529 ``overloaded_error`` inside an overload window; both carry an
        integer ``retry-after``.
    """
    now = trio.current_time()
    if state.limits.enabled:
        refused = state.limits.admit(cost, now)
        if refused is not None:
            trace.fault = "rate_limit"
            trace.retry_after = refused.retry_after
            unit = "requests" if refused.resource == "requests" else "input and output tokens"
            period = f"{state.config.ratelimit_period_s:g} s"
            raise SimulatorError(
                429,
                f"This request would exceed your organization's rate limit of {refused.limit} "
                f"{unit} per {period}. Retry after {refused.retry_after} s.",
                type="rate_limit_error",
                headers={"retry-after": str(refused.retry_after)},
            )
    overloaded = state.overload.retry_after(now)
    if overloaded is not None:
        trace.fault = "overload"
        trace.retry_after = overloaded
        raise SimulatorError(
            529,
            DEFAULT_MESSAGES["overloaded_error"],
            type="overloaded_error",
            headers={"retry-after": str(overloaded)},
        )


def _retry_after_of(error: SimulatorError) -> float | None:
    raw = error.headers.get("retry-after")
    return None if raw is None else float(raw)


def _reply_response(state: SimulatorState, trace: Trace, reply: Reply, message_id: str) -> Response:
    data = json.dumps(reply.message_json(message_id)).encode()
    trace.first_token_at = time.monotonic()
    state.stats.finish(trace, "completed", 200)
    return Response(data, status=200, content_type=_JSON)


def _fault_error(status: int, faults: Faults, config: SimulatorConfig) -> SimulatorError:
    kind = error_type_for(status)
    headers: dict[str, str] = {}
    if status in (429, 529) and not faults.no_retry_after:
        retry = config.retry_after_s if faults.retry_after is None else faults.retry_after
        headers["retry-after"] = f"{retry:g}"
    message = DEFAULT_MESSAGES.get(kind, f"Simulated {status} fault")
    return SimulatorError(status, message, type=kind, headers=headers)


def _json_response(payload: object, status: int = 200) -> Response:
    return Response(json.dumps(payload).encode(), status=status, content_type=_JSON)


def _error_response(error: SimulatorError, headers: Any = None) -> Response:
    request_id = cast(dict[str, Any], request.scope).get(_REQUEST_ID)
    response = Response(
        error_json(error.type, error.message, request_id), status=error.status, content_type=_JSON
    )
    for name, value in error.headers.items():
        response.headers[name] = value
    if headers:
        for name, value in headers:
            if name.lower() != "content-type":
                response.headers[name] = value
    return response
