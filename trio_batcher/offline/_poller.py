"""The batch poller: one task, in the app's nursery, that moves every batch to its end.

Theory of operation. A batch is a record in the ``BatchStore``; this task is the only
writer besides the cancel route, and both write by compare-and-set (``save`` re-reads and
re-applies a change that lost a race, so neither overwrites the other). Each round the
poller takes ``unfinished()`` -- which is also how a restarted proxy resumes -- and gives
each batch one step:

1. ``validating``: ``Submitter`` checks every line and creates the Message Batches.
2. ``in_progress`` / ``cancelling``: a requested cancel is sent upstream once; every
   Message Batch is retrieved and the OpenAI status derived with ``openai_status``. A
   Message Batch the upstream no longer knows (404: deleted there, or another key) fails
   the batch after ``MISSING_ROUNDS`` rounds in a row, rather than being asked for forever.
3. When every part has ended: ``Deliverer`` writes the results, in input order, into an
   output and an error file, and the batch takes its final status in one write.

One poller per deployment (``store.deployment``): under ``serve --workers N`` every worker
runs this task, but only the one holding ``poller.lock`` in the deployment's own work
directory (``DATA_DIR/batch-work/<deployment>``; an ``flock`` the kernel drops with its
holder) polls; the others try again every ``LEADER_RETRY_S``, so a worker that dies hands
over within seconds. Two pollers stepping one batch would create its Message Batches twice.
Another deployment sharing the data directory has its own lock and sees only its own
batches (the store filters), so it never steps, fails or delivers this one's.

Back-off: after a round in which nothing changed, the next one waits twice as long, from
``first_poll_s`` to ``max_poll_s``; any change, a new batch or a cancel (``wake``) starts
again from ``first_poll_s``; so does a batch created or changed by another process (the
unfinished batches' versions are compared every ``NEWS_S``, a local SQLite read). A step
that fails (the upstream down, the disk full) is logged and retried on a later round; only
``trio.Cancelled`` ends the task.

Memory does not grow with a batch: lines, ids and results are on disk (``_submit``,
``_deliver``); what is held is a page of lines and a 1 MiB write buffer.
"""

from __future__ import annotations

import dataclasses
import fcntl
import logging
import os
import time
from decimal import Decimal
from pathlib import Path
from typing import Any, Final, final

import trio

from ..errors import ProxyError
from ..store import BatchConflict, BatchRecord, BatchStore, FileStore
from ..store.data_dir import open_private, private_dir
from ..translation.openai_batch import (
    MAX_BATCH_BYTES,
    MAX_BATCH_REQUESTS,
    MAX_FILE_LINES,
    combined,
    openai_status,
)
from ..translation.openai_chat import TranslationOptions
from ..upstream.batches import MessageBatchesClient
from ._deliver import Deliverer, UsageSink
from ._records import WORK_LEVELS, BatchFailed, clear_spools, gateway_state, save
from ._submit import MAX_REPORTED_ERRORS, Submitter

__all__ = [
    "BATCH_PRICE_FACTOR",
    "MAX_REPORTED_ERRORS",
    "MISSING_ROUNDS",
    "SURFACE",
    "BatchPoller",
    "UsageSink",
]

log = logging.getLogger("trio_batcher")

SURFACE: Final = "openai.batch"
# Anthropic bills Message Batches at half the standard rate, cache prices included. The
# pricing data (data/pricing.json) holds standard rates only, so the discount is applied here.
BATCH_PRICE_FACTOR: Final = Decimal("0.5")
MISSING_ROUNDS: Final = 3
LEADER_RETRY_S: Final = 2.0
NEWS_S: Final = 1.0
LOCK_FILE: Final = "poller.lock"


