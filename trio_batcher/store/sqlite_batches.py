"""The embedded batch store: ``batches.sqlite3`` in the data directory.

Theory of operation. A batch is one row: the OpenAI batch object and its upstream batches as
JSON, plus the columns that queries need (owner, status, created_at, finished_at, the input
file, version). ``finished_at`` is set exactly when the status is final, so the retention
purge reads one partial index; ``unfinished`` reads the status index. Input lines and the
index of spooled results live in two tables of their own (``_batch_lines``), written in
slices and read a page at a time, so a 100,000-line batch never sits in memory. SQLite runs off the event loop through
``_sqlite.Database`` (a worker thread, a limiter of one, WAL for several workers).

Each row records its deployment (``store.deployment``) and every statement on ``batches``
filters on it: a gateway polls, lists, counts and purges only its own batches, so two
deployments sharing a data directory never step, fail or purge each other's. The per-line
tables hang off a batch id, which only its deployment ever holds.

Purge order makes it idempotent: the files go first, then the row and its lines in one
transaction. Interrupted in between, the row is still there and the next purge deletes its
(already missing) files again, harmlessly; no file is ever left without a batch naming it.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast, final

from . import _batch_lines as lines
from ._sqlite import Database, sortable_id
from .batches import (
    ACTIVE_STATUSES,
    FINAL_STATUSES,
    BatchConflict,
    BatchPage,
    BatchRecord,
    BatchRequest,
    BatchStore,
    UpstreamBatch,
)
from .deployment import Deployment
from .files import FileStore

__all__ = ["SQLiteBatchStore"]

T = TypeVar("T")

FILENAME: Final = "batches.sqlite3"
_PURGE_ROUND: Final = 100

_BATCHES_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS batches (
    id            TEXT PRIMARY KEY,
    owner         TEXT NOT NULL,
    status        TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    finished_at   INTEGER,
    input_file_id TEXT,
    version       INTEGER NOT NULL,
    updated_at    REAL NOT NULL,
    batch         TEXT NOT NULL,
    upstream      TEXT NOT NULL,
    deployment    TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS batches_by_owner ON batches (owner, id);
CREATE INDEX IF NOT EXISTS batches_by_status ON batches (status, created_at);
CREATE INDEX IF NOT EXISTS batches_by_finish ON batches (finished_at)
    WHERE finished_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS batches_by_input ON batches (input_file_id);
"""

_SCHEMA: Final = _BATCHES_SCHEMA + lines.SCHEMA
_INDEXES: Final = """
CREATE INDEX IF NOT EXISTS batches_by_deployment ON batches (deployment, owner, id);
CREATE INDEX IF NOT EXISTS batches_by_deployment_status
    ON batches (deployment, status, created_at);
CREATE INDEX IF NOT EXISTS batches_by_deployment_finish ON batches (deployment, finished_at)
    WHERE finished_at IS NOT NULL
"""
_COLUMNS: Final = "owner, batch, upstream, version, updated_at"


