"""The batch poller: a task, in the app's nursery, that moves every batch to its end.

Theory of operation. A batch is a record in the ``BatchStore``; the pollers are its only
writers besides the cancel route, and all write by compare-and-set (``save`` re-reads and
re-applies a change that lost a race, so none overwrites another). Each round the poller
takes ``unfinished()`` -- which is also how a restarted proxy resumes -- and gives each
batch one step:

1. ``validating``: ``Submitter`` checks every line and creates the Message Batches.
2. ``in_progress`` / ``cancelling``: a requested cancel is sent upstream once; every
   Message Batch is retrieved and the OpenAI status derived with ``openai_status``. A
   Message Batch the upstream no longer knows (404: deleted there, or another key) fails
   the batch after ``MISSING_ROUNDS`` rounds in a row, rather than being asked for forever
   (counted by each process for the steps it ran).
3. When every part has ended: ``Deliverer`` writes the results, in input order, into an
   output and an error file, and the batch takes its final status in one write.

Steps run side by side. ``run`` owns a nursery of steps; a round starts one for each
unfinished batch, oldest first, that is not in a step here already (``_busy``), through a
``CapacityLimiter`` of ``concurrency`` (``BATCH_POLL_CONCURRENCY``): with that many in
flight the round waits for one to end before it starts the next, so at most that many
steps (each a page of lines and a 1 MiB buffer) are ever held, and nothing is queued but
the list the round read. A round does not wait for its steps: a delivery of minutes goes
on while the rounds after it pass that batch by and step the others, so a small batch is
never held up behind a large one's delivery (``tests/test_batches_poller.py``).

Each batch has exactly one stepper, whichever process it is in. The processes of a
deployment that share ``DATA_DIR`` (``serve --workers N``, instances on one host) all poll,
and a step runs under its batch's claim (``_claims``: an ``flock`` per batch in the
deployment's work directory, ``DATA_DIR/batch-work/<deployment>``), taken without
waiting: a batch claimed elsewhere is passed by until a later round. Under the claim the
record is read again, so a step never acts on a state another process has moved on from
(two steppers would create its Message Batches twice). A per-batch lock rather than one
leader for the whole deployment, because the work is then shared -- a long delivery
occupies the worker that claimed it while the others step the rest, up to
``concurrency`` each -- and a kernel lock rather than a claim with an expiry in the store,
because the kernel drops it the instant its holder dies and a delivery of any length
needs no renewing. The price is that each process polls on its own back-off, so a batch
in progress may be retrieved upstream by each process in turn. Another deployment
sharing the data directory has its own work directory and sees only its own batches (the
store filters), so it never steps, fails or delivers this one's.

Back-off: after a round with no news, the next one waits twice as long, from
``first_poll_s`` to ``max_poll_s``; news starts again from ``first_poll_s`` (rounds are
never closer than that): a step here that changed its batch, a new batch or a cancel
(``wake``), or a batch created or changed by another process (the unfinished batches'
versions are compared every ``NEWS_S``, a local SQLite read). A step that fails (the
upstream down, the disk full) is logged and retried on a later round; only
``trio.Cancelled`` ends the task, and it leaves every batch resumable: a step cancelled
mid-way lets go of its claim and spool files, and the next step (here after a restart,
or in another process) takes the batch from its last saved state -- a delivery from the
start.

Memory does not grow with a batch: lines, ids and results are on disk (``_submit``,
``_deliver``); what a step holds is a page of lines and a 1 MiB write buffer.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any, Final, final

import trio

from ..errors import ProxyError
from ..store import BatchConflict, BatchRecord, BatchStore, FileStore
from ..store.batches import FINAL_STATUSES
from ..translation.openai_batch import (
    MAX_BATCH_BYTES,
    MAX_BATCH_REQUESTS,
    MAX_FILE_LINES,
    combined,
    openai_status,
)
from ..translation.openai_chat import TranslationOptions
from ..upstream.batches import MessageBatchesClient
from ._claims import Claims, clear_legacy_spools
from ._deliver import Deliverer, UsageSink
from ._records import BatchFailed, gateway_state, save
from ._submit import MAX_REPORTED_ERRORS, Submitter

__all__ = [
    "BATCH_PRICE_FACTOR",
    "DEFAULT_CONCURRENCY",
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
DEFAULT_CONCURRENCY: Final = 4


@final
class BatchPoller:
    """Drives every unfinished batch; ``run`` it in the app's nursery, ``wake`` it on news.

    Args:
      work_dir: where spool files go (``DATA_DIR/batch-work/<deployment>``), and the
        claims that share the deployment's batches among its processes (``_claims``).
      legacy_work_dir: ``DATA_DIR/batch-work`` itself, where versions before deployments
        left spool files; cleared once, under its old lock, by the deployment that adopts
        the legacy batches.
      max_file_requests: requests an input file may hold (``BATCH_FILE_MAX_REQUESTS``).
      concurrency: batches this poller steps at once (``BATCH_POLL_CONCURRENCY``).
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
        concurrency: int = DEFAULT_CONCURRENCY,
    ) -> None:
        if concurrency < 1:
            raise ValueError("a batch poller steps at least one batch at a time")
        self._batches = batches
        self._upstream = upstream
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
        self._claims = Claims(work_dir)
        self._limiter = trio.CapacityLimiter(concurrency)
        self._busy: set[str] = set()  # in a step here, or next to start one
        self._news = trio.Event()
        self._missing: dict[str, int] = {}  # Message Batch id -> 404s in a row

    def wake(self) -> None:
        """Something changed (a new batch, a cancel): poll now, from the shortest interval."""
        self._news.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        member = await self._join()
        try:
            # Spool files are a step's scratch; any whose claim is free are a crashed step's.
            try:
                await trio.to_thread.run_sync(self._claims.sweep)
                if self._legacy_work_dir is not None:
                    await trio.to_thread.run_sync(clear_legacy_spools, self._legacy_work_dir)
            except OSError as exc:
                log.warning("stale batch spool files could not be removed: %s", exc)
            async with trio.open_nursery() as steps:
                wait = self._first_poll_s
                while True:
                    self._news = trio.Event()
                    begun = trio.current_time()
                    await self._round(steps, self.wake)
                    if await self._until_news(wait):
                        wait = self._first_poll_s
                        # Rounds, however much news, start at most every first_poll_s.
                        await trio.sleep_until(begun + self._first_poll_s)
                    else:
                        wait = min(wait * 2, self._max_poll_s)
        finally:
            os.close(member)  # releases the shared lock

    async def _until_news(self, wait: float) -> bool:
        """Sleep ``wait`` seconds or until there is news; whether there was. News is a
        ``wake`` (a new batch or a cancel in this process, or a step here that changed
        something), or, checked every ``NEWS_S``, a batch created or changed by another
        process."""
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

    async def _join(self) -> int:
        """Wait until this process holds ``poller.lock`` shared; returns its descriptor.
        (A poller of an older version, which holds it exclusively, polls alone until it
        goes.) A data directory that cannot be written (the store's own failure, which
        every request that needs it reports) is logged and tried again, never a crash of
        the app."""
        warned = False
        while True:
            try:
                return await trio.to_thread.run_sync(self._claims.join)
            except BlockingIOError:
                pass
            except OSError as exc:
                if not warned:
                    log.warning("batches cannot be polled: %s", exc)
                    warned = True
            await trio.sleep(LEADER_RETRY_S)

    async def poll_once(self) -> bool:
        """One step for every unfinished batch not being stepped already, at most
        ``concurrency`` at once; returns when they are done, and whether any changed."""
        changed = False

        def note() -> None:
            nonlocal changed
            changed = True

        async with trio.open_nursery() as steps:
            await self._round(steps, note)
        return changed

    async def _round(self, steps: trio.Nursery, on_change: Callable[[], None]) -> None:
        """Start a step in ``steps`` for every unfinished batch this poller is not stepping
        already, oldest first; returns once all are started. With ``concurrency`` steps in
        flight it waits for one to end before starting the next: the only queue is the
        list ``unfinished`` read, whatever the number of batches."""
        try:
            records = await self._batches.unfinished()
        except Exception as exc:
            log.warning("the batch store is unavailable: %s", exc)
            return
        for record in records:
            if record.id in self._busy:
                continue  # still in its last step (a long delivery, say)
            self._busy.add(record.id)
            try:
                await self._limiter.acquire_on_behalf_of(record.id)
            except BaseException:
                self._busy.discard(record.id)
                raise
            steps.start_soon(self._step_task, record, on_change)

    async def _step_task(self, record: BatchRecord, on_change: Callable[[], None]) -> None:
        try:
            changed = await self._claimed_step(record)
        finally:
            self._limiter.release_on_behalf_of(record.id)
            self._busy.discard(record.id)
        if changed:
            on_change()

    async def _claimed_step(self, record: BatchRecord) -> bool:
        """One step of the batch under its claim, from its record read again under it (the
        one ``unfinished`` gave may be a step of another process behind); whether it
        changed. A claim held elsewhere is a step running there: nothing to do here."""
        try:
            # Shielded: a claim taken is always let go, even if shutdown comes meanwhile.
            with trio.CancelScope(shield=True):
                claim = await trio.to_thread.run_sync(self._claims.take, record.id)
            if claim is None:
                return False
            try:
                fresh = await self._batches.get(record.owner, record.id)
                if fresh is None or fresh.status in FINAL_STATUSES:
                    return False
                return await self._step(fresh)
            finally:
                self._claims.release(record.id, claim)
        except trio.Cancelled:
            raise
        except (BatchConflict, BatchFailed):
            return True  # it moved (or ended): look again next round
        except Exception as exc:
            log.warning("batch %s: step failed, will retry: %s", record.id, exc)
            return False

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
