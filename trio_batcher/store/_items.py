"""A page of a stored response's input items, cut by SQLite: ``GET .../input_items``.

The list is every earlier turn's input and output, then the response's own input, and may
be tens of megabytes. Python parsing all of it to return 20 items, on the event loop, is
what made one client's listing stall every other request. Here SQLite's JSON functions do
the work, in the reading thread (the sqlite3 module lets go of the GIL while SQLite runs):
one query measures every turn's arrays, one per turn looks a cursor's id up, and one per
turn touched by the page reads just the page's items, as JSON text that goes into the answer
as it is. Python handles a page, never the conversation.

Positions: the list in ascending order is a run of segments (turn, input or output); the
page is worked out on positions in the order asked for, as ``_list_page`` did on a list.
Every query runs in one read transaction, so the page is of one snapshot.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, final

from .responses import ItemsPage, UnknownCursor

__all__ = ["PageRequest", "page"]

_MAX_CHAIN: Final = 10_000
_SOURCES: Final = {
    "input": "json_each(r.input_items)",
    "output": "json_each(r.response, '$.output')",
}
_ID: Final = "CASE WHEN j.type = 'object' THEN json_extract(j.value, '$.id') END"
# An item as JSON text: objects and arrays are their stored text; scalars are quoted back.
_TEXT: Final = (
    "CASE j.type WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' WHEN 'null' THEN 'null'"
    " ELSE json_quote(j.value) END"
)

_SEGMENTS: Final = f"""
WITH RECURSIVE chain (depth, id, previous_id) AS (
    SELECT 0, id, previous_id FROM responses
     WHERE id = :id AND owner = :owner AND deployment = :deployment AND expires_at > :now
    UNION ALL
    SELECT chain.depth + 1, r.id, r.previous_id
      FROM responses AS r JOIN chain ON r.id = chain.previous_id
     WHERE r.owner = :owner AND r.deployment = :deployment AND r.expires_at > :now
       AND chain.depth < {_MAX_CHAIN}
)
SELECT c.depth, c.id, c.previous_id, json_array_length(r.input_items),
       CASE WHEN c.depth > 0 AND json_type(r.response, '$.output') = 'array'
            THEN json_array_length(r.response, '$.output') ELSE 0 END
  FROM chain AS c JOIN responses AS r ON r.id = c.id
 ORDER BY c.depth DESC
"""


@final
@dataclass(frozen=True)
class PageRequest:
    limit: int
    order: str  # "asc" or "desc"
    after: str | None = None
    before: str | None = None


@final
@dataclass(frozen=True)
class _Segment:
    response_id: str
    part: str  # "input" or "output"
    start: int  # its first position in ascending order
    length: int


def page(db: sqlite3.Connection, params: Mapping[str, Any], ask: PageRequest) -> ItemsPage | None:
    """The page (blocking: in the reading thread); None when the response is not visible."""
    db.execute("BEGIN")
    try:
        segments = _segments(db, params)
        if segments is None:
            return None
        return _page(db, segments, ask)
    finally:
        db.execute("COMMIT")


def _segments(db: sqlite3.Connection, params: Mapping[str, Any]) -> list[_Segment] | None:
    rows = db.execute(_SEGMENTS, params).fetchall()
    if not rows:
        return None
    if rows[0][2] is not None:  # an ancestor is gone: the response's own input only
        rows = rows[-1:]
    segments: list[_Segment] = []
    start = 0
    for depth, rid, _, inputs, outputs in rows:
        for part, length in (("input", inputs), ("output", outputs if depth else 0)):
            if length:
                segments.append(_Segment(rid, part, start, length))
                start += length
    return segments


def _page(db: sqlite3.Connection, segments: list[_Segment], ask: PageRequest) -> ItemsPage:
    total = sum(s.length for s in segments)
    descending = ask.order == "desc"

    def ordered(position: int) -> int:  # ascending position <-> position in the order asked
        return total - 1 - position if descending else position

    start, end = 0, total
    if ask.after is not None:
        start = ordered(_find(db, segments, ask.after, "after", last=descending)) + 1
    if ask.before is not None:
        end = ordered(_find(db, segments, ask.before, "before", last=descending))
    window = max(0, end - start)
    if ask.before is not None and ask.after is None:
        first, stop = max(start, end - ask.limit), end  # the items just before the cursor
    else:
        first, stop = start, start + min(window, ask.limit)
    has_more = window > ask.limit
    if stop <= first:
        return ItemsPage(items=[], first_id=None, last_id=None, has_more=has_more)
    low, high = (total - stop, total - first) if descending else (first, stop)
    rows = _read(db, segments, low, high)
    if descending:
        rows.reverse()
    return ItemsPage(
        items=[text for text, _ in rows],
        first_id=rows[0][1],
        last_id=rows[-1][1],
        has_more=has_more,
    )


def _find(
    db: sqlite3.Connection, segments: list[_Segment], item_id: str, param: str, *, last: bool
) -> int:
    """The ascending position of the first (``last``: the last) item with ``item_id``."""
    direction = "DESC" if last else "ASC"
    for segment in reversed(segments) if last else segments:
        row = db.execute(
            f"SELECT j.key FROM responses AS r, {_SOURCES[segment.part]} AS j"
            f" WHERE r.id = ? AND {_ID} = ? ORDER BY j.key {direction} LIMIT 1",
            (segment.response_id, item_id),
        ).fetchone()
        if row is not None:
            return segment.start + int(row[0])
    raise UnknownCursor(param, item_id)


def _read(
    db: sqlite3.Connection, segments: list[_Segment], low: int, high: int
) -> list[tuple[str, Any]]:
    """Items ``low`` to ``high - 1`` (ascending positions): (JSON text, id) each."""
    rows: list[tuple[str, Any]] = []
    for segment in segments:
        first = max(low, segment.start) - segment.start
        stop = min(high, segment.start + segment.length) - segment.start
        if stop <= first:
            continue
        rows += db.execute(
            f"SELECT {_TEXT}, {_ID} FROM responses AS r, {_SOURCES[segment.part]} AS j"
            " WHERE r.id = ? AND j.key >= ? AND j.key < ? ORDER BY j.key",
            (segment.response_id, first, stop),
        ).fetchall()
    return rows
