"""The batch poller: one task, in the app's nursery, that moves every batch to its end.

Theory of operation. A batch is a record in the ``BatchStore``; this task is the only
writer besides the cancel route, and both write by compare-and-set (``_save`` re-reads and
re-applies a change that lost a race, so neither overwrites the other). Each round the
poller takes ``unfinished()`` -- which is also how a restarted proxy resumes -- and gives
each batch one step:

1. ``validating``: read the input file line by line through ``LineChecker`` (the realtime
   translation). Bad lines fail the batch with ``errors.data`` naming each (at most
   ``MAX_REPORTED_ERRORS``) and nothing goes upstream. Otherwise the id mapping is stored
   and the lines are read again and sent as Message Batches, cut where ``split_batches``
   would cut them; each created batch is recorded at once, so a restart resumes after the
   last one recorded (a crash between the upstream's answer and that write can leave one
   orphaned Message Batch upstream; it is never billed twice to the client's file).
2. ``in_progress`` / ``cancelling``: a requested cancel is sent upstream once; every
   Message Batch is retrieved and the OpenAI status derived with ``openai_status``.
3. When every part has ended: the results are written, in input order, into an output and
   an error file (purpose ``batch_output``), then the batch takes its final status,
   counts, file ids and timestamps in one write. Files are atomic, so a restart during
   delivery leaves nothing half written and delivers again.

Back-off: after a round in which nothing changed, the next one waits twice as long, from
``first_poll_s`` to ``max_poll_s``; any change, a new batch or a cancel (``wake``) starts
again from ``first_poll_s``. A step that fails (the upstream down, the disk full) is logged
and retried on a later round; only ``trio.Cancelled`` ends the task.

Memory: the id map of one batch (two dict entries a line), one Message Batch body while it
is sent (at most Anthropic's 256 MB) and the results of one Message Batch while they are put
back in input order (the raw result lines, by id).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import aclosing
from decimal import Decimal
from typing import Any, Final, final

import trio

from ..errors import ProxyError
from ..store import BatchConflict, BatchRecord, BatchRequest, BatchStore, FileStore, UpstreamBatch
from ..store.files import BATCH_OUTPUT
from ..translation.openai_batch import (
    MAX_BATCH_BYTES,
    MAX_BATCH_REQUESTS,
    BatchLine,
    IdMap,
    LineChecker,
    LineError,
    batch_body,
    combined,
    openai_status,
    output_line,
    request_entry,
    unix_seconds,
)
from ..translation.openai_batch._split import BODY_PREFIX, BODY_SUFFIX
from ..translation.openai_chat import TranslationOptions
from ..upstream.batches import MessageBatchesClient

__all__ = ["BATCH_PRICE_FACTOR", "MAX_REPORTED_ERRORS", "SURFACE", "BatchPoller", "UsageSink"]

log = logging.getLogger("trio_batcher")

MAX_REPORTED_ERRORS: Final = 1000
_SLICE: Final = 1000  # lines per add_requests
_ENVELOPE: Final = len(BODY_PREFIX) + len(BODY_SUFFIX)

SURFACE: Final = "openai.batch"
# Anthropic bills Message Batches at half the standard rate, cache prices included. The
# pricing data (data/pricing.json) holds standard rates only, so the discount is applied here.
BATCH_PRICE_FACTOR: Final = Decimal("0.5")

# (owner, model, summed usage, requests) of a delivered batch's succeeded requests.
UsageSink = Callable[[str, str, Mapping[str, Any], int], None]


@final
class BatchPoller:
    """Drives every unfinished batch; ``run`` it in the app's nursery, ``wake`` it on news."""

    def __init__(
        self,
        batches: BatchStore,
        files: FileStore,
        upstream: MessageBatchesClient,
        options: TranslationOptions,
        *,
        on_usage: UsageSink | None = None,
        first_poll_s: float = 0.25,
        max_poll_s: float = 60.0,
        max_batch_requests: int = MAX_BATCH_REQUESTS,
        max_batch_bytes: int = MAX_BATCH_BYTES,
    ) -> None:
        self._batches = batches
        self._files = files
        self._upstream = upstream
        self._options = options
        self._on_usage = on_usage
        self._first_poll_s = first_poll_s
        self._max_poll_s = max_poll_s
        self._max_requests = max_batch_requests
        self._max_bytes = max_batch_bytes
        self._news = trio.Event()

    def wake(self) -> None:
        """Something changed (a new batch, a cancel): poll now, from the shortest interval."""
        self._news.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        wait = self._first_poll_s
        while True:
            self._news = trio.Event()
            changed = await self.poll_once()
            wait = self._first_poll_s if changed else min(wait * 2, self._max_poll_s)
            with trio.move_on_after(wait):
                await self._news.wait()
            if self._news.is_set():
                wait = self._first_poll_s

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
            except (BatchConflict, _BatchFailed):
                changed = True  # it moved (or ended): look again next round
            except Exception as exc:
                log.warning("batch %s: step failed, will retry: %s", record.id, exc)
        return changed

    # -- one step -----------------------------------------------------------------------

    async def _step(self, record: BatchRecord) -> bool:
        state = _state(record)
        if not state.get("validated"):
            if state.get("cancel_requested") and not record.upstream:
                await self._finish_cancel_before_upstream(record)
                return True
            await self._validate_and_send(record)
            return True
        return await self._follow(record)

    async def _finish_cancel_before_upstream(self, record: BatchRecord) -> None:
        now = int(time.time())
        await self._save(
            record,
            lambda r: r.evolve(status="cancelled", cancelled_at=now, **_final_counts(r)),
        )

    async def _validate_and_send(self, record: BatchRecord) -> None:
        endpoint = str(record.batch["endpoint"])
        input_id = str(record.batch["input_file_id"])
        checker = LineChecker(endpoint, self._options)
        ids = IdMap()
        errors: list[dict[str, Any]] = []
        pending: list[BatchRequest] = []
        index = 0
        async for item in self._checked(record.owner, input_id, checker):
            if isinstance(item, LineError):
                if len(errors) < MAX_REPORTED_ERRORS:
                    errors.append(item.as_batch_error())
                continue
            if errors:
                continue
            upstream_id = ids.add(item.custom_id, index)
            index += 1
            pending.append(BatchRequest(item.line, item.custom_id, upstream_id))
            if len(pending) >= _SLICE:
                await self._batches.add_requests(record.id, pending)
                pending = []
        now = int(time.time())
        if not errors and index == 0:
            errors.append(
                {
                    "code": "empty_file",
                    "message": "The input file has no requests.",
                    "param": None,
                    "line": None,
                }
            )
        if errors:
            await self._save(
                record,
                lambda r: r.evolve(
                    status="failed",
                    failed_at=now,
                    errors={"object": "list", "data": errors},
                ),
            )
            return
        if pending:
            await self._batches.add_requests(record.id, pending)
        record = await self._send(record, checker_for=endpoint, ids=ids, total=index)
        now = int(time.time())
        await self._save(
            record,
            lambda r: r.evolve(
                status="cancelling" if _state(r).get("cancel_requested") else "in_progress",
                in_progress_at=now,
                request_counts={"total": index, "completed": 0, "failed": 0},
                _gateway={**_state(r), "validated": True},
            ),
        )

    async def _send(
        self, record: BatchRecord, *, checker_for: str, ids: IdMap, total: int
    ) -> BatchRecord:
        """Create the Message Batches not yet recorded; returns the record with them."""
        done = sum(part.requests for part in record.upstream)
        checker = LineChecker(checker_for, self._options)
        group: list[bytes] = []
        size = _ENVELOPE
        first = position = 0
        async for item in self._checked(record.owner, str(record.batch["input_file_id"]), checker):
            if not isinstance(item, BatchLine):  # validated before: cannot happen
                raise RuntimeError(f"batch {record.id}: the input file changed")
            position += 1
            if position <= done:
                continue
            entry = request_entry(ids.anthropic(item.custom_id), item.params)
            added = len(entry) + (1 if group else 0)
            # The cut ``split_batches`` makes, taken one line at a time.
            if group and (len(group) == self._max_requests or size + added > self._max_bytes):
                record = await self._create(record, group, first)
                group, size = [], _ENVELOPE
                added = len(entry)
            if not group:
                first = position
            group.append(entry)
            size += added
        if group:
            record = await self._create(record, group, first)
        return record

    async def _create(self, record: BatchRecord, group: list[bytes], first: int) -> BatchRecord:
        try:
            created = await self._upstream.create(b"".join(batch_body(group)))
        except ProxyError as exc:
            if exc.status == 429 or exc.status >= 500:
                raise
            now = int(time.time())
            error = {
                "code": "upstream_refused",
                "message": f"The upstream refused the batch: {exc.message}",
                "param": None,
                "line": None,
            }
            await self._save(
                record,
                lambda r: r.evolve(
                    status="failed", failed_at=now, errors={"object": "list", "data": [error]}
                ),
            )
            raise _BatchFailed(record.id) from None  # stop this step: the batch is final
        part = UpstreamBatch(
            id=str(created["id"]),
            first_line=first,
            requests=len(group),
            processing_status=str(created.get("processing_status", "in_progress")),
            results_url=created.get("results_url"),
        )
        return await self._save(record, lambda r: r.evolve(upstream=[*r.upstream, part]))

    async def _follow(self, record: BatchRecord) -> bool:
        state = _state(record)
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
            record = await self._save(
                record, lambda r: r.evolve(_gateway={**_state(r), "cancel_sent": True})
            )
        objects = [await self._upstream.retrieve(part.id) for part in parts]
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
            await self._save(
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
            record = await self._save(
                record, lambda r: r.evolve(upstream=updated, status=status, finalizing_at=now)
            )
        await self._deliver(record, whole)
        return True

    async def _deliver(self, record: BatchRecord, whole: Mapping[str, Any]) -> None:
        endpoint = str(record.batch["endpoint"])
        created = int(time.time())
        succeeded = 0
        replies: dict[str, int] = {}  # succeeded requests by model
        # Usage summed by model, counted once the batch is final (a retried delivery
        # must not count twice).
        usage: dict[str, Any] = {}
        async with (
            self._files.write_file(
                record.owner, f"{record.id}_output.jsonl", BATCH_OUTPUT
            ) as output,
            self._files.write_file(record.owner, f"{record.id}_error.jsonl", BATCH_OUTPUT) as errs,
        ):
            checker = LineChecker(endpoint, self._options)
            input_id = str(record.batch["input_file_id"])
            async with (
                aclosing(self._checked(record.owner, input_id, checker)) as lines,
            ):
                mapping = aiter(self._batches.requests(record.id))
                try:
                    for part in record.upstream:
                        results = await self._results(part.id)
                        for _ in range(part.requests):
                            item = await anext(lines)
                            req = await anext(mapping)
                            if not isinstance(item, BatchLine):
                                raise RuntimeError(f"batch {record.id}: the input file changed")
                            raw = results.pop(req.upstream_custom_id, None)
                            result = json.loads(raw) if raw is not None else _missing()
                            kind, line = output_line(
                                result,
                                req.custom_id,
                                endpoint,
                                request=item.request,
                                created=created,
                            )
                            if kind == "output":
                                succeeded += 1
                                message = result["result"]["message"]
                                _add_usage(usage, message)
                                model = str(message.get("model", ""))
                                replies[model] = replies.get(model, 0) + 1
                            sink = output if kind == "output" else errs
                            await sink.write(json.dumps(line, ensure_ascii=False).encode() + b"\n")
                finally:
                    aclose = getattr(mapping, "aclose", None)
                    if aclose is not None:
                        with trio.CancelScope(shield=True):
                            await aclose()
        output_id = output.record.id if output.bytes_written else None
        error_id = errs.record.id if errs.bytes_written else None
        for unused, sink in ((output_id is None, output), (error_id is None, errs)):
            if unused:
                await self._files.delete(record.owner, sink.record.id)
        total = sum(part.requests for part in record.upstream)
        counts = {"total": total, "completed": succeeded, "failed": total - succeeded}
        cancelled = bool(_state(record).get("cancel_requested")) or (
            whole.get("cancel_initiated_at") is not None
        )
        status = openai_status(whole, cancel_requested=cancelled, validated=True, finalizing=False)
        now = int(time.time())
        stamps: dict[str, Any] = {
            "completed": {"completed_at": now},
            "expired": {"expired_at": unix_seconds(whole.get("ended_at")) or now},
            "cancelled": {"cancelled_at": now},
        }.get(status, {})

        def finish(r: BatchRecord) -> BatchRecord:
            return r.evolve(
                status=status,
                output_file_id=output_id,
                error_file_id=error_id,
                request_counts=counts,
                finalizing_at=r.batch.get("finalizing_at") or now,
                **stamps,
            )

        await self._save(record, finish)
        if self._on_usage is not None:
            for model, count in replies.items():
                self._on_usage(record.owner, model, usage.get(model, {}), count)

    async def _results(self, upstream_id: str) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        async with aclosing(self._upstream.results(upstream_id)) as lines:
            async for raw in lines:
                try:
                    custom_id = json.loads(raw).get("custom_id")
                except (ValueError, AttributeError):
                    continue
                if isinstance(custom_id, str):
                    found[custom_id] = raw
        return found

    async def _checked(
        self, owner: str, file_id: str, checker: LineChecker
    ) -> AsyncGenerator[BatchLine | LineError, None]:
        async with aclosing(self._files.read_lines(owner, file_id)) as lines:  # type: ignore[type-var]
            async for raw in lines:
                for item in checker.feed(raw):
                    yield item

    async def _save(
        self, record: BatchRecord, change: Callable[[BatchRecord], BatchRecord]
    ) -> BatchRecord:
        """Write ``change(record)``; on a lost race, apply it to the fresh record instead."""
        while True:
            try:
                return await self._batches.update(change(record))
            except BatchConflict:
                fresh = await self._batches.get(record.owner, record.id)
                if fresh is None:
                    raise
                record = fresh


@final
class _BatchFailed(Exception):
    """The step ended the batch as ``failed``; nothing more to do in it."""


def _state(record: BatchRecord) -> dict[str, Any]:
    state = record.batch.get("_gateway")
    return dict(state) if isinstance(state, Mapping) else {}


def _final_counts(record: BatchRecord) -> dict[str, Any]:
    return {"request_counts": record.batch.get("request_counts")}


def _add_usage(total: dict[str, Any], message: Mapping[str, Any]) -> None:
    """Add a reply's ``usage`` into its model's sum, keeping Anthropic's shape (the
    integer fields, and those of nested objects such as ``cache_creation``)."""
    usage = message.get("usage")
    if isinstance(usage, Mapping):
        _sum_into(total.setdefault(str(message.get("model", "")), {}), usage)


def _sum_into(summed: dict[str, Any], usage: Mapping[str, Any]) -> None:
    for key, value in usage.items():
        if isinstance(value, Mapping):
            _sum_into(summed.setdefault(key, {}), value)
        elif isinstance(value, int) and not isinstance(value, bool):
            summed[key] = summed.get(key, 0) + value


def _missing() -> dict[str, Any]:
    """A line the upstream's results left out: reported, never silently dropped."""
    return {"result": {"type": "missing"}}
