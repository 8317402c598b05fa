"""A request body read from a file on disk, so a 256 MB upload never sits in memory.

A Message Batch body can be as large as Anthropic takes (256 MB). ``FileBody`` hands it to
httpcore2 as an async iterable of 64 KiB chunks, read in a worker thread each, with its
size known beforehand (the pool sends ``Content-Length``, not chunked encoding, which the
Messages API expects). Every iteration opens the file afresh, so the pool can send the same
body again when a reused keep-alive connection turns out to be dead.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final, final

import trio

__all__ = ["FileBody"]

CHUNK_BYTES: Final = 64 * 1024


@final
class FileBody:
    """The bytes of ``path``, which must not change while a request reads them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.size = os.stat(path).st_size

    def __len__(self) -> int:
        return self.size

    async def __aiter__(self) -> AsyncIterator[bytes]:
        sent = 0
        async with await trio.open_file(self.path, "rb") as handle:
            while sent < self.size:
                chunk = await handle.read(min(CHUNK_BYTES, self.size - sent))
                if not chunk:
                    raise OSError(f"{self.path} became shorter while it was being sent")
                sent += len(chunk)
                yield chunk
