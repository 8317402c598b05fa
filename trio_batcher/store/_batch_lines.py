"""The per-line tables of the batch store: what maps a batch's results back to its lines.

A batch may have 100,000 lines, and every question the poller asks about them -- has this
``custom_id`` been seen, which line did this upstream id come from, what are the results in
input order -- is answered here, on disk, a page at a time, so the poller's memory does not
grow with the file.

``batch_requests`` holds one row per input line: its OpenAI ``custom_id`` and the id sent
upstream. ``batch_results`` indexes a batch's results spooled to a file (the poller's, on
disk): upstream id → offset and length there. Delivery reads both in input order with one
join, so results that came back in any order go out in the file's.

Functions take the open connection: they run in ``Database.run``'s worker thread.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, Final

from .batches import BatchRequest

__all__ = [
    "SCHEMA",
    "add_requests",
    "add_results",
    "clear",
    "clear_results",
    "find_custom_ids",
    "ordered_results",
    "requests_page",
]

PAGE: Final = 1000  # lines per read
_LOOKUP: Final = 500  # ids per IN (...), well under SQLite's 32,766 variables

SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS batch_requests (
    batch_id           TEXT NOT NULL,
    line               INTEGER NOT NULL,
    custom_id          TEXT NOT NULL,
    upstream_custom_id TEXT NOT NULL,
    PRIMARY KEY (batch_id, line)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS batch_requests_by_upstream
    ON batch_requests (batch_id, upstream_custom_id);
CREATE INDEX IF NOT EXISTS batch_requests_by_custom_id
    ON batch_requests (batch_id, custom_id);
CREATE TABLE IF NOT EXISTS batch_results (
    batch_id           TEXT NOT NULL,
    upstream_custom_id TEXT NOT NULL,
    offset             INTEGER NOT NULL,
    length             INTEGER NOT NULL,
    PRIMARY KEY (batch_id, upstream_custom_id)
) WITHOUT ROWID;
"""


def add_requests(db: sqlite3.Connection, batch_id: str, requests: Sequence[BatchRequest]) -> None:
    rows = [(batch_id, r.line, r.custom_id, r.upstream_custom_id) for r in requests]
    with db:
        db.executemany("INSERT OR REPLACE INTO batch_requests VALUES (?,?,?,?)", rows)


def requests_page(db: sqlite3.Connection, batch_id: str, after_line: int) -> list[BatchRequest]:
    rows = db.execute(
        "SELECT line, custom_id, upstream_custom_id FROM batch_requests"
        " WHERE batch_id = ? AND line > ? ORDER BY line LIMIT ?",
        (batch_id, after_line, PAGE),
    ).fetchall()
    return [BatchRequest(*row) for row in rows]


def find_custom_ids(
    db: sqlite3.Connection, batch_id: str, custom_ids: Sequence[str]
) -> dict[str, int]:
    wanted = sorted(set(custom_ids))
    found: dict[str, int] = {}
    for start in range(0, len(wanted), _LOOKUP):
        part = wanted[start : start + _LOOKUP]
        marks = ",".join("?" * len(part))
        for custom_id, line in db.execute(
            "SELECT custom_id, min(line) FROM batch_requests"
            f" WHERE batch_id = ? AND custom_id IN ({marks}) GROUP BY custom_id",
            (batch_id, *part),
        ):
            found[custom_id] = line
    return found


def add_results(
    db: sqlite3.Connection, batch_id: str, offsets: Sequence[tuple[str, int, int]]
) -> None:
    rows = [(batch_id, upstream_id, offset, length) for upstream_id, offset, length in offsets]
    with db:
        db.executemany("INSERT OR REPLACE INTO batch_results VALUES (?,?,?,?)", rows)


def ordered_results(
    db: sqlite3.Connection, batch_id: str, after_line: int
) -> list[tuple[BatchRequest, int | None, int | None]]:
    rows: list[tuple[Any, ...]] = db.execute(
        "SELECT r.line, r.custom_id, r.upstream_custom_id, x.offset, x.length"
        " FROM batch_requests AS r LEFT JOIN batch_results AS x"
        " ON x.batch_id = r.batch_id AND x.upstream_custom_id = r.upstream_custom_id"
        " WHERE r.batch_id = ? AND r.line > ? ORDER BY r.line LIMIT ?",
        (batch_id, after_line, PAGE),
    ).fetchall()
    return [(BatchRequest(line, cid, uid), off, n) for line, cid, uid, off, n in rows]


def clear_results(db: sqlite3.Connection, batch_id: str) -> None:
    with db:
        db.execute("DELETE FROM batch_results WHERE batch_id = ?", (batch_id,))


def clear(db: sqlite3.Connection, batch_id: str) -> None:
    """Every per-line row of the batch (in the caller's transaction, if any)."""
    db.execute("DELETE FROM batch_requests WHERE batch_id = ?", (batch_id,))
    db.execute("DELETE FROM batch_results WHERE batch_id = ?", (batch_id,))
