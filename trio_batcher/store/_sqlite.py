"""One SQLite file used off the event loop: what every SQLite store here shares.

Theory of operation (every SQLite store here: responses, spend, files, batches). SQLite calls
block, so each runs in a worker thread (``trio.to_thread.run_sync``), never on the event
loop. Writes go through one connection behind a ``CapacityLimiter`` of one: one statement at
a time. Reads may go through ``read`` instead: WAL lets readers run beside the writer and
beside each other, so each read takes a connection of its own from a small pool, at most
``readers`` at once; a read that scans large stored JSON passes ``bulk=True`` and is held to
``readers - 1`` of them, so a small lookup always finds a connection free however many large
reads queue (the sqlite3 module releases the GIL while SQLite works, so they really do run
beside the event loop). A call is not abandoned when its caller is cancelled (trio's
default), so a transaction that started is committed or rolled back before the cancellation
lands. The file, and its directory, are created on first use, mode 0700 and 0600 (the
``-wal`` and ``-shm`` files SQLite makes take the database file's mode). WAL journaling lets
the processes of ``serve --workers N`` share the file; ``busy_timeout`` absorbs the short
waits between writers.

Namespaces (``store.deployment``): the tables a store names in ``scoped`` get a
``deployment`` column when the file predates it (rows then belong to ``LEGACY``), ``migrate``
reshapes what a column cannot, then ``indexes`` are made, and a deployment that
``adopts_legacy`` takes the legacy rows -- all in one write transaction on the first
connection, so two processes opening an old file at once migrate it once.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final, TypeVar, final

import trio

from .data_dir import open_private, private_dir, tighten
from .deployment import LEGACY, Deployment
from .responses import StoreUnavailable

__all__ = ["Database", "sortable_id"]

T = TypeVar("T")

_last_us = 0
_last_lock = threading.Lock()
_SIDE_FILES: Final = ("-wal", "-shm", "-journal")


def sortable_id(prefix: str) -> str:
    """A new id that sorts after every id this process made before it, and (clocks agreeing)
    after those of other processes: microseconds since the epoch, then random bits.

    Lists page newest first with ``id < after``, so a cursor stays valid after the record it
    names is deleted, which a lookup of that record's position could not do.
    """
    global _last_us
    with _last_lock:
        _last_us = max(time.time_ns() // 1000, _last_us + 1)
        stamp = _last_us
    return f"{prefix}{stamp:014x}{secrets.token_hex(6)}"


@final
class Database:
    """A lazily opened SQLite file: one writing connection and the limiter that serialises
    its use, and (``readers`` > 0) a pool of reading ones.

    Args:
      scoped: tables with a ``deployment`` column (added to an older file).
      deployment: whose the legacy rows become, when it ``adopts_legacy``.
      migrate: run after the columns are added, before ``indexes``, in the same transaction.
      readers: read connections at most at once (0: reads use the writing connection).
    """

    def __init__(
        self,
        path: Path,
        schema: str,
        *,
        scoped: Sequence[str] = (),
        indexes: str = "",
        deployment: Deployment | None = None,
        migrate: Callable[[sqlite3.Connection], None] | None = None,
        readers: int = 0,
    ) -> None:
        self.path = path
        self._schema = schema
        self._scoped = tuple(scoped)
        self._indexes = indexes
        self._deployment = deployment
        self._migrate = migrate
        self._limiter = trio.CapacityLimiter(1)
        self._db: sqlite3.Connection | None = None
        self._readers = trio.CapacityLimiter(readers) if readers else None
        self._bulk = trio.CapacityLimiter(max(1, readers - 1)) if readers else None
        self._idle: list[sqlite3.Connection] = []
        self._idle_lock = threading.Lock()
        self._closed = False

    def exists(self) -> bool:
        """Whether anything was ever stored: reads of a store never written need no file."""
        return self._db is not None or self.path.exists()

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(connection)`` in a worker thread; ``StoreUnavailable`` when the disk fails."""

        def call() -> T:
            return fn(self._connection())

        try:
            return await trio.to_thread.run_sync(call, limiter=self._limiter)
        except (OSError, sqlite3.Error) as exc:
            raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc

    async def read(self, fn: Callable[[sqlite3.Connection], T], *, bulk: bool = False) -> T:
        """``fn(connection)`` on a reading connection of its own, in a worker thread: it
        waits for no write and no other read. ``bulk``: a read whose cost grows with the
        stored data, which never takes the last connection."""
        if self._readers is None or self._bulk is None:
            return await self.run(fn)
        if self._db is None:
            await self.run(lambda db: None)  # create and migrate the file first, once

        def call() -> T:
            db = self._reader()
            try:
                return fn(db)
            finally:
                self._release(db)

        try:
            if bulk:
                async with self._bulk:
                    return await trio.to_thread.run_sync(call, limiter=self._readers)
            return await trio.to_thread.run_sync(call, limiter=self._readers)
        except (OSError, sqlite3.Error) as exc:
            raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc

    async def aclose(self) -> None:
        self._closed = True
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for reader in idle:
            await trio.to_thread.run_sync(reader.close)
        if self._db is None:
            return
        db, self._db = self._db, None
        await trio.to_thread.run_sync(db.close, limiter=self._limiter)

    def _reader(self) -> sqlite3.Connection:
        with self._idle_lock:
            if self._idle:
                return self._idle.pop()
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA busy_timeout=5000")
        db.execute("PRAGMA query_only=1")
        return db

    def _release(self, db: sqlite3.Connection) -> None:
        if db.in_transaction:  # a read that failed half way
            db.rollback()
        with self._idle_lock:
            if not self._closed:
                self._idle.append(db)
                return
        db.close()

    def _connection(self) -> sqlite3.Connection:
        """Open on first use (in the worker thread, under the limiter)."""
        if self._db is None:
            private_dir(self.path.parent)
            os.close(open_private(self.path, os.O_RDWR | os.O_CREAT))
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.execute("PRAGMA busy_timeout=5000")
                for suffix in _SIDE_FILES:  # an older version's, made 0644
                    tighten(self.path.with_name(self.path.name + suffix))
                db.executescript(self._schema)
                self._prepare(db)
            except BaseException:
                db.close()
                raise
            db.isolation_level = "DEFERRED"  # ``with db:`` opens and commits a transaction
            self._db = db
        return self._db

    def _prepare(self, db: sqlite3.Connection) -> None:
        """Namespaces: columns, migration, indexes, adoption; one transaction."""
        if not (self._scoped or self._indexes or self._migrate):
            return
        db.execute("BEGIN IMMEDIATE")
        try:
            for table in self._scoped:
                columns = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
                if "deployment" not in columns:
                    db.execute(
                        f"ALTER TABLE {table} ADD COLUMN deployment TEXT NOT NULL"
                        f" DEFAULT '{LEGACY}'"
                    )
            if self._migrate is not None:
                self._migrate(db)
            for statement in filter(str.strip, self._indexes.split(";")):
                db.execute(statement)
            if self._deployment is not None and self._deployment.adopts_legacy:
                for table in self._scoped:
                    db.execute(
                        f"UPDATE OR IGNORE {table} SET deployment = ? WHERE deployment = ?",
                        (self._deployment.id, LEGACY),
                    )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
