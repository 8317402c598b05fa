"""Stored Responses: what ``store: true`` keeps, and the interface every backend serves.

A stored response is the response object the client received (in its internal view, with
what replaying it needs, such as the signatures of thinking blocks) and the input items of
the request that produced it, plus the id of the response it continued. A conversation
chained by ``previous_response_id`` is rebuilt by walking those links back to the first
turn, so no record copies its ancestors' items and a long conversation costs storage
linear in its length.

Each record belongs to the client key that created it (``owner_of``: a hash, never the
key) and to the deployment that stored it (``store.deployment``), and is invisible to every
other key and every other deployment, exactly as if it did not exist. Each carries its
own expiry, so a backend can purge lazily (SQLite) or let the server expire keys (Redis).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, final

__all__ = [
    "ChainBroken",
    "ItemsPage",
    "ResponseStore",
    "StoreUnavailable",
    "StoredResponse",
    "UnknownCursor",
    "owner_of",
]


def owner_of(client_key: str | None) -> str:
    """The owner id for a client key: its SHA-256, so the store never holds a usable key;
    ``""`` for a gateway without client keys (then every caller is the same owner)."""
    if not client_key:
        return ""
    return hashlib.sha256(client_key.encode()).hexdigest()


@final
@dataclass(frozen=True)
class StoredResponse:
    id: str
    owner: str
    created_at: float
    expires_at: float
    previous_id: str | None
    response: dict[str, Any]
    input_items: list[dict[str, Any]] = field(default_factory=list)

    def items(self) -> list[dict[str, Any]]:
        """This turn as history for the next one: its input, then its output."""
        output = self.response.get("output")
        return [*self.input_items, *(output if isinstance(output, list) else [])]


@final
class ChainBroken(LookupError):
    """An ancestor of a stored response is gone (deleted or expired): the conversation can
    no longer be rebuilt whole, and sending part of it would change the answer silently."""

    def __init__(self, missing_id: str) -> None:
        super().__init__(missing_id)
        self.missing_id = missing_id


@final
@dataclass(frozen=True)
class ItemsPage:
    """One page of a response's input items, in the order asked for. ``items`` are each
    item's JSON text, as stored: a page of a 20 MB conversation is copied into the answer,
    never parsed and serialised again by Python on the event loop."""

    items: Sequence[str]
    first_id: Any
    last_id: Any
    has_more: bool


@final
class UnknownCursor(LookupError):
    """``after`` / ``before`` names no item of the list."""

    def __init__(self, param: str, cursor: str) -> None:
        super().__init__(cursor)
        self.param = param
        self.cursor = cursor


@final
class StoreUnavailable(Exception):
    """The store cannot be read or written (a full or read-only disk, a data directory that
    is a file, a corrupt database): the edge answers 503, never a 500."""


class ResponseStore(Protocol):
    """Stored responses, by id and owner. Every method is safe to cancel: a write that was
    started completes or does not happen, never half. Every method raises
    ``StoreUnavailable`` when the backend fails."""

    async def put(self, record: StoredResponse) -> None: ...

    async def get(self, response_id: str, owner: str, now: float) -> StoredResponse | None:
        """The record, or None when it is unknown, expired, deleted or another owner's."""
        ...

    async def chain(
        self, response_id: str, owner: str, now: float
    ) -> Sequence[StoredResponse] | None:
        """The conversation ending at ``response_id``, oldest turn first; None when
        ``response_id`` itself is not visible. Raises ``ChainBroken`` for a lost ancestor."""
        ...

    async def find_items(
        self, item_ids: Sequence[str], owner: str, now: float
    ) -> dict[str, dict[str, Any]]:
        """The visible stored items among ``item_ids`` (input or output of any response of
        ``owner``), by id; the ids not found are absent."""
        ...

    async def input_items(
        self,
        response_id: str,
        owner: str,
        now: float,
        *,
        limit: int,
        order: str,
        after: str | None = None,
        before: str | None = None,
    ) -> ItemsPage | None:
        """A page of what produced ``response_id``: every earlier turn's input and output,
        then its own input (only its own input when an ancestor is gone), ``order`` "asc"
        or "desc", after / before an item id (``UnknownCursor`` when none has it); with
        ``before`` alone, the ``limit`` items just before it. None when ``response_id`` is
        not visible."""
        ...

    async def delete(self, response_id: str, owner: str) -> bool:
        """True when a visible record was deleted."""
        ...

    async def lease(self, response_ids: Sequence[str], runner: str, until: float) -> None:
        """Background responses: ``runner`` (one process) runs these until ``until``
        unless it renews the lease (``edge.background``)."""
        ...

    async def release(self, response_id: str) -> None:
        """The background run of ``response_id`` is over."""
        ...

    async def fail_orphans(self, now: float, error: dict[str, Any]) -> int:
        """Mark ``failed`` (with ``error``) the background responses still queued or in
        progress whose lease has lapsed: their process is gone. Returns how many."""
        ...

    async def purge_expired(self, now: float) -> int:
        """Remove every record past its expiry; returns how many went."""
        ...

    async def aclose(self) -> None: ...
