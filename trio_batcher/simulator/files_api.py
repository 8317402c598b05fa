"""The simulated Files API (beta ``files-api-2025-04-14``): upload, list, metadata, download
and delete under ``/v1/files``.

Served straight from ASGI, in front of Quart, because an upload may be hundreds of
megabytes: Quart reads a body eagerly into memory, whereas here the multipart body is
parsed as it is received (werkzeug's sans-IO ``MultipartDecoder``) and the ``file`` part
written to a temporary directory chunk by chunk, so the simulator's memory stays flat
whatever the file's size, and the gateway's own memory can be measured beside it. A
client that leaves mid-upload leaves no file behind. A download is sent back in chunks
read from disk.

Checks in the API's order: the key, ``anthropic-version``, then the beta: without
``anthropic-beta: files-api-2025-04-14`` every route is refused with a 400
``invalid_request_error``, as the real API does. One deviation: the real API lets only
files the API itself created be downloaded (an upload's metadata says
``downloadable: false``); the simulator marks uploads downloadable and serves them, so a
gateway's download path can be tested end to end.

``SimulatedFiles.known`` is what Messages validation asks for a ``source: {"type":
"file"}`` block (``messages_route.py``).
"""

from __future__ import annotations

import json
import mimetypes
import os
import shutil
import tempfile
import weakref
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, cast, final
from urllib.parse import parse_qs

import trio
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, Scope
from werkzeug.http import parse_options_header
from werkzeug.sansio.multipart import Data, Epilogue, Field, File, MultipartDecoder, NeedData

from ..upstreams.facts import file_ids
from .betas import parse_betas
from .config import API_VERSIONS, SimulatorConfig
from .errors import SimulatorError, error_json
from .request_io import REQUEST_ID_KEY

__all__ = ["FILES_BETA", "FILES_PATH", "SimulatedFiles", "is_files_route", "serve_files"]

FILES_PATH: Final = "/v1/files"
FILES_BETA: Final = "files-api-2025-04-14"
MAX_FILE_BYTES: Final = 500 * 1024 * 1024  # the real API's limit per file
_CHUNK: Final = 64 * 1024
_MAX_FIELD_BYTES: Final = 1024 * 1024


@final
@dataclass(slots=True)
class _Stored:
    id: str
    filename: str
    mime_type: str
    size_bytes: int
    created_at: str
    seq: int
    path: Path

    def metadata(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "file",
            "filename": self.filename,
            "mime_type": self.mime_type,
            "size_bytes": self.size_bytes,
            "created_at": self.created_at,
            "downloadable": True,
        }


@final
class SimulatedFiles:
    """The files uploaded so far, each in a temporary directory removed with the store."""

    def __init__(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="sim-files-"))
        self._finalizer = weakref.finalize(self, shutil.rmtree, self._dir, True)
        self._files: dict[str, _Stored] = {}
        self._seq = 0

    def known(self, file_id: str) -> bool:
        return file_id in self._files

    def __len__(self) -> int:
        return len(self._files)

    def spool(self) -> Path:
        """A new temporary path for an upload in progress."""
        return self._dir / f"partial-{os.urandom(8).hex()}"

    def add(self, path: Path, filename: str, mime_type: str) -> _Stored:
        self._seq += 1
        file_id = "file_011" + os.urandom(12).hex()
        final_path = self._dir / file_id
        path.rename(final_path)
        now = datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
        stored = _Stored(
            file_id, filename, mime_type, final_path.stat().st_size, now, self._seq, final_path
        )
        self._files[file_id] = stored
        return stored

    def get(self, file_id: str) -> _Stored | None:
        return self._files.get(file_id)

    def delete(self, file_id: str) -> bool:
        stored = self._files.pop(file_id, None)
        if stored is None:
            return False
        stored.path.unlink(missing_ok=True)
        return True

    def page(
        self, limit: int, before_id: str | None, after_id: str | None
    ) -> tuple[list[_Stored], bool]:
        """Newest first, like every Anthropic list; ``after_id``: older than that id
        (the next page), ``before_id``: newer than it (the previous one)."""
        ordered = sorted(self._files.values(), key=lambda f: f.seq, reverse=True)
        if after_id is not None:
            pivot = self._files.get(after_id)
            ordered = [f for f in ordered if pivot is None or f.seq < pivot.seq]
        if before_id is not None:
            pivot = self._files.get(before_id)
            ordered = [f for f in ordered if pivot is None or f.seq > pivot.seq]
            ordered = ordered[-limit:] if len(ordered) > limit else ordered
            return ordered, False
        return ordered[:limit], len(ordered) > limit


