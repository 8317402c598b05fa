"""Message Batches in the simulator: the records, the envelope check and the wire shapes.

Theory of operation: ``POST /v1/messages/batches`` checks the *envelope* here
(``parse_envelope``: ``requests`` a list of 1 to ``MAX_BATCH_REQUESTS`` objects, each with
a ``custom_id`` matching ``^[a-zA-Z0-9_-]{1,64}$``, unique within the batch, and an object
``params``); a bad envelope is a 400 and no batch exists. Each request's ``params`` are
*not* checked here: as in the real API, an invalid request becomes an ``errored`` result
when it is processed (``batches_work.py``), the rest of the batch being unaffected.

A ``Batch`` is a mutable record in a ``BatchBook``; only the batch's own processing task
(one per batch, in the app's nursery, ``batches_work.run_batch``) fills in its results and
ends it, and the routes only read it or ask for cancellation. Both run on one trio thread
and touch the record between checkpoints, so a reader never sees a half-made change.

What a client can rely on, as with the real API:

* ``processing_status`` goes ``in_progress`` → (``canceling`` →) ``ended``, never back;
* ``request_counts`` has every request under ``processing`` until the batch ends, then
  under exactly one of ``succeeded``, ``errored``, ``canceled``, ``expired``;
* ``results_url`` and ``ended_at`` are set exactly when the batch has ended;
* the list is newest first, paged by ``after_id`` / ``before_id`` / ``limit``.

Memory is bounded by ``SimulatorConfig.batch_entries``: creating a batch beyond it forgets
the oldest *ended* batch (results included); when every kept batch is still processing,
creation is refused with 429, like the real API's cap on batches in its queue. Each
batch is itself bounded by ``MAX_BATCH_REQUESTS`` and ``MAX_BATCH_BYTES``.
"""

from __future__ import annotations

import os
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, Literal, final

import trio

from .errors import SimulatorError
from .field_checks import as_list, as_object, as_string, fail, join, only, required

MAX_BATCH_REQUESTS: Final = 100_000
"""Requests one batch may hold (Anthropic's limit)."""

MAX_BATCH_BYTES: Final = 256 * 1024 * 1024
"""The largest ``POST /v1/messages/batches`` body (Anthropic's 256 MB)."""

CUSTOM_ID: Final = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_BATCH_KEYS: Final = frozenset({"requests"})
_REQUEST_KEYS: Final = frozenset({"custom_id", "params"})

Status = Literal["in_progress", "canceling", "ended"]
Outcome = Literal["succeeded", "errored", "canceled", "expired"]
OUTCOMES: Final[tuple[Outcome, ...]] = ("succeeded", "errored", "canceled", "expired")


@final
@dataclass(frozen=True, slots=True)
class BatchRequest:
    """One request of a batch, as the envelope gave it; ``params`` is unchecked."""

    custom_id: str
    params: dict[str, Any]


def parse_envelope(body: object) -> list[BatchRequest]:
    """The requests of a ``POST /v1/messages/batches`` body.

    Raises:
      SimulatorInvalidRequest: the envelope is malformed, a ``custom_id`` is missing,
        badly formed or repeated, or there are more than ``MAX_BATCH_REQUESTS`` requests.
    """
    envelope = as_object(body, "")
    only(envelope, _BATCH_KEYS, "")
    raw = as_list(required(envelope, "requests", ""), "requests")
    if not raw:
        fail("requests", "List should have at least 1 item after validation, not 0")
    if len(raw) > MAX_BATCH_REQUESTS:
        fail(
            "requests",
            f"List should have at most {MAX_BATCH_REQUESTS} items after validation, not {len(raw)}",
        )
    seen: set[str] = set()
    requests: list[BatchRequest] = []
    for index, item in enumerate(raw):
        path = join("requests", index)
        entry = as_object(item, path)
        only(entry, _REQUEST_KEYS, path)
        custom_id = as_string(required(entry, "custom_id", path), join(path, "custom_id"))
        if not CUSTOM_ID.fullmatch(custom_id):
            fail(join(path, "custom_id"), "String should match pattern '^[a-zA-Z0-9_-]{1,64}$'")
        if custom_id in seen:
            fail(
                join(path, "custom_id"),
                f"Duplicate custom_id {custom_id!r}: custom_id must be unique within a batch",
            )
        seen.add(custom_id)
        params = as_object(required(entry, "params", path), join(path, "params"))
        requests.append(BatchRequest(custom_id, params))
    return requests


def rfc3339(wall: float) -> str:
    """``wall`` (Unix seconds) as the API writes times: ``2024-08-20T18:37:24.100435Z``."""
    whole = int(wall)
    micros = round((wall - whole) * 1_000_000)
    if micros == 1_000_000:
        whole, micros = whole + 1, 0
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{micros:06d}Z"


