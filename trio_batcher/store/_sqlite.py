"""One SQLite file used off the event loop: what every SQLite store here shares.

Theory of operation (every SQLite store here: responses, spend, files, batches). SQLite calls
block, so each runs in a worker thread (``trio.to_thread.run_sync``) behind a
``CapacityLimiter`` of one: one connection, one statement at a time, never on the event loop.
A call is not abandoned when its caller is cancelled (trio's default), so a transaction that
started is committed or rolled back before the cancellation lands. The file, and its
directory, are created on first use. WAL journaling lets the processes of
``serve --workers N`` share the file; ``busy_timeout`` absorbs the short waits between
writers.
"""

from __future__ import annotations

import secrets
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, final

import trio

from .responses import StoreUnavailable

__all__ = ["Database", "sortable_id"]

T = TypeVar("T")

_last_us = 0
_last_lock = threading.Lock()


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
    """A lazily opened SQLite connection and the limiter that serialises its use."""

    def __init__(self, path: Path, schema: str) -> None:
        self.path = path
        self._schema = schema
        self._limiter = trio.CapacityLimiter(1)
        self._db: sqlite3.Connection | None = None

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

    async def aclose(self) -> None:
        if self._db is None:
            return
        db, self._db = self._db, None
        await trio.to_thread.run_sync(db.close, limiter=self._limiter)

    def _connection(self) -> sqlite3.Connection:
        """Open on first use (in the worker thread, under the limiter)."""
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA busy_timeout=5000")
            db.executescript(self._schema)
            db.isolation_level = "DEFERRED"  # ``with db:`` opens and commits a transaction
            self._db = db
        return self._db
