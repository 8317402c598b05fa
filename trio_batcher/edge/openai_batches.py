"""OpenAI's Batch API: ``POST /v1/batches``, ``GET /v1/batches[/{id}]``,
``POST /v1/batches/{id}/cancel``.

The routes only touch records: a new batch is stored ``validating`` and returned at once,
and the poller (``offline.BatchPoller``, woken by ``wake``) does the rest. A cancel is a
flag on the record written by compare-and-set, so it never overwrites the poller's own
transitions; the poller sends it upstream. What the gateway keeps for itself in the record
(``_gateway``) is never shown to the client.

A batch belongs to ``request_owner``, like its files; the input file must be the same
owner's, with purpose ``batch``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from quart import Blueprint, Response, request

from ..errors import ProxyError, invalid_request
from ..store import BatchConflict, BatchRecord, BatchStore, FileStore
from ..store.batches import FINAL_STATUSES
from ..store.files import BATCH_INPUT
from ..translation.openai_batch import ENDPOINTS
from .body import parse_json_body
from .http import openai_list
from .openai_files import file_not_found
from .openai_responses import reading_the_store, request_owner
from .routes import json_response, page_limit

__all__ = ["BATCHES_PATH", "batches_blueprint", "public_batch"]

BATCHES_PATH: Final = "/v1/batches"
_WINDOW_S: Final = 24 * 3600
_DEFAULT_LIMIT: Final = 20
_MAX_LIMIT: Final = 100
_MAX_METADATA: Final = 16


def public_batch(record: BatchRecord) -> dict[str, Any]:
    """The batch object as OpenAI returns it, without the gateway's own state."""
    return {k: v for k, v in record.batch.items() if not k.startswith("_")}


def batches_blueprint(
    batches: BatchStore,
    files: FileStore,
    keyed: Callable[[], bool],
    wake: Callable[[], None],
    tenant: Callable[[], str | None] = lambda: None,
    check: Callable[[], None] = lambda: None,
) -> Blueprint:
    """The Batch routes; ``wake()`` tells the poller something changed; ``tenant()`` names
    the requesting client's tenant, kept with the batch so its spend is charged there;
    ``check()`` raises ``ProxyError`` when that tenant may not start a batch now (its
    budget is spent)."""
    routes = Blueprint("openai_batches", __name__)

    def owner() -> str:
        return request_owner({k.lower(): v for k, v in request.headers.items()}, keyed())

    @routes.post(BATCHES_PATH)
    async def create() -> Response:
        # The doors' own checks (UTF-8, strict JSON, depth, surrogates): each a 400, where
        # Quart's get_json let a bad byte or a deep nest through as a 500.
        payload = parse_json_body(
            await request.get_data(cache=False, as_text=False, parse_form_data=False)
        )
        if not isinstance(payload, Mapping):
            raise invalid_request("The body must be a JSON object.")
        input_file_id, endpoint, metadata = _create_params(payload)
        who = owner()
        with reading_the_store():
            source = await files.get(who, input_file_id)
        if source is None:
            raise file_not_found(input_file_id, "input_file_id")
        if source.purpose != BATCH_INPUT:
            raise invalid_request(
                f"File {input_file_id} has purpose {source.purpose!r}, not 'batch'.",
                param="input_file_id",
            )
        check()
        batch = new_batch(input_file_id, endpoint, metadata, tenant(), int(time.time()))
        with reading_the_store():
            record = await batches.create(who, batch)
        wake()
        return json_response(public_batch(record))

    @routes.get(BATCHES_PATH)
    async def list_batches() -> Response:
        limit = page_limit(request.args.get("limit"), default=_DEFAULT_LIMIT, maximum=_MAX_LIMIT)
        with reading_the_store():
            page = await batches.list(owner(), after=request.args.get("after") or None, limit=limit)
        data = [public_batch(record) for record in page.data]
        return json_response(openai_list(data, page.has_more))

    @routes.get(f"{BATCHES_PATH}/<batch_id>")
    async def retrieve(batch_id: str) -> Response:
        with reading_the_store():
            record = await batches.get(owner(), batch_id)
        if record is None:
            raise _not_found(batch_id)
        return json_response(public_batch(record))

    @routes.post(f"{BATCHES_PATH}/<batch_id>/cancel")
    async def cancel(batch_id: str) -> Response:
        who = owner()
        while True:
            with reading_the_store():
                record = await batches.get(who, batch_id)
            if record is None:
                raise _not_found(batch_id)
            if record.status in FINAL_STATUSES:
                if record.status == "cancelled":
                    return json_response(public_batch(record))
                raise ProxyError(
                    409,
                    f"Cannot cancel a batch with status '{record.status}'.",
                    type="invalid_request_error",
                )
            state = dict(record.batch.get("_gateway") or {})
            if state.get("cancel_requested"):
                return json_response(public_batch(record))
            state["cancel_requested"] = True
            changed = record.evolve(
                status="cancelling",
                cancelling_at=int(time.time()),
                _gateway=state,
            )
            try:
                with reading_the_store():
                    stored = await batches.update(changed)
            except BatchConflict:
                continue  # the poller moved it meanwhile: look again
            wake()
            return json_response(public_batch(stored))

    return routes


def _create_params(payload: Mapping[str, Any]) -> tuple[str, str, dict[str, str] | None]:
    for name in ("input_file_id", "endpoint", "completion_window"):
        if name not in payload:
            raise invalid_request(
                f"Missing required parameter: '{name}'.",
                param=name,
                code="missing_required_parameter",
            )
    input_file_id = payload["input_file_id"]
    if not isinstance(input_file_id, str) or not input_file_id:
        raise invalid_request("input_file_id must be a file id.", param="input_file_id")
    endpoint = payload["endpoint"]
    if endpoint not in ENDPOINTS:
        raise invalid_request(
            f"endpoint must be one of {', '.join(ENDPOINTS)}; this gateway does not batch "
            f"{endpoint!r}.",
            param="endpoint",
        )
    if payload["completion_window"] != "24h":
        raise invalid_request("completion_window must be '24h'.", param="completion_window")
    metadata = payload.get("metadata")
    if metadata is not None and (
        not isinstance(metadata, Mapping)
        or len(metadata) > _MAX_METADATA
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        raise invalid_request(
            f"metadata must be an object of at most {_MAX_METADATA} string values.",
            param="metadata",
        )
    return input_file_id, str(endpoint), dict(metadata) if metadata is not None else None


def _not_found(batch_id: str) -> ProxyError:
    return ProxyError(
        404, f"No batch found with id '{batch_id}'.", code=None, type="invalid_request_error"
    )


def new_batch(
    input_file_id: str,
    endpoint: str,
    metadata: Mapping[str, Any] | None,
    tenant: str | None,
    now: int,
) -> dict[str, Any]:
    """A batch object as created: ``validating``, every timestamp but ``created_at`` and
    ``expires_at`` unset; ``_gateway`` holds the poller's state and the creating tenant."""
    return {
        "endpoint": endpoint,
        "errors": None,
        "input_file_id": input_file_id,
        "completion_window": "24h",
        "status": "validating",
        "output_file_id": None,
        "error_file_id": None,
        "created_at": now,
        "in_progress_at": None,
        "expires_at": now + _WINDOW_S,
        "finalizing_at": None,
        "completed_at": None,
        "failed_at": None,
        "expired_at": None,
        "cancelling_at": None,
        "cancelled_at": None,
        "request_counts": {"total": 0, "completed": 0, "failed": 0},
        "metadata": metadata,
        "_gateway": {"tenant": tenant},
    }