@final
class BatchPoller:
    """Drives every unfinished batch; ``run`` it in the app's nursery, ``wake`` it on news.

    Args:
      work_dir: where spool files go (``DATA_DIR/batch-work/<deployment>``) and the lock
        that elects one poller among the processes of the deployment.
      legacy_work_dir: ``DATA_DIR/batch-work`` itself, where versions before deployments
        left spool files; cleared once, under its old lock, by the deployment that adopts
        the legacy batches.
      max_file_requests: requests an input file may hold (``BATCH_FILE_MAX_REQUESTS``).
    """

    def __init__(
        self,
        batches: BatchStore,
        files: FileStore,
        upstream: MessageBatchesClient,
        options: TranslationOptions,
        work_dir: Path,
        *,
        on_usage: UsageSink | None = None,
        legacy_work_dir: Path | None = None,
        first_poll_s: float = 0.25,
        max_poll_s: float = 60.0,
        max_file_requests: int = MAX_FILE_LINES,
        max_batch_requests: int = MAX_BATCH_REQUESTS,
        max_batch_bytes: int = MAX_BATCH_BYTES,
    ) -> None:
        self._batches = batches
        self._upstream = upstream
        self._work_dir = work_dir
        self._legacy_work_dir = legacy_work_dir
        self._submitter = Submitter(
            batches,
            files,
            upstream,
            options,
            work_dir,
            max_file_requests=max_file_requests,
            max_batch_requests=max_batch_requests,
            max_batch_bytes=max_batch_bytes,
        )
        self._deliverer = Deliverer(
            batches,
            files,
            upstream,
            options,
            work_dir,
            on_usage=on_usage,
            max_file_requests=max_file_requests,
        )
        self._first_poll_s = first_poll_s
        self._max_poll_s = max_poll_s
        self._news = trio.Event()
        self._missing: dict[str, int] = {}  # Message Batch id -> 404s in a row

    def wake(self) -> None:
        """Something changed (a new batch, a cancel): poll now, from the shortest interval."""
        self._news.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        lock = await self._lead()
        try:
            # Spool files are a step's scratch; any here are a crashed leader's.
            try:
                await trio.to_thread.run_sync(clear_spools, self._work_dir)
                if self._legacy_work_dir is not None:
                    await trio.to_thread.run_sync(_clear_legacy_spools, self._legacy_work_dir)
            except OSError as exc:
                log.warning("stale batch spool files could not be removed: %s", exc)
            wait = self._first_poll_s
            while True:
                self._news = trio.Event()
                changed = await self.poll_once()
                wait = self._first_poll_s if changed else min(wait * 2, self._max_poll_s)
                if await self._until_news(wait):
                    wait = self._first_poll_s
        finally:
            os.close(lock)  # releases the flock

    async def _until_news(self, wait: float) -> bool:
        """Sleep ``wait`` seconds or until there is news; whether there was. News is a
        ``wake`` from this process, or, checked every ``NEWS_S``, a batch created or
        changed by another (a worker of ``serve --workers N`` that is not polling)."""
        seen = await self._fingerprint()
        deadline = trio.current_time() + wait
        while (left := deadline - trio.current_time()) > 0:
            with trio.move_on_after(min(left, NEWS_S)):
                await self._news.wait()
            if self._news.is_set():
                return True
            if await self._fingerprint() != seen:
                return True
        return False

    async def _fingerprint(self) -> frozenset[tuple[str, int]] | None:
        try:
            return frozenset((r.id, r.version) for r in await self._batches.unfinished())
        except Exception:
            return None

    async def _lead(self) -> int:
        """Wait until this process holds the poller lock; returns its descriptor. A data
        directory that cannot be written (the store's own failure, which every request
        that needs it reports) is logged and tried again, never a crash of the app."""
        warned = False
        while True:
            try:
                fd = await trio.to_thread.run_sync(self._open_lock)
            except OSError as exc:
                if not warned:
                    log.warning("batches cannot be polled: %s", exc)
                    warned = True
                await trio.sleep(LEADER_RETRY_S)
            else:
                break
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    await trio.sleep(LEADER_RETRY_S)
                else:
                    return fd
        except BaseException:
            os.close(fd)
            raise

    def _open_lock(self) -> int:
        private_dir(self._work_dir, WORK_LEVELS)
        return open_private(self._work_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT)

    async def poll_once(self) -> bool:
        """One step for every unfinished batch; whether any of them changed."""
        try:
            records = await self._batches.unfinished()
        except Exception as exc:
            log.warning("the batch store is unavailable: %s", exc)
            return False
        changed = False
        for record in records:
            try:
                changed |= await self._step(record)
            except trio.Cancelled:
                raise
            except (BatchConflict, BatchFailed):
                changed = True  # it moved (or ended): look again next round
            except Exception as exc:
                log.warning("batch %s: step failed, will retry: %s", record.id, exc)
        return changed

    # -- one step -----------------------------------------------------------------------

    async def _step(self, record: BatchRecord) -> bool:
        state = gateway_state(record)
        if not state.get("validated"):
            if state.get("cancel_requested") and not record.upstream:
                now = int(time.time())
                counts = record.batch.get("request_counts")
                await save(
                    self._batches,
                    record,
                    lambda r: r.evolve(status="cancelled", cancelled_at=now, request_counts=counts),
                )
                return True
            await self._submitter.validate_and_send(record)
            return True
        return await self._follow(record)

    async def _follow(self, record: BatchRecord) -> bool:
        state = gateway_state(record)
        parts = list(record.upstream)
        if state.get("cancel_requested") and not state.get("cancel_sent"):
            for part in parts:
                if part.processing_status != "ended":
                    try:
                        await self._upstream.cancel(part.id)
                    except ProxyError as exc:
                        # Refused (it ended meanwhile, say): nothing left to cancel there.
                        if exc.status == 429 or exc.status >= 500:
                            raise
                        log.info(
                            "batch %s: upstream cancel of %s refused: %s",
                            record.id,
                            part.id,
                            exc.message,
                        )
            record = await save(
                self._batches,
                record,
                lambda r: r.evolve(_gateway={**gateway_state(r), "cancel_sent": True}),
            )
        objects = [await self._retrieve(record, part.id) for part in parts]
        whole = combined(objects)
        ended = whole.get("processing_status") == "ended"
        status = openai_status(
            whole,
            cancel_requested=bool(state.get("cancel_requested")),
            validated=True,
            finalizing=ended,
        )
        updated = [
            dataclasses.replace(
                part,
                processing_status=str(obj.get("processing_status")),
                results_url=obj.get("results_url"),
            )
            for part, obj in zip(parts, objects, strict=True)
        ]
        if not ended:
            if status == record.status and updated == parts:
                return False
            now = int(time.time())
            stamp = {"cancelling_at": record.batch.get("cancelling_at") or now}
            await save(
                self._batches,
                record,
                lambda r: r.evolve(
                    upstream=updated,
                    status=status,
                    **(stamp if status == "cancelling" else {}),
                ),
            )
            return True
        if record.status != "finalizing" and status == "finalizing":
            now = int(time.time())
            record = await save(
                self._batches,
                record,
                lambda r: r.evolve(upstream=updated, status=status, finalizing_at=now),
            )
        await self._deliverer.deliver(record, whole)
        return True

    async def _retrieve(self, record: BatchRecord, upstream_id: str) -> dict[str, Any]:
        """The Message Batch, or the batch failed once the upstream has answered 404 for it
        ``MISSING_ROUNDS`` rounds in a row (one 404 may be a replica that lags)."""
        try:
            found = await self._upstream.retrieve(upstream_id)
        except ProxyError as exc:
            if exc.status != 404:
                raise
            misses = self._missing[upstream_id] = self._missing.get(upstream_id, 0) + 1
            if misses < MISSING_ROUNDS:
                raise
            del self._missing[upstream_id]
            now = int(time.time())
            gone = {
                "object": "list",
                "data": [
                    {
                        "code": "upstream_batch_missing",
                        "message": f"The upstream no longer knows Message Batch {upstream_id} "
                        f"({exc.message}); its results cannot be retrieved.",
                        "param": None,
                        "line": None,
                    }
                ],
            }
            await save(
                self._batches,
                record,
                lambda r: r.evolve(status="failed", failed_at=now, errors=gone),
            )
            raise BatchFailed(record.id) from None
        self._missing.pop(upstream_id, None)
        return found


def _clear_legacy_spools(legacy_dir: Path) -> None:
    """Spool files a poller of a version before deployments left in ``legacy_dir``, removed
    if no such poller holds its lock now (blocking: run it in a thread)."""
    if not legacy_dir.is_dir():
        return
    fd = open_private(legacy_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # an older gateway still polls there: its files are its own
        clear_spools(legacy_dir)
    finally:
        os.close(fd)
