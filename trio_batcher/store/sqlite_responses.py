"""The embedded response store: one SQLite file in the data directory.

Theory of operation. SQLite calls block, so each runs in a worker thread through
``_sqlite.Database``: writes on one connection, one at a time; reads on connections of their
own (WAL: readers never wait for the writer or for each other), so one client reading a
20 MB conversation does not hold up another's small lookup. Reads turn rows into records
in that thread too. A call is not abandoned when its caller is cancelled, so a write that
started is committed or rolled back before the cancellation lands, never left half done.
The file is opened, and the directory created, on first use. ``synchronous=NORMAL`` in WAL
mode can lose the last commits on a power cut but never corrupts the file, the usual trade
for a cache of conversations.

Every row records its deployment (``store.deployment``) and every statement filters on it:
two gateways sharing a data directory never see, continue or purge each other's responses,
even without client keys (when every caller of each is the same owner, ``""``).

A conversation is rebuilt with one recursive query that follows ``previous_id`` links;
its depth is bounded so a cycle (which ids make impossible, but a hand-edited file could
hold) cannot loop. ``input_items`` pages are cut by SQLite's JSON functions: Python sees a
page's items, as JSON text, never the whole conversation (``_items``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, TypeVar, final

from . import _items
from ._sqlite import Database
from .deployment import Deployment
from .responses import ChainBroken, ItemsPage, StoredResponse

__all__ = ["READERS", "SQLiteResponseStore"]

T = TypeVar("T")

FILENAME: Final = "responses.sqlite3"
# Read connections at once: a large read takes at most READERS - 1 (``Database.read``).
READERS: Final = 4
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
    input_items TEXT NOT NULL,
    deployment  TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS responses_by_expiry ON responses (expires_at);
-- who runs each unfinished background response (edge.background), until when
CREATE TABLE IF NOT EXISTS background_runs (
    deployment  TEXT NOT NULL,
    id          TEXT NOT NULL,
    runner      TEXT NOT NULL,
    lease_until REAL NOT NULL,
    PRIMARY KEY (deployment, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS items (
    deployment  TEXT NOT NULL,
    owner       TEXT NOT NULL,
    id          TEXT NOT NULL,
    response_id TEXT NOT NULL,
    PRIMARY KEY (deployment, owner, id)
) WITHOUT ROWID;
"""
_INDEXES: Final = """
CREATE INDEX IF NOT EXISTS responses_by_deployment ON responses (deployment, expires_at)
"""

_COLUMNS: Final = "id, owner, previous_id, created_at, expires_at, response, input_items"
_VISIBLE: Final = "owner = :owner AND deployment = :deployment AND expires_at > :now"

_CHAIN: Final = f"""
WITH RECURSIVE chain (depth, {_COLUMNS}) AS (
    SELECT 0, {_COLUMNS} FROM responses WHERE id = :id AND {_VISIBLE}
    UNION ALL
    SELECT chain.depth + 1, r.id, r.owner, r.previous_id, r.created_at, r.expires_at,
           r.response, r.input_items
      FROM responses AS r JOIN chain ON r.id = chain.previous_id
     WHERE r.owner = :owner AND r.deployment = :deployment AND r.expires_at > :now
       AND chain.depth < {MAX_CHAIN}
)
SELECT {_COLUMNS} FROM chain ORDER BY depth DESC
"""


# Background responses (queued or in progress) whose lease has lapsed: the process running
# them is gone. Each stored object is rewritten as failed, with the error given. A lease is
# taken before a response is first stored and dropped only once its final object is, so
# every unfinished one has a lease row, and only those rows are read.
_FAIL_ORPHANS: Final = """
UPDATE responses
   SET response = json_set(response, '$.status', 'failed', '$.error', json(:error))
 WHERE deployment = :deployment AND expires_at > :now
   AND id IN (SELECT id FROM background_runs
               WHERE deployment = :deployment AND lease_until <= :now)
   AND json_extract(response, '$.status') IN ('queued', 'in_progress')
"""


