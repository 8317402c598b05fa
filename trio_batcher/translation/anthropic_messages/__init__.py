"""Anthropic Messages, for clients that speak it: checks, relay codec and error shapes.

Pure, like every dialect here; the door is ``edge/anthropic_messages.py``.
"""

from __future__ import annotations

from .codec import AnthropicMessagesCodec as AnthropicMessagesCodec
from .codec import AnthropicMessagesStream as AnthropicMessagesStream
from .codec import encode_event as encode_event
from .errors import error_object as error_object
from .errors import error_reply as error_reply
from .errors import relayed_headers as relayed_headers
from .request import check_count_tokens as check_count_tokens
from .request import check_messages as check_messages
from .request import forwarded_headers as forwarded_headers

__all__ = [
    "AnthropicMessagesCodec",
    "AnthropicMessagesStream",
    "check_count_tokens",
    "check_messages",
    "encode_event",
    "error_object",
    "error_reply",
    "forwarded_headers",
    "relayed_headers",
]
