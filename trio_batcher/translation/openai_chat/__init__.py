"""OpenAI Chat Completions ⇄ Anthropic Messages, as pure functions (no I/O, no clock).

- ``translate_request``: client JSON → upstream body (+ what to echo, what was ignored);
- ``translate_response``: upstream reply → ``chat.completion``;
- ``StreamTranslator``: upstream SSE events → ``chat.completion.chunk`` dicts;
- ``OpenAIChatCodec``: the pipeline's codec for this dialect (replies, streams, headers).

docs/compatibility.md is the user-facing table of every rule and the test that proves it.
"""

from __future__ import annotations

from .codec import OpenAIChatCodec as OpenAIChatCodec
from .codec import OpenAIChatStream as OpenAIChatStream
from .request import TranslatedRequest as TranslatedRequest
from .request import TranslationOptions as TranslationOptions
from .request import translate_request as translate_request
from .response import new_completion_id as new_completion_id
from .response import translate_response as translate_response
from .response import translate_usage as translate_usage
from .stream import StreamTranslator as StreamTranslator
from .stream import UpstreamStreamError as UpstreamStreamError

__all__ = [
    "OpenAIChatCodec",
    "OpenAIChatStream",
    "StreamTranslator",
    "TranslatedRequest",
    "TranslationOptions",
    "UpstreamStreamError",
    "new_completion_id",
    "translate_request",
    "translate_response",
    "translate_usage",
]
