"""Checks on the translated body for what Anthropic would refuse, made before sending.

A prefill a model cannot take, or a fifth cache breakpoint, would come back as an upstream
400 that blames fields the client never wrote; here it is a 400 naming the client's own
message or part.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

from ...errors import invalid_request
from .model_traits import ModelTraits

MAX_CACHE_BREAKPOINTS: Final = 4  # Anthropic's limit per request


def check_prefill(body: Mapping[str, Any], messages: object, traits: ModelTraits) -> None:
    """A conversation ending with an assistant turn is a prefill, which Claude models from
    4.6 on refuse. Say so before sending, naming the message, rather than pass on a 400
    that blames a field the client never wrote."""
    if body["messages"][-1]["role"] != "assistant" or traits.prefill:
        return
    assistants = [
        i
        for i, m in enumerate(messages if isinstance(messages, list) else ())
        if isinstance(m, Mapping) and m.get("role") == "assistant"
    ]
    raise invalid_request(
        f"{body['model']} does not continue a conversation that ends with an assistant "
        "message (Claude models from 4.6 on take no prefill); end it with a user message.",
        param=f"messages[{assistants[-1]}]" if assistants else "messages",
    )


def check_cache_breakpoints(body: Mapping[str, Any], payload: Mapping[str, Any]) -> None:
    """Anthropic rejects a fifth ``cache_control``; say so in our terms, before sending.

    The count is taken on the translated body (a blank part carries no breakpoint there);
    ``param`` names the first breakpoint past the limit in the client's own request order,
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
        marked = list(_breakpoint_params(payload))
        raise invalid_request(
            f"At most {MAX_CACHE_BREAKPOINTS} cache breakpoints (cache_control or "
            f"prompt_cache_breakpoint) may be set in one request; found {found}.",
            param=marked[MAX_CACHE_BREAKPOINTS] if len(marked) > MAX_CACHE_BREAKPOINTS else None,
        )


def _breakpoint_params(payload: Mapping[str, Any]) -> Iterator[str]:
    """Where the client asked for cache breakpoints, in request order (tools, then messages)."""

    def marks(part: object) -> bool:
        return isinstance(part, Mapping) and (
            part.get("cache_control") is not None or part.get("prompt_cache_breakpoint") is not None
        )

    for i, tool in enumerate(payload.get("tools") or ()):
        if marks(tool):
            yield f"tools[{i}]"
    for i, message in enumerate(payload.get("messages") or ()):
        content = message.get("content") if isinstance(message, Mapping) else None
        for j, part in enumerate(content if isinstance(content, list) else ()):
            if marks(part):
                yield f"messages[{i}].content[{j}]"
