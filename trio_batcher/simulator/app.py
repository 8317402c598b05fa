"""The simulated Anthropic Messages API as a quart-trio app.

Theory of operation: ``SimulatorApp.asgi_app`` wraps Quart for every HTTP request. It picks
the ``request-id``, records the request in the received-requests log (``received.py``:
headers at once, then the whole body, read before the route runs and replayed to it),
appends the ``request-id`` and the ``anthropic-ratelimit-*`` headers to whatever response
goes out, and, for ``POST /v1/messages``, opens the request's ``Trace`` and guarantees in
its ``finally`` that the trace is closed -- as ``abandoned`` when nothing else closed it,
i.e. when the client disconnected and quart-trio cancelled the handler or the stream body
(``delivery.py``). ``/_sim/`` requests get none of this. The routes are declared here;
``POST /v1/messages`` does the rest in ``messages_route.py``, in the API's order: auth,
``anthropic-version``, body size and JSON, validation (against the betas of
``anthropic-beta``, ``betas.py``), fault directive syntax, the enforced rate limits
(``ratelimit.py``: 429, nothing charged), preceded by an overload on demand
(``overload_route.py``: ``POST /_sim/overload``), and overload windows (``overload.py``: 529),
fault directives and draws, then the reply (pure, ``replies.py``), sent on the latency
model's schedule either as one JSON body or as SSE events. Shared state
(``state.py``) is only touched between checkpoints, so a request's rate-limit check and
charge happen at once, and the headers sent with its response show the bucket it left.
"""

from __future__ import annotations

import os
import time
from typing import Any, cast, final

import trio
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, ASGISendEvent, Scope
from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from ..serving import serve_app
from .batches_route import add_batch_routes
from .bedrock_route import add_bedrock_routes, is_bedrock_invoke
from .config import SimulatorConfig
from .errors import SimulatorError
from .files_api import is_files_route, serve_files
from .google_tokens import GoogleTokens
from .messages_route import handle_messages
from .models import find_model, list_models
from .overload_route import add_overload_routes
from .prompt import analyse_prompt
from .received import read_body
from .request_io import (
    REQUEST_ID_KEY,
    TRACE_KEY,
    check_auth,
    check_headers,
    error_response,
    json_response,
    read_json,
    request_betas,
)
from .state import SimulatorState
from .stats import Trace
from .validation import validate_count_tokens_request
from .vertex_route import add_vertex_routes, is_vertex_predict


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
        extras[REQUEST_ID_KEY] = request_id
        entry = state.received.record(scope, request_id)
        path = scope["path"]
        bedrock = is_bedrock_invoke(path)
        on_bedrock = path.startswith("/model/")  # CountTokens too
        anthropic = not (on_bedrock or path.startswith("/v1/projects/") or path == "/token")
        tracked = scope["method"] == "POST" and (
            path == "/v1/messages" or bedrock or is_vertex_predict(path)
        )
        trace = Trace(request_id, time.monotonic())
        if tracked:
            extras[TRACE_KEY] = trace
            state.stats.begin(trace)

        async def send_with_headers(message: ASGISendEvent) -> None:
            if message["type"] == "http.response.start":
                status = message["status"]
                trace.status = status
                if entry is not None:
                    entry.status = status
                if anthropic:
                    extra = state.response_headers(request_id, status)
                elif on_bedrock:
                    extra = [(b"x-amzn-requestid", request_id.encode())]
                else:
                    extra = []
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        try:
            if is_files_route(path):  # streamed to disk: its body is not logged
                await serve_files(state.files, state.config, scope, receive, send_with_headers)
                return
            if entry is not None:
                receive = await read_body(receive, entry)
            await super().asgi_app(scope, receive, send_with_headers)
        finally:
            if tracked:
                state.stats.finish(trace, "abandoned")


