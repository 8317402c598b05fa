"""Validating a batch's input file and sending it as Message Batches, in constant memory.

Validation reads the file once through ``LineChecker`` (the realtime translation) and
writes every line's ids to the store in slices; a repeated ``custom_id`` is found in that
table, a slice at a time, not in a set of every id (``track_ids=False``). Bad lines fail the
batch with ``errors.data`` naming the first ``MAX_REPORTED_ERRORS`` in line order, and
nothing goes upstream.

Sending reads the file again and writes each Message Batch's body to a spool file, cut where
``split_batches`` would cut it, then streams that file upstream (``FileBody``): a 256 MB
body is never in memory. Each created batch is recorded at once, so a restart resumes after
the last one recorded (a crash between the upstream's answer and that write can leave one
orphaned Message Batch upstream; it is never billed twice to the client's file). A cancel
asked for meanwhile stops it before the next Message Batch: those already created are
cancelled upstream by the poller, and the lines never sent are reported cancelled.
"""

from __future__ import annotations

import time
from contextlib import aclosing
from pathlib import Path
from typing import IO, Any, Final, final

import trio

from ..errors import ProxyError
from ..store import BatchRecord, BatchRequest, BatchStore, FileStore, UpstreamBatch
from ..translation.openai_batch import (
    BODY_PREFIX,
    BODY_SUFFIX,
    MAX_BATCH_BYTES,
    MAX_BATCH_REQUESTS,
    MAX_FILE_LINES,
    BatchLine,
    LineChecker,
    LineError,
    anthropic_custom_id,
    duplicate_id,
    request_entry,
)
from ..translation.openai_chat import TranslationOptions
from ..upstream.batches import MessageBatchesClient
from ..upstream.file_body import FileBody
from ._records import BatchFailed, Spool, checked_lines, gateway_state, open_spool, save

__all__ = ["MAX_REPORTED_ERRORS", "Submitter"]

MAX_REPORTED_ERRORS: Final = 1000
_SLICE: Final = 1000  # lines per write to the store
_WRITE_BYTES: Final = 1024 * 1024  # spool writes are this large (one thread hop each)
_ENVELOPE: Final = len(BODY_PREFIX) + len(BODY_SUFFIX)
_FILE_LIMITS: Final = frozenset({"max_requests_exceeded", "max_file_size_exceeded"})


