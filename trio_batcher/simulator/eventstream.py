"""AWS event-stream framing (``application/vnd.amazon.eventstream``), the encoding side.

Bedrock's ``invoke-with-response-stream`` answers with binary messages, not SSE. Each is::

    total length (u32) | headers length (u32) | CRC32 of those 8 bytes (u32)
    headers: name length (u8) | name | type 7 = string (u8) | value length (u16) | value
    payload
    CRC32 of everything before (u32)

all big-endian. botocore's ``EventStreamBuffer`` (what the ``anthropic`` SDK decodes with)
checks both CRCs and the lengths, so a framing slip fails the SDK loudly.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from collections.abc import Mapping
from typing import Final

_STRING: Final = 7
_JSON: Final = "application/json"


def encode_message(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One event-stream message with string ``headers`` and ``payload``."""
    encoded = b"".join(_header(name, value) for name, value in headers.items())
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack(">II", total, len(encoded))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + encoded + payload
    return message + struct.pack(">I", zlib.crc32(message))


def chunk_message(event_json: bytes) -> bytes:
    """A ``chunk`` event carrying one Anthropic stream event: ``{"bytes": base64(json)}``."""
    payload = json.dumps({"bytes": base64.b64encode(event_json).decode()}).encode()
    return encode_message(
        {":event-type": "chunk", ":content-type": _JSON, ":message-type": "event"}, payload
    )


def exception_message(exception_type: str, body: Mapping[str, object]) -> bytes:
    """An ``exception`` message, how Bedrock fails a stream after its 200 (the type is a
    member of the ``ResponseStream`` union, e.g. ``modelStreamErrorException``)."""
    return encode_message(
        {":exception-type": exception_type, ":content-type": _JSON, ":message-type": "exception"},
        json.dumps(body).encode(),
    )


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    return (
        struct.pack(">B", len(raw_name))
        + raw_name
        + struct.pack(">BH", _STRING, len(raw_value))
        + raw_value
    )
