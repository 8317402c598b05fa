"""Planning Anthropic Message Batches: consecutive requests, under both of Anthropic's limits.

One OpenAI batch may need several Message Batches: Anthropic takes at most 100,000 requests
or 256 MB of request body in one. Sizes are those of the bytes Anthropic receives -- the
body ``{"requests":[<entry>,<entry>...]}`` with each entry ``{"custom_id":…,"params":{…}}``
as ``request_entry`` serialises it -- so a plan that fits here fits there.

``split_batches`` reads its input once, lazily, and keeps counters only: a 100,000-line file
is planned in constant memory, and the caller streams each planned range from storage with
``batch_body``. Groups are consecutive ranges of the input, so results map back to lines by
the index alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, final

__all__ = [
    "BODY_PREFIX",
    "BODY_SUFFIX",
    "MAX_BATCH_BYTES",
    "MAX_BATCH_REQUESTS",
    "PlannedBatch",
    "RequestTooLarge",
    "batch_body",
    "request_entry",
    "split_batches",
]

MAX_BATCH_REQUESTS: Final = 100_000
MAX_BATCH_BYTES: Final = 256 * 1024 * 1024
BODY_PREFIX: Final = b'{"requests":['
BODY_SUFFIX: Final = b"]}"
_ENVELOPE: Final = len(BODY_PREFIX) + len(BODY_SUFFIX)


def request_entry(custom_id: str, params: Mapping[str, Any]) -> bytes:
    """One request as Anthropic receives it inside a batch: compact JSON, UTF-8."""
    entry = {"custom_id": custom_id, "params": params}
    return json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode()


def batch_body(entries: Iterable[bytes]) -> Iterator[bytes]:
    """The ``POST /v1/messages/batches`` body for ``entries``, in pieces (to stream it)."""
    yield BODY_PREFIX
    for i, entry in enumerate(entries):
        yield b"," + entry if i else entry
    yield BODY_SUFFIX


@final
@dataclass(frozen=True)
class PlannedBatch:
    """Input entries ``first`` .. ``first + count - 1``; ``bytes`` is their body's size."""

    first: int
    count: int
    bytes: int


@final
class RequestTooLarge(ValueError):
    """One request alone exceeds the byte limit: no plan can send it."""

    def __init__(self, index: int, size: int, max_bytes: int) -> None:
        super().__init__(
            f"request {index} needs {size} bytes in a batch body of at most {max_bytes}"
        )
        self.index = index
        self.size = size


def split_batches(
    lines: Iterable[bytes | tuple[str, Mapping[str, Any]]],
    max_requests: int = MAX_BATCH_REQUESTS,
    max_bytes: int = MAX_BATCH_BYTES,
) -> Iterator[PlannedBatch]:
    """Consecutive groups of ``lines`` that each fit one Message Batch, in order.

    Args:
      lines: serialised entries (``request_entry``'s bytes), or ``(custom_id, params)``
        pairs to serialise.
      max_requests: requests per Message Batch (Anthropic: 100,000).
      max_bytes: bytes per Message Batch body (Anthropic: 256 MB).

    Raises:
      RequestTooLarge: an entry that fits in no body (validation should have refused it).
    """
    if max_requests < 1 or max_bytes <= _ENVELOPE:
        raise ValueError("limits too small to hold any request")
    first = count = 0
    size = _ENVELOPE
    for index, line in enumerate(lines):
        entry = line if isinstance(line, bytes) else request_entry(*line)
        if _ENVELOPE + len(entry) > max_bytes:
            raise RequestTooLarge(index, _ENVELOPE + len(entry), max_bytes)
        added = len(entry) + (1 if count else 0)  # the comma before every entry but the first
        if count == max_requests or size + added > max_bytes:
            yield PlannedBatch(first, count, size)
            first, count, size = index, 0, _ENVELOPE
            added = len(entry)
        count += 1
        size += added
    if count:
        yield PlannedBatch(first, count, size)