@final
class Submitter:
    """The ``validating`` step: check every line, then create the Message Batches."""

    def __init__(
        self,
        batches: BatchStore,
        files: FileStore,
        upstream: MessageBatchesClient,
        options: TranslationOptions,
        work_dir: Path,
        *,
        max_file_requests: int = MAX_FILE_LINES,
        max_batch_requests: int = MAX_BATCH_REQUESTS,
        max_batch_bytes: int = MAX_BATCH_BYTES,
    ) -> None:
        self._batches = batches
        self._files = files
        self._upstream = upstream
        self._options = options
        self._work_dir = work_dir
        self._max_file_requests = max_file_requests
        self._max_requests = max_batch_requests
        self._max_bytes = max_batch_bytes

    def _checker(self, record: BatchRecord) -> LineChecker:
        return LineChecker(
            str(record.batch["endpoint"]),
            self._options,
            max_lines=self._max_file_requests,
            track_ids=False,
        )

    async def validate_and_send(self, record: BatchRecord) -> None:
        errors, total = await self._validate(record)
        now = int(time.time())
        if not errors and total == 0:
            errors = [_error("empty_file", "The input file has no requests.")]
        if errors:
            await self._batches.clear_requests(record.id)
            failed = {"object": "list", "data": errors}
            await save(
                self._batches,
                record,
                lambda r: r.evolve(status="failed", failed_at=now, errors=failed),
            )
            return
        record = await self._send(record)
        now = int(time.time())
        counts = {"total": total, "completed": 0, "failed": 0}
        if not record.upstream:  # cancelled before anything was sent
            await save(
                self._batches,
                record,
                lambda r: r.evolve(status="cancelled", cancelled_at=now, request_counts=counts),
            )
            return
        await save(
            self._batches,
            record,
            lambda r: r.evolve(
                status="cancelling" if gateway_state(r).get("cancel_requested") else "in_progress",
                in_progress_at=now,
                request_counts=counts,
                _gateway={**gateway_state(r), "validated": True},
            ),
        )

    async def _validate(self, record: BatchRecord) -> tuple[list[dict[str, Any]], int]:
        """Every line checked and its ids stored; the errors (first ones, in line order)
        and the number of requests."""
        await self._batches.clear_requests(record.id)  # a pass cut short by a restart
        errors = _Errors()
        pending: list[BatchRequest] = []
        index = 0
        input_id = str(record.batch["input_file_id"])
        checked = checked_lines(self._files, record.owner, input_id, self._checker(record))
        async with aclosing(checked) as lines:
            async for item in lines:
                if isinstance(item, LineError):
                    errors.add(item.as_batch_error())
                    if item.custom_id is None:
                        continue
                    # Stored too: a later line reusing its id is a duplicate, as OpenAI counts.
                    pending.append(BatchRequest(item.line, item.custom_id, ""))
                else:
                    upstream_id = anthropic_custom_id(item.custom_id, index)
                    pending.append(BatchRequest(item.line, item.custom_id, upstream_id))
                    index += 1
                if len(pending) >= _SLICE:
                    await self._store_slice(record.id, pending, errors)
                    pending = []
        await self._store_slice(record.id, pending, errors)
        return errors.first(), index

    async def _store_slice(
        self, batch_id: str, pending: list[BatchRequest], errors: _Errors
    ) -> None:
        """Store a slice's lines, refusing those whose id an earlier line holds."""
        seen = await self._batches.find_custom_ids(batch_id, [r.custom_id for r in pending])
        kept: list[BatchRequest] = []
        for request in pending:
            if request.custom_id in seen:
                errors.add(duplicate_id(request.line, request.custom_id).as_batch_error())
            else:
                seen[request.custom_id] = request.line
                kept.append(request)
        await self._batches.add_requests(batch_id, kept)

    async def _send(self, record: BatchRecord) -> BatchRecord:
        """Create the Message Batches not yet recorded; returns the record with them."""
        done = sum(part.requests for part in record.upstream)
        spool = Spool(self._work_dir, record.id)
        body = _Body(spool.body)
        position = first = 0
        input_id = str(record.batch["input_file_id"])
        lines = checked_lines(self._files, record.owner, input_id, self._checker(record))
        try:
            async for item in lines:
                if not isinstance(item, BatchLine):  # validated before: cannot happen
                    raise RuntimeError(f"batch {record.id}: the input file changed")
                position += 1
                if position <= done:
                    continue
                entry = request_entry(
                    anthropic_custom_id(item.custom_id, position - 1), item.params
                )
                # The cut ``split_batches`` makes, taken one line at a time.
                if body.count and (
                    body.count == self._max_requests or body.size + 1 + len(entry) > self._max_bytes
                ):
                    record = await self._create(record, await body.finish(), first, body.count)
                    body = _Body(spool.body)
                if not body.count:
                    first = position
                await body.add(entry)
            if body.count:
                record = await self._create(record, await body.finish(), first, body.count)
        except _Cancelled as cancelled:
            return cancelled.record
        finally:
            await lines.aclose()
            await body.aclose()
            await spool.discard()
        return record

    async def _create(
        self, record: BatchRecord, body: FileBody, first: int, count: int
    ) -> BatchRecord:
        """Create one Message Batch and record it -- unless a cancel came in meanwhile: then
        nothing more is sent (``_Cancelled``), and delivery reports the rest cancelled."""
        fresh = await self._batches.get(record.owner, record.id)
        if fresh is not None and gateway_state(fresh).get("cancel_requested"):
            raise _Cancelled(fresh)
        try:
            created = await self._upstream.create(body)
        except ProxyError as exc:
            if not _refused(exc):
                raise  # the upstream is busy or down: the next round tries again
            now = int(time.time())
            refused = {"object": "list", "data": [_refusal(exc)]}
            await save(
                self._batches,
                record,
                lambda r: r.evolve(status="failed", failed_at=now, errors=refused),
            )
            raise BatchFailed(record.id) from None  # stop this step: the batch is final
        part = UpstreamBatch(
            id=str(created["id"]),
            first_line=first,
            requests=count,
            processing_status=str(created.get("processing_status", "in_progress")),
            results_url=created.get("results_url"),
        )
        return await save(self._batches, record, lambda r: r.evolve(upstream=[*r.upstream, part]))


