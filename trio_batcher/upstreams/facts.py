"""What the router needs to know of a request that only its whole body tells.

The pipeline carries a request's body as the client's bytes once the door has read it (the
parsed tree is let go: ``upstream.request.outline``), so whatever routing needs from the
body is worked out at the door, once, while it still has the tree:

- the **conversation** the request is a turn of (``conversation.conversation_key``), so
  the router can keep its turns where the prompt cache is -- only with more than one
  upstream and ``UPSTREAM_AFFINITY`` on;
- a feature only **Anthropic's own API** carries (``anthropic_only``), which makes every
  bedrock and vertex upstream ineligible for the request: the Files API (a content block
  whose ``source`` is a ``file_id``), the MCP connector (``mcp_servers``) and code
  execution containers (``container``) keep state in an Anthropic organisation that a
  cloud deployment cannot see. Only when the gateway has a cloud upstream.

Both cost a walk over the body's top and its content blocks, so neither is computed when
it could not change the route (``Fleet.wants_facts``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, final

from .conversation import SESSION_HEADER, conversation_key

__all__ = ["NO_FACTS", "FactsOf", "RouteFacts", "anthropic_only", "facts_of", "file_ids"]

# Top-level fields of a Messages body that only Anthropic's API serves, and why.
_ANTHROPIC_FIELDS: Final = (
    ("mcp_servers", "the MCP connector (mcp_servers)"),
    ("container", "a code execution container (container)"),
)
_FILES: Final = "the Files API (a file_id source)"


@final
@dataclass(frozen=True, slots=True)
class RouteFacts:
    """``conversation``: its key, or None; ``anthropic_only``: the feature that needs
    Anthropic's own API, named for an error, or None."""

    conversation: str | None = None
    anthropic_only: str | None = None


NO_FACTS: Final = RouteFacts()

FactsOf = Callable[[str, Mapping[str, Any]], RouteFacts]
"""``facts_of(model, body)``: the facts of a Messages body sent for ``model``."""


def anthropic_only(body: Mapping[str, Any]) -> str | None:
    """The first feature of ``body`` only Anthropic's own API carries, or None."""
    for name, feature in _ANTHROPIC_FIELDS:
        if body.get(name):
            return feature
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list) and _has_file_source(content):
                return _FILES
    return None


def _has_file_source(blocks: Iterable[object]) -> bool:
    for block in blocks:
        if not isinstance(block, dict):
            continue
        source = block.get("source")
        if isinstance(source, dict) and source.get("type") == "file":
            return True
        if block.get("type") == "container_upload":
            return True
        inner = block.get("content")  # a tool result's own blocks
        if isinstance(inner, list) and _has_file_source(inner):
            return True
    return False


def file_ids(body: object) -> list[str]:
    """Every ``file_id`` a Messages body names in a ``source: {"type": "file"}`` block (a
    document or an image, in a message or inside a tool result's content) or a
    ``container_upload`` block (a file for code execution), in order."""
    found: list[str] = []

    def walk(blocks: object) -> None:
        if not isinstance(blocks, list):
            return
        for block in blocks:
            if not isinstance(block, dict):
                continue
            source = block.get("source")
            if isinstance(source, dict) and source.get("type") == "file":
                file_id = source.get("file_id")
                if isinstance(file_id, str):
                    found.append(file_id)
            if block.get("type") == "container_upload":  # a file for code execution
                file_id = block.get("file_id")
                if isinstance(file_id, str):
                    found.append(file_id)
            walk(block.get("content"))

    messages = body.get("messages") if isinstance(body, dict) else None
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, dict):
                walk(message.get("content"))
    return found


def facts_of(
    tenant: str | None,
    headers: Iterable[tuple[bytes, bytes]],
    *,
    conversation: bool,
    capabilities: bool,
) -> FactsOf:
    """The facts a door computes for one request: its conversation key (bound to the
    tenant and Claude Code's session header, from the ASGI scope's ``headers``) when
    ``conversation``, the Anthropic-only feature when ``capabilities``."""
    wanted = SESSION_HEADER.encode()
    session = next((v for k, v in headers if k.lower() == wanted), None)
    session_id = session.decode("latin-1")[:256] if session else None
    owner = tenant or ""

    def of(model: str, body: Mapping[str, Any]) -> RouteFacts:
        key = conversation_key(owner, model, body, session_id=session_id) if conversation else None
        return RouteFacts(key, anthropic_only(body) if capabilities else None)

    return of
