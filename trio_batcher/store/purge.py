"""The task that purges expired stored responses (``RESPONSES_RETENTION_DAYS``).

Expired records are already invisible (every read filters on expiry); purging gives their
space back. Once at startup, then hourly: retention is counted in days, so an hour of
slack costs nothing, and one indexed ``DELETE`` an hour costs nothing either.
"""

from __future__ import annotations

import logging
import time
from typing import Final

import trio

from .responses import ResponseStore, StoreUnavailable

__all__ = ["PURGE_INTERVAL_S", "purge_expired_periodically"]

log = logging.getLogger("trio_batcher")

PURGE_INTERVAL_S: Final = 3600.0


async def purge_expired_periodically(
    store: ResponseStore, interval_s: float = PURGE_INTERVAL_S
) -> None:
    while True:
        try:
            purged = await store.purge_expired(time.time())
        except StoreUnavailable as exc:  # a full or read-only disk must not stop the gateway
            log.warning("could not purge expired responses: %s", exc)
        else:
            if purged:
                log.info("purged %d expired stored responses", purged)
        await trio.sleep(interval_s)
