"""The stored-response routes: ``GET`` / ``DELETE /v1/responses/{id}`` and
``GET /v1/responses/{id}/input_items``.

Quart routes (a blueprint), not doors: they read the store and never call the upstream,
and they are rare next to ``POST /v1/responses``. Every answer is in OpenAI's shapes. A
response that is unknown, expired, deleted, or another key's is the same 404, so a key
cannot learn whether someone else's id exists.

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
from .openai_responses import reading_the_store, request_owner
from .routes import json_response, page_limit

__all__ = ["responses_blueprint"]

_DEFAULT_LIMIT: Final = 20
_MAX_LIMIT: Final = 100


def responses_blueprint(store: ResponseStore, keyed: Callable[[], bool]) -> Blueprint:
    """The routes, reading ``store``; ``keyed()`` says whether client keys are required."""
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
        if request.args.get("stream", "false").lower() not in ("false", "0", ""):
            raise invalid_request(
                "Replaying a stored response as a stream is not supported by this gateway; "
                "retrieve it without stream=true.",
                param="stream",
            )
        record = await visible(response_id)
        include = request.args.getlist("include") + request.args.getlist("include[]")
        return json_response(client_view(record.response, include))

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
