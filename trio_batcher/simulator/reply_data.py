"""A reply as data: the ``Block`` and ``Reply`` that every rendering is made from.

``replies.build_reply`` lays a reply out and cuts it short once; the non-streamed
``Message`` JSON (here) and the SSE events (``sse.py``) are two renderings of that one
``Reply``, so a stream and a plain response say the same thing. Each block keeps the
pieces it is generated in: one piece is one output token and, streamed, one content delta.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, final

from .prompt import InputUsage


@final
@dataclass(frozen=True, slots=True)
class Block:
    """One content block of a reply, as the pieces it is generated (and streamed) in.

    ``pieces`` are text for ``text``, thinking text for ``thinking`` and fragments of the
    input's JSON for ``tool_use``; each is one output token.
    """

    type: str
    pieces: tuple[str, ...]
    id: str = ""
    name: str = ""
    input: Mapping[str, Any] | None = None
    signature: str = ""

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def to_json(self) -> dict[str, Any]:
        if self.type == "tool_use":
            return {"type": "tool_use", "id": self.id, "name": self.name, "input": self.input}
        if self.type == "thinking":
            return {"type": "thinking", "thinking": self.text, "signature": self.signature}
        return {"type": "text", "text": self.text}


@final
@dataclass(frozen=True, slots=True)
class Reply:
    """A complete reply; ``output_tokens`` counts every piece (at least 1 unless
    ``max_tokens`` was 0)."""

    model: str
    blocks: tuple[Block, ...]
    stop_reason: str
    stop_sequence: str | None
    input_usage: InputUsage
    output_tokens: int

    @property
    def token_pieces(self) -> int:
        """Content deltas a stream of this reply carries (the latency model's token count)."""
        return sum(len(b.pieces) for b in self.blocks)

    def usage_json(self, output_tokens: int | None = None) -> dict[str, Any]:
        u = self.input_usage
        return {
            "input_tokens": u.input_tokens,
            "cache_creation_input_tokens": u.cache_creation_input_tokens,
            "cache_read_input_tokens": u.cache_read_input_tokens,
            "cache_creation": {
                "ephemeral_5m_input_tokens": u.ephemeral_5m_input_tokens,
                "ephemeral_1h_input_tokens": u.ephemeral_1h_input_tokens,
            },
            "output_tokens": self.output_tokens if output_tokens is None else output_tokens,
            "service_tier": "standard",
        }

    def message_json(self, message_id: str) -> dict[str, Any]:
        """The non-streamed ``Message`` object."""
        return {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [b.to_json() for b in self.blocks],
            "stop_reason": self.stop_reason,
            "stop_sequence": self.stop_sequence,
            "usage": self.usage_json(),
        }
