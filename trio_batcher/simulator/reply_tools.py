"""Tool calls in a reply, and the tool results a reply answers.

A simulated model calls custom tools only (server tools are the API's to run), each with
an example input valid for the tool's ``input_schema`` and an id derived from the request's
digest, so the same request calls the same tools with the same ids. The trailing user
turn's ``tool_result`` blocks are what a reply after a tool call talks about.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, Final

from .faults import last_user_texts
from .reply_data import Block
from .reply_text import json_pieces
from .schemas import example_value

MAX_PARALLEL_TOOLS: Final = 4

_BASE62: Final = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_WORD: Final = re.compile(r"[a-z0-9_]+")
# The words of a tool name: snake_case, kebab-case and CamelCase pieces.
_NAME_PART: Final = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


def custom_tools(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The tools a simulated model may call: custom ones, loaded (``defer_loading`` tools
    are only names until a tool search loads them)."""
    return [
        t
        for t in body.get("tools") or ()
        if t.get("type") in (None, "custom") and not t.get("defer_loading")
    ]


def user_texts(body: Mapping[str, Any]) -> list[str]:
    """The last user turn's own words: its texts, less the ``<system-reminder>`` blocks an
    agent harness (Claude Code) adds to it, which are not the user saying anything."""
    return [t for t in last_user_texts(body) if not t.lstrip().startswith("<system-reminder>")]


def asked_for(tools: list[Mapping[str, Any]], text: str) -> list[Mapping[str, Any]]:
    """The tools the user's words ask for, under ``tool_choice: auto``: those whose name, or
    a word of four letters or more in it (``get_weather`` → ``weather``, ``ListAgents`` →
    ``agents``), the text mentions. A model handed a toolbox and a greeting answers the
    greeting; one asked about the weather calls the weather tool."""
    words = set(_WORD.findall(text.lower()))
    chosen = []
    for tool in tools:
        name = str(tool["name"])
        parts = {p.lower() for p in _NAME_PART.findall(name) if len(p) >= 4}
        if name.lower() in words or parts & words:
            chosen.append(tool)
    return chosen


def ends_with_user(body: Mapping[str, Any]) -> bool:
    roles = [m["role"] for m in body["messages"] if m["role"] != "system"]
    return bool(roles) and roles[-1] == "user"


def tool_results(body: Mapping[str, Any]) -> tuple[int, list[str]] | None:
    """How many ``tool_result`` blocks the trailing user turn holds, and their texts;
    None when it holds none."""
    count = 0
    texts: list[str] = []
    for message in reversed(body["messages"]):
        if message["role"] == "system":
            continue
        if message["role"] != "user":
            break
        content = message["content"]
        if isinstance(content, str):
            continue
        for block in content:
            if block["type"] != "tool_result":
                continue
            count += 1
            inner = block.get("content")
            if isinstance(inner, str):
                texts.append(inner)
            elif isinstance(inner, list):
                texts.extend(b["text"] for b in inner if b.get("type") == "text")
    return (count, texts) if count else None


def tool_blocks(
    tools: list[Mapping[str, Any]], choice: Mapping[str, Any], digest: bytes
) -> list[Block]:
    if choice["type"] == "tool":
        chosen = [t for t in tools if t["name"] == choice["name"]][:1]
    elif choice.get("disable_parallel_tool_use"):
        chosen = tools[:1]
    else:
        chosen = tools[:MAX_PARALLEL_TOOLS]
    blocks: list[Block] = []
    if choice["type"] == "auto":
        names = ", ".join(t["name"] for t in chosen)
        blocks.append(Block("text", tuple(_as_pieces(f"I will call {names}."))))
    for i, tool in enumerate(chosen):
        tool_input = example_value(tool["input_schema"])
        blocks.append(
            Block(
                "tool_use",
                json_pieces(json.dumps(tool_input)),
                id=_tool_id(digest, i),
                name=tool["name"],
                input=tool_input,
            )
        )
    return blocks


def _as_pieces(text: str) -> list[str]:
    words = text.split()
    return [w if i == 0 else f" {w}" for i, w in enumerate(words)]


def _tool_id(digest: bytes, index: int) -> str:
    number = int.from_bytes(hashlib.blake2b(digest + bytes([index]), digest_size=16).digest())
    chars = []
    for _ in range(22):
        number, rest = divmod(number, 62)
        chars.append(_BASE62[rest])
    return "toolu_01" + "".join(chars)
