"""The stored-response routes: ``GET`` / ``DELETE /v1/responses/{id}`` and
``GET /v1/responses/{id}/input_items``.

Quart routes (a blueprint), not doors: they read the store and never call the upstream,
and they are rare next to ``POST /v1/responses``. Every answer is in OpenAI's shapes. A
response that is unknown, expired, deleted, or another key's is the same 404, so a key
cannot learn whether someone else's id exists.

``input_items`` lists what produced the response: the earlier turns' inputs and outputs
(when it continued a ``previous_response_id``) and then its own input, paged by item id
the way OpenAI's cursor lists are (``limit`` 1-100, default 20; ``order`` ``desc`` by
default; ``after`` / ``before`` an item id of the list).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from quart import Blueprint, Response, request

from ..errors import ProxyError, invalid_request
from ..store import ResponseStore, StoredResponse
from ..store.responses import ChainBroken
from ..translation.openai_responses import client_view
from .http import openai_list
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
        page = _page_params(request.args)
        try:
            with reading_the_store():
                chain = await store.chain(response_id, owner(), time.time())
        except ChainBroken:
            chain = None
            record = await visible(response_id)  # 404 if the response itself is gone
            items = list(record.input_items)
        else:
            if chain is None:
                raise _not_found(response_id)
            items = _items_of(chain)
        return json_response(_list_page(items, *page))

    return routes


def _items_of(chain: Sequence[StoredResponse]) -> list[dict[str, Any]]:
    """Every earlier turn's input and output, then the last turn's input only."""
    items: list[dict[str, Any]] = []
    for record in chain[:-1]:
        items.extend(record.items())
    items.extend(chain[-1].input_items)
    return items


def _page_params(args: Mapping[str, str]) -> tuple[int, str, str | None, str | None]:
    limit = page_limit(args.get("limit"), default=_DEFAULT_LIMIT, maximum=_MAX_LIMIT)
    order = args.get("order", "desc")
    if order not in ("asc", "desc"):
        raise invalid_request("order must be 'asc' or 'desc'.", param="order")
    return limit, order, args.get("after"), args.get("before")


def _list_page(
    items: list[dict[str, Any]], limit: int, order: str, after: str | None, before: str | None
) -> dict[str, Any]:
    ordered = items if order == "asc" else items[::-1]
    ids = [item.get("id") for item in ordered]
    start, end = 0, len(ordered)
    if after is not None:
        start = _cursor(ids, after, "after") + 1
    if before is not None:
        end = _cursor(ids, before, "before")
    window = ordered[start:end]
    if before is not None and after is None:
        # Paging backwards: the page is the ``limit`` items just before the cursor.
        data, has_more = window[-limit:], len(window) > limit
    else:
        data, has_more = window[:limit], len(window) > limit
    return openai_list(data, has_more)


def _cursor(ids: list[Any], cursor: str, param: str) -> int:
    try:
        return ids.index(cursor)
    except ValueError:
        raise invalid_request(
            f"No input item with id '{cursor}' in this response's list.", param=param
        ) from None


def _not_found(response_id: str) -> ProxyError:
    return ProxyError(404, f"Response with id '{response_id}' not found.", param=None, code=None)
