"""OpenAI's Files API, for batches: ``POST /v1/files``, ``GET /v1/files[/{id}[/content]]``,
``DELETE /v1/files/{id}``.

An upload is a ``multipart/form-data`` body with a ``purpose`` field and a ``file`` part. It
is parsed as it arrives (werkzeug's sans-IO ``MultipartDecoder``) and the file part is
written chunk by chunk into the file store, so the file is never whole in memory. What does
buffer: quart-trio's request ``Body`` keeps whatever has arrived and not yet been read, and
the ASGI side does not wait for the view, so with a disk slower than the network that
buffer can grow -- up to the upload limit (``MAX_UPLOAD_BYTES``; past it the request is a
413), never further. ``purpose`` may come before or after the file (the ``openai`` SDK
sends it first); only ``batch`` is accepted, and a file that turns out to have no valid
purpose is discarded.

Every file belongs to ``request_owner`` (the key's hash when keys are required); another
owner's id is answered exactly like an unknown one, 404.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import AsyncExitStack, aclosing
from typing import Final

from quart import Blueprint, Response, request
from werkzeug.http import parse_options_header
from werkzeug.sansio.multipart import Data, Epilogue, Field, File, MultipartDecoder, NeedData

from ..errors import ProxyError, invalid_request
from ..store import FileNotFound, FileRecord, FileSink, FileStore, FileTooLarge
from ..store.files import BATCH_INPUT
from ..translation.openai_batch import MAX_FILE_BYTES
from .http import openai_list
from .openai_responses import reading_the_store, request_owner
from .routes import json_response, page_limit

__all__ = ["FILES_PATH", "MAX_UPLOAD_BYTES", "files_blueprint"]

FILES_PATH: Final = "/v1/files"
# The body around the file: the purpose field, part headers, boundaries.
_MULTIPART_SLACK: Final = 64 * 1024
MAX_UPLOAD_BYTES: Final = MAX_FILE_BYTES + _MULTIPART_SLACK
_MAX_FIELD_BYTES: Final = 64 * 1024
# The decoder is fed at most this much at once: it refuses a buffer past _MAX_FIELD_BYTES,
# and the server may hand over everything that arrived since the last read in one chunk.
_FEED_BYTES: Final = 16 * 1024
_DEFAULT_LIMIT: Final = 10_000
_MAX_LIMIT: Final = 10_000


def files_blueprint(files: FileStore, keyed: Callable[[], bool]) -> Blueprint:
    """The Files routes over ``files``; ``keyed()`` says whether client keys are required."""
    routes = Blueprint("openai_files", __name__)

    def owner() -> str:
        return request_owner({k.lower(): v for k, v in request.headers.items()}, keyed())

    @routes.post(FILES_PATH)
    async def upload() -> Response:
        boundary = _boundary(request.headers.get("Content-Type", ""))
        with reading_the_store():
            record = await _store_upload(files, owner(), boundary, request.body)
        return json_response(record.to_openai())

    @routes.get(FILES_PATH)
    async def list_files() -> Response:
        limit = page_limit(request.args.get("limit"), default=_DEFAULT_LIMIT, maximum=_MAX_LIMIT)
        purpose = request.args.get("purpose") or None
        with reading_the_store():
            page = await files.list(
                owner(), after=request.args.get("after") or None, limit=limit, purpose=purpose
            )
        data = [record.to_openai() for record in page.data]
        return json_response(openai_list(data, page.has_more))

    @routes.get(f"{FILES_PATH}/<file_id>")
    async def retrieve(file_id: str) -> Response:
        with reading_the_store():
            record = await files.get(owner(), file_id)
        if record is None:
            raise file_not_found(file_id)
        return json_response(record.to_openai())

    @routes.get(f"{FILES_PATH}/<file_id>/content")
    async def content(file_id: str) -> Response:
        chunks = files.read_file(owner(), file_id)
        try:
            with reading_the_store():
                first = await anext(chunks, b"")
        except FileNotFound:
            raise file_not_found(file_id) from None

        async def body() -> AsyncIterator[bytes]:
            try:
                if first:
                    yield first
                async for chunk in chunks:
                    yield chunk
            finally:
                await chunks.aclose()  # type: ignore[attr-defined]

        return Response(body(), status=200, content_type="application/octet-stream")

    @routes.delete(f"{FILES_PATH}/<file_id>")
    async def delete(file_id: str) -> Response:
        with reading_the_store():
            deleted = await files.delete(owner(), file_id)
        if not deleted:
            raise file_not_found(file_id)
        return json_response({"id": file_id, "object": "file", "deleted": True})

    return routes


def file_not_found(file_id: str, param: str | None = None) -> ProxyError:
    return ProxyError(
        404, f"No such File object: {file_id}", param=param, code=None, type="invalid_request_error"
    )


async def _store_upload(
    files: FileStore, owner: str, boundary: bytes, body: AsyncIterator[bytes]
) -> FileRecord:
    """Parse the multipart ``body`` and store its file part; returns its record."""
    decoder = MultipartDecoder(boundary, max_form_memory_size=_MAX_FIELD_BYTES)
    async with aclosing(_slices(body)) as chunks:
        return await _decode(files, owner, decoder, chunks)


async def _decode(
    files: FileStore, owner: str, decoder: MultipartDecoder, chunks: AsyncIterator[bytes]
) -> FileRecord:
    fields: dict[str, bytes] = {}
    field_name: str | None = None
    field_value = bytearray()
    record: FileRecord | None = None
    seen_file = ended = False
    try:
        async with AsyncExitStack() as stack:
            sink: FileSink | None = None
            while True:
                event = decoder.next_event()
                if isinstance(event, NeedData):
                    if ended:
                        raise invalid_request("The multipart body ended early.", param="file")
                    data = await anext(chunks, None)
                    ended = data is None
                    decoder.receive_data(data)
                elif isinstance(event, Epilogue):
                    break
                elif isinstance(event, Field):
                    field_name, field_value = event.name, bytearray()
                elif isinstance(event, File):
                    if event.name != "file" or seen_file:
                        raise invalid_request(
                            "The upload must have exactly one part named 'file'.", param="file"
                        )
                    seen_file = True
                    purpose = fields.get("purpose")
                    if purpose is not None and purpose != BATCH_INPUT.encode():
                        raise _bad_purpose(purpose)
                    sink = await stack.enter_async_context(
                        files.write_file(
                            owner,
                            event.filename or "upload.jsonl",
                            BATCH_INPUT,
                            max_bytes=MAX_FILE_BYTES,
                        )
                    )
                elif isinstance(event, Data):
                    if field_name is not None:
                        field_value += event.data
                        if not event.more_data:
                            fields[field_name] = bytes(field_value)
                            field_name = None
                    elif sink is not None:
                        await sink.write(event.data)
                        if not event.more_data:
                            await stack.aclose()  # the file part ended: publish it
                            record, sink = sink.record, None
    except FileTooLarge:
        raise ProxyError(
            413,
            f"The file is larger than the {MAX_FILE_BYTES} bytes a batch input may have.",
            param="file",
            code="file_too_large",
            type="invalid_request_error",
        ) from None
    except ValueError as exc:  # werkzeug's word for a malformed body
        raise invalid_request(f"The multipart body is malformed: {exc}.") from None
    if record is None:
        raise invalid_request("The upload has no 'file' part.", param="file")
    purpose = fields.get("purpose")
    if purpose != BATCH_INPUT.encode():
        await files.delete(owner, record.id)
        if purpose is None:
            raise invalid_request(
                "Missing required parameter: 'purpose'.",
                param="purpose",
                code="missing_required_parameter",
            )
        raise _bad_purpose(purpose)
    return record


async def _slices(body: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
    """``body`` again, in pieces of at most ``_FEED_BYTES``."""
    async for chunk in body:
        view = memoryview(chunk)
        for start in range(0, len(view), _FEED_BYTES):
            yield bytes(view[start : start + _FEED_BYTES])


def _bad_purpose(purpose: bytes) -> ProxyError:
    text = purpose.decode("utf-8", "replace")
    return invalid_request(
        f"This gateway stores files for batches only: purpose must be 'batch', not {text!r}.",
        param="purpose",
    )


def _boundary(content_type: str) -> bytes:
    mimetype, options = parse_options_header(content_type)
    boundary = options.get("boundary")
    if not isinstance(boundary, str) or mimetype != "multipart/form-data" or not boundary:
        raise invalid_request(
            "Upload the file as multipart/form-data with a 'purpose' field and a 'file' part."
        )
    return boundary.encode("latin-1")
