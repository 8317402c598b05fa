"""The Message Batches routes: create, retrieve, list, cancel, delete, results.

Every route checks auth and ``anthropic-version`` first, as ``POST /v1/messages`` does, and
answers failures in the API's error shape. The routes only read batches and ask for
cancellation; processing belongs to each batch's task (``batches_work.run_batch``), which
``create`` starts in ``app.nursery``.

* ``POST /v1/messages/batches``: the envelope is checked (``batches.parse_envelope``, 400
  ``invalid_request_error``); the batch is answered ``in_progress``. Bodies are held to the
  simulator's ``max_request_bytes`` (413), not the real API's 256 MB.
* ``GET /v1/messages/batches/<id>``: the batch, or 404 ``not_found_error``.
* ``GET /v1/messages/batches``: newest first, ``limit`` (1 to 1000, default 20),
  ``after_id`` / ``before_id``; ``{data, has_more, first_id, last_id}``.
* ``POST /v1/messages/batches/<id>/cancel``: ``canceling`` (again if already so); an
  ended batch is a 400 (the real API's answer here is unverified).
* ``DELETE /v1/messages/batches/<id>``: ``{id, type: "message_batch_deleted"}``, only for
  an ended batch (400 otherwise).
* ``GET /v1/messages/batches/<id>/results``: the JSONL file, one result per line in the
  order the requests were processed (unprocessed ones last), streamed; before the batch
  has ended, a 404 ``not_found_error``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Final

import trio
from quart import Response, request
from quart_trio import QuartTrio

from .batches import BatchBook, parse_envelope
from .batches_work import run_batch
from .errors import SimulatorError
from .request_io import check_headers, error_response, json_response, read_json, request_betas
from .state import SimulatorState

_CHUNK_BYTES: Final = 64 * 1024
_JSONL: Final = "application/x-jsonl"


def _base_url() -> str:
    """Where this request reached the simulator, for ``results_url``."""
    return request.host_url.rstrip("/")


async def _lines(lines: Sequence[bytes]) -> AsyncIterator[bytes]:
    """``lines`` as newline-terminated JSONL, in chunks of about ``_CHUNK_BYTES``."""
    chunk: list[bytes] = []
    size = 0
    for line in lines:
        chunk.append(line + b"\n")
        size += len(line) + 1
        if size >= _CHUNK_BYTES:
            yield b"".join(chunk)
            chunk, size = [], 0
    if chunk:
        yield b"".join(chunk)


def add_batch_routes(app: QuartTrio, state: SimulatorState) -> BatchBook:
    """Register the Message Batches routes on ``app``; the book of their batches."""
    config = state.config
    book = BatchBook(config.batch_entries)

    @app.post("/v1/messages/batches")
    async def create_batch() -> Response:
        try:
            api_version = check_headers(config)
            _, body = await read_json(config)
            requests = parse_envelope(body)
            batch = book.add(
                requests,
                api_version=api_version,
                betas=request_betas(),
                expiry_s=config.batch_expiry_s,
            )
            app.nursery.start_soon(run_batch, state, batch)
            return json_response(batch.to_json(_base_url()))
        except SimulatorError as error:
            return error_response(error)

    @app.get("/v1/messages/batches")
    async def list_batches() -> Response:
        try:
            check_headers(config)
            args = request.args
            limit = args.get("limit", default=20, type=int) or 20
            page = book.page(
                limit=max(1, min(limit, 1000)),
                after_id=args.get("after_id"),
                before_id=args.get("before_id"),
                base_url=_base_url(),
            )
            return json_response(page)
        except SimulatorError as error:
            return error_response(error)

    @app.get("/v1/messages/batches/<batch_id>")
    async def retrieve_batch(batch_id: str) -> Response:
        try:
            check_headers(config)
            return json_response(book.get(batch_id).to_json(_base_url()))
        except SimulatorError as error:
            return error_response(error)

    @app.post("/v1/messages/batches/<batch_id>/cancel")
    async def cancel_batch(batch_id: str) -> Response:
        try:
            check_headers(config)
            batch = book.get(batch_id)
            if batch.status == "ended":
                raise SimulatorError(
                    400, f"Message Batch {batch_id} has already ended and cannot be canceled."
                )
            batch.cancel(trio.current_time())
            return json_response(batch.to_json(_base_url()))
        except SimulatorError as error:
            return error_response(error)

    @app.delete("/v1/messages/batches/<batch_id>")
    async def delete_batch(batch_id: str) -> Response:
        try:
            check_headers(config)
            book.delete(batch_id)
            return json_response({"id": batch_id, "type": "message_batch_deleted"})
        except SimulatorError as error:
            return error_response(error)

    @app.get("/v1/messages/batches/<batch_id>/results")
    async def batch_results(batch_id: str) -> Response:
        try:
            check_headers(config)
            batch = book.get(batch_id)
            if batch.status != "ended":
                raise SimulatorError(
                    404,
                    f"Results for message_batch {batch_id} are not available until it has "
                    f"ended (processing_status: {batch.status}).",
                )
            # A snapshot of references: a delete while streaming does not cut the file.
            response = Response(_lines(list(batch.results.values())), content_type=_JSONL)
            response.timeout = None
            return response
        except SimulatorError as error:
            return error_response(error)

    return book
