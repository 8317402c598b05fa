"""What a stream has said so far, read from the upstream's events whatever the dialect.

The observatory needs a stream's usage (``message_start`` reports input and cache tokens,
``message_delta`` the cumulative output), and the relay needs to know whether the answer is
whole (a stop reason, or ``message_stop``) to tell a clean end from an upstream that hung
up early. Both are facts of the Anthropic stream, so they are kept here, once, rather than
by each dialect's encoder.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, final

from ..upstream.usage import merge_usage

__all__ = ["StreamTally", "event_kind"]


def event_kind(name: str, data: Mapping[str, Any]) -> str:
    """An event's type: its SSE name, or for an unnamed event its JSON ``type``."""
    return name if name and name != "message" else str(data.get("type") or "")


@final
class StreamTally:
    """Usage and completeness of one upstream stream; ``observe`` every event in order."""

    def __init__(self) -> None:
        self._usage: dict[str, Any] = {}
        self.stop_reason: str | None = None
        self.stopped = False  # message_stop seen
        self.deltas = 0  # content_block_delta events seen, each at least a token
        self.message_id: str | None = None  # the reply's id, from message_start

    def observe(self, kind: str, data: Mapping[str, Any]) -> None:
        if kind == "content_block_delta":
            self.deltas += 1
        elif kind == "message_start":
            message = data.get("message")
            if isinstance(message, Mapping):
                merge_usage(self._usage, message.get("usage"))
                if isinstance(message.get("id"), str):
                    self.message_id = message["id"]
        elif kind == "message_delta":
            merge_usage(self._usage, data.get("usage"))
            delta = data.get("delta")
            if isinstance(delta, Mapping) and isinstance(delta.get("stop_reason"), str):
                self.stop_reason = delta["stop_reason"]
        elif kind == "message_stop":
            self.stopped = True

    @property
    def complete(self) -> bool:
        """The upstream said the answer is over (a stop reason or ``message_stop``)."""
        return self.stopped or self.stop_reason is not None

    @property
    def usage(self) -> dict[str, Any]:
        """The cumulative usage reported so far, in Anthropic's shape (``{}`` before any)."""
        return dict(self._usage)
