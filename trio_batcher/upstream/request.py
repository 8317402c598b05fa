"""What the pipeline asks the upstream for: one Messages API call, in the upstream's terms.

Every client dialect decodes its request into an ``UpstreamRequest`` at the edge, so
everything behind the edge -- the gate, windows, the dispatcher, resilience, the
observatory -- handles one currency and has no per-dialect branches.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, final

from ..errors import ProxyError
from ..logs import DecisionNotes
from ..tracing import NOOP_TRACE, RequestTrace

__all__ = ["ReplyHook", "UpstreamRequest", "encode_body", "outline"]

ReplyHook = Callable[[str, str], Awaitable[None]]
"""Told a reply's message ``id`` and the name of the upstream that served it."""

# The fields of a Messages request that carry the conversation: everything large.
_CONVERSATION: Final = frozenset({"messages", "system", "tools"})


def encode_body(body: Mapping[str, Any]) -> bytes:
    """``body`` as the upstream receives it: compact JSON, UTF-8.

    Raises:
      ProxyError: 400 ``invalid_json`` for a string that is not valid Unicode (an unpaired
        surrogate). The doors refuse those where they can name the field; this is the net
        under them, so that no input becomes a 500.
    """
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode()
    except UnicodeEncodeError:
        raise ProxyError(
            400,
            "The request contains text that is not valid Unicode (an unpaired UTF-16 surrogate).",
            type="invalid_request_error",
            code="invalid_json",
        ) from None


def outline(body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` without the conversation (messages, system, tools): what the pipeline reads
    (``model``, ``stream``, the caps) once the body itself travels as ``content``."""
    return {k: v for k, v in body.items() if k not in _CONVERSATION}


@final
@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    """One ``POST /v1/messages`` to make upstream.

    Attributes:
      body: the Messages request, as parsed (the pipeline reads ``model`` and ``stream``).
      model: the upstream model name (cooldowns are per model; metrics count by it).
      stream: whether to stream.
      surface: which door the request came in by (``"openai.chat"``,
        ``"anthropic.messages"``), for the observatory's per-surface counts.
      content: the body already serialised, sent as it is. A door that relays the client's
        own body sets it, so the upstream receives the client's bytes, field for field;
        ``None`` serialises ``body``.
      headers: extra request headers for the upstream (``anthropic-beta``, and an
        ``anthropic-version`` that replaces the configured one), lower-case ASCII names.
      tenant: the name of the tenant it is for (never its key), which the observatory
        counts it under; set by the pipeline once the tenant is admitted.
      conversation: the conversation it is a turn of (``upstreams.conversation_key``),
        which the router keeps on one upstream so its prompt cache stays warm; computed
        at the door (which still has the whole body) only when there is a choice of
        upstream, ``None`` otherwise.
      anthropic_only: a feature of the body only Anthropic's own API carries (the Files
        API, the MCP connector...), named for an error: no bedrock or vertex upstream may
        take the request (``upstreams.facts``).
      pinned: the name of the only upstream that may take the request, because it holds
        state the request continues (a message thread); ``None``: any the route picks.
      on_reply: awaited once the reply exists (a non-stream reply, or a stream's
        ``message_start``) with its message id and the upstream that served it, before
        the client has it: a door that records what the reply created (a thread's head)
        does it here, so a client's next request finds it recorded.
      service_tier: ``"flex"``: the client said the request may wait, and its door found
        the gateway able to batch it: the pipeline answers it through a Message Batch at
        the batch price (``pipeline.flex``); ``None``: realtime, as always.
      deferrable: the request can wait (a background response, a flex request falling
        back to realtime): it queues in the deferrable priority lane at the admission gate
        and the upstream cap (``admission.lanes``), behind interactive requests but for its
        lane's share. Set by the gateway, never by a client's say-so.
      notes: what the stages decided for the request, for its DEBUG line
        (``logs.decisions``); None (and nothing noted) unless DEBUG is on.
      trace: the request's trace (``tracing``), which the fleet records each upstream
        attempt under; the no-op one unless traces are on. It travels with the request
        because the attempt runs in a dispatcher or window task, not the request's own.
    """

    body: Mapping[str, Any]
    model: str
    stream: bool
    surface: str
    content: bytes | None = None
    headers: tuple[tuple[bytes, bytes], ...] = ()
    tenant: str | None = None
    conversation: str | None = None
    anthropic_only: str | None = None
    pinned: str | None = None
    on_reply: ReplyHook | None = None
    service_tier: str | None = None
    deferrable: bool = False
    notes: DecisionNotes | None = field(default=None, compare=False, repr=False)
    trace: RequestTrace = NOOP_TRACE
