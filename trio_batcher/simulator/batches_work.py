"""Processing a Message Batch: one task per batch, in the simulator app's nursery.

Theory of operation: ``run_batch`` is started by ``POST /v1/messages/batches`` in
``app.nursery`` (quart-trio's lifetime nursery, so shutting the simulator down cancels it)
and is the only writer of its batch's results. On trio's clock it

1. waits ``batch_processing_s`` from the batch's creation (a cancellation ends the wait);
2. processes the requests one after another, each taking ``batch_request_s``: the result
   is worked out first (``process_request``) and recorded when that time has passed. A
   request already started finishes even if cancellation is asked meanwhile -- the real
   API's "non-interruptible" requests -- and the batch stays ``canceling`` until then;
3. ends the batch once every request has a result, at a cancellation (after the request
   in hand), or at ``expires_at`` (a ``trio.move_on_at`` scope), whichever comes first.
   Requests without a result are then ``canceled`` if cancellation was asked, else
   ``expired``.

``process_request`` is the non-streamed half of ``POST /v1/messages`` (``messages_route``)
applied to one ``params``: validation against the creating request's ``anthropic-version``
and ``anthropic-beta``, the model checks, the ``[[sim:...]]`` directives of the last user
message (``times=N`` counted with the realtime requests' directives), one draw from the
configured fault rates, then the same reply a ``/v1/messages`` call gets, with
``service_tier: "batch"`` in its usage. Every refusal or fault is an ``errored`` result
carrying the error object the realtime call would have answered; ``hang=1`` is a request
that never finishes, so it ends ``canceled`` or ``expired``. Batch requests pass neither
the enforced rate limits nor overload windows (the real Batches API queues instead), and
they are not counted in ``/_sim/stats``, which counts HTTP requests.

Time is only ever waited for with trio's sleeps, so a test under ``autojump_clock`` sees
exact times.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

import trio

from .batches import Batch, BatchRequest, Outcome
from .errors import SimulatorError, SimulatorInvalidRequest
from .faults import NO_FAULTS, draw_status, embedded_faults

# The realtime route's model checks and fault errors, shared so a batch request is refused
# or faulted with exactly the realtime wording.
from .messages_route import _check_model as check_model
from .messages_route import _fault_error as fault_error
from .prompt import InputUsage, analyse_prompt
from .state import SimulatorState
from .validation import validate_messages_request

HANG: Final = "hang"
"""``process_request``'s answer for a request carrying ``hang=1``: it never finishes."""


def result_line(custom_id: str, result: Mapping[str, Any]) -> bytes:
    """One line of the results file (without its newline)."""
    return json.dumps({"custom_id": custom_id, "result": result}).encode()


def unprocessed_line(custom_id: str, outcome: Outcome) -> bytes:
    """The result of a request that was never processed (``canceled`` or ``expired``)."""
    return result_line(custom_id, {"type": outcome})


def error_result(error: SimulatorError) -> dict[str, Any]:
    """An ``errored`` result: the error envelope the realtime call would have answered."""
    envelope = {"type": "error", "error": {"type": error.type, "message": error.message}}
    return {"type": "errored", "error": envelope}


def process_request(
    state: SimulatorState, batch: Batch, request: BatchRequest
) -> tuple[Outcome, bytes] | str:
    """The result of one batch request (see the module docstring), or ``HANG``.

    Uses the state's RNG (one fault draw), prompt cache, reply memo and ``times=N``
    counts, like a realtime request; never raises a ``SimulatorError``.
    """
    config = state.config
    params = request.params
    try:
        validate_messages_request(params, api_version=batch.api_version, betas=batch.betas)
        if params.get("stream") is True:
            raise SimulatorInvalidRequest("stream: streaming is not supported in Message Batches")
        check_model(params)
        faults = embedded_faults(params)
        if state.transient_spent(faults):
            faults = NO_FAULTS
        prompt = analyse_prompt(params, seed=config.seed)
        reply_tokens = config.reply_tokens if faults.tokens is None else faults.tokens
        reply, _ = state.reply(params, prompt, InputUsage(prompt.input_tokens), reply_tokens)
        state.use_transient(faults)
        drawn = draw_status(config, state.rng)
        if faults.hang:
            return HANG
        status = faults.status or drawn
        if status:
            raise fault_error(status, faults, config)
        reply = replace(reply, input_usage=state.cache.usage(prompt, now=time.monotonic()))
        message = reply.message_json("msg_sim" + os.urandom(12).hex())
        message["usage"]["service_tier"] = "batch"
        return "succeeded", result_line(
            request.custom_id, {"type": "succeeded", "message": message}
        )
    except SimulatorError as error:
        return "errored", result_line(request.custom_id, error_result(error))


async def run_batch(state: SimulatorState, batch: Batch) -> None:
    """Process ``batch`` until it ends (see the module docstring); the batch's only writer.

    Cancelling this task (the simulator shutting down) leaves the batch unfinished: the
    state dies with the app.
    """
    config = state.config
    with trio.move_on_at(batch.expires_at):
        with trio.move_on_at(batch.created_at + config.batch_processing_s):
            await batch.cancel_requested.wait()
        for request in list(batch.requests):
            if batch.cancel_requested.is_set():
                break
            done = process_request(state, batch, request)
            if isinstance(done, str):  # HANG: only a cancellation or the expiry ends it
                await batch.cancel_requested.wait()
                break
            await trio.sleep(config.batch_request_s)
            outcome, line = done
            batch.record(request.custom_id, outcome, line)
    unprocessed: Outcome = "canceled" if batch.cancel_requested.is_set() else "expired"
    batch.end(trio.current_time(), unprocessed, unprocessed_line)
