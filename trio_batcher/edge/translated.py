"""The upstream request a translating door makes of its translated Messages body.

Both OpenAI doors (Chat Completions, Responses) end the same way: the router's facts are
worked out of the whole translated body (``upstreams.facts``: only when they could change
the route), and a large body is encoded once, here, with only its outline kept (the codec
reads the outline; the bytes are what goes upstream), so an in-flight request holds about
its size once rather than as bytes, a tree and a serialisation made at send time.
"""

from __future__ import annotations

from typing import Any

from ..upstream.request import UpstreamRequest, encode_body, outline
from ..upstreams.facts import NO_FACTS, FactsOf

__all__ = ["upstream_request_of"]


def upstream_request_of(
    body: dict[str, Any],
    model: str,
    stream: bool,
    surface: str,
    *,
    large: bool,
    facts_of: FactsOf | None,
    flex: bool = False,
) -> tuple[dict[str, Any], UpstreamRequest]:
    """(the body the door keeps, the upstream request): ``body`` itself, or for a
    ``large`` one its outline, the whole having been encoded into the request; ``flex``:
    the translation found ``service_tier: "flex"`` to honour (``pipeline.flex``)."""
    facts = facts_of(model, body) if facts_of is not None else NO_FACTS
    content = None
    if large:
        content = encode_body(body)
        body = outline(body)
    request = UpstreamRequest(
        body,
        model,
        stream,
        surface,
        content=content,
        conversation=facts.conversation,
        anthropic_only=facts.anthropic_only,
        service_tier="flex" if flex else None,
    )
    return body, request
