"""OpenAI Chat message content (a string or content parts) → Anthropic content blocks.

Each function validates as it converts and raises a 400 naming the exact field
(``messages[2].content[0].image_url.url``). This module reads Chat's part shapes; what a
text, image or PDF payload may be is ``_common.content``, shared with the Responses path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from ...errors import invalid_request
from .._common.content import (
    Block,
    image_block,
    is_blank,
    pdf_block,
    string_blocks,
    text_block,
)


def _text(part: Mapping[str, object], param: str) -> Block | None:
    text = part.get("text")
    if not isinstance(text, str):
        raise invalid_request("A text part needs a string `text`.", param=f"{param}.text")
    return text_block(text, part, param)


def _image(part: Mapping[str, object], param: str) -> Block:
    image_url = part.get("image_url")
    if not isinstance(image_url, Mapping):
        raise invalid_request(
            "image_url must be an object with a `url`.", param=f"{param}.image_url"
        )
    return image_block(image_url.get("url"), part, param, "image_url.url")


def _file(part: Mapping[str, object], param: str) -> Block:
    file = part.get("file")
    where = f"{param}.file"
    if not isinstance(file, Mapping):
        raise invalid_request("file must be an object.", param=where)
    if file.get("file_id") is not None and file.get("file_data") is None:
        raise invalid_request(
            "file_id cannot be resolved by this gateway; send the file inline as file_data.",
            param=f"{where}.file_id",
        )
    return pdf_block(file.get("file_data"), file.get("filename"), part, param, "file.file_data")


def _parts(content: object, param: str, allowed: frozenset[str]) -> list[Block]:
    if isinstance(content, str):
        return string_blocks(content)
    if not isinstance(content, list):
        raise invalid_request("content must be a string or an array of content parts.", param=param)
    blocks: list[Block] = []
    for j, part in enumerate(content):
        where = f"{param}[{j}]"
        if not isinstance(part, Mapping):
            raise invalid_request("A content part must be an object.", param=where)
        kind = part.get("type")
        if not isinstance(kind, str) or kind not in allowed:
            raise invalid_request(_unsupported_part(kind, allowed), param=f"{where}.type")
        block: Block | None
        if kind == "text":
            block = _text(part, where)
        elif kind == "refusal":
            refusal = part.get("refusal")
            if not isinstance(refusal, str):
                raise invalid_request(
                    "A refusal part needs a string `refusal`.", param=f"{where}.refusal"
                )
            block = None if is_blank(refusal) else {"type": "text", "text": refusal}
        elif kind == "image_url":
            block = _image(part, where)
        else:
            block = _file(part, where)
        if block is not None:
            blocks.append(block)
    return blocks


def _unsupported_part(kind: object, allowed: frozenset[str]) -> str:
    if kind == "input_audio":
        return "Audio input is not supported: the upstream model cannot take audio."
    return f"Unsupported content part type {kind!r} here; allowed: {', '.join(sorted(allowed))}."


_TEXT_ONLY: Final = frozenset({"text"})
_USER_PARTS: Final = frozenset({"text", "image_url", "file"})
_ASSISTANT_PARTS: Final = frozenset({"text", "refusal"})
_TOOL_PARTS: Final = frozenset({"text", "image_url"})


def system_blocks(content: object, param: str) -> list[Block]:
    """Text blocks of a system/developer message (string or text parts)."""
    return _parts(content, param, _TEXT_ONLY)


def user_blocks(content: object, param: str) -> list[Block]:
    """Blocks of a user message: text, images (data or http(s) URL), PDF files."""
    return _parts(content, param, _USER_PARTS)


def assistant_blocks(content: object, param: str) -> list[Block]:
    """Text blocks of an assistant message (``null`` content is no blocks)."""
    return [] if content is None else _parts(content, param, _ASSISTANT_PARTS)


def tool_result_content(content: object, param: str) -> str | list[Block] | None:
    """A tool result's content: a string stays a string, parts become blocks (text and
    images — Anthropic accepts images in tool results, so we do too); None when empty."""
    if content is None:
        return None
    if isinstance(content, str):
        return None if is_blank(content) else content
    blocks = _parts(content, param, _TOOL_PARTS)
    return blocks or None
