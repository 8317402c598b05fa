"""OpenAI Responses (``/v1/responses``) ⇄ Anthropic Messages, as pure functions (no I/O, no clock).

- ``translate_request``: client JSON + stored history → upstream body, this request's
  canonical input items, and what the response object echoes;
- ``ResponsesCodec``: the pipeline's codec for this dialect (response objects, SSE events,
  headers) and ``final``, the complete response to store;
- ``client_view``: a stored (internal) response as the client may see it.

Every rule the dialects share is ``translation._common``'s, called with this dialect's paths.
"""

from __future__ import annotations

from ._ids import new_response_id as new_response_id
from .codec import ResponsesCodec as ResponsesCodec
from .codec import ResponsesStream as ResponsesStream
from .request import ResponsesRequest as ResponsesRequest
from .request import item_references as item_references
from .request import translate_request as translate_request
from .response import client_view as client_view
from .response import translate_response as translate_response
from .stream import ResponsesStreamTranslator as ResponsesStreamTranslator

__all__ = [
    "ResponsesCodec",
    "ResponsesRequest",
    "ResponsesStream",
    "ResponsesStreamTranslator",
    "client_view",
    "item_references",
    "new_response_id",
    "translate_request",
    "translate_response",
]