def is_files_route(path: str) -> bool:
    return path == FILES_PATH or path.startswith(FILES_PATH + "/")


async def serve_files(
    files: SimulatedFiles,
    config: SimulatorConfig,
    scope: Scope,
    receive: ASGIReceiveCallable,
    send: ASGISendCallable,
) -> None:
    """Answer one request under ``/v1/files``."""
    assert scope["type"] == "http"
    found_id = cast(dict[str, Any], scope).get(REQUEST_ID_KEY)
    request_id = found_id if isinstance(found_id, str) else None
    headers = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope["headers"]]
    try:
        _check(config, headers)
        method, path = scope["method"], scope["path"]
        rest = path[len(FILES_PATH) :].strip("/")
        parts = rest.split("/") if rest else []
        if not parts and method == "POST":
            stored = await _upload(files, headers, receive)
            if stored is None:
                return  # the client left: nothing to answer, and no file kept
            await _json(send, stored.metadata())
        elif not parts and method == "GET":
            query = parse_qs(scope["query_string"].decode("latin-1"))
            await _json(send, _list(files, query))
        elif len(parts) == 1 and method == "GET":
            await _json(send, _found(files, parts[0]).metadata())
        elif len(parts) == 1 and method == "DELETE":
            if not files.delete(parts[0]):
                raise _not_found(parts[0])
            await _json(send, {"id": parts[0], "type": "file_deleted"})
        elif len(parts) == 2 and parts[1] == "content" and method == "GET":
            await _download(send, _found(files, parts[0]))
        elif len(parts) <= 2:
            raise SimulatorError(405, f"{method} {path}: Method Not Allowed")
        else:
            raise SimulatorError(404, f"Not found: {path}")
    except SimulatorError as error:
        body = error_json(error.type, error.message, request_id)
        await _send(send, error.status, body, "application/json")


def _check(config: SimulatorConfig, headers: list[tuple[str, str]]) -> None:
    found = dict(reversed(headers))
    key = found.get("x-api-key", "")
    if not key:
        scheme, _, token = found.get("authorization", "").partition(" ")
        key = token.strip() if scheme.lower() == "bearer" else ""
    if not key:
        raise SimulatorError(401, "x-api-key header or Authorization: Bearer is required")
    if config.api_keys and key not in config.api_keys:
        raise SimulatorError(401, "invalid x-api-key")
    version = found.get("anthropic-version")
    if not version:
        raise SimulatorError(400, "anthropic-version: header is required")
    if version not in API_VERSIONS:
        raise SimulatorError(400, f"anthropic-version: {version!r} is not a valid version")
    betas = parse_betas(v for k, v in headers if k == "anthropic-beta")
    if FILES_BETA not in betas:
        raise SimulatorError(
            400,
            f"The Files API is in beta: add the 'anthropic-beta: {FILES_BETA}' header.",
        )


def _found(files: SimulatedFiles, file_id: str) -> _Stored:
    stored = files.get(file_id)
    if stored is None:
        raise _not_found(file_id)
    return stored


def _not_found(file_id: str) -> SimulatorError:
    return SimulatorError(404, f"File not found: {file_id}")


def _list(files: SimulatedFiles, query: dict[str, list[str]]) -> dict[str, Any]:
    def one(name: str) -> str | None:
        values = query.get(name)
        return values[-1] if values else None

    raw_limit = one("limit") or "20"
    try:
        limit = int(raw_limit)
    except ValueError:
        raise SimulatorError(
            400, f"limit: Input should be a valid integer: {raw_limit!r}"
        ) from None
    if not 1 <= limit <= 1000:
        raise SimulatorError(400, "limit: Input should be between 1 and 1000")
    page, has_more = files.page(limit, one("before_id"), one("after_id"))
    return {
        "data": [f.metadata() for f in page],
        "has_more": has_more,
        "first_id": page[0].id if page else None,
        "last_id": page[-1].id if page else None,
    }


