"""The embedded spend store: one SQLite file (``spend.sqlite3``) in the data directory.

The connection every SQLite store here shares (``store.Database``), for these reasons:
each SQLite call runs in a worker thread (``trio.to_thread.run_sync``) behind a
``CapacityLimiter`` of one, so the event loop never blocks and there is one statement at a
time on one connection; a call is not abandoned when its caller is cancelled, so an
``add`` that started is committed (or rolled back) whole. WAL journaling lets every worker
of ``serve --workers N`` share the file, and ``busy_timeout`` absorbs writers' short waits.
The file and the directory are created by the first ``add``; reads before it answer 0
without touching the disk.

The ledger is the tenants', whichever upstream they spent on, so real deployments sharing a
data directory share it; a simulated one (``serve --simulate``) keeps its own file, so play
money never counts against a real budget.

One row per tenant per UTC hour, ``(tenant, hour) -> nano_usd``, added to with an upsert:
a month is at most 744 rows per tenant, and ``spent`` is one range scan of the primary key.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Final, TypeVar, final

from ..store import Database
from .model import BudgetPeriod, hour_of
from .spend import NANO, nano_usd

__all__ = ["SQLiteSpendStore"]

T = TypeVar("T")

FILENAME: Final = "spend.sqlite3"
# ``serve --simulate`` spends nothing real: its ledger must not eat a real tenant's budget.
SIMULATED_FILENAME: Final = "spend-simulated.sqlite3"

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS spend (
    tenant   TEXT NOT NULL,
    hour     INTEGER NOT NULL,
    nano_usd INTEGER NOT NULL,
    PRIMARY KEY (tenant, hour)
) WITHOUT ROWID;
"""


@final
class SQLiteSpendStore:
    """``SpendStore`` on one SQLite file under ``directory`` (``resolve_data_dir``)."""

    def __init__(self, directory: Path, *, simulated: bool = False) -> None:
        name = SIMULATED_FILENAME if simulated else FILENAME
        self._database = Database(directory / name, _SCHEMA)

    @property
    def path(self) -> Path:
        return self._database.path

    async def add(self, tenant: str, usd: float, now: float) -> None:
        amount = nano_usd(usd)
        if not amount:
            return
        row = (tenant, hour_of(now), amount)

        def write(db: sqlite3.Connection) -> None:
            with db:
                db.execute(
                    "INSERT INTO spend (tenant, hour, nano_usd) VALUES (?, ?, ?) "
                    "ON CONFLICT (tenant, hour) DO UPDATE SET nano_usd = nano_usd + "
                    "excluded.nano_usd",
                    row,
                )

        await self._database.run(write)

    async def spent(self, tenant: str, period: BudgetPeriod, now: float) -> float:
        if not self._database.exists():
            return 0.0
        start, end = period.start(now), hour_of(now)

        def read(db: sqlite3.Connection) -> int:
            (total,) = db.execute(
                "SELECT COALESCE(SUM(nano_usd), 0) FROM spend "
                "WHERE tenant = ? AND hour BETWEEN ? AND ?",
                (tenant, start, end),
            ).fetchone()
            return int(total)

        return await self._database.run(read) / NANO

    async def purge_before(self, before: float) -> int:
        if not self._database.exists():
            return 0

        def write(db: sqlite3.Connection) -> int:
            with db:
                return db.execute("DELETE FROM spend WHERE hour < ?", (before,)).rowcount

        return await self._database.run(write)

    async def aclose(self) -> None:
        await self._database.aclose()
