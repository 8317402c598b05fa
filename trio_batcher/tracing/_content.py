"""Prompts and completions in the GenAI conventions' message shape (content capture only).

Used only when ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``: a Messages request's
``system``, ``messages`` and a reply's ``content`` become ``gen_ai.system_instructions``,
``gen_ai.input.messages`` and ``gen_ai.output.messages`` (JSON strings of role and parts).
Text, tool calls and tool results keep their content; any other block (an image, a document,
thinking) is named by its type only, so a capture never carries base64 payloads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["input_messages", "output_messages", "system_instructions"]


def _part(block: Any) -> dict[str, Any]:
    if isinstance(block, str):
        return {"type": "text", "content": block}
    if not isinstance(block, Mapping):
        return {"type": "unknown"}
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "content": block.get("text")}
    if kind == "tool_use":
        return {
            "type": "tool_call",
            "id": block.get("id"),
            "name": block.get("name"),
            "arguments": block.get("input"),
        }
    if kind == "tool_result":
        return {
            "type": "tool_call_response",
            "id": block.get("tool_use_id"),
            "response": block.get("content"),
        }
    return {"type": str(kind)}


def _parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, list):
        return [_part(block) for block in content]
    return [_part(content)]


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def system_instructions(body: Mapping[str, Any]) -> str | None:
    system = body.get("system")
    return None if system is None else _dumps(_parts(system))


def input_messages(body: Mapping[str, Any]) -> str | None:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    return _dumps(
        [
            {"role": m.get("role"), "parts": _parts(m.get("content"))}
            for m in messages
            if isinstance(m, Mapping)
        ]
    )


def output_messages(message: Mapping[str, Any]) -> str:
    return _dumps(
        [
            {
                "role": message.get("role") or "assistant",
                "parts": _parts(message.get("content") or []),
                "finish_reason": message.get("stop_reason"),
            }
        ]
    )
