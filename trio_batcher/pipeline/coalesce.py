"""Merging the deltas a stream has already read, so a translated stream writes less.

When the upstream is ahead of the client -- under load, or with a fast model -- several
``content_block_delta`` events are already read by the time the relay runs. Translated one
by one, each becomes its own OpenAI chunk or Responses event: its own JSON encoding, its
own SSE frame, its own bytes on the wire, and its own parse in the client. Their text is
what a client concatenates anyway, so a run of them can be translated as one.

What merges: consecutive deltas of one content block (the same ``index``) and one kind
whose pieces concatenate -- ``text_delta`` (``text``), ``input_json_delta``
(``partial_json``, a tool call's arguments) and ``thinking_delta`` (``thinking``). Anything
else -- another block's delta, a ``signature_delta`` or ``citations_delta``, a block start
or stop, ``message_delta`` -- ends the run and passes unchanged, so order, block
boundaries and usage are exactly the upstream's.

Only what was already read is merged: the relay passes what it found buffered and never
waits for more, so a lone stream's events go out exactly when they would without this.

A merged event has no ``raw`` text (``""``): only codecs that translate (``StreamCodec.
coalesces``) are given merged events; the Messages door relays every event's own text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from ..upstream.resilience import StreamEvent
from .tally import event_kind

__all__ = ["coalesce_deltas"]

# The delta kinds whose pieces concatenate, and the field that carries each piece.
_PIECE_FIELD: Final = {
    "text_delta": "text",
    "input_json_delta": "partial_json",
    "thinking_delta": "thinking",
}


def _piece(event: StreamEvent) -> tuple[int, str, str] | None:
    """``(index, delta type, piece)`` of a delta that can merge, else None."""
    name, data, _ = event
    if event_kind(name, data) != "content_block_delta":
        return None
    index = data.get("index")
    delta = data.get("delta")
    if not isinstance(index, int) or not isinstance(delta, dict):
        return None
    kind = delta.get("type")
    field = _PIECE_FIELD.get(kind) if isinstance(kind, str) else None
    if field is None or not isinstance(kind, str):
        return None
    piece = delta.get(field)
    if not isinstance(piece, str) or len(delta) != 2:
        return None  # another field beside type and piece: pass it on as it is
    return index, kind, piece


def _merged(index: int, kind: str, pieces: list[str]) -> StreamEvent:
    delta: dict[str, Any] = {"type": kind, _PIECE_FIELD[kind]: "".join(pieces)}
    data = {"type": "content_block_delta", "index": index, "delta": delta}
    return ("content_block_delta", data, "")


def coalesce_deltas(events: Sequence[StreamEvent]) -> list[StreamEvent]:
    """``events`` with each run of mergeable deltas of one block and kind made one event.

    A run of one is passed as it was (its ``raw`` kept); the result has the same events in
    the same order otherwise, and the pieces of a merged run joined in order.
    """
    out: list[StreamEvent] = []
    run: list[StreamEvent] = []
    run_key: tuple[int, str] | None = None
    pieces: list[str] = []

    def flush() -> None:
        if len(run) == 1:
            out.append(run[0])
        elif run:
            assert run_key is not None
            out.append(_merged(run_key[0], run_key[1], pieces))
        run.clear()
        pieces.clear()

    for event in events:
        found = _piece(event)
        key = None if found is None else found[:2]
        if key is None or key != run_key:
            flush()
            run_key = key
        if found is None:
            out.append(event)
        else:
            run.append(event)
            pieces.append(found[2])
    flush()
    return out
