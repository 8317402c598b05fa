"""A streamed reply re-framed for Bedrock: Anthropic's SSE events as event-stream messages.

``delivery.stream_body`` paces the SSE body (latency, stream faults, the trace); this wraps
it, so pacing and faults behave the same on every surface. Each SSE event becomes one
``chunk`` message whose payload is ``{"bytes": base64(the event's JSON)}``; the final
``message_stop`` gains ``amazon-bedrock-invocationMetrics`` (token counts from
``message_start`` and ``message_delta``, first-byte and whole-invocation latencies in ms).
A mid-stream ``error`` event becomes an ``exception`` message: ``modelStreamErrorException``
(Bedrock's "error while streaming", HTTP 424 in its model) carrying the model's
``originalStatusCode`` (529 for overload) and ``originalMessage``, then the body ends.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any, Final

from .errors import ERROR_TYPES
from .eventstream import chunk_message, exception_message

# the first status listed for each error type (400 for invalid_request_error)
_STATUS_OF: Final = {kind: status for status, kind in reversed(list(ERROR_TYPES.items()))}


async def bedrock_events(sse: AsyncIterator[bytes], started_at: float) -> AsyncIterator[bytes]:
    """The event-stream body for the SSE body ``sse`` of a request that arrived at
    ``started_at`` (``time.monotonic()``)."""
    input_tokens = output_tokens = 0
    first_byte_ms: int | None = None
    async for block in sse:
        out: list[bytes] = []
        for text in block.split(b"\n\n"):
            if not text:
                continue
            name, data = _parse(text)
            if first_byte_ms is None:
                first_byte_ms = _ms_since(started_at)
            event: dict[str, Any] = json.loads(data)
            if name == "error":
                error = event["error"]
                out.append(
                    exception_message(
                        "modelStreamErrorException",
                        {
                            "message": f"{error['type']}: {error['message']}",
                            "originalStatusCode": _STATUS_OF.get(error["type"], 500),
                            "originalMessage": error["message"],
                        },
                    )
                )
                continue
            if name == "message_start":
                input_tokens = event["message"]["usage"]["input_tokens"]
            elif name == "message_delta":
                output_tokens = event["usage"]["output_tokens"]
            elif name == "message_stop":
                event["amazon-bedrock-invocationMetrics"] = {
                    "inputTokenCount": input_tokens,
                    "outputTokenCount": output_tokens,
                    "invocationLatency": _ms_since(started_at),
                    "firstByteLatency": first_byte_ms,
                }
                data = json.dumps(event).encode()
            out.append(chunk_message(data))
        if out:
            yield b"".join(out)


def _parse(text: bytes) -> tuple[str, bytes]:
    """``(name, data)`` of one ``event: NAME\\ndata: JSON`` block as ``sse.py`` renders it."""
    head, _, data = text.partition(b"\ndata: ")
    return head.removeprefix(b"event: ").decode(), data


def _ms_since(started_at: float) -> int:
    return round((time.monotonic() - started_at) * 1000)
