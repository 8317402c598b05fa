"""Anthropic Messages reply → the Responses ``response`` object; what streams share with it.

One Anthropic content block is one output item, in block order: ``text`` → a ``message``
with one ``output_text`` part; ``tool_use`` → a ``function_call`` (``call_id`` is the
``tool_use`` id, ``namespace`` and ``name`` mapped back from the Anthropic tool name);
``thinking`` / ``redacted_thinking`` → a ``reasoning`` item (``_thinking``). Blocks of
server tools, which the gateway never asks for, are skipped. Item ids derive from the
response id and the item's index (``_ids.output_item_id``), so a streamed response and a
plain one name their items alike.

Status: ``end_turn``, ``tool_use``, ``stop_sequence`` and ``pause_turn`` are
``completed``; ``max_tokens`` and ``model_context_window_exceeded`` are ``incomplete``
(``max_output_tokens``). ``refusal`` is ``incomplete`` with ``content_filter``: Anthropic's
refusal is a safety classifier stopping the output mid-way (the text so far stays as it is),
which is what OpenAI's ``content_filter`` reports -- not a refusal the model wrote, which
OpenAI would put in a ``refusal`` part.

Two views of one response: ``final`` (what the codec builds, and the door stores) always
carries each reasoning item's ``encrypted_content``, so that a later
``previous_response_id`` can replay the thinking; ``client_view`` removes it unless the
request's ``include`` asked for ``reasoning.encrypted_content``, as OpenAI does. Everything
the client sees goes through ``client_view``.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping
from typing import Any, Final

from ..openai_chat.response import tool_arguments, translate_usage
from ._ids import output_item_id
from ._params import ENCRYPTED_REASONING
from ._thinking import encrypted_content
from .request import ResponsesRequest

__all__ = [
    "client_view",
    "function_call_item",
    "message_item",
    "output_items",
    "reasoning_item",
    "response_object",
    "status_for",
    "translate_response",
    "usage_for",
]

_INCOMPLETE: Final[Mapping[str, str]] = {
    "max_tokens": "max_output_tokens",
    "model_context_window_exceeded": "max_output_tokens",
    "refusal": "content_filter",
}


def status_for(stop_reason: object) -> tuple[str, dict[str, Any] | None]:
    """(``status``, ``incomplete_details``) for an Anthropic ``stop_reason``."""
    reason = _INCOMPLETE.get(stop_reason) if isinstance(stop_reason, str) else None
    return ("incomplete", {"reason": reason}) if reason else ("completed", None)


def usage_for(usage: Mapping[str, Any]) -> dict[str, Any]:
    """Responses usage from Anthropic usage, by the Chat path's one formula
    (``translate_usage``): input counts uncached input, cache writes and cache reads."""
    chat = translate_usage(usage)
    details = chat.get("completion_tokens_details") or {}
    return {
        "input_tokens": chat["prompt_tokens"],
        "input_tokens_details": chat["prompt_tokens_details"],
        "output_tokens": chat["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": details.get("reasoning_tokens", 0)},
        "total_tokens": chat["total_tokens"],
    }


def message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": status,
        "content": [] if status == "in_progress" else [output_text(text)],
    }


def output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def function_call_item(
    item_id: str,
    call_id: str,
    upstream_name: str,
    arguments: str,
    tool_names: Mapping[str, tuple[str | None, str]],
    status: str = "completed",
) -> dict[str, Any]:
    namespace, name = tool_names.get(upstream_name, (None, upstream_name))
    item: dict[str, Any] = {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }
    if namespace is not None:
        item["namespace"] = namespace
    return item


def reasoning_item(item_id: str, block: Mapping[str, Any] | None) -> dict[str, Any]:
    """A reasoning item; ``block`` None for one whose block has not ended (no blob yet)."""
    item: dict[str, Any] = {"type": "reasoning", "id": item_id, "summary": []}
    if block is None:
        return item
    text = block.get("thinking") if block.get("type") == "thinking" else None
    if isinstance(text, str) and text:
        item["summary"] = [{"type": "summary_text", "text": text}]
    item["encrypted_content"] = encrypted_content(block)
    return item


def output_items(
    message: Mapping[str, Any], response_id: str, tool_names: Mapping[str, tuple[str | None, str]]
) -> list[dict[str, Any]]:
    """The output items for an Anthropic reply's content blocks."""
    items: list[dict[str, Any]] = []
    blocks = message.get("content")
    for block in blocks if isinstance(blocks, list) else ():
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        index = len(items)
        if kind == "text":
            item_id = output_item_id(response_id, "msg", index)
            items.append(message_item(item_id, str(block.get("text") or "")))
        elif kind == "tool_use":
            items.append(
                function_call_item(
                    output_item_id(response_id, "fc", index),
                    str(block.get("id") or ""),
                    str(block.get("name") or ""),
                    tool_arguments(block.get("input")),
                    tool_names,
                )
            )
        elif kind in ("thinking", "redacted_thinking"):
            items.append(reasoning_item(output_item_id(response_id, "rs", index), block))
    return items


def response_object(
    tr: ResponsesRequest,
    *,
    response_id: str,
    created_at: int,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    incomplete_details: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``response`` object: the reply's facts, then the request's echoed fields."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "model": tr.model,
        "output": output,
        "usage": usage,
        "error": error,
        "incomplete_details": incomplete_details,
        **copy.deepcopy(tr.echo),
    }


def translate_response(
    message: Mapping[str, Any], tr: ResponsesRequest, *, response_id: str, created_at: int
) -> dict[str, Any]:
    """The complete (internal, ``final``) response object for an Anthropic reply."""
    status, details = status_for(message.get("stop_reason"))
    usage = message.get("usage")
    return response_object(
        tr,
        response_id=response_id,
        created_at=created_at,
        status=status,
        output=output_items(message, response_id, tr.tool_names),
        usage=usage_for(usage if isinstance(usage, Mapping) else {}),
        incomplete_details=details,
    )


def client_view(response: Mapping[str, Any], include: Collection[str]) -> dict[str, Any]:
    """``response`` as the client sees it: without reasoning items' ``encrypted_content``
    unless ``include`` has ``reasoning.encrypted_content``. Works on a stored response too
    (pass the ``include`` of the request that made it, or of the one reading it)."""
    view = dict(response)
    output = response.get("output")
    if ENCRYPTED_REASONING not in include and isinstance(output, list):
        view["output"] = [item_view(item, include) for item in output]
    return view


def item_view(item: Mapping[str, Any], include: Collection[str]) -> dict[str, Any]:
    """One output item as the client sees it (see ``client_view``)."""
    if item.get("type") == "reasoning" and ENCRYPTED_REASONING not in include:
        return {k: v for k, v in item.items() if k != "encrypted_content"}
    return dict(item)
