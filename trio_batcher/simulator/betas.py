"""The ``anthropic-beta`` header: which betas a request names, and what each unlocks.

The header holds a comma-separated list and may be repeated (Claude Code sends one header,
SDKs may send several); ``parse_betas`` folds them into one set of names. Validation asks
about beta *families* -- the name without its date (``context-management-2025-06-27`` is
family ``context-management``) -- so a new dated version of a beta unlocks what the old
one did.

What the betas unlock, as ``validation.py`` applies it:

* ``BETA_FIELDS``: beta-API top-level fields whose beta is documented. Without it they are
  refused exactly as the API refuses an unknown field (``context_management: Extra inputs
  are not permitted``, which Claude Code users met on endpoints that dropped the beta).
* ``THINKING_DISPLAY_UPDATES``: the family that allows ``thinking.display: "updates"``.
* ``MID_CONVERSATION_SYSTEM``: the preview beta of ``role: "system"`` messages, which lets
  them through on any model (without it, only models that support them take them).
* Everything else that exists only in the beta API -- the other top-level fields of the
  ``anthropic`` SDK's beta request types and Claude Code's ``safeguards``
  (``validation.MESSAGES_BETA_KEYS``), beta-only content blocks, a system message's
  ``clear_at`` and ``output_config``, toolsets -- is unlocked by *any* beta. Which beta
  each needs is not documented where the simulator can see it (Claude Code sends a system
  message's ``output_config`` under ``per-turn-control-2026-07-01``, a name no SDK knows),
  and the simulator never refuses what it cannot place; with no beta at all they are
  extra inputs, as in the non-beta API.

Unknown beta names are accepted: the real API refuses names it does not know, but the
simulator cannot know the current list (Claude Code drops a refused beta and retries).

Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

__all__ = [
    "BETA_FIELDS",
    "MID_CONVERSATION_SYSTEM",
    "THINKING_DISPLAY_UPDATES",
    "beta_families",
    "parse_betas",
]

BETA_FIELDS: Final[Mapping[str, frozenset[str]]] = {
    # context editing; compaction edits (compact_20260112) come with the compact beta
    "context_management": frozenset({"context-management", "compact"}),
    "mcp_servers": frozenset({"mcp-client"}),
}
"""Top-level field -> the beta families, any of which unlocks it."""

THINKING_DISPLAY_UPDATES: Final = "thinking-display-updates"
"""The family that allows ``thinking.display: "updates"``."""

MID_CONVERSATION_SYSTEM: Final = "mid-conversation-system"
"""The family of the preview beta of mid-conversation ``role: "system"`` messages."""

_DATE: Final = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8})$")


def parse_betas(values: Iterable[str]) -> frozenset[str]:
    """The beta names in ``anthropic-beta`` header values (each a comma-separated list).

    Blank items are dropped and the whitespace around each name is ignored.
    """
    return frozenset(
        name for value in values for item in value.split(",") if (name := item.strip())
    )


def beta_families(names: Iterable[str]) -> frozenset[str]:
    """Each beta name without its date: ``claude-code-20250219`` -> ``claude-code``."""
    return frozenset(_DATE.sub("", name) for name in names)
