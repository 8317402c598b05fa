"""Delivering an ended batch: its results, in input order, as OpenAI output and error files.

Anthropic returns results in no particular order, and a batch may have 100,000 of them, so
they are not gathered in memory to be sorted. First every Message Batch's results stream to
a spool file on disk, each line's offset indexed in the store under its upstream id; then
the store's lines are read in input order joined with that index (``ordered_results``),
each result read back from the spool by offset, translated (``output_line``) and written
to the output or the error file. Memory holds a page of lines, whatever the batch's size.

Files are atomic, so a restart during delivery leaves nothing half written and delivers
again from the start (the spool and its index are rebuilt). Usage is summed by model and
reported once the batch is final, so a delivery that runs twice never counts twice.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import aclosing
from pathlib import Path
from typing import IO, Any, Final, final

import trio

from ..store import BatchRecord, BatchRequest, BatchStore, FileStore
from ..store.files import BATCH_OUTPUT, FileSink
from ..translation.openai_batch import (
    MAX_FILE_LINES,
    BatchLine,
    LineChecker,
    openai_status,
    output_line,
    unix_seconds,
)
from ..translation.openai_chat import TranslationOptions
from ..upstream.batches import MessageBatchesClient
from ._records import Spool, checked_lines, gateway_state, open_spool, save

__all__ = ["Deliverer", "UsageSink"]

# (tenant, model, summed usage, requests) of a delivered batch's succeeded requests; the
# tenant is the creator's name (None for a batch stored before tenants were recorded).
UsageSink = Callable[[str | None, str, Mapping[str, Any], int], None]

_INDEX_SLICE: Final = 1000  # offsets per write to the store
_READ_ROWS: Final = 256  # results read back from the spool in one thread hop
_WRITE_BYTES: Final = 1024 * 1024

_Row = tuple[BatchRequest, int | None, int | None]


@final
class Deliverer:
    """The last step of a batch whose Message Batches have all ended."""

    def __init__(
        self,
        batches: BatchStore,
        files: FileStore,
        upstream: MessageBatchesClient,
        options: TranslationOptions,
        work_dir: Path,
        *,
        on_usage: UsageSink | None = None,
        max_file_requests: int = MAX_FILE_LINES,
    ) -> None:
        self._batches = batches
        self._files = files
        self._upstream = upstream
        self._options = options
        self._work_dir = work_dir
        self._on_usage = on_usage
        self._max_file_requests = max_file_requests

    async def deliver(self, record: BatchRecord, whole: Mapping[str, Any]) -> None:
        spool = Spool(self._work_dir, record.id)
        try:
            await self._spool_results(record, spool.results)
            await self._write_files(record, whole, spool.results)
        finally:
            await spool.discard()

    async def _spool_results(self, record: BatchRecord, path: Path) -> None:
        """Every part's results into ``path``, each indexed by its upstream id."""
        await self._batches.clear_results(record.id)
        handle: IO[bytes] = await trio.to_thread.run_sync(open_spool, path)
        try:
            buffer = bytearray()
            index: list[tuple[str, int, int]] = []
            offset = 0
            for part in record.upstream:
                async with aclosing(self._upstream.results(part.id)) as lines:
                    async for raw in lines:
                        custom_id = _custom_id(raw)
                        if custom_id is None:
                            continue
                        index.append((custom_id, offset, len(raw)))
                        buffer += raw
                        buffer += b"\n"
                        offset += len(raw) + 1
                        if len(index) >= _INDEX_SLICE or len(buffer) >= _WRITE_BYTES:
                            await trio.to_thread.run_sync(handle.write, bytes(buffer))
                            buffer.clear()
                            await self._batches.add_results(record.id, index)
                            index = []
            await trio.to_thread.run_sync(handle.write, bytes(buffer))
            await self._batches.add_results(record.id, index)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(handle.close)

    async def _write_files(
        self, record: BatchRecord, whole: Mapping[str, Any], results: Path
    ) -> None:
        endpoint = str(record.batch["endpoint"])
        checker = LineChecker(
            endpoint, self._options, max_lines=self._max_file_requests, track_ids=False
        )
        created = int(time.time())
        succeeded = 0
        replies: dict[str, int] = {}  # succeeded requests by model
        usage: dict[str, Any] = {}  # their usage, summed by model
        input_id = str(record.batch["input_file_id"])
        owner = record.owner
        async with (
            self._files.write_file(owner, f"{record.id}_output.jsonl", BATCH_OUTPUT) as output,
            self._files.write_file(owner, f"{record.id}_error.jsonl", BATCH_OUTPUT) as errs,
            aclosing(checked_lines(self._files, owner, input_id, checker)) as lines,
            aclosing(self._batches.ordered_results(record.id)) as rows,  # type: ignore[type-var]
            await trio.open_file(results, "rb") as spool,
        ):
            page: list[_Row] = []
            sent = sum(part.requests for part in record.upstream)
            position = 0

            async def drain() -> None:
                nonlocal succeeded, position
                raws = await trio.to_thread.run_sync(_read_rows, spool.wrapped, page)
                for (request, _, _), raw in zip(page, raws, strict=True):
                    item = await anext(lines)
                    if not isinstance(item, BatchLine) or item.line != request.line:
                        raise RuntimeError(f"batch {record.id}: the input file changed")
                    position += 1
                    if raw is not None:
                        result = json.loads(raw)
                    else:  # never sent (a cancel stopped the sending), or left out
                        result = _NOT_SENT if position > sent else _missing()
                    kind, line = output_line(
                        result, request.custom_id, endpoint, request=item.request, created=created
                    )
                    if kind == "output":
                        succeeded += 1
                        message = result["result"]["message"]
                        _add_usage(usage, message)
                        model = str(message.get("model", ""))
                        replies[model] = replies.get(model, 0) + 1
                    sink = output if kind == "output" else errs
                    await sink.write(json.dumps(line, ensure_ascii=False).encode() + b"\n")
                page.clear()

            async for row in rows:
                page.append(row)
                if len(page) >= _READ_ROWS:
                    await drain()
            await drain()
        await self._finish(record, whole, output, errs, succeeded)
        if self._on_usage is not None:
            tenant = gateway_state(record).get("tenant")
            for model, count in replies.items():
                self._on_usage(
                    tenant if isinstance(tenant, str) else None, model, usage.get(model, {}), count
                )

    async def _finish(
        self,
        record: BatchRecord,
        whole: Mapping[str, Any],
        output: FileSink,
        errs: FileSink,
        succeeded: int,
    ) -> None:
        output_id = output.record.id if output.bytes_written else None
        error_id = errs.record.id if errs.bytes_written else None
        for unused, sink in ((output_id is None, output), (error_id is None, errs)):
            if unused:
                await self._files.delete(record.owner, sink.record.id)
        sent = sum(part.requests for part in record.upstream)
        total = max(sent, int((record.batch.get("request_counts") or {}).get("total") or 0))
        counts = {"total": total, "completed": succeeded, "failed": total - succeeded}
        cancelled = bool(gateway_state(record).get("cancel_requested")) or (
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

        await save(self._batches, record, finish)


def _custom_id(raw: bytes) -> str | None:
    try:
        custom_id = json.loads(raw).get("custom_id")
    except (ValueError, AttributeError):
        return None
    return custom_id if isinstance(custom_id, str) else None


def _read_rows(handle: IO[bytes], rows: Sequence[_Row]) -> list[bytes | None]:
    """The spooled results of ``rows`` (None for a line without one), read by offset."""
    fd = handle.fileno()
    return [
        os.pread(fd, length, offset) if offset is not None and length is not None else None
        for _, offset, length in rows
    ]


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


# A line after the Message Batches a cancel stopped: as cancelled as those cancelled there.
_NOT_SENT: Final = {"result": {"type": "canceled"}}


def _missing() -> dict[str, Any]:
    """A line the upstream's results left out: reported, never silently dropped."""
    return {"result": {"type": "missing"}}
