"""The OpenAI Responses codec: the pipeline's Anthropic answers as Responses objects and events.

Implements ``pipeline.contract.ReplyCodec``. Pure: the response id and creation time come
from the caller. Besides the bytes, it keeps ``final`` -- the complete internal response
object (``response`` module: with each reasoning item's ``encrypted_content``) -- for the
door to store. ``final`` is set by ``reply`` and, on a stream, before the codec returns the
bytes of the terminal event (``response.completed`` / ``incomplete`` / ``failed``), so the
door can store the response before the client learns it is done. An error before the first
byte leaves it None: there is no response, only an HTTP error.

Responses streams end with their terminal event: ``terminator`` is ``b""`` (the relay writes
nothing for an empty terminator).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, final

from ...errors import ProxyError
from .._common.params import served_tier
from ..openai_chat.codec import openai_headers
from .request import ResponsesRequest
from .response import client_view, translate_response
from .stream import ResponsesStreamTranslator

__all__ = ["ResponsesCodec", "ResponsesStream", "encode_event"]

# ResponseError.code is a closed set in the SDK's types; these are the ones that apply.
_RATE_LIMITED: Final = "rate_limit_exceeded"
_SERVER_ERROR: Final = "server_error"
_INVALID_PROMPT: Final = "invalid_prompt"


def encode_event(event: Mapping[str, Any]) -> bytes:
    """``event: <type>\\ndata: <json>\\n\\n``, the JSON on one line."""
    payload = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
    return f"event: {event['type']}\ndata: {payload}\n\n".encode()


@final
class ResponsesCodec:
    """One request's answers: response object, stream encoder, headers, ``final``."""

    def __init__(self, tr: ResponsesRequest, *, response_id: str, created_at: int) -> None:
        self._tr = tr
        self._id = response_id
        self._created_at = created_at
        self._final: dict[str, Any] | None = None
        self._stream: ResponsesStream | None = None

    @property
    def response_id(self) -> str:
        return self._id

    @property
    def created_at(self) -> int:
        return self._created_at

    @property
    def final(self) -> dict[str, Any] | None:
        """The complete internal response once built or streamed to its end; else None."""
        if self._final is None and self._stream is not None:
            return self._stream.final
        return self._final

    def headers(self, upstream: Mapping[str, str]) -> dict[str, str]:
        """As for Chat Completions: rate limits, request id, what was ignored."""
        return openai_headers(upstream, self._tr.ignored_params)

    def reply(self, message: dict[str, Any], raw: bytes) -> dict[str, Any]:
        del raw  # translated, not relayed
        self._final = translate_response(
            message, self._tr, response_id=self._id, created_at=self._created_at
        )
        self._final["service_tier"] = served_tier(message)  # flex from a Message Batch
        return client_view(self._final, self._tr.include)

    def stream(self) -> ResponsesStream:
        """The stream encoder: one per response (a background response's is made when it
        is accepted, to send its ``queued`` events, and is the one the pipeline feeds)."""
        if self._stream is not None:
            return self._stream
        self._stream = ResponsesStream(
            ResponsesStreamTranslator(
                self._tr,
                response_id=self._id,
                created_at=self._created_at,
                include=self._tr.include,
            )
        )
        return self._stream

    def error(self, exc: ProxyError) -> ProxyError:
        """An error before the first byte, reworded for this client where it needs to be."""
        name_the_cap(exc, self._tr)
        return exc


@final
class ResponsesStream:
    """Upstream events in, Responses SSE events out; no terminator after the last."""

    terminator: Final = b""
    coalesces: Final = True  # a run of text deltas is one output_text.delta

    def __init__(self, translator: ResponsesStreamTranslator) -> None:
        self._translator = translator

    @property
    def final(self) -> dict[str, Any] | None:
        return self._translator.final

    def feed(self, name: str, data: Mapping[str, Any], raw: str) -> list[bytes]:
        del raw
        return [encode_event(e) for e in self._translator.feed(name, data)]

    def finish(self) -> list[bytes]:
        return [encode_event(e) for e in self._translator.finish()]

    def queued(self) -> list[bytes]:
        """A background response's first events (``ResponsesStreamTranslator.queued``)."""
        return [encode_event(e) for e in self._translator.queued()]

    def upstream_error(self, data: Mapping[str, Any], raw: str) -> bytes:
        """An upstream ``error`` event after the 200: ``response.failed``."""
        del raw
        error = data.get("error")
        error = error if isinstance(error, Mapping) else {}
        kind = error.get("type")
        message = error.get("message")
        code = _RATE_LIMITED if kind == "rate_limit_error" else _SERVER_ERROR
        text = (
            message if isinstance(message, str) and message else "The upstream reported an error."
        )
        if isinstance(kind, str) and kind:
            text = f"{text} (upstream {kind})"
        return b"".join(encode_event(e) for e in self._translator.fail(code, text))

    def error(self, exc: ProxyError) -> bytes:
        """A failure of the gateway's own after the start (deadline, truncated upstream)."""
        code = _RATE_LIMITED if exc.status == 429 else _SERVER_ERROR
        if exc.status == 400:  # a background response's upstream refusal (edge.background)
            code = _INVALID_PROMPT
        return b"".join(encode_event(e) for e in self._translator.fail(code, exc.message))


def name_the_cap(exc: ProxyError, tr: ResponsesRequest) -> None:
    """Anthropic's "max_tokens: 200000 > 64000, which is the maximum..." in the client's
    terms: ``max_output_tokens`` if the client set it, else the gateway's default."""
    if exc.upstream_status != 400 or exc.param is not None:
        return
    if not exc.message.startswith("max_tokens:"):
        return
    exc.param = "max_output_tokens"
    if tr.cap_param is not None:
        exc.message = "max_output_tokens" + exc.message.removeprefix("max_tokens")
    else:
        exc.message += (
            " The request set no max_output_tokens, so the gateway sent its "
            "DEFAULT_MAX_TOKENS (plus the thinking budget, if reasoning.effort asked for one); "
            "set max_output_tokens within the model's limit."
        )
