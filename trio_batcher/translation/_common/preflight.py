"""Checks on the translated body for what Anthropic would refuse, made before sending.

A prefill a model cannot take, or a fifth cache breakpoint, would come back as an upstream
400 that blames fields the client never wrote; here it is a 400 naming the client's own
message, item or part, under the path its dialect gives.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from ...errors import invalid_request
from .model_traits import ModelTraits

__all__ = ["MAX_CACHE_BREAKPOINTS", "check_cache_breakpoints", "check_prefill", "marks_cache"]

MAX_CACHE_BREAKPOINTS: Final = 4  # Anthropic's limit per request


def check_prefill(
    body: Mapping[str, Any], traits: ModelTraits, *, param: str, ending: str, remedy: str
) -> None:
    """A conversation ending with an assistant turn is a prefill, which Claude models from
    4.6 on refuse. Say so before sending, naming ``param`` (the assistant turn's last
    message or item; ``ending`` says what it is, ``remedy`` what to send instead), rather
    than pass on a 400 that blames a field the client never wrote."""
    if body["messages"][-1]["role"] != "assistant" or traits.prefill:
        return
    raise invalid_request(
        f"{body['model']} does not continue a conversation that ends with {ending} "
        f"(Claude models from 4.6 on take no prefill); {remedy}.",
        param=param,
    )


def check_cache_breakpoints(body: Mapping[str, Any], marked: Iterable[str]) -> None:
    """Anthropic rejects a fifth ``cache_control``; say so in our terms, before sending.

    The count is taken on the translated body (a blank part carries no breakpoint there);
    ``marked`` (read only when there are too many) lists where the client asked for a
    breakpoint, in its own request order, and ``param`` names the first one past the limit,
    so the client can see which one to drop.
    """
    blocks: list[Mapping[str, Any]] = [*body.get("tools", ()), *body.get("system", ())]
    for message in body["messages"]:
        for block in message["content"]:
            blocks.append(block)
            if isinstance(block.get("content"), list):  # a tool_result's own blocks
                blocks.extend(block["content"])
    found = sum(1 for block in blocks if "cache_control" in block)
    if found > MAX_CACHE_BREAKPOINTS:
        where = list(marked)
        raise invalid_request(
            f"At most {MAX_CACHE_BREAKPOINTS} cache breakpoints (cache_control or "
            f"prompt_cache_breakpoint) may be set in one request; found {found}.",
            param=where[MAX_CACHE_BREAKPOINTS] if len(where) > MAX_CACHE_BREAKPOINTS else None,
        )


def marks_cache(part: object) -> bool:
    """Whether a client's part or tool asks for a cache breakpoint (either spelling)."""
    return isinstance(part, Mapping) and (
        part.get("cache_control") is not None or part.get("prompt_cache_breakpoint") is not None
    )