def _migrate(db: sqlite3.Connection) -> None:
    """An ``items`` table of a file older than deployments is keyed by (owner, id): two
    deployments could overwrite each other's rows. Rebuilt keyed by deployment too."""
    columns = {row[1]: row[5] for row in db.execute("PRAGMA table_info(items)")}
    if columns.get("deployment"):
        return
    db.execute("ALTER TABLE items RENAME TO items_before_deployments")
    db.execute(_SCHEMA[_SCHEMA.index("CREATE TABLE IF NOT EXISTS items") :])
    db.execute(
        "INSERT OR IGNORE INTO items (deployment, owner, id, response_id)"
        " SELECT deployment, owner, id, response_id FROM items_before_deployments"
    )
    db.execute("DROP TABLE items_before_deployments")


@final
class SQLiteResponseStore:
    """``ResponseStore`` on one SQLite file under ``directory``, for ``deployment``."""

    def __init__(self, directory: Path, *, deployment: Deployment | None = None) -> None:
        self._deployment = deployment or Deployment("local")
        self._database = Database(
            directory / FILENAME,
            _SCHEMA,
            scoped=("responses", "items"),
            indexes=_INDEXES,
            deployment=self._deployment,
            migrate=_migrate,
            readers=READERS,
        )

    @property
    def path(self) -> Path:
        return self._database.path

    async def put(self, record: StoredResponse) -> None:
        deployment = self._deployment.id

        def write(db: sqlite3.Connection) -> None:
            row = (
                record.id,
                record.owner,
                record.previous_id,
                record.created_at,
                record.expires_at,
                _dumps(record.response),
                _dumps(record.input_items),
                deployment,
            )
            items = [
                (deployment, record.owner, item_id, record.id)
                for item in record.items()
                if isinstance(item_id := item.get("id"), str)
            ]
            with db:
                db.execute(
                    f"INSERT OR REPLACE INTO responses ({_COLUMNS}, deployment)"
                    " VALUES (?,?,?,?,?,?,?,?)",
                    row,
                )
                db.executemany(
                    "INSERT OR REPLACE INTO items (deployment, owner, id, response_id)"
                    " VALUES (?,?,?,?)",
                    items,
                )

        await self._database.run(write)

    async def get(self, response_id: str, owner: str, now: float) -> StoredResponse | None:
        params = self._params(id=response_id, owner=owner, now=now)

        def read(db: sqlite3.Connection) -> StoredResponse | None:
            row = db.execute(
                f"SELECT {_COLUMNS} FROM responses WHERE id = :id AND {_VISIBLE}", params
            ).fetchone()
            return None if row is None else _record(row)

        return await self._database.read(read)

    async def find_items(
        self, item_ids: Sequence[str], owner: str, now: float
    ) -> dict[str, dict[str, Any]]:
        wanted = sorted(set(item_ids))
        if not wanted or (not self._database.exists()):
            return {}
        deployment = self._deployment.id

        def read(db: sqlite3.Connection) -> dict[str, dict[str, Any]]:
            marks = ",".join("?" * len(wanted))
            rows = db.execute(
                f"SELECT DISTINCT r.id, r.owner, r.previous_id, r.created_at, r.expires_at, "
                f"r.response, r.input_items FROM items AS i JOIN responses AS r "
                f"ON r.id = i.response_id AND r.owner = i.owner AND r.deployment = i.deployment "
                f"WHERE i.deployment = ? AND i.owner = ? AND i.id IN ({marks}) "
                f"AND r.expires_at > ?",
                (deployment, owner, *wanted, now),
            ).fetchall()
            found: dict[str, dict[str, Any]] = {}
            for row in rows:
                for item in _record(row).items():
                    if item.get("id") in wanted:
                        found[item["id"]] = item
            return found

        return await self._database.read(read)

    async def chain(
        self, response_id: str, owner: str, now: float
    ) -> Sequence[StoredResponse] | None:
        params = self._params(id=response_id, owner=owner, now=now)

        def read(db: sqlite3.Connection) -> list[StoredResponse]:
            return [_record(row) for row in db.execute(_CHAIN, params).fetchall()]

        records = await self._database.read(read, bulk=True)
        if not records:
            return None
        first = records[0]
        if first.previous_id is not None:
            raise ChainBroken(first.previous_id)
        return records

    async def input_items(
        self,
        response_id: str,
        owner: str,
        now: float,
        *,
        limit: int,
        order: str,
        after: str | None = None,
        before: str | None = None,
    ) -> ItemsPage | None:
        params = self._params(id=response_id, owner=owner, now=now)
        ask = _items.PageRequest(limit=limit, order=order, after=after, before=before)
        return await self._database.read(lambda db: _items.page(db, params, ask), bulk=True)

    async def delete(self, response_id: str, owner: str) -> bool:
        deployment = self._deployment.id

        def write(db: sqlite3.Connection) -> bool:
            with db:
                cursor = db.execute(
                    "DELETE FROM responses WHERE id = ? AND owner = ? AND deployment = ?",
                    (response_id, owner, deployment),
                )
                db.execute(
                    "DELETE FROM items WHERE response_id = ? AND owner = ? AND deployment = ?",
                    (response_id, owner, deployment),
                )
            return cursor.rowcount > 0

        return await self._database.run(write)

    async def purge_expired(self, now: float) -> int:
        if not self._database.exists():
            return 0  # nothing was ever stored: do not create the file to purge it
        deployment = self._deployment.id

        def write(db: sqlite3.Connection) -> int:
            with db:
                cursor = db.execute(
                    "DELETE FROM responses WHERE deployment = ? AND expires_at <= ?",
                    (deployment, now),
                )
                db.execute(
                    "DELETE FROM items WHERE deployment = ? AND NOT EXISTS (SELECT 1 FROM"
                    " responses AS r WHERE r.id = items.response_id AND r.owner = items.owner"
                    " AND r.deployment = items.deployment)",
                    (deployment,),
                )
            return cursor.rowcount

        return await self._database.run(write)

    async def lease(self, response_ids: Sequence[str], runner: str, until: float) -> None:
        """Mark ``response_ids`` as run by ``runner`` (a process) until ``until``; called
        before a background response is first stored, then again to renew the lease."""
        rows = [(self._deployment.id, rid, runner, until) for rid in response_ids]
        if not rows:
            return

        def write(db: sqlite3.Connection) -> None:
            with db:
                db.executemany(
                    "INSERT OR REPLACE INTO background_runs (deployment, id, runner, lease_until)"
                    " VALUES (?,?,?,?)",
                    rows,
                )

        await self._database.run(write)

    async def release(self, response_id: str) -> None:
        """The background run of ``response_id`` is over (its final object is stored)."""
        deployment = self._deployment.id

        def write(db: sqlite3.Connection) -> None:
            with db:
                db.execute(
                    "DELETE FROM background_runs WHERE deployment = ? AND id = ?",
                    (deployment, response_id),
                )

        await self._database.run(write)

    async def fail_orphans(self, now: float, error: dict[str, Any]) -> int:
        """Rewrite as ``failed`` (with ``error``) every background response of this
        deployment left queued or in progress by a process that is gone (no live lease);
        returns how many. Leases past their time are dropped too."""
        if not self._database.exists():
            return 0
        params = self._params(now=now, error=_dumps(error))

        def write(db: sqlite3.Connection) -> int:
            with db:
                cursor = db.execute(_FAIL_ORPHANS, params)
                db.execute(
                    "DELETE FROM background_runs WHERE deployment = :deployment"
                    " AND lease_until <= :now",
                    params,
                )
            return cursor.rowcount

        return await self._database.run(write)

    async def aclose(self) -> None:
        await self._database.aclose()

    def _params(self, **values: Any) -> dict[str, Any]:
        return {**values, "deployment": self._deployment.id}


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
