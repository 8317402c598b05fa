"""Content blocks, one at a time: which block types a role may send, and each one's fields.

A block is checked where it stands (a message's content, a document's or a tool result's
inner content, the system prompt): its ``type`` tag, the role it appears under, its fields
against the SDK's TypedDict (``BLOCK_KEYS``) and the sources of images and documents. Types
the simulator never reads (server tool results, the beta API's blocks) pass with a check of
their tag only. Rules that span blocks or messages (tool_use/tool_result pairing) are
``conversation_checks``'s; a block's ``cache_control`` counts towards the request's limit.

Pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from .field_checks import (
    Walk,
    as_boolean,
    as_list,
    as_object,
    as_string,
    counted_cache_control,
    fail,
    is_set,
    join,
    one_of,
    only,
    required,
    tagged,
)

BLOCK_KEYS: Final[Mapping[str, frozenset[str]]] = {
    "text": frozenset({"type", "text", "cache_control", "citations"}),
    "image": frozenset({"type", "source", "cache_control", "transformations"}),
    "document": frozenset({"type", "source", "cache_control", "citations", "context", "title"}),
    "tool_use": frozenset(
        {"type", "id", "name", "input", "cache_control", "caller", "toolset_name"}
    ),
    "tool_result": frozenset(
        {"type", "tool_use_id", "content", "is_error", "cache_control", "toolset_name"}
    ),
    "thinking": frozenset({"type", "thinking", "signature"}),
    "redacted_thinking": frozenset({"type", "data"}),
}
"""Fields of the content blocks validated in depth."""

# Blocks the SDK can send that the simulator passes through with a shallow check only.
_OPAQUE_BLOCKS: Final = frozenset(
    {
        "search_result",
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
        "tool_search_tool_result",
        "container_upload",
    }
)
_TOOL_RESULT_CONTENT: Final = frozenset(
    {"text", "image", "document", "search_result", "tool_reference", "browser_state"}
)
_ASSISTANT_ONLY: Final = frozenset({"tool_use", "thinking", "redacted_thinking"})
# Blocks only the beta API has, passed through with a shallow check under any beta.
_BETA_BLOCKS: Final = frozenset(
    {
        "advisor_tool_result",
        "compaction",
        "fallback",
        "mcp_tool_listing",
        "mcp_tool_result",
        "mcp_tool_use",
    }
)
# Tool changes in the conversation (beta): in a system message or any other.
_TOOL_CHANGES: Final = frozenset({"tool_addition", "tool_removal"})

TOOL_USE_ID: Final = re.compile(r"^[a-zA-Z0-9_-]+$")
IMAGE_MEDIA_TYPES: Final = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})


def check_content_block(value: object, path: str, role: str, walk: Walk) -> None:
    block = as_object(value, path)
    kind = required(block, "type", path)
    known = isinstance(kind, str) and (
        kind in BLOCK_KEYS
        or kind in _OPAQUE_BLOCKS
        or (walk.any_beta and (kind in _BETA_BLOCKS or kind in _TOOL_CHANGES))
    )
    if not known:
        fail(
            join(path, "type"),
            f"Input tag {kind!r} found using 'type' does not match any of the expected tags",
        )
    if role == "system" and kind != "text" and kind not in _TOOL_CHANGES:
        fail(join(path, "type"), "system messages may only contain text blocks")
    if kind in _OPAQUE_BLOCKS or kind in _BETA_BLOCKS:
        return
    if kind in _TOOL_CHANGES:
        only(block, frozenset({"type", "tool", "cache_control"}), path)
        as_object(required(block, "tool", path), join(path, "tool"))
        counted_cache_control(block, path, walk)
        return
    if kind in _ASSISTANT_ONLY and role != "assistant":
        fail(join(path, "type"), f"`{kind}` blocks are only allowed in assistant messages")
    if kind == "tool_result" and role != "user":
        fail(join(path, "type"), "`tool_result` blocks are only allowed in user messages")
    if kind == "text":
        check_text_block(block, path, walk)
    elif kind == "image":
        _image_block(block, path, walk)
    elif kind == "document":
        _document_block(block, path, walk)
    elif kind == "tool_use":
        only(block, BLOCK_KEYS["tool_use"], path)
        tool_id = as_string(required(block, "id", path), join(path, "id"))
        if not TOOL_USE_ID.match(tool_id):
            fail(join(path, "id"), "String should match pattern '^[a-zA-Z0-9_-]+$'")
        as_string(required(block, "name", path), join(path, "name"), non_empty=True)
        as_object(required(block, "input", path), join(path, "input"))
        counted_cache_control(block, path, walk)
    elif kind == "tool_result":
        _tool_result_block(block, path, walk)
    elif kind == "thinking":
        only(block, BLOCK_KEYS["thinking"], path)
        as_string(required(block, "thinking", path), join(path, "thinking"))
        as_string(required(block, "signature", path), join(path, "signature"))
    else:  # redacted_thinking
        only(block, BLOCK_KEYS["redacted_thinking"], path)
        as_string(required(block, "data", path), join(path, "data"))


def check_text_block(block: Mapping[str, Any], path: str, walk: Walk) -> None:
    only(block, BLOCK_KEYS["text"], path)
    text = as_string(required(block, "text", path), join(path, "text"))
    if not text:
        fail(join(path, "text"), "text content blocks must be non-empty")
    if not text.strip():
        fail(join(path, "text"), "text content blocks must contain non-whitespace text")
    if is_set(block, "citations"):
        as_list(block["citations"], join(path, "citations"))
    counted_cache_control(block, path, walk)


def _image_block(block: Mapping[str, Any], path: str, walk: Walk) -> None:
    only(block, BLOCK_KEYS["image"], path)
    spath = join(path, "source")
    source, kind = tagged(required(block, "source", path), spath, ("base64", "url", "file"))
    if kind == "base64":
        only(source, frozenset({"type", "media_type", "data"}), spath)
        media = required(source, "media_type", spath)
        if not isinstance(media, str) or media not in IMAGE_MEDIA_TYPES:
            fail(
                join(spath, "media_type"),
                "Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'",
            )
        as_string(required(source, "data", spath), join(spath, "data"), non_empty=True)
    else:
        _reference_source(source, kind, spath)
    counted_cache_control(block, path, walk)


def _document_block(block: Mapping[str, Any], path: str, walk: Walk) -> None:
    only(block, BLOCK_KEYS["document"], path)
    spath = join(path, "source")
    source, kind = tagged(
        required(block, "source", path), spath, ("base64", "text", "content", "url", "file")
    )
    if kind in ("base64", "text"):
        only(source, frozenset({"type", "media_type", "data"}), spath)
        expected = "application/pdf" if kind == "base64" else "text/plain"
        one_of(required(source, "media_type", spath), join(spath, "media_type"), (expected,))
        as_string(required(source, "data", spath), join(spath, "data"), non_empty=kind == "base64")
    elif kind == "content":
        only(source, frozenset({"type", "content"}), spath)
        content = required(source, "content", spath)
        if not isinstance(content, str):
            for j, item in enumerate(as_list(content, join(spath, "content"))):
                ipath = join(spath, f"content.{j}")
                if as_object(item, ipath).get("type") not in ("text", "image"):
                    fail(join(ipath, "type"), "Input should be 'text' or 'image'")
                check_content_block(item, ipath, "user", walk)
    else:
        _reference_source(source, kind, spath)
    for key in ("title", "context"):
        if is_set(block, key):
            as_string(block[key], join(path, key))
    if is_set(block, "citations"):
        as_object(block["citations"], join(path, "citations"))
    counted_cache_control(block, path, walk)


def _reference_source(source: Mapping[str, Any], kind: str, spath: str) -> None:
    """An image's or document's source held elsewhere: a ``url``, or a ``file`` id."""
    key = "url" if kind == "url" else "file_id"
    only(source, frozenset({"type", key}), spath)
    as_string(required(source, key, spath), join(spath, key), non_empty=True)


def _tool_result_block(block: Mapping[str, Any], path: str, walk: Walk) -> None:
    only(block, BLOCK_KEYS["tool_result"], path)
    tool_use_id = as_string(required(block, "tool_use_id", path), join(path, "tool_use_id"))
    if not TOOL_USE_ID.match(tool_use_id):
        fail(join(path, "tool_use_id"), "String should match pattern '^[a-zA-Z0-9_-]+$'")
    if is_set(block, "is_error"):
        as_boolean(block["is_error"], join(path, "is_error"))
    content = block.get("content")
    if content is not None and not isinstance(content, str):
        cpath = join(path, "content")
        for j, item in enumerate(as_list(content, cpath)):
            ipath = join(cpath, j)
            item = as_object(item, ipath)
            kind = required(item, "type", ipath)
            if not isinstance(kind, str) or kind not in _TOOL_RESULT_CONTENT:
                fail(
                    join(ipath, "type"),
                    f"Input tag {kind!r} found using 'type' does not "
                    "match any of the expected tags",
                )
            if kind in ("text", "image", "document"):
                check_content_block(item, ipath, "user", walk)
    counted_cache_control(block, path, walk)