def create_simulator_app(
    config: SimulatorConfig, *, google_tokens: GoogleTokens | None = None
) -> SimulatorApp:
    """The simulated upstream as an ASGI app; host it with ``serving.serve_app``.

    Routes: ``POST /v1/messages``, ``POST /v1/messages/count_tokens``, ``GET /v1/models``,
    ``GET /v1/models/<id>`` (any query string, such as Claude Code's ``?beta=true``, is
    ignored), the Message Batches routes (``batches_route.py``: create, retrieve, list,
    cancel, delete and results under ``/v1/messages/batches``), and the introspection
    endpoints:

    * ``GET /_sim/stats``: counters and traces (``?recent=N`` limits the traces returned);
    * ``GET /_sim/requests``: the received-requests log, ``{"requests": [...]}`` oldest
      first (``?recent=N``: the newest N), each entry as ``ReceivedRequest.to_json``
      gives it -- ``seq``, ``received_at``, ``request_id``, ``method``, ``path``,
      ``query``, ``headers`` (every ``[name, value]`` pair, credentials included),
      ``body`` (text), ``json`` (the parsed body or null), ``body_truncated``, ``status``;
    * ``POST /_sim/requests/reset``: empty that log;
    * ``POST /_sim/reset``: reset everything (counters, log, cache, limits, RNG, an
      overload on demand);
    * ``GET``, ``POST``, ``DELETE /_sim/overload``: an overload on demand
      (``overload_route.py``).

    In process, ``app.sim.received`` is the same log (``ReceivedLog``). ``google_tokens``:
    the Vertex token store, when several simulators share one (``fleet.py``: one Google
    token endpoint serves every region); ``None``: the app's own, from ``config``.
    """
    state = SimulatorState(config)
    app = SimulatorApp(__name__, state)
    app.config["RESPONSE_TIMEOUT"] = None  # streams may outlive Quart's 60 s default
    app.config["MAX_CONTENT_LENGTH"] = config.max_request_bytes

    @app.post("/v1/messages")
    async def messages() -> Response:
        return await handle_messages(state)

    @app.post("/v1/messages/count_tokens")
    async def count_tokens() -> Response:
        try:
            api_version = check_headers(config)
            _, body = await read_json(config)
            validate_count_tokens_request(body, api_version=api_version, betas=request_betas())
            prompt = analyse_prompt(body, seed=config.seed, cache_hint=False)
            counted: dict[str, Any] = {"input_tokens": prompt.input_tokens}
            if body.get("context_management") is not None:
                # the beta reports the count before its edits; the simulator applies none
                counted["context_management"] = {"original_input_tokens": prompt.input_tokens}
            return json_response(counted)
        except SimulatorError as error:
            return error_response(error)

    add_batch_routes(app, state)
    add_bedrock_routes(app, state)
    add_vertex_routes(app, state, google_tokens)
    add_overload_routes(app, state)

    @app.get("/v1/models")
    async def models() -> Response:
        try:
            check_auth(config)
            args = request.args
            limit = args.get("limit", default=20, type=int) or 20
            page = list_models(
                limit=max(1, min(limit, 1000)),
                after_id=args.get("after_id"),
                before_id=args.get("before_id"),
            )
            return json_response(page)
        except SimulatorError as error:
            return error_response(error)

    @app.get("/v1/models/<path:model_id>")
    async def model(model_id: str) -> Response:
        try:
            check_auth(config)
            found = find_model(model_id)
            if found is None:
                raise SimulatorError(404, f"model: {model_id}")
            return json_response(found)
        except SimulatorError as error:
            return error_response(error)

    @app.get("/_sim/stats")
    async def stats() -> Response:
        recent = request.args.get("recent", default=None, type=int)
        return json_response(state.stats.snapshot(recent))

    @app.post("/_sim/reset")
    async def reset() -> Response:
        state.reset()
        return json_response({"ok": True})

    @app.get("/_sim/requests")
    async def received() -> Response:
        recent = request.args.get("recent", default=None, type=int)
        return json_response(state.received.snapshot(recent))

    @app.post("/_sim/requests/reset")
    async def reset_received() -> Response:
        state.received.clear()
        return json_response({"ok": True})

    @app.errorhandler(HTTPException)
    async def http_error(error: HTTPException) -> Response:
        status = error.code or 500
        message = f"{request.method} {request.path}: {error.name}"
        if status == 404:
            message = f"Not found: {request.path}"
        return error_response(SimulatorError(status, message), headers=error.get_headers())

    @app.errorhandler(Exception)
    async def unexpected(error: Exception) -> Response:
        app.logger.exception("simulator bug", exc_info=error)
        trace = cast(dict[str, Any], request.scope).get(TRACE_KEY)
        if trace is not None:
            state.stats.finish(trace, "error", 500)
        return error_response(SimulatorError(500, "Simulated upstream internal error"))

    return app


async def run_simulator(
    config: SimulatorConfig,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    shutdown: trio.Event | None = None,
    graceful_timeout: float = 5.0,
    google_tokens: GoogleTokens | None = None,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the simulator until ``shutdown`` is set; reports ``(host, port)`` when bound.

    ``graceful_timeout`` bounds how long shutdown waits for in-flight requests (a
    ``hang=1`` request never finishes by itself). ``google_tokens``: see
    ``create_simulator_app``.
    """
    await serve_app(
        create_simulator_app(config, google_tokens=google_tokens),
        host,
        port,
        shutdown=shutdown,
        graceful_timeout=graceful_timeout,
        task_status=task_status,
    )
