"""The beta API's own top-level fields: which betas unlock them, and the two checked in depth.

A request that names a beta in ``anthropic-beta`` is served by the beta API, whose model
has fields the regular one lacks. The documented ones need their own beta
(``betas.BETA_FIELDS``), the others any beta. Their values are accepted as they come except
``context_management`` (each edit's tag and fields) and ``mcp_servers`` (URL servers).

Pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from .betas import BETA_FIELDS
from .field_checks import (
    Walk,
    as_boolean,
    as_integer,
    as_list,
    as_object,
    as_string,
    fail,
    is_set,
    join,
    one_of,
    only,
    required,
    tagged,
)

MESSAGES_BETA_KEYS: Final = frozenset(
    {
        "billing_policy",
        "compaction",
        "context_management",
        "fallback_credit_token",
        "fallbacks",
        "mcp_servers",
        "thread",
        "safeguards",  # Claude Code's, under its dangerous-tool-use beta; in no SDK
    }
)
"""Top-level fields only the beta API has: the documented ones need their beta
(``betas.BETA_FIELDS``), the others any beta; their values are not checked beyond that,
except ``context_management`` and ``mcp_servers``."""

COUNT_TOKENS_BETA_KEYS: Final = frozenset(
    {"billing_policy", "compaction", "context_management", "mcp_servers"}
)
"""Like ``MESSAGES_BETA_KEYS`` for ``count_tokens``."""

CONTEXT_EDIT_KEYS: Final[Mapping[str, frozenset[str]]] = {
    "clear_tool_uses_20250919": frozenset(
        {"type", "clear_at_least", "clear_tool_inputs", "exclude_tools", "keep", "trigger"}
    ),
    "clear_thinking_20251015": frozenset({"type", "keep"}),
    "compact_20260112": frozenset({"type", "instructions", "pause_after_compaction", "trigger"}),
}
"""The ``context_management.edits`` the beta API knows, and their fields."""

MCP_SERVER_KEYS: Final = frozenset(
    {"name", "type", "url", "authorization_token", "tool_configuration"}
)


def unlocked_beta_keys(beta_keys: frozenset[str], walk: Walk) -> frozenset[str]:
    """The beta-API top-level fields the request's betas unlock (see ``betas.py``)."""
    if not walk.any_beta:
        return frozenset()
    return frozenset(
        key for key in beta_keys if key not in BETA_FIELDS or BETA_FIELDS[key] & walk.betas
    )


# Edit type -> its fields that hold a ``{"type": ..., "value": N}`` count, and their types.
_EDIT_COUNTS: Final[Mapping[str, Mapping[str, tuple[str, ...]]]] = {
    "clear_tool_uses_20250919": {
        "trigger": ("input_tokens", "tool_uses"),
        "keep": ("tool_uses",),
        "clear_at_least": ("input_tokens",),
    },
    "clear_thinking_20251015": {"keep": ("thinking_turns", "all")},
    "compact_20260112": {"trigger": ("input_tokens",)},
}


def check_context_management(value: object) -> None:
    """``context_management`` (beta): each edit's tag, fields and their types."""
    config = as_object(value, "context_management")
    only(config, frozenset({"edits"}), "context_management")
    if not is_set(config, "edits"):
        return
    for i, edit in enumerate(as_list(config["edits"], "context_management.edits")):
        path = f"context_management.edits.{i}"
        edit = as_object(edit, path)
        kind = required(edit, "type", path)
        if not isinstance(kind, str) or kind not in CONTEXT_EDIT_KEYS:
            fail(
                join(path, "type"),
                f"Input tag {kind!r} found using 'type' does not match any of the expected tags",
            )
        only(edit, CONTEXT_EDIT_KEYS[kind], path)
        for key, types in _EDIT_COUNTS[kind].items():
            if not is_set(edit, key) or (kind == "clear_thinking_20251015" and edit[key] == "all"):
                continue
            kpath = join(path, key)
            count, tag = tagged(edit[key], kpath, types)
            if tag != "all":
                only(count, frozenset({"type", "value"}), kpath)
                if as_integer(required(count, "value", kpath), join(kpath, "value")) < 0:
                    fail(join(kpath, "value"), "Input should be greater than or equal to 0")
        for key in ("exclude_tools", "clear_tool_inputs"):  # tool names; or a bool for the latter
            names = edit.get(key)
            if names is None or (key == "clear_tool_inputs" and isinstance(names, bool)):
                continue
            for j, name in enumerate(as_list(names, join(path, key))):
                as_string(name, join(path, f"{key}.{j}"))
        if is_set(edit, "instructions"):
            as_string(edit["instructions"], join(path, "instructions"))
        if is_set(edit, "pause_after_compaction"):
            as_boolean(edit["pause_after_compaction"], join(path, "pause_after_compaction"))


def check_mcp_servers(value: object) -> None:
    """``mcp_servers`` (beta): URL server definitions."""
    for i, server in enumerate(as_list(value, "mcp_servers")):
        path = f"mcp_servers.{i}"
        server = as_object(server, path)
        only(server, MCP_SERVER_KEYS, path)
        as_string(required(server, "name", path), join(path, "name"), non_empty=True)
        one_of(required(server, "type", path), join(path, "type"), ("url",))
        as_string(required(server, "url", path), join(path, "url"), non_empty=True)
        if is_set(server, "authorization_token"):
            as_string(server["authorization_token"], join(path, "authorization_token"))
        if is_set(server, "tool_configuration"):
            as_object(server["tool_configuration"], join(path, "tool_configuration"))
