"""``/_sim/overload``: overload this simulator now, on demand, and end it early.

A gateway in front of several upstreams must route around one that is overloaded; to watch
it do so, a test or an operator overloads one simulated upstream (each simulator has its own
state, ``fleet.py``) at the moment of their choosing rather than on a schedule:

* ``POST /_sim/overload`` with ``{"for_s": 30}`` (and optionally ``"status"``: 529, the
  default, or 429, 503, 500; and ``"retry_after"``: true, the default, or false) answers
  every Messages request -- Anthropic's
  ``/v1/messages``, Bedrock's invoke routes, Vertex's rawPredict alike, each in its own
  wire's error format (``cloud_errors.py``) -- with that status until ``for_s`` has passed;
  a new POST replaces a running overload. Its refusals carry ``retry-after`` = the seconds
  left (Bedrock's never do, nor does a 500); with ``"retry_after": false`` none does, as
  Anthropic's own 529s usually arrive, so a gateway has only its own back-off to go by;
* ``DELETE /_sim/overload`` ends it now;
* ``GET /_sim/overload``: ``{"active", "remaining_s", "status", "retry_after"}``.

Every answer is the state after the call, as ``GET`` gives it. A bad body is a 400 in
Anthropic's shape naming the field. The refusals are made in ``messages_route`` (the
overload comes before the rate limits, charges nothing, and is counted in ``/_sim/stats``
as the overload windows' 529s are: its status in ``by_status``, ``fault: "overload"`` in the
trace); ``/_sim/reset`` ends it too. Times are trio's clock.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

import trio
from quart import Response, request
from quart_trio import QuartTrio

from .errors import SimulatorError, SimulatorInvalidRequest
from .overload import ON_DEMAND_STATUSES
from .request_io import error_response, json_response
from .state import SimulatorState

_FIELDS: Final = ("for_s", "status", "retry_after")


def parse_overload(raw: bytes) -> tuple[float, int, bool]:
    """``for_s``, ``status`` and ``retry_after`` from a ``POST /_sim/overload`` body.

    Raises:
      SimulatorInvalidRequest: not a JSON object, an unknown field, ``for_s`` missing or
        not a number > 0, ``status`` not one of ``ON_DEMAND_STATUSES``, ``retry_after``
        not a boolean.
    """
    try:
        body = json.loads(raw) if raw.strip() else None
    except ValueError:
        raise SimulatorInvalidRequest("body: There was an error parsing the body as JSON") from None
    if not isinstance(body, dict):
        raise SimulatorInvalidRequest('body: expected a JSON object such as {"for_s": 30}')
    for key in body:
        if key not in _FIELDS:
            raise SimulatorInvalidRequest(f"{key}: Extra inputs are not permitted")
    for_s = body.get("for_s")
    if (
        isinstance(for_s, bool)
        or not isinstance(for_s, int | float)
        or not math.isfinite(for_s)
        or for_s <= 0
    ):
        raise SimulatorInvalidRequest(
            f"for_s: a number of seconds > 0 is required, got {json.dumps(for_s)}"
        )
    status = body.get("status", 529)
    if isinstance(status, bool) or status not in ON_DEMAND_STATUSES:
        allowed = ", ".join(map(str, ON_DEMAND_STATUSES))
        raise SimulatorInvalidRequest(
            f"status: expected one of {allowed}, got {json.dumps(status)}"
        )
    retry_after = body.get("retry_after", True)
    if not isinstance(retry_after, bool):
        raise SimulatorInvalidRequest(
            f"retry_after: expected true or false, got {json.dumps(retry_after)}"
        )
    return float(for_s), int(status), retry_after


def add_overload_routes(app: QuartTrio, state: SimulatorState) -> None:
    """Register ``GET``, ``POST`` and ``DELETE /_sim/overload`` on ``app``."""

    def answer() -> Response:
        snapshot: dict[str, Any] = state.on_demand.snapshot(trio.current_time())
        return json_response(snapshot)

    @app.get("/_sim/overload")
    async def overload_state() -> Response:
        return answer()

    @app.post("/_sim/overload")
    async def overload_start() -> Response:
        raw = await request.get_data(cache=False, as_text=False, parse_form_data=False)
        try:
            for_s, status, retry_after = parse_overload(raw)
        except SimulatorError as error:
            return error_response(error)
        state.on_demand.start(trio.current_time(), for_s, status, retry_after=retry_after)
        return answer()

    @app.delete("/_sim/overload")
    async def overload_stop() -> Response:
        state.on_demand.stop()
        return answer()