@final
class SQLiteBatchStore:
    """``BatchStore`` under ``directory`` (the data directory).

    Args:
        directory: the data directory; the file is created on the first write.
        files: where the batches' files live; the purge deletes them with their batch.
        deployment: whose batches these are (``store.deployment``): every read, the
          poller's included, and the purge see only them.
        clock: the wall clock, for ``updated_at`` (injectable for tests).
    """

    def __init__(
        self,
        directory: Path,
        files: FileStore,
        *,
        deployment: Deployment | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._deployment = deployment or Deployment("local")
        self._db = Database(
            directory / FILENAME,
            _SCHEMA,
            scoped=("batches",),
            indexes=_INDEXES,
            deployment=self._deployment,
        )
        self._files = files
        self._clock = clock

    async def create(
        self, owner: str, batch: Mapping[str, Any], upstream: Sequence[UpstreamBatch] = ()
    ) -> BatchRecord:
        record = BatchRecord(
            owner=owner,
            batch={**batch, "id": sortable_id("batch_"), "object": "batch"},
            upstream=tuple(upstream),
            version=1,
            updated_at=self._clock(),
        )
        row = {**_row(record), "deployment": self._deployment.id}

        def write(db: sqlite3.Connection) -> None:
            with db:
                db.execute(
                    "INSERT INTO batches (id, owner, status, created_at, finished_at,"
                    " input_file_id, version, updated_at, batch, upstream, deployment)"
                    " VALUES (:id, :owner, :status, :created_at, :finished_at,"
                    " :input_file_id, :version, :updated_at, :batch, :upstream, :deployment)",
                    row,
                )

        await self._db.run(write)
        return record

    async def get(self, owner: str, batch_id: str) -> BatchRecord | None:
        if not self._db.exists():
            return None

        def read(db: sqlite3.Connection) -> tuple[Any, ...] | None:
            row: tuple[Any, ...] | None = db.execute(
                f"SELECT {_COLUMNS} FROM batches WHERE id = ? AND owner = ? AND deployment = ?",
                (batch_id, owner, self._deployment.id),
            ).fetchone()
            return row

        row = await self._db.run(read)
        return None if row is None else _record(row)

    async def list(self, owner: str, *, after: str | None = None, limit: int = 20) -> BatchPage:
        if not self._db.exists() or limit < 1:
            return BatchPage(data=[], has_more=False)
        params = {
            "owner": owner,
            "after": after,
            "limit": limit + 1,
            "deployment": self._deployment.id,
        }

        def read(db: sqlite3.Connection) -> list[tuple[Any, ...]]:
            return db.execute(
                f"SELECT {_COLUMNS} FROM batches WHERE owner = :owner"
                " AND deployment = :deployment AND (:after IS NULL OR id < :after) ORDER BY id DESC LIMIT :limit",
                params,
            ).fetchall()

        rows = await self._db.run(read)
        return BatchPage(data=[_record(row) for row in rows[:limit]], has_more=len(rows) > limit)

    async def update(self, record: BatchRecord) -> BatchRecord:
        stored = BatchRecord(
            owner=record.owner,
            batch=record.batch,
            upstream=record.upstream,
            version=record.version + 1,
            updated_at=self._clock(),
        )
        row = {**_row(stored), "expected": record.version, "deployment": self._deployment.id}

        def write(db: sqlite3.Connection) -> bool:
            with db:
                cursor = db.execute(
                    "UPDATE batches SET status = :status, finished_at = :finished_at,"
                    " input_file_id = :input_file_id, version = :version,"
                    " updated_at = :updated_at, batch = :batch, upstream = :upstream"
                    " WHERE id = :id AND owner = :owner AND deployment = :deployment"
                    " AND version = :expected",
                    row,
                )
            return cursor.rowcount == 1

        if not await self._db.run(write):
            raise BatchConflict(record.id)
        return stored

    async def unfinished(self) -> Sequence[BatchRecord]:
        if not self._db.exists():
            return []
        active = sorted(ACTIVE_STATUSES)

        def read(db: sqlite3.Connection) -> list[tuple[Any, ...]]:
            marks = ",".join("?" * len(active))
            return db.execute(
                f"SELECT {_COLUMNS} FROM batches WHERE deployment = ? AND status IN ({marks})"
                " ORDER BY created_at, id",
                (self._deployment.id, *active),
            ).fetchall()

        return [_record(row) for row in await self._db.run(read)]

    async def status_counts(self) -> dict[str, int]:
        if not self._db.exists():
            return {}

        def read(db: sqlite3.Connection) -> list[tuple[Any, ...]]:
            return db.execute(
                "SELECT status, count(*) FROM batches WHERE deployment = ? GROUP BY status",
                (self._deployment.id,),
            ).fetchall()

        return {str(status): int(count) for status, count in await self._db.run(read)}

    async def others_unfinished(self) -> dict[str, int]:
        """Unfinished batches of the other deployments in this file, by deployment (``''``:
        stored before deployments were recorded): what a gateway reports at startup, since
        after a key rotation without ``DEPLOYMENT_ID`` its old batches are someone else's."""
        if not self._db.exists():
            return {}
        active = sorted(ACTIVE_STATUSES)

        def read(db: sqlite3.Connection) -> list[tuple[Any, ...]]:
            marks = ",".join("?" * len(active))
            return db.execute(
                f"SELECT deployment, count(*) FROM batches WHERE deployment != ?"
                f" AND status IN ({marks}) GROUP BY deployment",
                (self._deployment.id, *active),
            ).fetchall()

        return {str(name): int(count) for name, count in await self._db.run(read)}

    async def add_requests(self, batch_id: str, requests: Sequence[BatchRequest]) -> None:
        if requests:
            await self._db.run(lambda db: lines.add_requests(db, batch_id, requests))

    async def requests(self, batch_id: str, *, after_line: int = 0) -> AsyncIterator[BatchRequest]:
        async for page in self._pages(lines.requests_page, batch_id, after_line, lambda r: r.line):
            for row in page:
                yield row

    async def find_custom_ids(self, batch_id: str, custom_ids: Sequence[str]) -> dict[str, int]:
        if not custom_ids or not self._db.exists():
            return {}
        return await self._db.run(lambda db: lines.find_custom_ids(db, batch_id, custom_ids))

    async def clear_requests(self, batch_id: str) -> None:
        def write(db: sqlite3.Connection) -> None:
            with db:
                lines.clear(db, batch_id)

        await self._db.run(write)

    async def add_results(self, batch_id: str, offsets: Sequence[tuple[str, int, int]]) -> None:
        if offsets:
            await self._db.run(lambda db: lines.add_results(db, batch_id, offsets))

    async def clear_results(self, batch_id: str) -> None:
        await self._db.run(lambda db: lines.clear_results(db, batch_id))

    async def ordered_results(
        self, batch_id: str
    ) -> AsyncIterator[tuple[BatchRequest, int | None, int | None]]:
        async for page in self._pages(lines.ordered_results, batch_id, 0, lambda r: r[0].line):
            for row in page:
                yield row

    async def _pages(
        self,
        read: Callable[[sqlite3.Connection, str, int], Sequence[T]],
        batch_id: str,
        after_line: int,
        line_of: Callable[[T], int],
    ) -> AsyncIterator[Sequence[T]]:
        """``read``'s pages of the batch's lines after ``after_line``, until a short one."""
        if not self._db.exists():
            return
        while True:
            cursor = after_line
            page = await self._db.run(lambda db, c=cursor: read(db, batch_id, c))  # type: ignore[misc]
            yield page
            if len(page) < lines.PAGE:
                return
            after_line = line_of(page[-1])

    async def purge_finished(self, now: float, retention_s: float) -> int:
        if not self._db.exists():
            return 0
        cutoff = now - retention_s
        purged = 0
        while True:

            def read(db: sqlite3.Connection) -> list[tuple[Any, ...]]:
                return db.execute(
                    f"SELECT {_COLUMNS} FROM batches WHERE deployment = ? AND finished_at <= ?"
                    " ORDER BY finished_at LIMIT ?",
                    (self._deployment.id, cutoff, _PURGE_ROUND),
                ).fetchall()

            records = [_record(row) for row in await self._db.run(read)]
            for record in records:
                await self._purge(record)
            purged += len(records)
            if len(records) < _PURGE_ROUND:
                return purged

    async def aclose(self) -> None:
        await self._db.aclose()

    async def _purge(self, record: BatchRecord) -> None:
        input_file_id = record.batch.get("input_file_id")

        def shared(db: sqlite3.Connection) -> bool:
            return (
                db.execute(
                    "SELECT 1 FROM batches WHERE input_file_id = ? AND id != ?",
                    (input_file_id, record.id),
                ).fetchone()
                is not None
            )

        # A batch created on this input file between the check and the delete would lose its
        # input and fail: a race the edge can close by refusing a finished batch's input.
        keep_input = bool(input_file_id) and await self._db.run(shared)
        for file_id in record.file_ids():
            if not (keep_input and file_id == input_file_id):
                await self._files.delete(record.owner, file_id)

        def write(db: sqlite3.Connection) -> None:
            with db:
                lines.clear(db, record.id)
                db.execute("DELETE FROM batches WHERE id = ?", (record.id,))

        await self._db.run(write)


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _row(record: BatchRecord) -> dict[str, Any]:
    status = record.batch.get("status")
    if status not in ACTIVE_STATUSES and status not in FINAL_STATUSES:
        raise ValueError(f"unknown batch status {status!r}")
    if not isinstance(record.batch.get("created_at"), int | float):
        raise ValueError("a batch object needs its created_at")
    input_file_id = record.batch.get("input_file_id")
    return {
        "id": record.id,
        "owner": record.owner,
        "status": status,
        "created_at": record.created_at,
        "finished_at": record.finished_at,
        "input_file_id": input_file_id if isinstance(input_file_id, str) else None,
        "version": record.version,
        "updated_at": record.updated_at,
        "batch": _dumps(record.batch),
        "upstream": _dumps([u.to_json() for u in record.upstream]),
    }


def _record(row: tuple[Any, ...]) -> BatchRecord:
    owner, batch, upstream, version, updated_at = row
    return BatchRecord(
        owner=owner,
        batch=json.loads(batch),
        upstream=tuple(UpstreamBatch.from_json(u) for u in json.loads(upstream)),
        version=version,
        updated_at=updated_at,
    )


if TYPE_CHECKING:  # the backend serves the whole interface
    _: BatchStore = SQLiteBatchStore(Path(), files=cast(FileStore, None))
