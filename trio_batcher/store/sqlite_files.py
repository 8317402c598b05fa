"""The embedded file store: records in SQLite, contents as plain files beside it.

Theory of operation. Under the data directory, ``files.sqlite3`` holds one row per file (the
OpenAI file object and its owner) and ``files/<id>`` holds the bytes, never SQLite: a
200 MB upload must not pass through the database's page cache or its WAL. Every disk call
(open, read, write, fsync, rename, unlink) runs in a worker thread behind ``io_limiter``;
SQLite runs behind its own limiter of one (``_sqlite.Database``). Memory is one chunk per
reader or writer, whatever the file size.

An upload is written to ``files/.<id>.part``, fsynced, renamed to ``files/<id>`` and only
then recorded, rename and insert in one worker call; a failure or a cancellation before that
removes the part file (in a shielded cleanup), so nothing is left. A delete removes the row,
then the bytes. The only windows that can leave bytes without a row are a process dying
between rename and insert or between the row's and the bytes' removal; ``purge_expired``
sweeps such orphans once they are a day old (older than any upload in progress).

Each row records its deployment (``store.deployment``): a gateway lists, reads, deletes and
expires only its own files; bytes are kept while any deployment's row names them. Contents
are written mode 0600 under directories made 0700 (``data_dir``).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final, TypeVar, final

import trio

from ._sqlite import Database, sortable_id
from .data_dir import open_private, private_dir
from .deployment import Deployment
from .files import (
    MAX_LINE_BYTES,
    FileNotFound,
    FilePage,
    FileRecord,
    FileStore,
    FileTooLarge,
    LineTooLong,
)
from .responses import StoreUnavailable

__all__ = ["SQLiteFileStore"]

T = TypeVar("T")

FILENAME: Final = "files.sqlite3"
CONTENTS: Final = "files"
CHUNK_BYTES: Final = 64 * 1024
# Bytes without a row this old are orphans of a crash, not an upload in progress.
ORPHAN_AGE_S: Final = 86_400.0

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS files (
    id         TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    bytes      INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    filename   TEXT NOT NULL,
    purpose    TEXT NOT NULL,
    expires_at INTEGER,
    deployment TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS files_by_owner ON files (owner, id);
CREATE INDEX IF NOT EXISTS files_by_expiry ON files (expires_at) WHERE expires_at IS NOT NULL;
"""
_INDEXES: Final = """
CREATE INDEX IF NOT EXISTS files_by_deployment ON files (deployment, owner, id)
"""

_COLUMNS: Final = "id, owner, bytes, created_at, filename, purpose, expires_at"
_VISIBLE: Final = (
    "owner = :owner AND deployment = :deployment AND (expires_at IS NULL OR expires_at > :now)"
)


@final
class _Sink:
    """``FileSink`` over an open part file."""

    def __init__(self, handle: IO[bytes], max_bytes: int | None, limiter: trio.CapacityLimiter):
        self._handle = handle
        self._max_bytes = max_bytes
        self._limiter = limiter
        self._written = 0
        self._record: FileRecord | None = None

    @property
    def bytes_written(self) -> int:
        return self._written

    @property
    def record(self) -> FileRecord:
        if self._record is None:
            raise RuntimeError("the file is stored only once its `async with` block has exited")
        return self._record

    async def write(self, chunk: bytes) -> None:
        if not chunk:
            return
        if self._max_bytes is not None and self._written + len(chunk) > self._max_bytes:
            raise FileTooLarge(self._max_bytes)
        await _in_thread(self._handle.write, chunk, limiter=self._limiter)
        self._written += len(chunk)


