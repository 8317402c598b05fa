"""What makes two requests turns of one conversation: the key the affinity table is read by.

Anthropic's prompt cache matches a request's prefix (tools, then system, then messages, in
that order) against what the same deployment saw before. Two requests share a cache entry
only if they share that prefix, so the key is what every turn of a conversation has in
common and what different conversations (almost always) do not: the tenant (caches are
never shared across tenants on purpose), the model (a cache is per model), the system
prompt, the tools, and the first user message. Later turns append to ``messages`` and keep
all of these, so every turn of a conversation gets the same key without the gateway
remembering anything about it.

Claude Code names its session in a header (``X-Claude-Code-Session-Id``, read off Claude
Code's own bundle): when present it is the key instead (with the tenant and model), since a
session is one conversation even where its first message repeats another session's
(``hi``). A string ``content`` and a single text block are the same prompt to the model,
and ``cache_control`` markers do not change it, so both are normalized away first.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["SESSION_HEADER", "conversation_key"]

SESSION_HEADER: Final = "x-claude-code-session-id"


def conversation_key(
    tenant: str, model: str, body: Mapping[str, Any], *, session_id: str | None = None
) -> str:
    """A hex SHA-256 naming the conversation ``body`` (a Messages request) is a turn of."""
    if session_id:
        parts: list[object] = ["session", tenant, model, session_id]
    else:
        messages = body.get("messages")
        first_user = None
        if isinstance(messages, list):
            first_user = next(
                (m for m in messages if isinstance(m, dict) and m.get("role") == "user"), None
            )
        parts = [
            "prefix",
            tenant,
            model,
            _normal(body.get("system")),
            _normal(body.get("tools")),
            _normal(None if first_user is None else first_user.get("content")),
        ]
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _normal(value: object) -> object:
    """``value`` with what does not change the prompt taken out: ``cache_control`` keys,
    and a string where a list of one text block says the same."""
    if isinstance(value, str):
        return [{"type": "text", "text": value}]
    if isinstance(value, list):
        return [_strip(item) for item in value]
    return _strip(value)


def _strip(value: object) -> object:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip(item) for item in value]
    return value
