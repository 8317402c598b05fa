"""The native Anthropic Messages door: ``POST /v1/messages`` and its ``count_tokens``.

For Claude Code, the ``anthropic`` SDKs and agents built on them, pointed at the gateway
with ``ANTHROPIC_BASE_URL``. There is nothing to translate: the client's body goes upstream
as its own bytes, with its ``anthropic-version`` and ``anthropic-beta`` headers and the
gateway's key (never the client's), and the reply or every stream event comes back as the
upstream sent it. What the gateway adds is what it adds for every door -- admission
windows, the gate, retries before the first byte, shared cooldowns, cancellation, metrics.

``count_tokens`` is forwarded with the same key, headers, deadline and cooldowns, but not
through the gate or a window: it generates nothing, and Claude Code sends it in bursts.
"""

from __future__ import annotations

from typing import Final, final

from ..errors import ProxyError
from ..pipeline.contract import JSONReply, StreamReply
from ..pipeline.core import Pipeline
from ..translation.anthropic_messages import (
    AnthropicMessagesCodec,
    check_count_tokens,
    check_messages,
    error_reply,
    forwarded_headers,
    relayed_headers,
)
from ..upstream.request import UpstreamRequest
from .http import Scope

__all__ = ["COUNT_TOKENS_PATH", "MESSAGES_PATH", "SURFACE", "CountTokensDoor", "MessagesDoor"]

MESSAGES_PATH: Final = "/v1/messages"
COUNT_TOKENS_PATH: Final = "/v1/messages/count_tokens"
SURFACE: Final = "anthropic.messages"
COUNT_TOKENS_SURFACE: Final = "anthropic.count_tokens"
_CODEC: Final = AnthropicMessagesCodec()
_BOM: Final = b"\xef\xbb\xbf"


class _AnthropicErrors:
    def error_reply(self, exc: ProxyError) -> JSONReply:
        status, body, headers = error_reply(exc)
        return JSONReply(body, headers, status)


@final
class MessagesDoor(_AnthropicErrors):
    """Messages in, Messages upstream, the upstream's answer back as it was sent."""

    surface: Final = SURFACE

    async def handle(
        self,
        pipeline: Pipeline,
        payload: object,
        raw: bytes,
        scope: Scope,
        arrived: float,
        *,
        large: bool,
    ) -> JSONReply | StreamReply:
        del large  # nothing to translate: the checks are a few lookups whatever the size
        try:
            model, stream = check_messages(payload)
        except ProxyError as exc:
            stream = isinstance(payload, dict) and payload.get("stream") is True
            timing = pipeline.record_refused(exc.status, arrived, stream=stream, surface=SURFACE)
            exc.headers["Server-Timing"] = timing.server_timing_header()
            raise
        assert isinstance(payload, dict)
        request = UpstreamRequest(
            payload,
            model,
            stream,
            SURFACE,
            content=raw.removeprefix(_BOM),
            headers=forwarded_headers(scope["headers"]),
        )
        return await pipeline.handle(request, _CODEC, arrived)


@final
class CountTokensDoor(_AnthropicErrors):
    """``count_tokens`` forwarded upstream; its answer (or error) relayed as it is."""

    surface: Final = COUNT_TOKENS_SURFACE

    async def handle(
        self,
        pipeline: Pipeline,
        payload: object,
        raw: bytes,
        scope: Scope,
        arrived: float,
        *,
        large: bool,
    ) -> JSONReply:
        del large
        try:
            model = check_count_tokens(payload)
        except ProxyError as exc:
            timing = pipeline.record_refused(exc.status, arrived, surface=COUNT_TOKENS_SURFACE)
            exc.headers["Server-Timing"] = timing.server_timing_header()
            raise
        assert isinstance(payload, dict)
        request = UpstreamRequest(
            payload,
            model,
            False,
            COUNT_TOKENS_SURFACE,
            content=raw.removeprefix(_BOM),
            headers=forwarded_headers(scope["headers"]),
        )
        reply, timing = await pipeline.count_tokens(request, arrived)
        headers = relayed_headers(reply.headers)
        headers["Server-Timing"] = timing.server_timing_header()
        return JSONReply(reply.raw, headers)
