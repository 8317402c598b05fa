"""The OpenAI Chat Completions door: ``POST /v1/chat/completions``.

Decodes an OpenAI body into an upstream request (``translation.openai_chat``), hands it to
the pipeline with the codec that answers in OpenAI's terms, and spells every error in
OpenAI's shape (``{"error": {"message", "type", "param", "code"}}``).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Final, final

import trio

from ..errors import ProxyError
from ..pipeline.contract import JSONReply, StreamReply
from ..pipeline.core import Pipeline
from ..settings import Settings
from ..translation.openai_chat import (
    OpenAIChatCodec,
    TranslatedRequest,
    TranslationOptions,
    new_completion_id,
    translate_request,
)
from ..upstream.request import UpstreamRequest
from ..upstreams.facts import FactsOf
from .http import Incoming
from .translated import upstream_request_of

__all__ = ["CHAT_PATH", "SURFACE", "OpenAIChatDoor"]

CHAT_PATH: Final = "/v1/chat/completions"
SURFACE: Final = "openai.chat"


@final
class OpenAIChatDoor:
    """Chat Completions in, Anthropic Messages upstream."""

    surface: Final = SURFACE
    generates: Final = True

    def __init__(self, settings: Settings) -> None:
        self._options = TranslationOptions(
            default_model=settings.default_model,
            default_max_tokens=settings.default_max_tokens,
            anthropic_version=settings.anthropic_version,
        )
        # With a flex window, service_tier "flex" is honoured (pipeline.flex), not ignored.
        self._flex_options = replace(self._options, flex=True)
        # Large bodies are translated in a worker thread, one at a time, so that a body with
        # a million parts does not stall every other request on the event loop.
        self._large_bodies = trio.CapacityLimiter(1)

    relays_body: Final = False

    async def handle(self, pipeline: Pipeline, incoming: Incoming) -> JSONReply | StreamReply:
        payload, arrived = incoming.payload, incoming.arrived
        facts_of = pipeline.route_facts(incoming.tenant, incoming.scope["headers"])
        options = self._flex_options if pipeline.flex_ready else self._options
        try:
            if incoming.large:
                tr, request = await trio.to_thread.run_sync(
                    _translate, payload, options, True, facts_of, limiter=self._large_bodies
                )
            else:
                tr, request = _translate(payload, options, False, facts_of)
        except ProxyError as exc:
            # Under ``(none)``: the model named by a request we refuse is unchecked input,
            # and must not use up the registry's per-model entries.
            stream = isinstance(payload, dict) and payload.get("stream") is True
            timing = pipeline.record_refused(
                exc.status, arrived, stream=stream, surface=SURFACE, tenant=incoming.tenant
            )
            exc.headers["Server-Timing"] = timing.server_timing_header()
            raise
        del payload
        incoming.release()
        codec = OpenAIChatCodec(tr, completion_id=new_completion_id(), created=int(time.time()))
        return await pipeline.handle(request, codec, arrived, incoming.tenant, incoming.trace)

    def error_reply(self, exc: ProxyError) -> JSONReply:
        return JSONReply(exc.body(), exc.headers, exc.status)


def _translate(
    payload: object, options: TranslationOptions, large: bool, facts_of: FactsOf | None = None
) -> tuple[TranslatedRequest, UpstreamRequest]:
    """The translation, and the upstream request made of it.

    A large body is encoded here, once (in the worker thread, one at a time), and only
    its bytes stay: the translated tree is dropped (the codec keeps its outline), so an
    in-flight request holds about its size once rather than as bytes, tree and a
    serialisation made at send time.
    """
    tr = translate_request(payload, options)
    body, request = upstream_request_of(
        tr.body,
        tr.upstream_model,
        tr.stream,
        SURFACE,
        large=large,
        facts_of=facts_of,
        flex=tr.flex,
    )
    return (replace(tr, body=body) if large else tr), request