@final
class _Cancelled(Exception):
    """A cancel was asked for while the Message Batches were being created."""

    def __init__(self, record: BatchRecord) -> None:
        super().__init__(record.id)
        self.record = record


@final
class _Body:
    """One Message Batch body being written to the spool: ``{"requests":[e,e,…]}``."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._handle: IO[bytes] | None = None
        self._buffer = bytearray(BODY_PREFIX)
        self.count = 0
        self.size = _ENVELOPE

    async def add(self, entry: bytes) -> None:
        if self.count:
            self._buffer += b","
            self.size += 1
        self._buffer += entry
        self.size += len(entry)
        self.count += 1
        if len(self._buffer) >= _WRITE_BYTES:
            await self._flush()

    async def finish(self) -> FileBody:
        self._buffer += BODY_SUFFIX
        await self._flush()
        await self.aclose()
        return await trio.to_thread.run_sync(FileBody, self._path)

    async def aclose(self) -> None:
        if self._handle is not None:
            handle, self._handle = self._handle, None
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(handle.close)

    async def _flush(self) -> None:
        data = bytes(self._buffer)
        self._buffer.clear()
        if self._handle is None:
            self._handle = await trio.to_thread.run_sync(open_spool, self._path)
        await trio.to_thread.run_sync(self._handle.write, data)


@final
class _Errors:
    """The ``errors.data`` entries with the lowest line numbers, at most
    ``MAX_REPORTED_ERRORS``, one a line: repeats are found a slice late, so entries arrive
    nearly, not exactly, in line order."""

    def __init__(self) -> None:
        self._entries: list[dict[str, Any]] = []

    def __bool__(self) -> bool:
        return bool(self._entries)

    def add(self, entry: dict[str, Any]) -> None:
        self._entries.append(entry)
        if len(self._entries) >= 2 * MAX_REPORTED_ERRORS:
            self._trim()

    def first(self) -> list[dict[str, Any]]:
        self._trim()
        return self._entries

    def _trim(self) -> None:
        """Sort, keep one entry a line -- the later: a repeated ``custom_id`` is found
        after the line's own error and is the one reported, as ``LineChecker`` does (a
        file limit's entry is kept beside it) -- and drop all but the first
        ``MAX_REPORTED_ERRORS``."""
        by_line: dict[tuple[int | None, bool], dict[str, Any]] = {}
        for entry in self._entries:  # a file limit's entry stands beside its line's own
            by_line[entry["line"], entry["code"] in _FILE_LIMITS] = entry
        self._entries = sorted(by_line.values(), key=lambda e: e["line"] or 0)
        del self._entries[MAX_REPORTED_ERRORS:]


def _refused(exc: ProxyError) -> bool:
    """Whether the upstream said no for good, rather than not now. A 401 (reported as a
    502, ``upstream_authentication_error``: the gateway's key was refused) is a no: asking
    again every round with the same key would leave the batch ``validating`` forever."""
    if exc.upstream_status == 401:
        return True
    return exc.status != 429 and exc.status < 500


def _refusal(exc: ProxyError) -> dict[str, Any]:
    """The ``errors.data`` entry of a batch the upstream refused to create."""
    if exc.upstream_status == 401:
        # The message says whose key it was (``upstream.errors``), never the key itself.
        return _error("upstream_authentication_error", f"{exc.message} (batch not created)")
    return _error("upstream_refused", f"The upstream refused the batch: {exc.message}")


def _error(code: str, message: str) -> dict[str, Any]:
    return {"code": code, "message": message, "param": None, "line": None}