async def _upload(
    files: SimulatedFiles, headers: Iterable[tuple[str, str]], receive: ASGIReceiveCallable
) -> _Stored | None:
    content_type = next((v for k, v in headers if k == "content-type"), "")
    mimetype, options = parse_options_header(content_type)
    boundary = options.get("boundary")
    if mimetype != "multipart/form-data" or not boundary:
        raise SimulatorError(400, "file: upload the file as multipart/form-data")
    decoder = MultipartDecoder(boundary.encode("latin-1"), max_form_memory_size=_MAX_FIELD_BYTES)
    spool = files.spool()
    handle: Any = None  # trio's async wrapper of the spool file, once the part starts
    filename = mime = ""
    size = 0
    ended = in_file = done = False
    pending: deque[bytes] = deque()
    try:
        while True:
            event = decoder.next_event()
            if isinstance(event, NeedData):
                if ended:
                    raise SimulatorError(400, "file: the multipart body ended early")
                while not pending and not ended:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return None  # the spool goes in ``finally``
                    body = cast(bytes, message.get("body", b""))
                    ended = not message.get("more_body", False)
                    # Fed in slices: the decoder refuses more than its limit at once.
                    pending.extend(body[i : i + _CHUNK] for i in range(0, len(body), _CHUNK))
                decoder.receive_data(pending.popleft() if pending else None)
            elif isinstance(event, Epilogue):
                break
            elif isinstance(event, File):
                if event.name != "file" or handle is not None:
                    raise SimulatorError(400, "file: exactly one part named 'file' is expected")
                filename, mime = _names(event)
                handle = await trio.open_file(spool, "wb")
                in_file = True
            elif isinstance(event, Field):
                in_file = False
            elif isinstance(event, Data) and in_file and handle is not None:
                await handle.write(event.data)
                size += len(event.data)
                if size > MAX_FILE_BYTES:
                    raise SimulatorError(413, f"file: larger than {MAX_FILE_BYTES} bytes")
                if not event.more_data:
                    in_file, done = False, True
        if not done or handle is None:
            raise SimulatorError(400, "file: Field required")
        await handle.aclose()
        return files.add(spool, filename, mime)
    except ValueError as exc:  # werkzeug's word for a malformed body
        raise SimulatorError(400, f"file: the multipart body is malformed ({exc})") from None
    finally:
        if handle is not None:
            with trio.CancelScope(shield=True):
                await handle.aclose()
        spool.unlink(missing_ok=True)


def _names(event: File) -> tuple[str, str]:
    """The file's name (its last path component) and MIME type."""
    filename = os.path.basename(event.filename or "") or "unnamed"
    mime = event.headers.get("content-type", "").split(";")[0].strip()
    if not mime or mime == "application/octet-stream":
        mime = mimetypes.guess_type(filename)[0] or "application/octet-stream"
    return filename, mime


async def _download(send: ASGISendCallable, stored: _Stored) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", stored.mime_type.encode("latin-1")),
                (b"content-length", b"%d" % stored.size_bytes),
            ],
            "trailers": False,
        }
    )
    async with await trio.open_file(stored.path, "rb") as handle:
        while chunk := await handle.read(_CHUNK):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _json(send: ASGISendCallable, payload: object) -> None:
    await _send(send, 200, json.dumps(payload).encode(), "application/json")


async def _send(send: ASGISendCallable, status: int, body: bytes, content_type: str) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type.encode()),
                (b"content-length", b"%d" % len(body)),
            ],
            "trailers": False,
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


def check_file_sources(files: SimulatedFiles, body: Any, betas: frozenset[str]) -> None:
    """A Messages body's file blocks need the files beta and must name stored files: a
    400 without the beta (the non-beta API knows no ``file`` source), a 404 for an id
    that names no file."""
    ids = file_ids(body)
    if not ids:
        return
    if FILES_BETA not in betas:
        raise SimulatorError(
            400,
            "source: Input tag 'file' found using 'type' does not match any of the expected "
            f"tags: 'base64', 'content', 'text', 'url' (add 'anthropic-beta: {FILES_BETA}')",
        )
    for file_id in ids:
        if not files.known(file_id):
            raise _not_found(file_id)
