"""The OpenAI Chat Completions codec: the pipeline's Anthropic answers in OpenAI's terms.

The pipeline speaks Anthropic Messages only; this is what turns one request's upstream
reply, stream events and errors into what an OpenAI client parses. Pure: the completion id
and creation time come from the caller, so the same input gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, final

from ...errors import ProxyError
from ...upstream.errors import openai_error_body, ratelimit_headers
from ...upstream.sse import DONE, encode_data
from .._common.params import served_tier
from .request import TranslatedRequest
from .response import translate_response
from .stream import StreamTranslator

__all__ = ["OpenAIChatCodec", "OpenAIChatStream", "name_the_cap", "openai_headers"]


@final
class OpenAIChatCodec:
    """One request's answers: reply body, stream encoder, response headers."""

    def __init__(self, tr: TranslatedRequest, *, completion_id: str, created: int) -> None:
        self._tr = tr
        self._id = completion_id
        self._created = created

    def headers(self, upstream: Mapping[str, str]) -> dict[str, str]:
        return openai_headers(upstream, self._tr.ignored_params)

    def reply(self, message: dict[str, Any], raw: bytes) -> dict[str, Any]:
        del raw  # translated, not relayed
        body = translate_response(
            message, model=self._tr.model, completion_id=self._id, created=self._created
        )
        if self._tr.service_tier is not None:  # asked: say which tier served it
            body["service_tier"] = served_tier(message)
        return body

    def stream(self) -> OpenAIChatStream:
        return OpenAIChatStream(
            StreamTranslator(
                model=self._tr.model,
                completion_id=self._id,
                created=self._created,
                include_usage=self._tr.include_usage,
            ),
            # A stream is always served realtime; said on every chunk when a tier was asked.
            tier="default" if self._tr.service_tier is not None else None,
        )

    def error(self, exc: ProxyError) -> ProxyError:
        """An error before the first byte, reworded for this client where it needs to be."""
        name_the_cap(exc, self._tr)
        return exc


@final
class OpenAIChatStream:
    """Upstream events in, ``chat.completion.chunk`` SSE lines out, ``[DONE]`` last."""

    terminator: Final = DONE
    coalesces: Final = True  # a run of text deltas is one chunk

    def __init__(self, translator: StreamTranslator, tier: str | None = None) -> None:
        self._translator = translator
        self._tier = tier

    def feed(self, name: str, data: Mapping[str, Any], raw: str) -> list[bytes]:
        del raw
        return [encode_data(self._tiered(chunk)) for chunk in self._translator.feed(name, data)]

    def finish(self) -> list[bytes]:
        return [encode_data(self._tiered(chunk)) for chunk in self._translator.finish()]

    def _tiered(self, chunk: dict[str, Any]) -> dict[str, Any]:
        if self._tier is not None:
            chunk["service_tier"] = self._tier
        return chunk

    def upstream_error(self, data: Mapping[str, Any], raw: str) -> bytes:
        del raw
        error = data.get("error")
        return encode_data(openai_error_body(error if isinstance(error, Mapping) else {}))

    def error(self, exc: ProxyError) -> bytes:
        return encode_data(exc.body())


def openai_headers(upstream: Mapping[str, str], ignored_params: Sequence[str]) -> dict[str, str]:
    """What every OpenAI dialect's answer carries: OpenAI's ``x-ratelimit-*`` (from the
    upstream's), the upstream's request id as ``x-request-id``, and the request's ignored
    parameters in ``x-trio-batcher-ignored-params``."""
    headers = ratelimit_headers(upstream)
    request_id = upstream.get("request-id")
    if request_id:
        headers["x-request-id"] = request_id
    if ignored_params:
        headers["x-trio-batcher-ignored-params"] = ",".join(ignored_params)
    return headers


def name_the_cap(exc: ProxyError, tr: TranslatedRequest) -> None:
    """Anthropic's "max_tokens: 200000 > 64000, which is the maximum..." names its own
    field; say it in the client's terms, naming the field the client set (or the setting
    the gateway filled in)."""
    if exc.upstream_status != 400 or exc.param is not None:
        return
    if not exc.message.startswith("max_tokens:"):
        return
    if tr.cap_param is not None:
        exc.param = tr.cap_param
        exc.message = tr.cap_param + exc.message.removeprefix("max_tokens")
    else:
        exc.param = "max_completion_tokens"
        exc.message += (
            " The request set no max_completion_tokens, so the gateway sent its "
            "DEFAULT_MAX_TOKENS (plus the thinking budget, if reasoning_effort asked for one); "
            "set max_completion_tokens within the model's limit."
        )
