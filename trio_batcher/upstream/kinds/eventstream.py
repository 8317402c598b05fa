"""Bedrock's response stream (AWS event-stream) back into Anthropic stream events.

``InvokeModelWithResponseStream`` answers ``application/vnd.amazon.eventstream``: binary
messages (a prelude with the lengths and a CRC32, typed headers, a payload, a CRC32 of
the whole). Each ``chunk`` event's payload is ``{"bytes": base64(<one Anthropic stream
event as JSON>)}``, so once unwrapped the stream is the Messages stream the rest of the
gateway already relays. botocore's ``EventStreamBuffer`` does the framing and checks the
checksums (the same parser boto3 and the SDK use); this module only unwraps.

``feed(chunk)`` takes bytes as they arrive, cut anywhere, and returns the events complete
so far as ``(name, data, raw)`` -- the ``StreamEvent`` an ``UpstreamStream`` yields for an
SSE stream, so the stream relay and the resilience layer's retry-before-content need no
Bedrock branch. ``raw`` is the event's JSON text as Bedrock carried it.

An ``exception`` message (Bedrock's mid-stream error: ``:exception-type``
``throttlingException``, ``modelStreamErrorException``...) becomes an Anthropic ``error``
event whose type is what ``bedrock.classify`` maps it to (``throttlingException`` ->
``rate_limit_error``, ``serviceUnavailableException`` -> ``overloaded_error``), just as a
first-party stream reports an error (and as the SDK's decoder does): before any content
the resilience layer retries it like the status it stands for; after content the relay
sends it to the client as the stream's last event. Broken framing (a bad checksum, an
absurd length) is a 502 ``upstream_protocol_error``.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Final, final

from ...errors import ProxyError
from ..resilience import StreamEvent
from .bedrock import bedrock_error_type, classify, error_message

__all__ = ["EventStreamDecoder"]

_PROTOCOL_ERROR: Final = "upstream_protocol_error"


def _protocol_error(what: str) -> ProxyError:
    return ProxyError(502, f"Bedrock sent an unusable event stream: {what}.", code=_PROTOCOL_ERROR)


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


@final
class EventStreamDecoder:
    """Incremental: one per response. Not thread-safe; no I/O."""

    def __init__(self) -> None:
        from botocore.eventstream import EventStreamBuffer

        self._buffer: Any = EventStreamBuffer()
        self._pending = 0

    @property
    def pending(self) -> bool:
        """Whether bytes of an unfinished message are buffered (a stream that ends here
        was cut short)."""
        return self._pending > 0

    def finish(self) -> None:
        """Called once the body ended: a message left unfinished means the stream was cut
        short (a dropped connection can look like a clean end of the body).

        Raises:
          ProxyError: 502 ``upstream_protocol_error`` if bytes are pending.
        """
        if self.pending:
            raise _protocol_error(f"it ended inside a message ({self._pending} bytes)")

    def feed(self, chunk: bytes) -> list[StreamEvent]:
        """The events completed by ``chunk``.

        Raises:
          ProxyError: 502 ``upstream_protocol_error`` for framing botocore rejects, a
            chunk that is not base64 of a JSON object, or an unknown message type.
        """
        from botocore.eventstream import ParserError

        self._buffer.add_data(chunk)
        self._pending += len(chunk)
        events: list[StreamEvent] = []
        try:
            for message in self._buffer:
                self._pending -= message.prelude.total_length
                event = self._event(message.headers, message.payload)
                if event is not None:
                    events.append(event)
        except ParserError as exc:
            raise _protocol_error(type(exc).__name__) from None
        return events

    def _event(self, headers: dict[str, Any], payload: bytes) -> StreamEvent | None:
        message_type = _text(headers.get(":message-type", "event"))
        if message_type == "event":
            if _text(headers.get(":event-type", "")) != "chunk":
                return None  # initial-response and any future event: nothing to relay
            return self._chunk(payload)
        if message_type == "exception":
            name = _text(headers.get(":exception-type", ""))
            return self._error(name, payload)
        if message_type == "error":
            # An error the service itself raised: its code and message are headers.
            name = _text(headers.get(":error-code", ""))
            text = _text(headers.get(":error-message", ""))
            body = json.dumps({"message": text}).encode() if text else payload
            return self._error(name, body)
        raise _protocol_error(f"unknown message type {message_type!r}")

    def _chunk(self, payload: bytes) -> StreamEvent | None:
        try:
            wrapper = json.loads(payload)
            encoded = wrapper["bytes"]
            raw = base64.b64decode(encoded, validate=True).decode()
            data = json.loads(raw)
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise _protocol_error("a chunk that is not base64 of a JSON event") from None
        if not isinstance(data, dict):
            raise _protocol_error("a chunk whose event is not a JSON object")
        name = data.get("type")
        if not isinstance(name, str) or not name:
            return None  # no event name to relay it by (the SDK skips these too)
        return name, data, raw

    def _error(self, name: str, payload: bytes) -> StreamEvent:
        message, fields = error_message(payload)
        kind = bedrock_error_type(name)
        _, error_type = classify(500, kind, fields)  # unknown: the service failed
        data: dict[str, Any] = {
            "type": "error",
            "error": {
                "type": error_type,
                "message": message or f"Bedrock reported {kind or 'an error'}.",
            },
        }
        return "error", data, json.dumps(data, separators=(",", ":"), ensure_ascii=False)