@final
@dataclass(eq=False, slots=True)
class Batch:
    """One Message Batch and, once processed, its results (encoded JSONL lines).

    Times on trio's clock (``*_at`` floats) drive processing; ``created_wall`` anchors
    them to wall-clock time for the RFC 3339 fields. ``api_version`` and ``betas`` are the
    headers of the creating request: every request of the batch is validated against them.
    """

    id: str
    requests: list[BatchRequest]
    api_version: str
    betas: frozenset[str]
    created_at: float
    created_wall: float
    expires_at: float
    status: Status = "in_progress"
    cancel_initiated_at: float | None = None
    ended_at: float | None = None
    counts: dict[Outcome, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    # custom_id -> its encoded result line; bounded by len(requests).
    results: dict[str, bytes] = field(default_factory=dict)
    cancel_requested: trio.Event = field(default_factory=trio.Event)

    def wall(self, at: float) -> str:
        return rfc3339(self.created_wall + (at - self.created_at))

    def record(self, custom_id: str, outcome: Outcome, line: bytes) -> None:
        """Keep one request's result; the counts show it only once the batch has ended."""
        if custom_id not in self.results:
            self.counts[outcome] += 1
        self.results[custom_id] = line

    def cancel(self, now: float) -> None:
        """Ask for cancellation (idempotent): ``canceling`` until processing stops."""
        if self.status == "in_progress":
            self.status = "canceling"
            self.cancel_initiated_at = now
            self.cancel_requested.set()

    def end(self, now: float, unprocessed: Outcome, line: Callable[[str, Outcome], bytes]) -> None:
        """End the batch: every request without a result gets ``unprocessed``.

        Args:
          now: the end time, on trio's clock.
          unprocessed: ``canceled`` or ``expired``.
          line: ``line(custom_id, outcome)`` encodes that result.
        """
        for request in self.requests:
            if request.custom_id not in self.results:
                self.record(request.custom_id, unprocessed, line(request.custom_id, unprocessed))
        self.requests = []  # the params are no longer needed; the results stay
        self.status = "ended"
        self.ended_at = now

    def to_json(self, base_url: str) -> dict[str, Any]:
        """The ``message_batch`` object."""
        ended = self.status == "ended"
        total = len(self.results) if ended else len(self.requests)
        counts: dict[str, int] = {"processing": 0 if ended else total}
        for outcome in OUTCOMES:
            counts[outcome] = self.counts[outcome] if ended else 0
        return {
            "id": self.id,
            "type": "message_batch",
            "processing_status": self.status,
            "request_counts": counts,
            "created_at": self.wall(self.created_at),
            "expires_at": self.wall(self.expires_at),
            "ended_at": None if self.ended_at is None else self.wall(self.ended_at),
            "cancel_initiated_at": (
                None if self.cancel_initiated_at is None else self.wall(self.cancel_initiated_at)
            ),
            "archived_at": None,
            "results_url": f"{base_url}/v1/messages/batches/{self.id}/results" if ended else None,
        }


@final
class BatchBook:
    """The kept batches, oldest first; at most ``capacity`` of them (see the module doc)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._batches: OrderedDict[str, Batch] = OrderedDict()

    def __len__(self) -> int:
        return len(self._batches)

    def add(
        self,
        requests: list[BatchRequest],
        *,
        api_version: str,
        betas: frozenset[str],
        expiry_s: float,
    ) -> Batch:
        """A new ``in_progress`` batch, kept; forgets the oldest ended batch if full.

        Raises:
          SimulatorError: 429 ``rate_limit_error`` when every kept batch is processing.
        """
        if len(self._batches) >= self.capacity:
            oldest_ended = next(
                (key for key, b in self._batches.items() if b.status == "ended"), None
            )
            if oldest_ended is None:
                raise SimulatorError(
                    429,
                    f"Too many Message Batches in progress (the simulator keeps "
                    f"{self.capacity}); retry once one has ended.",
                    headers={"retry-after": "1"},
                )
            del self._batches[oldest_ended]
        now = trio.current_time()
        batch = Batch(
            id="msgbatch_sim" + os.urandom(12).hex(),
            requests=requests,
            api_version=api_version,
            betas=betas,
            created_at=now,
            created_wall=time.time(),
            expires_at=now + expiry_s,
        )
        self._batches[batch.id] = batch
        return batch

    def get(self, batch_id: str) -> Batch:
        """The batch ``batch_id``.

        Raises:
          SimulatorError: 404 ``not_found_error`` for an unknown (or deleted) id.
        """
        batch = self._batches.get(batch_id)
        if batch is None:
            raise SimulatorError(404, f"message_batch: {batch_id} not found")
        return batch

    def delete(self, batch_id: str) -> None:
        """Forget an ended batch and its results.

        Raises:
          SimulatorError: 404 for an unknown id; 400 while the batch is still processing.
        """
        batch = self.get(batch_id)
        if batch.status != "ended":
            raise SimulatorError(
                400,
                f"Message Batch {batch_id} cannot be deleted while it is {batch.status}; "
                "cancel it and wait for it to end first.",
            )
        del self._batches[batch_id]

    def newest_first(self) -> Iterator[Batch]:
        return reversed(self._batches.values())

    def page(
        self, *, limit: int, after_id: str | None, before_id: str | None, base_url: str
    ) -> dict[str, Any]:
        """A page of ``GET /v1/messages/batches``: newest first, as ``list_models`` pages.

        ``after_id`` starts the page just past that batch (older ones); ``before_id`` gives
        the ``limit`` batches just before it (newer ones). An unknown cursor is ignored.
        """
        ids = [b.id for b in self.newest_first()]
        start, stop = 0, len(ids)
        if after_id in ids:
            start = ids.index(after_id) + 1
        if before_id in ids:
            stop = ids.index(before_id)
            start = max(start, stop - limit)
        chosen = ids[start:stop][:limit]
        return {
            "data": [self._batches[i].to_json(base_url) for i in chosen],
            "has_more": start + len(chosen) < stop if before_id is None else start > 0,
            "first_id": chosen[0] if chosen else None,
            "last_id": chosen[-1] if chosen else None,
        }
