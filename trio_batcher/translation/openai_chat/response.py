"""Anthropic Messages reply → OpenAI ``chat.completion`` (non-streaming).

Shared with the stream translator: ``translate_usage`` (the one usage formula), the
stop-reason table, and how tool arguments and thinking blocks are rendered, so that a stream
reassembled by OpenAI's rules equals the non-stream reply (tests/test_translation_stream.py
proves it by property).

Reasoning is returned twice, on purpose:
- ``message.reasoning_content``: the thinking text, concatenated (the field DeepSeek, vLLM and
  LiteLLM use), for display;
- ``message.thinking_blocks``: the blocks verbatim, ``{"type": "thinking", "thinking",
  "signature"}`` or ``{"type": "redacted_thinking", "data"}`` (LiteLLM's name), because a
  thinking block can only be sent back to Anthropic with its signature. The request
  translator accepts the same field on assistant messages, so a client that appends the reply
  message to its history round-trips the reasoning unchanged.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from typing import Any, Final

__all__ = [
    "FINISH_REASONS",
    "finish_reason",
    "new_completion_id",
    "thinking_block",
    "tool_arguments",
    "translate_response",
    "translate_usage",
]

FINISH_REASONS: Final[Mapping[str, str]] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def finish_reason(stop_reason: object) -> str:
    """OpenAI's ``finish_reason`` for an Anthropic ``stop_reason``; unknown or null → ``stop``."""
    return FINISH_REASONS.get(stop_reason, "stop") if isinstance(stop_reason, str) else "stop"


def new_completion_id() -> str:
    """A fresh ``chatcmpl-…`` id (96 random bits)."""
    return "chatcmpl-" + secrets.token_hex(12)


def _count(usage: Mapping[str, Any], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def translate_usage(usage: Mapping[str, Any]) -> dict[str, Any]:
    """OpenAI usage for Anthropic usage — the one formula used on every path.

    ``prompt_tokens`` counts every input token the request was billed for: uncached input +
    cache writes + cache reads (Anthropic reports them separately; OpenAI's prompt count
    includes cached tokens). ``cached_tokens`` is the cache reads, ``cache_write_tokens`` the
    cache writes (both fields of the ``openai`` SDK's ``PromptTokensDetails``).
    ``completion_tokens_details.reasoning_tokens`` appears only when the upstream reports
    ``output_tokens_details.thinking_tokens``. Missing or null counts are 0.
    """
    uncached = _count(usage, "input_tokens")
    cache_write = _count(usage, "cache_creation_input_tokens")
    cache_read = _count(usage, "cache_read_input_tokens")
    output = _count(usage, "output_tokens")
    prompt = uncached + cache_write + cache_read
    result: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "total_tokens": prompt + output,
        "prompt_tokens_details": {"cached_tokens": cache_read, "cache_write_tokens": cache_write},
    }
    details = usage.get("output_tokens_details")
    if isinstance(details, Mapping) and "thinking_tokens" in details:
        result["completion_tokens_details"] = {
            "reasoning_tokens": _count(details, "thinking_tokens")
        }
    return result


def tool_arguments(tool_input: object) -> str:
    """``function.arguments`` for a ``tool_use`` input: compact JSON, as OpenAI writes it."""
    return json.dumps(tool_input if tool_input is not None else {}, separators=(",", ":"))


def thinking_block(block: Mapping[str, Any]) -> dict[str, Any]:
    """The ``thinking_blocks`` entry for a thinking or redacted_thinking block, verbatim."""
    if block.get("type") == "redacted_thinking":
        return {"type": "redacted_thinking", "data": str(block.get("data") or "")}
    return {
        "type": "thinking",
        "thinking": str(block.get("thinking") or ""),
        "signature": str(block.get("signature") or ""),
    }


def translate_response(
    message: Mapping[str, Any], *, model: str, completion_id: str, created: int
) -> dict[str, Any]:
    """The ``chat.completion`` for an Anthropic ``message``.

    Args:
      message: the upstream reply body (``type: "message"``).
      model: echoed as ``model`` — the name the client asked for, not the upstream's.
      completion_id: ``chatcmpl-…`` (see ``new_completion_id``).
      created: unix seconds.

    Text blocks are concatenated; ``content`` is ``null`` only when the reply is tool calls
    and no text (OpenAI's convention), ``""`` when it is empty. Block types that the proxy
    never asks for (server tools) are skipped.
    """
    text: list[str] = []
    reasoning: list[str] = []
    thinking: list[dict[str, Any]] = []
    tool_calls: list[dict[str, Any]] = []
    blocks = message.get("content")
    for block in blocks if isinstance(blocks, list) else ():
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text":
            text.append(str(block.get("text") or ""))
        elif kind == "tool_use":
            tool_calls.append(
                {
                    "id": str(block.get("id") or ""),
                    "type": "function",
                    "function": {
                        "name": str(block.get("name") or ""),
                        "arguments": tool_arguments(block.get("input")),
                    },
                }
            )
        elif kind in ("thinking", "redacted_thinking"):
            entry = thinking_block(block)
            thinking.append(entry)
            if kind == "thinking":
                reasoning.append(entry["thinking"])
    content = "".join(text)
    reply: dict[str, Any] = {
        "role": "assistant",
        "content": None if not content and tool_calls else content,
        "refusal": None,
    }
    if tool_calls:
        reply["tool_calls"] = tool_calls
    if any(reasoning):  # absent, not "", when there is no reasoning text (as when streamed)
        reply["reasoning_content"] = "".join(reasoning)
    if thinking:
        reply["thinking_blocks"] = thinking
    usage = message.get("usage")
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": reply,
                "logprobs": None,
                "finish_reason": finish_reason(message.get("stop_reason")),
            }
        ],
        "usage": translate_usage(usage if isinstance(usage, Mapping) else {}),
    }
