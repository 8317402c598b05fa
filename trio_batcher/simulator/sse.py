"""Render a ``Reply`` as Anthropic's server-sent events, byte for byte.

Pure. ``render_stream`` returns the whole event sequence up front; each event says whether
it carries an output token (a content delta), which is what the latency model schedules.
Order: ``message_start``, ``ping``, then per block ``content_block_start``, its deltas and
``content_block_stop``, then ``message_delta`` (cumulative usage) and ``message_stop``.
A ``tool_use`` block's first ``input_json_delta`` is ``""`` and a ``thinking`` block ends
with a ``signature_delta``; neither counts as a token.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final, final

from .errors import error_json
from .reply_data import Block, Reply

_dumps: Final = json.dumps


@final
@dataclass(frozen=True, slots=True)
class Event:
    """One SSE event, encoded; ``token`` marks a content delta, ``opens_block`` a
    ``content_block_start``."""

    data: bytes
    token: bool = False
    opens_block: bool = False


def sse(name: str, data: str) -> bytes:
    """``event: NAME\\ndata: JSON\\n\\n``."""
    return f"event: {name}\ndata: {data}\n\n".encode()


def error_event(type: str, message: str, request_id: str | None) -> bytes:
    """An ``error`` event, as the API sends after a 200 when it fails mid-stream."""
    return b"event: error\ndata: " + error_json(type, message, request_id) + b"\n\n"


def render_content(reply: Reply) -> tuple[Event, ...]:
    """The content-block events of ``reply`` -- the part that depends on its content only,
    so a caller may reuse it for every request that gets the same reply."""
    events: list[Event] = []
    for index, block in enumerate(reply.blocks):
        events.extend(_block_events(index, block))
    return tuple(events)


def render_stream(
    reply: Reply, message_id: str, content: tuple[Event, ...] | None = None
) -> list[Event]:
    """Every event of the stream for ``reply``, in order.

    Args:
      reply: what to send.
      message_id: the ``id`` in ``message_start``.
      content: ``render_content(reply)``, if the caller has it already.
    """
    start = {
        "type": "message_start",
        "message": {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": reply.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": reply.usage_json(output_tokens=min(1, reply.output_tokens)),
        },
    }
    events = [
        Event(sse("message_start", _dumps(start))),
        Event(sse("ping", '{"type": "ping"}')),
    ]
    events.extend(render_content(reply) if content is None else content)
    usage = reply.usage_json()
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": reply.stop_reason, "stop_sequence": reply.stop_sequence},
        "usage": {
            "input_tokens": usage["input_tokens"],
            "cache_creation_input_tokens": usage["cache_creation_input_tokens"],
            "cache_read_input_tokens": usage["cache_read_input_tokens"],
            "output_tokens": usage["output_tokens"],
        },
    }
    events.append(Event(sse("message_delta", _dumps(delta))))
    events.append(Event(sse("message_stop", '{"type": "message_stop"}')))
    return events


def _block_events(index: int, block: Block) -> list[Event]:
    if block.type == "tool_use":
        first: dict[str, object] = {
            "type": "tool_use",
            "id": block.id,
            "name": block.name,
            "input": {},
        }
        kind, field = "input_json_delta", "partial_json"
    elif block.type == "thinking":
        first = {"type": "thinking", "thinking": "", "signature": ""}
        kind, field = "thinking_delta", "thinking"
    else:
        first = {"type": "text", "text": ""}
        kind, field = "text_delta", "text"
    start = {"type": "content_block_start", "index": index, "content_block": first}
    events = [Event(sse("content_block_start", _dumps(start)), opens_block=True)]
    prefix = (
        f'{{"type": "content_block_delta", "index": {index}, '
        f'"delta": {{"type": "{kind}", "{field}": '
    )
    if block.type == "tool_use":
        events.append(Event(sse("content_block_delta", prefix + '""}}')))
    events.extend(
        Event(sse("content_block_delta", prefix + _dumps(piece) + "}}"), token=True)
        for piece in block.pieces
    )
    if block.type == "thinking":
        signature = {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "signature_delta", "signature": block.signature},
        }
        events.append(Event(sse("content_block_delta", _dumps(signature))))
    stop = f'{{"type": "content_block_stop", "index": {index}}}'
    events.append(Event(sse("content_block_stop", stop)))
    return events
