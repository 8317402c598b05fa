"""The embedded response store: one SQLite file in the data directory.

Theory of operation. SQLite calls block, so each runs in a worker thread
(``trio.to_thread.run_sync``) behind a ``CapacityLimiter`` of one: one connection, one
statement at a time, never on the event loop. A call is not abandoned when its caller is
cancelled (trio's default), so a write that started is committed or rolled back before
the cancellation lands, never left half done. The file is opened, and the directory
created, on first use. WAL journaling lets several processes (``serve --workers N``)
share the file: readers never block the writer, and ``busy_timeout`` absorbs the short
waits between writers. ``synchronous=NORMAL`` in WAL mode can lose the last commits on a
power cut but never corrupts the file, the usual trade for a cache of conversations.

A conversation is rebuilt with one recursive query that follows ``previous_id`` links;
its depth is bounded so a cycle (which ids make impossible, but a hand-edited file could
hold) cannot loop.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, TypeVar, final

from ._sqlite import Database
from .responses import ChainBroken, StoredResponse

__all__ = ["SQLiteResponseStore"]

T = TypeVar("T")

FILENAME: Final = "responses.sqlite3"
# Longest conversation rebuilt; far beyond any context window's worth of turns.
MAX_CHAIN: Final = 10_000

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS responses (
    id          TEXT PRIMARY KEY,
    owner       TEXT NOT NULL,
    previous_id TEXT,
    created_at  REAL NOT NULL,
    expires_at  REAL NOT NULL,
    response    TEXT NOT NULL,
    input_items TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS responses_by_expiry ON responses (expires_at);
CREATE TABLE IF NOT EXISTS items (
    owner       TEXT NOT NULL,
    id          TEXT NOT NULL,
    response_id TEXT NOT NULL,
    PRIMARY KEY (owner, id)
) WITHOUT ROWID;
"""

_COLUMNS: Final = "id, owner, previous_id, created_at, expires_at, response, input_items"

_CHAIN: Final = f"""
WITH RECURSIVE chain (depth, {_COLUMNS}) AS (
    SELECT 0, {_COLUMNS} FROM responses
     WHERE id = :id AND owner = :owner AND expires_at > :now
    UNION ALL
    SELECT chain.depth + 1, r.id, r.owner, r.previous_id, r.created_at, r.expires_at,
           r.response, r.input_items
      FROM responses AS r JOIN chain ON r.id = chain.previous_id
     WHERE r.owner = :owner AND r.expires_at > :now AND chain.depth < {MAX_CHAIN}
)
SELECT {_COLUMNS} FROM chain ORDER BY depth DESC
"""


@final
class SQLiteResponseStore:
    """``ResponseStore`` on one SQLite file under ``directory``."""

    def __init__(self, directory: Path) -> None:
        self._database = Database(directory / FILENAME, _SCHEMA)

    @property
    def path(self) -> Path:
        return self._database.path

    async def put(self, record: StoredResponse) -> None:
        row = (
            record.id,
            record.owner,
            record.previous_id,
            record.created_at,
            record.expires_at,
            _dumps(record.response),
            _dumps(record.input_items),
        )

        items = [
            (record.owner, item_id, record.id)
            for item in record.items()
            if isinstance(item_id := item.get("id"), str)
        ]

        def write(db: sqlite3.Connection) -> None:
            with db:
                db.execute(
                    f"INSERT OR REPLACE INTO responses ({_COLUMNS}) VALUES (?,?,?,?,?,?,?)", row
                )
                db.executemany("INSERT OR REPLACE INTO items VALUES (?,?,?)", items)

        await self._database.run(write)

    async def get(self, response_id: str, owner: str, now: float) -> StoredResponse | None:
        def read(db: sqlite3.Connection) -> tuple[Any, ...] | None:
            row: tuple[Any, ...] | None = db.execute(
                f"SELECT {_COLUMNS} FROM responses WHERE id = ? AND owner = ? AND expires_at > ?",
                (response_id, owner, now),
            ).fetchone()
            return row

        row = await self._database.run(read)
        return None if row is None else _record(row)

    async def find_items(
        self, item_ids: Sequence[str], owner: str, now: float
    ) -> dict[str, dict[str, Any]]:
        wanted = sorted(set(item_ids))
        if not wanted or (not self._database.exists()):
            return {}

        def read(db: sqlite3.Connection) -> list[tuple[Any, ...]]:
            marks = ",".join("?" * len(wanted))
            return db.execute(
                f"SELECT DISTINCT r.id, r.owner, r.previous_id, r.created_at, r.expires_at, "
                f"r.response, r.input_items FROM items AS i JOIN responses AS r "
                f"ON r.id = i.response_id AND r.owner = i.owner "
                f"WHERE i.owner = ? AND i.id IN ({marks}) AND r.expires_at > ?",
                (owner, *wanted, now),
            ).fetchall()

        found: dict[str, dict[str, Any]] = {}
        for row in await self._database.run(read):
            for item in _record(row).items():
                if item.get("id") in wanted:
                    found[item["id"]] = item
        return found

    async def chain(
        self, response_id: str, owner: str, now: float
    ) -> Sequence[StoredResponse] | None:
        def read(db: sqlite3.Connection) -> list[tuple[Any, ...]]:
            return db.execute(_CHAIN, {"id": response_id, "owner": owner, "now": now}).fetchall()

        rows = await self._database.run(read)
        if not rows:
            return None
        records = [_record(row) for row in rows]
        first = records[0]
        if first.previous_id is not None:
            raise ChainBroken(first.previous_id)
        return records

    async def delete(self, response_id: str, owner: str) -> bool:
        def write(db: sqlite3.Connection) -> bool:
            with db:
                cursor = db.execute(
                    "DELETE FROM responses WHERE id = ? AND owner = ?", (response_id, owner)
                )
                db.execute(
                    "DELETE FROM items WHERE response_id = ? AND owner = ?", (response_id, owner)
                )
            return cursor.rowcount > 0

        return await self._database.run(write)

    async def purge_expired(self, now: float) -> int:
        if not self._database.exists():
            return 0  # nothing was ever stored: do not create the file to purge it

        def write(db: sqlite3.Connection) -> int:
            with db:
                cursor = db.execute("DELETE FROM responses WHERE expires_at <= ?", (now,))
                db.execute(
                    "DELETE FROM items WHERE NOT EXISTS (SELECT 1 FROM responses AS r "
                    "WHERE r.id = items.response_id AND r.owner = items.owner)"
                )
            return cursor.rowcount

        return await self._database.run(write)

    async def aclose(self) -> None:
        await self._database.aclose()


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _record(row: tuple[Any, ...]) -> StoredResponse:
    rid, owner, previous_id, created_at, expires_at, response, input_items = row
    return StoredResponse(
        id=rid,
        owner=owner,
        previous_id=previous_id,
        created_at=created_at,
        expires_at=expires_at,
        response=json.loads(response),
        input_items=json.loads(input_items),
    )
