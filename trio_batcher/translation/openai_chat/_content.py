"""OpenAI message content (a string or content parts) → Anthropic content blocks.

Each function validates as it converts and raises a 400 naming the exact field
(``messages[2].content[0].image_url.url``). Text that is empty or only whitespace is dropped
here — Anthropic rejects such blocks — and the caller decides whether what remains is enough.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any, Final

from ...errors import invalid_request

Block = dict[str, Any]

IMAGE_TYPES: Final = ("image/jpeg", "image/png", "image/gif", "image/webp")
_IMAGE_ALIASES: Final = {"image/jpg": "image/jpeg"}
# Magic numbers: a declared media type that contradicts the bytes is corrected, because
# Anthropic rejects the mismatch and the bytes are the truth.
_SIGNATURES: Final = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
_CACHE_TTLS: Final = ("5m", "1h")
# OpenAI's prompt_cache_breakpoint TTLs → Anthropic's: 30 minutes has no equivalent and maps
# to the default 5-minute cache (refreshed on every hit); 12 hours maps to the longest, 1 hour.
_BREAKPOINT_TTLS: Final = {"30m": None, "12h": "1h"}


def is_blank(text: str) -> bool:
    return not text.strip()


def cache_control(part: Mapping[str, Any], param: str) -> dict[str, Any] | None:
    """The Anthropic ``cache_control`` for a part or tool, if it asks for one.

    Accepts Anthropic's own ``cache_control`` (``{"type": "ephemeral", "ttl"?: "5m"|"1h"}``,
    which LiteLLM-style clients send) and OpenAI's ``prompt_cache_breakpoint``; the former
    wins if both are present.
    """
    raw = part.get("cache_control")
    if raw is not None:
        if not isinstance(raw, Mapping) or raw.get("type") != "ephemeral":
            raise invalid_request(
                'cache_control must be {"type": "ephemeral"}.', param=f"{param}.cache_control"
            )
        ttl = raw.get("ttl")
        if ttl is None:
            return {"type": "ephemeral"}
        if not isinstance(ttl, str) or ttl not in _CACHE_TTLS:
            raise invalid_request(
                'cache_control.ttl must be "5m" or "1h".', param=f"{param}.cache_control.ttl"
            )
        return {"type": "ephemeral", "ttl": ttl}
    breakpoint_ = part.get("prompt_cache_breakpoint")
    if breakpoint_ is None:
        return None
    where = f"{param}.prompt_cache_breakpoint"
    if not isinstance(breakpoint_, Mapping) or breakpoint_.get("mode") != "explicit":
        raise invalid_request('prompt_cache_breakpoint.mode must be "explicit".', param=where)
    ttl = breakpoint_.get("ttl", "30m")
    if not isinstance(ttl, str) or ttl not in _BREAKPOINT_TTLS:
        raise invalid_request(
            'prompt_cache_breakpoint.ttl must be "30m" or "12h".', param=f"{where}.ttl"
        )
    anthropic_ttl = _BREAKPOINT_TTLS[ttl]
    return (
        {"type": "ephemeral"}
        if anthropic_ttl is None
        else {"type": "ephemeral", "ttl": anthropic_ttl}
    )


def _with_cache(block: Block, part: Mapping[str, Any], param: str) -> Block:
    control = cache_control(part, param)
    if control is not None:
        block["cache_control"] = control
    return block


def _text(part: Mapping[str, Any], param: str) -> Block | None:
    text = part.get("text")
    if not isinstance(text, str):
        raise invalid_request("A text part needs a string `text`.", param=f"{param}.text")
    if is_blank(text):
        return None
    return _with_cache({"type": "text", "text": text}, part, param)


def _decode_base64(data: str, param: str) -> bytes:
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise invalid_request("The data URL's payload is not valid base64.", param=param) from None
    if not raw:
        raise invalid_request("The data URL's payload is empty.", param=param)
    return raw


def _split_data_url(url: str, param: str) -> tuple[str, str]:
    """(media type, base64 payload) of a ``data:…;base64,…`` URL.

    Whitespace inside the payload (MIME-style line breaks, as Python's
    ``base64.encodebytes`` writes them) is removed: it is not data, and Anthropic rejects it.
    """
    header, comma, payload = url.partition(",")
    params = header[len("data:") :].split(";")
    if not comma or "base64" not in (p.strip().lower() for p in params[1:]):
        raise invalid_request("Only base64 data URLs are supported.", param=param)
    return params[0].strip().lower(), "".join(payload.split())


def _image(part: Mapping[str, Any], param: str) -> Block:
    image_url = part.get("image_url")
    if not isinstance(image_url, Mapping):
        raise invalid_request(
            "image_url must be an object with a `url`.", param=f"{param}.image_url"
        )
    url = image_url.get("url")
    where = f"{param}.image_url.url"
    if not isinstance(url, str) or not url:
        raise invalid_request("image_url.url must be a non-empty string.", param=where)
    lowered = url[:8].lower()
    if lowered.startswith(("http://", "https://")):
        return _with_cache({"type": "image", "source": {"type": "url", "url": url}}, part, param)
    if not lowered.startswith("data:"):
        raise invalid_request("image_url.url must be an http(s) URL or a data URL.", param=where)
    media_type, payload = _split_data_url(url, where)
    media_type = _IMAGE_ALIASES.get(media_type, media_type)
    if media_type not in IMAGE_TYPES:
        raise invalid_request(
            f"Unsupported image type {media_type!r}; supported: {', '.join(IMAGE_TYPES)}.",
            param=where,
        )
    raw = _decode_base64(payload, where)
    media_type = _sniff(raw) or media_type
    source = {"type": "base64", "media_type": media_type, "data": payload}
    return _with_cache({"type": "image", "source": source}, part, param)


def _sniff(raw: bytes) -> str | None:
    for magic, media_type in _SIGNATURES:
        if raw.startswith(magic):
            return media_type
    if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP":
        return "image/webp"
    return None


def _file(part: Mapping[str, Any], param: str) -> Block:
    file = part.get("file")
    where = f"{param}.file"
    if not isinstance(file, Mapping):
        raise invalid_request("file must be an object.", param=where)
    if file.get("file_id") is not None and file.get("file_data") is None:
        raise invalid_request(
            "file_id cannot be resolved by this gateway; send the file inline as file_data.",
            param=f"{where}.file_id",
        )
    data = file.get("file_data")
    if not isinstance(data, str) or not data:
        raise invalid_request(
            "file.file_data must be a non-empty string.", param=f"{where}.file_data"
        )
    if data[:5].lower() == "data:":
        media_type, payload = _split_data_url(data, f"{where}.file_data")
        if media_type != "application/pdf":
            raise invalid_request(
                f"Unsupported file type {media_type!r}; only application/pdf is supported.",
                param=f"{where}.file_data",
            )
        _decode_base64(payload, f"{where}.file_data")
    else:  # bare base64, as OpenAI's docs also allow: accepted when the bytes are a PDF
        payload = "".join(data.split())
        if not _decode_base64(payload, f"{where}.file_data").startswith(b"%PDF"):
            raise invalid_request(
                "file.file_data is not a PDF; only PDF files are supported.",
                param=f"{where}.file_data",
            )
    block: Block = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": payload},
    }
    filename = file.get("filename")
    if isinstance(filename, str) and filename:
        block["title"] = filename
    return _with_cache(block, part, param)


def _parts(content: object, param: str, allowed: frozenset[str]) -> list[Block]:
    if isinstance(content, str):
        return [] if is_blank(content) else [{"type": "text", "text": content}]
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