@final
class SQLiteFileStore:
    """``FileStore`` under ``directory`` (the data directory).

    Args:
        directory: the data directory; created on the first write.
        deployment: whose files these are (``store.deployment``): others' are invisible.
        clock: the wall clock, for ``created_at`` and expiry (injectable for tests).
        chunk_bytes: the size of each read from disk.
        io_limiter: bounds the worker threads doing file I/O for this store.
    """

    def __init__(
        self,
        directory: Path,
        *,
        deployment: Deployment | None = None,
        clock: Callable[[], float] = time.time,
        chunk_bytes: int = CHUNK_BYTES,
        io_limiter: trio.CapacityLimiter | None = None,
    ) -> None:
        self._deployment = deployment or Deployment("local")
        self._db = Database(
            directory / FILENAME,
            _SCHEMA,
            scoped=("files",),
            indexes=_INDEXES,
            deployment=self._deployment,
        )
        self._contents = directory / CONTENTS
        self._clock = clock
        self._chunk_bytes = chunk_bytes
        self._io_limiter = io_limiter or trio.CapacityLimiter(4)

    @property
    def contents_dir(self) -> Path:
        return self._contents

    @asynccontextmanager
    async def write_file(
        self,
        owner: str,
        filename: str,
        purpose: str,
        *,
        max_bytes: int | None = None,
        expires_at: int | None = None,
    ) -> AsyncIterator[_Sink]:
        file_id = sortable_id("file-")
        part = self._contents / f".{file_id}.part"
        final_path = self._contents / file_id
        handle = await _in_thread(_create, part, limiter=self._io_limiter)
        try:
            sink = _Sink(handle, max_bytes, self._io_limiter)
            yield sink
            await _in_thread(_sync_and_close, handle, limiter=self._io_limiter)
            record = FileRecord(
                id=file_id,
                owner=owner,
                bytes=sink.bytes_written,
                created_at=int(self._clock()),
                filename=filename,
                purpose=purpose,
                expires_at=expires_at,
            )
            row = (*_row(record), self._deployment.id)

            def publish(db: sqlite3.Connection) -> None:
                os.replace(part, final_path)
                try:
                    with db:
                        db.execute(
                            f"INSERT INTO files ({_COLUMNS}, deployment) VALUES (?,?,?,?,?,?,?,?)",
                            row,
                        )
                except BaseException:
                    final_path.unlink(missing_ok=True)
                    raise

            await self._db.run(publish)
            sink._record = record
        except BaseException:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(_discard, handle, part, limiter=self._io_limiter)
            raise

    async def read_file(self, owner: str, file_id: str) -> AsyncGenerator[bytes, None]:
        record = await self.get(owner, file_id)
        handle = None
        if record is not None:
            handle = await _in_thread(_open, self._contents / record.id, limiter=self._io_limiter)
        if handle is None:
            raise FileNotFound(file_id)
        try:
            while chunk := await _in_thread(
                handle.read, self._chunk_bytes, limiter=self._io_limiter
            ):
                yield chunk
        finally:
            # Closing a file opened for reading flushes nothing, so it cannot block: done
            # inline, it also runs when the generator is finalised outside any task.
            handle.close()

    async def read_lines(
        self, owner: str, file_id: str, *, max_line_bytes: int = MAX_LINE_BYTES
    ) -> AsyncIterator[bytes]:
        # The tail of an unfinished line is kept as a list of pieces and joined once, so a
        # line spanning many chunks costs its length, not its length times its chunks.
        pieces: list[bytes] = []
        held = 0
        number = 0
        async with aclosing(self.read_file(owner, file_id)) as chunks:
            async for chunk in chunks:
                start = 0
                while (end := chunk.find(b"\n", start)) >= 0:
                    number += 1
                    if held + end - start > max_line_bytes:
                        raise LineTooLong(number, max_line_bytes)
                    line = b"".join((*pieces, chunk[start:end])) if pieces else chunk[start:end]
                    pieces.clear()
                    held = 0
                    yield line[:-1] if line.endswith(b"\r") else line
                    start = end + 1
                if start < len(chunk):
                    held += len(chunk) - start
                    if held > max_line_bytes:
                        raise LineTooLong(number + 1, max_line_bytes)
                    pieces.append(chunk[start:])
        if pieces:
            line = b"".join(pieces)
            yield line[:-1] if line.endswith(b"\r") else line

    async def get(self, owner: str, file_id: str) -> FileRecord | None:
        if not self._db.exists():
            return None
        params = self._params(id=file_id, owner=owner, now=self._clock())

        def read(db: sqlite3.Connection) -> tuple[Any, ...] | None:
            row: tuple[Any, ...] | None = db.execute(
                f"SELECT {_COLUMNS} FROM files WHERE id = :id AND {_VISIBLE}", params
            ).fetchone()
            return row

        row = await self._db.run(read)
        return None if row is None else FileRecord(*row)

    async def list(
        self,
        owner: str,
        *,
        after: str | None = None,
        limit: int = 10_000,
        purpose: str | None = None,
    ) -> FilePage:
        if not self._db.exists() or limit < 1:
            return FilePage(data=[], has_more=False)
        params = self._params(
            owner=owner, now=self._clock(), after=after, purpose=purpose, limit=limit + 1
        )

        def read(db: sqlite3.Connection) -> list[tuple[Any, ...]]:
            return db.execute(
                f"SELECT {_COLUMNS} FROM files WHERE {_VISIBLE}"
                " AND (:after IS NULL OR id < :after) AND (:purpose IS NULL OR purpose = :purpose)"
                " ORDER BY id DESC LIMIT :limit",
                params,
            ).fetchall()

        rows = await self._db.run(read)
        return FilePage(data=[FileRecord(*row) for row in rows[:limit]], has_more=len(rows) > limit)

    async def delete(self, owner: str, file_id: str) -> bool:
        if not self._db.exists():
            return False
        params = self._params(id=file_id, owner=owner, now=self._clock())

        def write(db: sqlite3.Connection) -> str | None:
            with db:
                row = db.execute(
                    f"DELETE FROM files WHERE id = :id AND {_VISIBLE} RETURNING id", params
                ).fetchone()
            return None if row is None else str(row[0])

        deleted = await self._db.run(write)
        if deleted is None:
            return False
        await _in_thread(_unlink, self._contents / deleted, limiter=self._io_limiter)
        return True

    async def purge_expired(self, now: float) -> int:
        if not self._db.exists():
            return 0

        def write(db: sqlite3.Connection) -> list[str]:
            with db:
                rows = db.execute(
                    "DELETE FROM files WHERE deployment = ? AND expires_at <= ? RETURNING id",
                    (self._deployment.id, now),
                ).fetchall()
            return [str(row[0]) for row in rows]

        expired = await self._db.run(write)
        for file_id in expired:
            await _in_thread(_unlink, self._contents / file_id, limiter=self._io_limiter)
        await self._sweep_orphans(now)
        return len(expired)

    async def aclose(self) -> None:
        await self._db.aclose()

    def _params(self, **values: Any) -> dict[str, Any]:
        return {**values, "deployment": self._deployment.id}

    async def _sweep_orphans(self, now: float) -> None:
        old = await _in_thread(
            _old_entries, self._contents, now - ORPHAN_AGE_S, limiter=self._io_limiter
        )
        for name in old:
            file_id = name[1:].removesuffix(".part") if name.startswith(".") else name

            # Any deployment's row keeps the bytes: another's are not orphans.
            def known(db: sqlite3.Connection, file_id: str = file_id) -> bool:
                return (
                    db.execute("SELECT 1 FROM files WHERE id = ?", (file_id,)).fetchone()
                    is not None
                )

            if name.startswith(".") or not await self._db.run(known):
                await _in_thread(_unlink, self._contents / name, limiter=self._io_limiter)


