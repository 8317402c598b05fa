"""``POST /v1/messages``: from a checked request to a reply, a refusal or a fault.

``handle_messages`` runs in the request's handler task, inside the trace ``SimulatorApp``
opened for it (``app.py`` gives the order of the steps). The reply is sent on the latency
model's schedule: one JSON body after the whole reply's delay, or an SSE body that
``delivery.py`` paces and that closes the trace itself. Every other way out closes the
trace here; a client that goes away first has its handler cancelled by quart-trio, and
``SimulatorApp`` closes the trace as ``abandoned``.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, cast, final

import trio
from quart import Response, request

from .config import SimulatorConfig
from .delivery import stream_body
from .errors import DEFAULT_MESSAGES, SimulatorError, error_type_for
from .faults import FAULT_HEADER, NO_FAULTS, Faults, draw_status, embedded_faults, parse_faults
from .files_api import check_file_sources
from .latency import reply_delay, schedule
from .models import DEFAULT_MAX_OUTPUT_TOKENS, find_model
from .prompt import InputUsage, analyse_prompt
from .request_io import (
    TRACE_KEY,
    check_headers,
    error_response,
    json_response,
    read_json,
    request_betas,
)
from .sse import render_stream
from .state import SimulatorState
from .stats import Trace
from .validation import validate_messages_request


async def handle_messages(state: SimulatorState) -> Response:
    """``POST /v1/messages``: checks in the API's order (auth, version, body, validation,
    fault directive syntax), then the enforced rate limits (429), an overload window (529),
    then faults (directives, then one draw from the configured rates), then the reply on the
    latency model's schedule. Every way out closes the trace."""
    config = state.config
    trace, base = request_trace()
    try:
        api_version = check_headers(config)
        raw, body = await read_json(config)
        answer = await answer_messages(state, trace, base, raw, body, api_version, request_betas())
        return answer_response(answer)
    except SimulatorError as error:
        state.stats.finish(trace, "error", error.status)
        return error_response(error)


def answer_response(answer: Answer) -> Response:
    """An answer as Anthropic sends it (and Vertex, which relays Anthropic's SSE): JSON, or
    a stream of server-sent events with no time limit."""
    if answer.events is None:
        return json_response(answer.message)
    response = Response(answer.events, status=200, content_type="text/event-stream; charset=utf-8")
    response.headers["cache-control"] = "no-cache"
    response.timeout = None
    return response


def request_trace() -> tuple[Trace, float]:
    """The request's trace, and its arrival on trio's clock (the latency model counts from
    there)."""
    trace: Trace = cast(dict[str, Any], request.scope)[TRACE_KEY]
    return trace, trio.current_time() - (time.monotonic() - trace.started_at)


@final
@dataclass(frozen=True, slots=True)
class Answer:
    """A reply to a Messages request: the message (JSON) or, for a stream, its SSE body.

    The clouds' routes (``bedrock_route.py``, ``vertex_route.py``) reuse everything from
    validation to delivery and only re-wrap this."""

    message: dict[str, Any]
    events: AsyncIterator[bytes] | None = None


async def answer_messages(
    state: SimulatorState,
    trace: Trace,
    base: float,
    raw: bytes,
    body: dict[str, Any],
    api_version: str,
    betas: frozenset[str],
) -> Answer:
    """Validation, fault directive syntax, rate limits, overload, faults, then the reply on
    the latency model's schedule (a JSON reply after its whole delay; a stream paced by
    ``delivery.py``, which closes the trace itself). A non-stream answer closes the trace.

    Raises:
      SimulatorError: a refusal or an injected fault, in Anthropic's terms (the caller
        closes the trace and renders it in its own dialect).
    """
    config = state.config
    # A thread's ``continue`` is checked and answered as the conversation it continues.
    body, turn = state.threads.resolve(body) if betas else (body, None)
    validate_messages_request(body, api_version=api_version, betas=betas)
    check_file_sources(state.files, body, betas)
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
        if turn is not None:
            state.threads.hold(turn, reply.message_json(message_id))
        events = render_stream(reply, message_id, content())
        trace.status = 200
        return Answer({}, stream_body(state.stats, trace, events, offsets, base, faults))
    deadline = base + reply_delay(offsets, latency)
    if deadline > trio.current_time():
        await trio.sleep_until(deadline)
    message = reply.message_json(message_id)
    if turn is not None:
        state.threads.hold(turn, message)
    trace.first_token_at = time.monotonic()
    state.stats.finish(trace, "completed", 200)
    return Answer(message)


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


def _check_pressure(state: SimulatorState, trace: Trace, cost: int) -> None:
    """An overload on demand, then the enforced rate limits, then the overload schedule.

    Raises:
      SimulatorError: the on-demand overload's status while one runs (nothing is
        charged); 429 ``rate_limit_error`` when a bucket has no room (nothing is charged),
        or 529 ``overloaded_error`` inside an overload window; all but a 500 carry an
        integer ``retry-after``: when the overload or window ends, when the bucket has room.
    """
    now = trio.current_time()
    demanded = state.on_demand.retry_after(now)
    if demanded is not None:
        trace.fault = "overload"
        retry_after = demanded if state.on_demand.send_retry_after else None
        raise _on_demand_error(state.on_demand.status, retry_after, trace)
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


# What an on-demand overload says, by status (Anthropic's own words for 529 and 429).
_ON_DEMAND_MESSAGES: Final = {
    529: DEFAULT_MESSAGES["overloaded_error"],
    429: DEFAULT_MESSAGES["rate_limit_error"],
    503: "Simulated overload: the service is unavailable.",
    500: DEFAULT_MESSAGES["api_error"],
}


def _on_demand_error(status: int, retry_after: int | None, trace: Trace) -> SimulatorError:
    """The refusal of an overload on demand (``POST /_sim/overload``), in Anthropic's
    terms (each cloud's route re-renders it): ``retry-after`` is when the overload ends,
    except on a 500, which the API sends without one, and when ``retry_after`` is None
    (the overload was started with ``"retry_after": false``)."""
    headers: dict[str, str] = {}
    if status != 500 and retry_after is not None:
        headers["retry-after"] = str(retry_after)
        trace.retry_after = retry_after
    return SimulatorError(
        status, _ON_DEMAND_MESSAGES[status], type=error_type_for(status), headers=headers
    )


def _retry_after_of(error: SimulatorError) -> float | None:
    raw = error.headers.get("retry-after")
    return None if raw is None else float(raw)


def _fault_error(status: int, faults: Faults, config: SimulatorConfig) -> SimulatorError:
    kind = error_type_for(status)
    headers: dict[str, str] = {}
    if status in (429, 529) and not faults.no_retry_after:
        retry = config.retry_after_s if faults.retry_after is None else faults.retry_after
        headers["retry-after"] = f"{retry:g}"
    message = DEFAULT_MESSAGES.get(kind, f"Simulated {status} fault")
    return SimulatorError(status, message, type=kind, headers=headers)
