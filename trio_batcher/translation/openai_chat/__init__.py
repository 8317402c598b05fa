"""OpenAI Chat Completions ⇄ Anthropic Messages, as pure functions (no I/O, no clock).

- ``translate_request``: client JSON → upstream body (+ what to echo, what was ignored);
- ``translate_response``: upstream reply → ``chat.completion``;
- ``StreamTranslator``: upstream SSE events → ``chat.completion.chunk`` dicts;
- ``upstream_error`` / ``ratelimit_headers``: upstream failures and limits in OpenAI's terms.

docs/compatibility.md is the user-facing table of every rule and the test that proves it.
"""

from __future__ import annotations

from ...upstream.errors import client_status as client_status
from ...upstream.errors import openai_error_body as openai_error_body
from ...upstream.errors import parse_retry_after as parse_retry_after
from ...upstream.errors import ratelimit_headers as ratelimit_headers
from ...upstream.errors import status_for_error_type as status_for_error_type
from ...upstream.errors import upstream_error as upstream_error
from .request import TranslatedRequest as TranslatedRequest
from .request import TranslationOptions as TranslationOptions
from .request import translate_request as translate_request
from .response import new_completion_id as new_completion_id
from .response import translate_response as translate_response
from .response import translate_usage as translate_usage
from .stream import StreamTranslator as StreamTranslator
from .stream import UpstreamStreamError as UpstreamStreamError

__all__ = [
    "StreamTranslator",
    "TranslatedRequest",
    "TranslationOptions",
    "UpstreamStreamError",
    "client_status",
    "new_completion_id",
    "openai_error_body",
    "parse_retry_after",
    "ratelimit_headers",
    "status_for_error_type",
    "translate_request",
    "translate_response",
    "translate_usage",
    "upstream_error",
]
