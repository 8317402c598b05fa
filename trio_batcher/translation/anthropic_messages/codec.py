"""The Anthropic Messages codec: nothing to translate, so everything is relayed.

A client that speaks the Messages API gets the upstream's reply body as it was sent, and
every stream event -- name and data, ``ping`` included -- in order and unmodified: the
gateway must not be the thing that breaks next month's event type or beta field. Only an
error of the gateway's own making is written here, in Anthropic's shape.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, final

from ...errors import ProxyError
from .errors import error_object, relayed_headers

__all__ = ["AnthropicMessagesCodec", "AnthropicMessagesStream", "encode_event"]


def encode_event(name: str, raw: str) -> bytes:
    """One SSE event as the upstream sent it (a multi-line data field keeps its lines)."""
    if "\n" not in raw:
        return f"event: {name}\ndata: {raw}\n\n".encode()
    lines = "".join(f"data: {line}\n" for line in raw.split("\n"))
    return f"event: {name}\n{lines}\n".encode()


@final
class AnthropicMessagesCodec:
    """One request's answers: the upstream's own, plus its request id and rate limits."""

    def headers(self, upstream: Mapping[str, str]) -> dict[str, str]:
        return relayed_headers(upstream)

    def reply(self, message: dict[str, Any], raw: bytes) -> bytes:
        del message
        return raw

    def stream(self) -> AnthropicMessagesStream:
        return AnthropicMessagesStream()

    def error(self, exc: ProxyError) -> ProxyError:
        return exc


@final
class AnthropicMessagesStream:
    """Upstream events out as they came in; no terminator beyond ``message_stop``."""

    terminator: Final = b""
    coalesces: Final = False  # every event is relayed as it came

    def feed(self, name: str, data: Mapping[str, Any], raw: str) -> list[bytes]:
        # An unnamed event is named by its type, as Anthropic's own streams always are.
        return [encode_event(name if name and name != "message" else str(data.get("type")), raw)]

    def finish(self) -> list[bytes]:
        return []

    def upstream_error(self, data: Mapping[str, Any], raw: str) -> bytes:
        del data
        return encode_event("error", raw)

    def error(self, exc: ProxyError) -> bytes:
        return encode_event("error", json.dumps(error_object(exc), ensure_ascii=False))
