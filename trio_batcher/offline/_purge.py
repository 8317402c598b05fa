"""The task that purges finished batches and their files (``BATCH_RETENTION_DAYS``).

Once at startup, then hourly, like the stored responses' purge: retention is counted in
days. ``purge_finished`` is idempotent, so a purge interrupted by a shutdown simply runs
again at the next start.
"""

from __future__ import annotations

import logging
import time
from typing import Final

import trio

from ..store import BatchStore, StoreUnavailable

__all__ = ["purge_batches_periodically"]

log = logging.getLogger("trio_batcher")

_DAY_S: Final = 86_400.0
_INTERVAL_S: Final = 3600.0


async def purge_batches_periodically(
    batches: BatchStore, retention_days: float, interval_s: float = _INTERVAL_S
) -> None:
    while True:
        try:
            purged = await batches.purge_finished(time.time(), retention_days * _DAY_S)
        except StoreUnavailable as exc:  # a full or read-only disk must not stop the gateway
            log.warning("could not purge finished batches: %s", exc)
        else:
            if purged:
                log.info("purged %d finished batches and their files", purged)
        await trio.sleep(interval_s)
