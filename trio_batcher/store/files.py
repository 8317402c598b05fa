"""Uploaded and produced files (OpenAI's Files API, for batches): records and the interface.

A file is a record (OpenAI's file object plus its owner) and its contents. The contents can be
hundreds of megabytes, so no method takes or returns them whole: uploads are written chunk by
chunk into a sink, downloads and line-by-line reads are async iterators of bounded pieces.

Each record belongs to the owner that wrote it (``owner_of`` of the client key, ``""`` without
client keys) and every read checks it: another owner's id behaves exactly like an unknown one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Final, Protocol, final

__all__ = [
    "BATCH_INPUT",
    "BATCH_OUTPUT",
    "MAX_LINE_BYTES",
    "FileNotFound",
    "FilePage",
    "FileRecord",
    "FileSink",
    "FileStore",
    "FileTooLarge",
    "LineTooLong",
]

BATCH_INPUT: Final = "batch"
BATCH_OUTPUT: Final = "batch_output"  # both the output file and the error file of a batch
# Anthropic's request size limit for the Messages API: no valid batch line is longer.
MAX_LINE_BYTES: Final = 32 * 1024 * 1024


@final
@dataclass(frozen=True)
class FileRecord:
    id: str
    owner: str
    bytes: int
    created_at: int
    filename: str
    purpose: str
    expires_at: int | None = None

    def to_openai(self) -> dict[str, Any]:
        """The file object as OpenAI returns it. ``status`` is deprecated there but the SDK
        still requires it; a stored file is complete, hence always ``processed``."""
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": None,
            "expires_at": self.expires_at,
        }


@final
@dataclass(frozen=True)
class FilePage:
    """One page of a newest-first list; the next page is ``after=data[-1].id``."""

    data: Sequence[FileRecord]
    has_more: bool


@final
class FileNotFound(LookupError):
    """The id is unknown, deleted, expired or another owner's: the edge answers 404."""

    def __init__(self, file_id: str) -> None:
        super().__init__(file_id)
        self.file_id = file_id


@final
class FileTooLarge(Exception):
    """An upload went past its size limit; it was abandoned and nothing of it is kept (413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the file is larger than {limit} bytes")
        self.limit = limit


@final
class LineTooLong(Exception):
    """A line is longer than the reader agreed to hold in memory (the file is still intact)."""

    def __init__(self, line: int, limit: int) -> None:
        super().__init__(f"line {line} is longer than {limit} bytes")
        self.line = line
        self.limit = limit


class FileSink(Protocol):
    """Where an upload is written. ``record`` is set once the ``async with`` block that
    produced the sink has exited normally and the file is stored."""

    @property
    def bytes_written(self) -> int: ...

    @property
    def record(self) -> FileRecord: ...

    async def write(self, chunk: bytes) -> None:
        """Append ``chunk``. Raises ``FileTooLarge`` before writing past the limit."""
        ...


class FileStore(Protocol):
    """Files by id and owner. Every method raises ``StoreUnavailable`` when the disk fails.

    An upload is atomic: the file becomes visible (and listed) only when its ``async with``
    block exits normally; an exception or a cancellation inside it leaves no record and no
    bytes on disk.
    """

    def write_file(
        self,
        owner: str,
        filename: str,
        purpose: str,
        *,
        max_bytes: int | None = None,
        expires_at: int | None = None,
    ) -> AbstractAsyncContextManager[FileSink]: ...

    def read_file(self, owner: str, file_id: str) -> AsyncIterator[bytes]:
        """The contents in chunks of bounded size. Raises ``FileNotFound`` on the first
        iteration, before any chunk, when the file is not visible. A file deleted while it
        is read is read to its end."""
        ...

    def read_lines(
        self, owner: str, file_id: str, *, max_line_bytes: int = MAX_LINE_BYTES
    ) -> AsyncIterator[bytes]:
        """Each line without its ``\\n`` (or ``\\r\\n``), in order; a last line without a
        newline counts, an empty file has no lines. Memory holds one line and one chunk.
        Raises ``FileNotFound`` like ``read_file`` and ``LineTooLong`` (numbered from 1)
        for a line over ``max_line_bytes``."""
        ...

    async def get(self, owner: str, file_id: str) -> FileRecord | None: ...

    async def list(
        self,
        owner: str,
        *,
        after: str | None = None,
        limit: int = 10_000,
        purpose: str | None = None,
    ) -> FilePage:
        """The owner's files, newest first, starting after the id ``after`` (which need not
        exist any more)."""
        ...

    async def delete(self, owner: str, file_id: str) -> bool:
        """Remove the record and its bytes; True when a visible file was deleted."""
        ...

    async def purge_expired(self, now: float) -> int:
        """Delete every file whose ``expires_at`` has passed; returns how many went."""
        ...

    async def aclose(self) -> None: ...
