"""Anthropic thinking blocks ⇄ Responses ``reasoning`` items.

A thinking block can only go back upstream exactly as it came: its text *and* its
``signature`` (a ``redacted_thinking`` block: its opaque ``data``). A reasoning item carries
the text as its summary (one ``summary_text`` part per block) and the rest as
``encrypted_content``, prefixed so that the two kinds -- and blobs from another provider,
which Anthropic could not verify -- are told apart:

- ``thinking:<signature>`` -- a thinking block; its text is the summary parts, joined;
- ``redacted_thinking:<data>`` -- a redacted block; its summary is empty.

The summary is always filled in, whatever ``reasoning.summary`` asked: it is the only copy
of the text a stateless client (``store: false``) can send back, and without the exact text
the signature does not verify.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["encrypted_content", "thinking_block"]

_THINKING: Final = "thinking:"
_REDACTED: Final = "redacted_thinking:"


def encrypted_content(block: Mapping[str, Any]) -> str:
    """The ``encrypted_content`` for an Anthropic ``thinking`` or ``redacted_thinking`` block."""
    if block.get("type") == "redacted_thinking":
        return _REDACTED + str(block.get("data") or "")
    return _THINKING + str(block.get("signature") or "")


def thinking_block(item: Mapping[str, Any]) -> dict[str, Any] | None:
    """The Anthropic block a (canonical) reasoning item stands for; None when it carries no
    ``encrypted_content`` of ours, and so cannot be sent back as thinking."""
    blob = item.get("encrypted_content")
    if not isinstance(blob, str):
        return None
    if blob.startswith(_REDACTED) and len(blob) > len(_REDACTED):
        return {"type": "redacted_thinking", "data": blob[len(_REDACTED) :]}
    if blob.startswith(_THINKING) and len(blob) > len(_THINKING):
        summary = item.get("summary")
        text = "".join(
            str(part.get("text") or "")
            for part in (summary if isinstance(summary, list) else ())
            if isinstance(part, Mapping)
        )
        return {"type": "thinking", "thinking": text, "signature": blob[len(_THINKING) :]}
    return None