async def _in_thread(
    fn: Callable[..., T], *args: Any, limiter: trio.CapacityLimiter | None = None
) -> T:
    try:
        return await trio.to_thread.run_sync(fn, *args, limiter=limiter)
    except OSError as exc:
        raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc


def _row(record: FileRecord) -> tuple[Any, ...]:
    return (
        record.id,
        record.owner,
        record.bytes,
        record.created_at,
        record.filename,
        record.purpose,
        record.expires_at,
    )


def _create(part: Path) -> IO[bytes]:
    private_dir(part.parent, levels=2)  # the data directory and ``files`` under it
    return os.fdopen(open_private(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "wb")


def _open(path: Path) -> IO[bytes] | None:
    try:
        return path.open("rb")
    except FileNotFoundError:  # the row outlived its bytes (a crash mid-delete): not found
        return None


def _sync_and_close(handle: IO[bytes]) -> None:
    """Durable before it is visible: a batch must not start from a file a power cut emptied."""
    handle.flush()
    os.fsync(handle.fileno())
    handle.close()


def _discard(handle: IO[bytes], part: Path) -> None:
    handle.close()
    part.unlink(missing_ok=True)


def _unlink(path: Path) -> None:
    path.unlink(missing_ok=True)


def _old_entries(directory: Path, before: float) -> list[str]:
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return []
    return [e.name for e in entries if e.is_file() and e.stat().st_mtime < before]


if TYPE_CHECKING:  # the backend serves the whole interface
    _: FileStore = SQLiteFileStore(Path())
