"""Embedded state the gateway keeps between requests: stored Responses (and, later, batches
and spend). Each kind has a small interface and an SQLite backend in the data directory, so
one command works on a fresh machine; a shared backend can sit behind the same interface.
"""

from __future__ import annotations

from .data_dir import resolve_data_dir as resolve_data_dir
from .responses import ResponseStore as ResponseStore
from .responses import StoredResponse as StoredResponse
from .responses import owner_of as owner_of
from .sqlite_responses import SQLiteResponseStore as SQLiteResponseStore

__all__ = [
    "ResponseStore",
    "SQLiteResponseStore",
    "StoredResponse",
    "owner_of",
    "resolve_data_dir",
]
