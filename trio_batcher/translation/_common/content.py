"""One content part's payload (text, an image, a PDF) → an Anthropic content block.

The dialects shape their parts differently (Chat nests an image's URL under
``image_url.url``, Responses writes ``image_url`` as the URL), so each reads its own shape
and hands the payload here with the part's path and the field's name as the client wrote
it: a bad image is a 400 naming ``messages[2].content[0].image_url.url`` on one path and
``input[2].content[0].image_url`` on the other, from the same check. Text that is empty or
only whitespace is dropped here — Anthropic rejects such blocks — and the caller decides
whether what remains is enough.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any, Final

from ...errors import invalid_request

__all__ = [
    "Block",
    "cache_control",
    "image_block",
    "is_blank",
    "pdf_block",
    "string_blocks",
    "text_block",
    "with_cache",
]

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


def string_blocks(text: str) -> list[Block]:
    """Content written as a plain string: one text block, none when blank."""
    return [] if is_blank(text) else [{"type": "text", "text": text}]


def with_cache(block: Block, part: Mapping[str, Any], param: str) -> Block:
    """``block`` with the cache breakpoint ``part`` (at ``param``) asks for, if any."""
    control = cache_control(part, param)
    if control is not None:
        block["cache_control"] = control
    return block


def text_block(text: str, part: Mapping[str, Any], param: str) -> Block | None:
    """The text block of the part at ``param``; None for blank text."""
    if is_blank(text):
        return None
    return with_cache({"type": "text", "text": text}, part, param)


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


def image_block(url: object, part: Mapping[str, Any], param: str, name: str) -> Block:
    """The image block for ``url``, the field ``name`` of the part at ``param``: an
    http(s) URL, or a base64 data URL of a supported type (the bytes' own type wins)."""
    where = f"{param}.{name}"
    if not isinstance(url, str) or not url:
        raise invalid_request(f"{name} must be a non-empty string.", param=where)
    lowered = url[:8].lower()
    if lowered.startswith(("http://", "https://")):
        return with_cache({"type": "image", "source": {"type": "url", "url": url}}, part, param)
    if not lowered.startswith("data:"):
        raise invalid_request(f"{name} must be an http(s) URL or a data URL.", param=where)
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
    return with_cache({"type": "image", "source": source}, part, param)


def _sniff(raw: bytes) -> str | None:
    for magic, media_type in _SIGNATURES:
        if raw.startswith(magic):
            return media_type
    if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP":
        return "image/webp"
    return None


def pdf_block(
    data: object, filename: object, part: Mapping[str, Any], param: str, name: str
) -> Block:
    """The document block for ``data``, the field ``name`` of the part at ``param``: a PDF
    as a base64 data URL, or as bare base64 (as OpenAI's docs also allow) whose bytes are
    a PDF."""
    where = f"{param}.{name}"
    if not isinstance(data, str) or not data:
        raise invalid_request(f"{name} must be a non-empty string.", param=where)
    if data[:5].lower() == "data:":
        media_type, payload = _split_data_url(data, where)
        if media_type != "application/pdf":
            raise invalid_request(
                f"Unsupported file type {media_type!r}; only application/pdf is supported.",
                param=where,
            )
        _decode_base64(payload, where)
    else:
        payload = "".join(data.split())
        if not _decode_base64(payload, where).startswith(b"%PDF"):
            raise invalid_request(
                f"{name} is not a PDF; only PDF files are supported.", param=where
            )
    block: Block = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": payload},
    }
    if isinstance(filename, str) and filename:
        block["title"] = filename
    return with_cache(block, part, param)
