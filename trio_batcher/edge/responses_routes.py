"""The stored-response routes: ``GET`` / ``DELETE /v1/responses/{id}``,
``GET /v1/responses/{id}/input_items`` and ``POST /v1/responses/{id}/cancel``.

Quart routes (a blueprint), not doors: they read the store and never call the upstream,
and they are rare next to ``POST /v1/responses``. Every answer is in OpenAI's shapes. A
response that is unknown, expired, deleted, or another key's is the same 404, so a key
cannot learn whether someone else's id exists.

Background responses (``edge.background``): ``GET`` returns the current state (``queued``,
``in_progress``, then the final one); with ``stream=true`` (only for one created with
``stream: true``) it replays the kept events after ``starting_after`` and follows the live
ones; a finished response whose events are no longer kept is answered with its terminal
event alone, built from the stored object. ``cancel`` stops a queued or running one
(stored ``cancelled``) and returns it; a finished one is returned unchanged; a response
that was not created with ``background: true`` is a 400, as OpenAI answers.

``input_items`` lists what produced the response: the earlier turns' inputs and outputs
(when it continued a ``previous_response_id``) and then its own input, paged by item id
the way OpenAI's cursor lists are (``limit`` 1-100, default 20; ``order`` ``desc`` by
default; ``after`` / ``before`` an item id of the list). The store cuts the page
(``store._items``), so a conversation of many megabytes is never parsed here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Final

from quart import Blueprint, Response, request

from ..errors import ProxyError, invalid_request
from ..store import ResponseStore, StoredResponse
from ..store.responses import ItemsPage, UnknownCursor
from ..translation.openai_responses import client_view
from ..translation.openai_responses.codec import encode_event
from .background import FINAL_STATUSES, BackgroundRunner
from .background_events import EventsDropped
from .openai_responses import reading_the_store, request_owner
from .routes import json_response, page_limit

__all__ = ["responses_blueprint"]

_DEFAULT_LIMIT: Final = 20
_MAX_LIMIT: Final = 100


def responses_blueprint(
    store: ResponseStore, keyed: Callable[[], bool], background: BackgroundRunner | None = None
) -> Blueprint:
    """The routes, reading ``store``; ``keyed()`` says whether client keys are required;
    ``background`` runs this process's background responses."""
    routes = Blueprint("responses", __name__)

    def owner() -> str:
        return request_owner({k.lower(): v for k, v in request.headers.items()}, keyed())

    async def visible(response_id: str) -> StoredResponse:
        with reading_the_store():
            record = await store.get(response_id, owner(), time.time())
        if record is None:
            raise _not_found(response_id)
        return record

    @routes.get("/v1/responses/<response_id>")
    async def retrieve(response_id: str) -> Response:
        stream = request.args.get("stream", "false").lower() not in ("false", "0", "")
        record = await visible(response_id)
        include = request.args.getlist("include") + request.args.getlist("include[]")
        if stream:
            return _resume(record, _starting_after(request.args), background)
        return json_response(client_view(record.response, include))

    @routes.post("/v1/responses/<response_id>/cancel")
    async def cancel(response_id: str) -> Response:
        record = await visible(response_id)
        if record.response.get("background") is not True:
            raise invalid_request(
                "Only responses created with background: true can be cancelled.",
                param="response_id",
            )
        status = record.response.get("status")
        if status not in FINAL_STATUSES:
            here = background is not None and await background.cancel(response_id, owner())
            if not here:
                raise ProxyError(
                    409,
                    "This background response is run by another process of the gateway "
                    "(several workers share DATA_DIR); send the cancel again, it reaches "
                    "the process that runs it only by chance.",
                    code="background_elsewhere",
                )
            record = await visible(response_id)
        return json_response(client_view(record.response, ()))

    @routes.delete("/v1/responses/<response_id>")
    async def delete(response_id: str) -> Response:
        with reading_the_store():
            deleted = await store.delete(response_id, owner())
        if not deleted:
            raise _not_found(response_id)
        return json_response({"id": response_id, "object": "response.deleted", "deleted": True})

    @routes.get("/v1/responses/<response_id>/input_items")
    async def input_items(response_id: str) -> Response:
        limit, order, after, before = _page_params(request.args)
        try:
            with reading_the_store():
                page = await store.input_items(
                    response_id,
                    owner(),
                    time.time(),
                    limit=limit,
                    order=order,
                    after=after,
                    before=before,
                )
        except UnknownCursor as exc:
            raise invalid_request(
                f"No input item with id '{exc.cursor}' in this response's list.",
                param=exc.param,
            ) from None
        if page is None:
            raise _not_found(response_id)
        return Response(_list_text(page), status=200, content_type="application/json")

    return routes


def _starting_after(args: Mapping[str, str]) -> int | None:
    raw = args.get("starting_after")
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise invalid_request(
            "starting_after must be a sequence number (an integer >= 0).", param="starting_after"
        )
    return value


_SSE_HEADERS: Final = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_TERMINAL_EVENTS: Final = {
    "completed": "response.completed",
    "incomplete": "response.incomplete",
    "failed": "response.failed",
}


def _resume(
    record: StoredResponse, starting_after: int | None, background: BackgroundRunner | None
) -> Response:
    """``GET /v1/responses/{id}?stream=true``: the kept events after ``starting_after``
    and the live ones; for a finished response whose events are gone, its terminal event
    (none for a cancelled one: OpenAI's stream has no cancelled event)."""
    events = background.events(record.id) if background is not None else None
    if events is not None:
        try:
            events.check(starting_after)
        except EventsDropped as exc:
            raise invalid_request(
                f"The events after {starting_after} are no longer kept (the oldest kept is "
                f"{exc.first_kept}; BACKGROUND_STREAM_BUFFER_BYTES). Retrieve the response "
                "without stream=true.",
                param="starting_after",
            ) from None
        return Response(
            events.follow(starting_after),
            status=200,
            headers=_SSE_HEADERS,
            content_type="text/event-stream",
        )
    status = record.response.get("status")
    if record.response.get("background") is not True or status not in FINAL_STATUSES:
        raise invalid_request(
            "Only a background response created with stream: true can be streamed, and "
            "only by the gateway process that runs it; retrieve it without stream=true.",
            param="stream",
        )
    body = b""
    kind = _TERMINAL_EVENTS.get(str(status))
    if kind is not None:
        sequence = 0 if starting_after is None else starting_after + 1
        view = client_view(record.response, ())
        body = encode_event({"type": kind, "sequence_number": sequence, "response": view})
    return Response(body, status=200, headers=_SSE_HEADERS, content_type="text/event-stream")


def _page_params(args: Mapping[str, str]) -> tuple[int, str, str | None, str | None]:
    limit = page_limit(args.get("limit"), default=_DEFAULT_LIMIT, maximum=_MAX_LIMIT)
    order = args.get("order", "desc")
    if order not in ("asc", "desc"):
        raise invalid_request("order must be 'asc' or 'desc'.", param="order")
    return limit, order, args.get("after"), args.get("before")


def _list_text(page: ItemsPage) -> str:
    """``openai_list``'s shape, with the items' stored JSON text copied in as it is: a page
    of large items is never parsed and serialised again on the event loop."""
    ids = json.dumps(page.first_id), json.dumps(page.last_id)
    return (
        f'{{"object":"list","data":[{",".join(page.items)}],"first_id":{ids[0]},'
        f'"last_id":{ids[1]},"has_more":{"true" if page.has_more else "false"}}}'
    )


def _not_found(response_id: str) -> ProxyError:
    return ProxyError(404, f"Response with id '{response_id}' not found.", param=None, code=None)
