"""Chat's ``tools`` and ``tool_choice`` (with ``parallel_tool_calls``) as Anthropic tools.

Chat nests each tool's fields under ``function``; this module reads that shape and the
Chat spelling of choices, and ``_common.tools`` applies the rules both dialects share, so a
bad tool is a 400 naming ``tools[i].function…`` rather than an upstream error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import invalid_request
from .._common.fields import optional_bool
from .._common.tools import (
    check_allowed_mode,
    function_tool,
    keep_allowed,
    named_choice,
    settle_choice,
)


def translate_tools(value: object) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid_request("tools must be an array.", param="tools")
    tools: list[dict[str, Any]] = []
    names: set[str] = set()
    for i, tool in enumerate(value):
        param = f"tools[{i}]"
        if not isinstance(tool, Mapping):
            raise invalid_request("A tool must be an object.", param=param)
        if tool.get("type") != "function":
            raise invalid_request(
                f"Unsupported tool type {tool.get('type')!r}; only function tools are supported.",
                param=f"{param}.type",
            )
        function = tool.get("function")
        if not isinstance(function, Mapping):
            raise invalid_request(
                "A function tool needs a function object.", param=f"{param}.function"
            )
        tools.append(function_tool(tool, function, param, "function.", names))
    return tools


def translate_tool_choice(
    payload: Mapping[str, Any], tools: list[dict[str, Any]]
) -> dict[str, Any] | None:
    parallel = optional_bool(payload, "parallel_tool_calls")
    choice = payload.get("tool_choice")
    names = [t["name"] for t in tools]
    result: dict[str, Any] | None
    if choice is None:
        result = None
    elif (named := named_choice(choice)) is not None:
        result = named
    elif isinstance(choice, Mapping) and choice.get("type") == "function":
        function = choice.get("function")
        name = function.get("name") if isinstance(function, Mapping) else None
        if not isinstance(name, str) or not name:
            raise invalid_request(
                "tool_choice.function.name is required.", param="tool_choice.function.name"
            )
        if name not in names:
            raise invalid_request(
                f"tool_choice names {name!r}, which is not in tools.",
                param="tool_choice.function.name",
            )
        result = {"type": "tool", "name": name}
    elif isinstance(choice, Mapping) and choice.get("type") == "allowed_tools":
        result = _allowed_tools(choice, tools, names)
    else:
        raise invalid_request(
            'tool_choice must be "none", "auto", "required", a function or allowed_tools.',
            param="tool_choice",
        )
    return settle_choice(result, tools, parallel)


def _allowed_tools(
    choice: Mapping[str, Any], tools: list[dict[str, Any]], names: list[str]
) -> dict[str, Any]:
    """``allowed_tools`` restricts the callable tools to its entries."""
    allowed = choice.get("allowed_tools")
    mode = allowed.get("mode") if isinstance(allowed, Mapping) else None
    check_allowed_mode(mode, "tool_choice.allowed_tools", "tool_choice.allowed_tools")
    assert isinstance(allowed, Mapping)
    entries = allowed.get("tools")
    if not isinstance(entries, list):
        raise invalid_request(
            "allowed_tools.tools must be an array.", param="tool_choice.allowed_tools.tools"
        )
    keep: set[str] = set()
    for i, entry in enumerate(entries):
        function = entry.get("function") if isinstance(entry, Mapping) else None
        name = function.get("name") if isinstance(function, Mapping) else None
        if not isinstance(name, str) or name not in names:
            raise invalid_request(
                "allowed_tools entries must name function tools from tools.",
                param=f"tool_choice.allowed_tools.tools[{i}]",
            )
        keep.add(name)
    return keep_allowed(str(mode), keep, tools)
