"""Who owns each object Anthropic keeps for the gateway: a batch, a file, a thread.

Everything stateful the gateway relays to Anthropic (Message Batches, the Files API, message
threads) is created under the gateway's *one* upstream key: Anthropic would show tenant A's
batch to anyone who names its id. So every such object is recorded here as it is created --
its kind, its id, its owner (the tenant of the key that made it: ``OwnedObjects`` never sees
a key) and the upstream that holds it -- and every later use of an id is checked against
this table first: another owner's id is answered as an unknown one (Anthropic's 404
``not_found_error``), and lists show each owner only its own.

One SQLite file in ``DATA_DIR`` (``anthropic_objects.sqlite3``), rows scoped to the deployment
(``store.deployment``) like every other store: two gateways sharing a data directory never
see each other's objects. Small rows only (an object's id and a little metadata, never its
content): a batch's results and a file's bytes stay at Anthropic and stream through.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, final

from ._sqlite import Database
from .deployment import Deployment

__all__ = ["OwnedObject", "OwnedObjects", "OwnedPage"]

FILENAME: Final = "anthropic_objects.sqlite3"

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS objects (
    kind       TEXT NOT NULL,
    id         TEXT NOT NULL,
    owner      TEXT NOT NULL,
    upstream   TEXT NOT NULL,
    created_at REAL NOT NULL,
    meta       TEXT NOT NULL,
    deployment TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (deployment, kind, id)
);
"""
_INDEXES: Final = """
CREATE INDEX IF NOT EXISTS objects_by_owner ON objects (deployment, kind, owner, created_at, id);
"""


@final
@dataclass(frozen=True, slots=True)
class OwnedObject:
    """One object: ``kind`` (``"batch"``, ``"file"``, ``"thread"``), its Anthropic ``id``,
    its ``owner`` (a tenant's name, ``""`` for a gateway without keys), the ``upstream``
    that holds it, and ``meta``: what the gateway needs later (a batch's model and request
    count, whether its spend was charged...)."""

    kind: str
    id: str
    owner: str
    upstream: str
    created_at: float
    meta: Mapping[str, Any] = field(default_factory=dict)


@final
@dataclass(frozen=True, slots=True)
class OwnedPage:
    """A page of one owner's objects, newest first."""

    data: list[OwnedObject]
    has_more: bool


@final
class OwnedObjects:
    """The ownership table (module doc). Every call runs in a worker thread."""

    def __init__(
        self,
        directory: Path,
        *,
        deployment: Deployment | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._deployment = deployment or Deployment("local")
        self._db = Database(
            directory / FILENAME,
            _SCHEMA,
            indexes=_INDEXES,
            deployment=self._deployment,
            readers=2,
        )
        self._clock = clock

    async def record(
        self, kind: str, object_id: str, owner: str, upstream: str, meta: Mapping[str, Any] = {}
    ) -> OwnedObject:
        """``owner`` made ``object_id`` on ``upstream``. Recording an id again replaces it
        (a thread's next turn moves its head)."""
        made = OwnedObject(kind, object_id, owner, upstream, self._clock(), dict(meta))
        row = (kind, object_id, owner, upstream, made.created_at, json.dumps(made.meta))

        def write(db: sqlite3.Connection) -> None:
            with db:
                db.execute(
                    "INSERT OR REPLACE INTO objects"
                    " (kind, id, owner, upstream, created_at, meta, deployment)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (*row, self._deployment.id),
                )

        await self._db.run(write)
        return made

    async def get(self, kind: str, object_id: str, owner: str) -> OwnedObject | None:
        """The object if ``owner`` owns it; ``None`` for an unknown id or another owner's
        (the caller answers both alike: an id must not tell whether it exists)."""
        if not self._db.exists():
            return None

        def read(db: sqlite3.Connection) -> tuple[Any, ...] | None:
            found: tuple[Any, ...] | None = db.execute(
                "SELECT kind, id, owner, upstream, created_at, meta FROM objects"
                " WHERE deployment = ? AND kind = ? AND id = ? AND owner = ?",
                (self._deployment.id, kind, object_id, owner),
            ).fetchone()
            return found

        row = await self._db.read(read)
        return None if row is None else _object(row)

    async def update(self, kind: str, object_id: str, meta: Mapping[str, Any]) -> None:
        """Replace an object's ``meta`` (whoever owns it)."""

        def write(db: sqlite3.Connection) -> None:
            with db:
                db.execute(
                    "UPDATE objects SET meta = ? WHERE deployment = ? AND kind = ? AND id = ?",
                    (json.dumps(dict(meta)), self._deployment.id, kind, object_id),
                )

        await self._db.run(write)

    async def forget(self, kind: str, object_id: str) -> None:
        """The object is gone upstream (deleted): forget it."""

        def write(db: sqlite3.Connection) -> None:
            with db:
                db.execute(
                    "DELETE FROM objects WHERE deployment = ? AND kind = ? AND id = ?",
                    (self._deployment.id, kind, object_id),
                )

        await self._db.run(write)

    async def page(
        self,
        kind: str,
        owner: str,
        *,
        limit: int = 20,
        before: str | None = None,
        after: str | None = None,
    ) -> OwnedPage:
        """``owner``'s objects of ``kind``, newest first, ``limit`` at most, strictly
        before (older than) ``before`` or after (newer than) ``after``: the cursors of
        Anthropic's list endpoints (``before_id``/``after_id``, which count in the list's
        own order: Anthropic's ``after_id`` is this ``before``). With ``after`` alone, the
        ``limit`` objects just newer than it."""
        if not self._db.exists() or limit < 1:
            return OwnedPage([], has_more=False)
        query = (
            "SELECT kind, id, owner, upstream, created_at, meta FROM objects"
            " WHERE deployment = ? AND kind = ? AND owner = ?"
        )
        params: list[Any] = [self._deployment.id, kind, owner]
        for cursor, op in ((before, "<"), (after, ">")):
            if cursor is not None:
                query += (
                    f" AND (created_at, id) {op} (SELECT created_at, id FROM objects"
                    " WHERE deployment = ? AND kind = ? AND id = ?)"
                )
                params += [self._deployment.id, kind, cursor]
        # Only ``after``: the ``limit`` objects just newer than it (read oldest first, then
        # turned round), not the newest ones, so that paging back towards the newest end
        # skips nothing; ``has_more`` then says whether still newer ones exist.
        adjacent_newer = after is not None and before is None
        order = "ASC" if adjacent_newer else "DESC"
        query += f" ORDER BY created_at {order}, id {order} LIMIT ?"
        params.append(limit + 1)

        def read(db: sqlite3.Connection) -> list[tuple[Any, ...]]:
            return db.execute(query, params).fetchall()

        rows = await self._db.read(read, bulk=True)
        chosen = rows[:limit]
        if adjacent_newer:
            chosen.reverse()
        return OwnedPage([_object(r) for r in chosen], has_more=len(rows) > limit)

    async def aclose(self) -> None:
        await self._db.aclose()


def _object(row: tuple[Any, ...]) -> OwnedObject:
    kind, object_id, owner, upstream, created_at, meta = row
    return OwnedObject(kind, object_id, owner, upstream, float(created_at), json.loads(meta))
