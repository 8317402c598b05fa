"""What every stage of the poller shares: the gateway's state in a record, compare-and-set
saves, an input file read through the line checker, and the spool files on disk."""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import aclosing
from pathlib import Path
from typing import IO, Any, Final, final

import trio

from ..store import BatchConflict, BatchRecord, BatchStore, FileStore
from ..store.data_dir import open_private, private_dir
from ..translation.openai_batch import BatchLine, LineChecker, LineError

__all__ = [
    "WORK_LEVELS",
    "BatchFailed",
    "Spool",
    "checked_lines",
    "clear_spools",
    "gateway_state",
    "open_spool",
    "save",
]

# The work directory is DATA_DIR/batch-work/<deployment>: the levels made private (0700).
WORK_LEVELS: Final = 3


@final
class BatchFailed(Exception):
    """The step ended the batch as ``failed``; nothing more to do in it."""


def gateway_state(record: BatchRecord) -> dict[str, Any]:
    """The poller's own fields (``_gateway``: validated, cancel_requested, cancel_sent)."""
    state = record.batch.get("_gateway")
    return dict(state) if isinstance(state, Mapping) else {}


async def save(
    batches: BatchStore, record: BatchRecord, change: Callable[[BatchRecord], BatchRecord]
) -> BatchRecord:
    """Write ``change(record)``; on a lost race, apply it to the fresh record instead."""
    while True:
        try:
            return await batches.update(change(record))
        except BatchConflict:
            fresh = await batches.get(record.owner, record.id)
            if fresh is None:
                raise
            record = fresh


async def checked_lines(
    files: FileStore, owner: str, file_id: str, checker: LineChecker
) -> AsyncGenerator[BatchLine | LineError, None]:
    """The input file's lines, one at a time, as ``checker`` judges them."""
    async with aclosing(files.read_lines(owner, file_id)) as lines:  # type: ignore[type-var]
        async for raw in lines:
            for item in checker.feed(raw):
                yield item


@final
class Spool:
    """Scratch files of one batch under the work directory: the Message Batch body being
    sent (``.body``) and the results being put back in order (``.results``).

    They hold what would otherwise sit in memory; nothing in them outlives the step that
    wrote them (a restart writes them again), so ``discard`` is all the cleanup there is.
    """

    def __init__(self, work_dir: Path, batch_id: str) -> None:
        self.body = work_dir / f"{batch_id}.body"
        self.results = work_dir / f"{batch_id}.results"

    async def discard(self) -> None:
        def remove() -> None:
            for path in (self.body, self.results):
                path.unlink(missing_ok=True)

        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(remove)


def open_spool(path: Path) -> IO[bytes]:
    """A spool file, truncated, mode 0600 in a 0700 directory: it holds a batch's prompts or
    results (blocking: run it in a thread)."""
    private_dir(path.parent, WORK_LEVELS)
    return os.fdopen(open_private(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "wb")


def clear_spools(work_dir: Path) -> None:
    """Remove every spool file under ``work_dir`` (blocking: run it in a thread)."""
    for pattern in ("*.body", "*.results"):
        for path in work_dir.glob(pattern):
            path.unlink(missing_ok=True)
