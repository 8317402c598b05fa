"""Batch records (OpenAI's Batch API on Anthropic's Message Batches) and the interface.

A record holds three things: the OpenAI batch object as the client sees it (``batch``: status,
timestamps, ``request_counts``, ``errors``, file ids, ``metadata``), the Anthropic message
batches that carry it (``upstream``: a batch is split at Anthropic's limits, each part
covering a contiguous range of input lines), and, beside the record, one ``BatchRequest``
per input line: its OpenAI ``custom_id`` and the one sent upstream (Anthropic accepts only
``^[a-zA-Z0-9_-]{1,64}$``). A batch may have 100,000 lines, so requests are added in slices
and read back as a stream, never as one list.

Records change by compare-and-set: ``update`` succeeds only if nobody wrote the record since
it was read (``version``), so a poller and a cancel (or two workers' pollers) never overwrite
each other's transitions; the loser reads again and retries. The poller's side
(``unfinished``, requests) is not owner-checked; everything a client reaches is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, final

__all__ = [
    "ACTIVE_STATUSES",
    "FINAL_STATUSES",
    "BatchConflict",
    "BatchPage",
    "BatchRecord",
    "BatchRequest",
    "BatchStore",
    "UpstreamBatch",
]

ACTIVE_STATUSES: Final = frozenset({"validating", "in_progress", "finalizing", "cancelling"})
FINAL_STATUSES: Final = frozenset({"completed", "failed", "expired", "cancelled"})
# The timestamp each final status sets: what retention counts from.
FINISHED_AT: Final = {
    "completed": "completed_at",
    "failed": "failed_at",
    "expired": "expired_at",
    "cancelled": "cancelled_at",
}


@final
@dataclass(frozen=True)
class UpstreamBatch:
    """One Anthropic message batch, carrying input lines ``first_line`` to
    ``first_line + requests - 1``. ``delivered`` says its results were written to the
    batch's output and error files, so a restarted poller does not write them twice."""

    id: str
    first_line: int
    requests: int
    processing_status: str = "in_progress"
    results_url: str | None = None
    delivered: bool = False

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> UpstreamBatch:
        return cls(**data)


@final
@dataclass(frozen=True)
class BatchRequest:
    """One input line (numbered from 1, as ``errors.data[].line``) and its two custom ids."""

    line: int
    custom_id: str
    upstream_custom_id: str


@final
@dataclass(frozen=True)
class BatchRecord:
    """A stored batch. ``batch`` is the OpenAI batch object; treat it as read-only and make
    changes with ``evolve``. ``version`` counts the writes, for compare-and-set."""

    owner: str
    batch: Mapping[str, Any]
    upstream: tuple[UpstreamBatch, ...] = ()
    version: int = 0
    updated_at: float = 0.0

    @property
    def id(self) -> str:
        return str(self.batch["id"])

    @property
    def status(self) -> str:
        return str(self.batch["status"])

    @property
    def created_at(self) -> int:
        return int(self.batch["created_at"])

    @property
    def finished_at(self) -> int | None:
        """When the batch reached its final status; None while it is active."""
        key = FINISHED_AT.get(self.status)
        if key is None:
            return None
        value = self.batch.get(key)
        return int(value) if isinstance(value, int | float) else self.created_at

    def file_ids(self) -> list[str]:
        """The files this batch reads or produced, which expire with it."""
        keys = ("input_file_id", "output_file_id", "error_file_id")
        return [v for k in keys if isinstance(v := self.batch.get(k), str) and v]

    def evolve(
        self, *, upstream: Sequence[UpstreamBatch] | None = None, **fields: Any
    ) -> BatchRecord:
        """A copy with ``fields`` set in the batch object (and ``upstream`` replaced),
        keeping ``version`` so that ``update`` can tell whether it is still current."""
        return dataclasses.replace(
            self,
            batch={**self.batch, **fields},
            upstream=self.upstream if upstream is None else tuple(upstream),
        )

    def to_openai(self) -> dict[str, Any]:
        return dict(self.batch)


@final
@dataclass(frozen=True)
class BatchPage:
    """One page of a newest-first list; the next page is ``after=data[-1].id``."""

    data: Sequence[BatchRecord]
    has_more: bool


@final
class BatchConflict(Exception):
    """``update`` lost a race: the record changed (or went) since it was read."""

    def __init__(self, batch_id: str) -> None:
        super().__init__(batch_id)
        self.batch_id = batch_id


class BatchStore(Protocol):
    """Batches by id and owner. Every method raises ``StoreUnavailable`` when the backend
    fails, and ``ValueError`` for a batch object without a known ``status`` or a
    ``created_at``."""

    async def create(
        self, owner: str, batch: Mapping[str, Any], upstream: Sequence[UpstreamBatch] = ()
    ) -> BatchRecord:
        """Store a new batch; the store assigns ``id`` (``batch_…``, sorting by creation)
        and ``object``. Returns the record at version 1."""
        ...

    async def get(self, owner: str, batch_id: str) -> BatchRecord | None:
        """The record, or None when it is unknown, purged or another owner's."""
        ...

    async def list(self, owner: str, *, after: str | None = None, limit: int = 20) -> BatchPage:
        """The owner's batches, newest first, after the id ``after`` (which may be gone)."""
        ...

    async def update(self, record: BatchRecord) -> BatchRecord:
        """Replace the stored record if its version is still ``record.version``; returns the
        stored record (version + 1, ``updated_at`` now). Raises ``BatchConflict`` otherwise."""
        ...

    async def unfinished(self) -> Sequence[BatchRecord]:
        """Every batch of every owner not in a final status, oldest first: what a poller
        resumes after a restart."""
        ...

    async def status_counts(self) -> dict[str, int]:
        """How many batches of every owner are in each status (those with none left out):
        the observatory's batches-by-status gauge."""
        ...

    async def add_requests(self, batch_id: str, requests: Sequence[BatchRequest]) -> None:
        """Record a slice of the batch's lines; adding a line again replaces it, so a
        validation pass interrupted by a restart can simply run again."""
        ...

    def requests(self, batch_id: str, *, after_line: int = 0) -> AsyncIterator[BatchRequest]:
        """The batch's lines after ``after_line``, in order, read a page at a time."""
        ...

    async def find_custom_ids(self, batch_id: str, custom_ids: Sequence[str]) -> dict[str, int]:
        """Which of ``custom_ids`` the batch's lines hold already, and on which (first) line:
        how validation finds a repeated id without keeping every id in memory."""
        ...

    async def clear_requests(self, batch_id: str) -> None:
        """Forget the batch's lines and results index (a validation that starts over, or
        one that failed and will send nothing)."""
        ...

    async def add_results(self, batch_id: str, offsets: Sequence[tuple[str, int, int]]) -> None:
        """Index a slice of spooled results: ``(upstream custom_id, offset, length)`` each;
        a later entry for the same id replaces the earlier one."""
        ...

    async def clear_results(self, batch_id: str) -> None:
        """Drop the results index (a delivery that starts over spools them again)."""
        ...

    def ordered_results(
        self, batch_id: str
    ) -> AsyncIterator[tuple[BatchRequest, int | None, int | None]]:
        """Every line in input order with its result's offset and length in the spool
        (None, None for a line with no result), read a page at a time."""
        ...

    async def purge_finished(self, now: float, retention_s: float) -> int:
        """Delete the batches that reached a final status at least ``retention_s`` before
        ``now``, with their lines and their files (an input file only when no other batch
        still reads it). Safe to repeat after an interruption; returns how many went."""
        ...

    async def aclose(self) -> None: ...
