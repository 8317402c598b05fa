"""Embedded state the gateway keeps between requests: stored Responses, batch files and batch
records (and, later, spend). Each kind has a small interface and an SQLite backend in the data
directory, so one command works on a fresh machine; a shared backend can sit behind the same
interface.
"""

from __future__ import annotations

from ._sqlite import Database as Database
from .batches import BatchConflict as BatchConflict
from .batches import BatchPage as BatchPage
from .batches import BatchRecord as BatchRecord
from .batches import BatchRequest as BatchRequest
from .batches import BatchStore as BatchStore
from .batches import UpstreamBatch as UpstreamBatch
from .data_dir import resolve_data_dir as resolve_data_dir
from .files import FileNotFound as FileNotFound
from .files import FilePage as FilePage
from .files import FileRecord as FileRecord
from .files import FileSink as FileSink
from .files import FileStore as FileStore
from .files import FileTooLarge as FileTooLarge
from .files import LineTooLong as LineTooLong
from .responses import ResponseStore as ResponseStore
from .responses import StoredResponse as StoredResponse
from .responses import StoreUnavailable as StoreUnavailable
from .responses import owner_of as owner_of
from .sqlite_batches import SQLiteBatchStore as SQLiteBatchStore
from .sqlite_files import SQLiteFileStore as SQLiteFileStore
from .sqlite_responses import SQLiteResponseStore as SQLiteResponseStore

__all__ = [
    "BatchConflict",
    "BatchPage",
    "BatchRecord",
    "BatchRequest",
    "BatchStore",
    "Database",
    "FileNotFound",
    "FilePage",
    "FileRecord",
    "FileSink",
    "FileStore",
    "FileTooLarge",
    "LineTooLong",
    "ResponseStore",
    "SQLiteBatchStore",
    "SQLiteFileStore",
    "SQLiteResponseStore",
    "StoreUnavailable",
    "StoredResponse",
    "UpstreamBatch",
    "owner_of",
    "resolve_data_dir",
]
