"""``tools`` and ``tool_choice`` (with ``parallel_tool_calls``) as Anthropic tools.

Only function tools exist upstream. Names, schemas and choices are checked here so that a
bad tool is a 400 naming ``tools[i]…`` rather than an upstream error; strict tools have
their schema cut to the subset Anthropic compiles (``strict_schema``), which refuses, naming
the node, a schema the grammar compiler would refuse.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from ...errors import invalid_request
from ._content import cache_control
from ._fields import optional_bool
from .strict_schema import strict_schema

_TOOL_NAME: Final = re.compile(r"[a-zA-Z0-9_-]{1,64}")


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
        name = function.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
            raise invalid_request(
                "function.name must match ^[a-zA-Z0-9_-]{1,64}$.", param=f"{param}.function.name"
            )
        if name in names:
            raise invalid_request(f"Duplicate tool name {name!r}.", param=f"{param}.function.name")
        names.add(name)
        out: dict[str, Any] = {"name": name}
        description = function.get("description")
        if description is not None and not isinstance(description, str):
            raise invalid_request(
                "function.description must be a string.", param=f"{param}.function.description"
            )
        if description:
            out["description"] = description
        out["input_schema"] = _input_schema(
            function.get("parameters"), f"{param}.function.parameters"
        )
        strict = function.get("strict")
        if strict is not None:
            if not isinstance(strict, bool):
                raise invalid_request(
                    "function.strict must be a boolean.", param=f"{param}.function.strict"
                )
            out["strict"] = strict
            if strict:  # compiled into a grammar: only a subset of JSON Schema
                out["input_schema"] = _strict_input_schema(
                    out["input_schema"], f"{param}.function.parameters"
                )
        control = cache_control(tool, param)
        if control is not None:
            out["cache_control"] = control
        tools.append(out)
    return tools


def _input_schema(parameters: object, param: str) -> dict[str, Any]:
    """``parameters`` as ``input_schema``; a missing or empty schema means "no arguments".

    Anthropic requires an object schema; OpenAI tolerates ``{"properties": …}`` without a
    ``type``, which is an object schema in all but name, so ``"type": "object"`` is added.
    """
    if parameters is None or parameters == {}:
        return {"type": "object", "properties": {}}
    if not isinstance(parameters, Mapping):
        raise invalid_request("function.parameters must be a JSON Schema object.", param=param)
    for keyword in ("anyOf", "oneOf", "allOf"):
        if keyword in parameters:
            raise invalid_request(
                f"function.parameters cannot use {keyword} at the top level (Anthropic's tools "
                "take one object schema); move the alternatives into a property.",
                param=f"{param}.{keyword}",
            )
    if "type" not in parameters:
        return {"type": "object", **parameters}
    if parameters["type"] != "object":
        raise invalid_request(
            'function.parameters must have "type": "object".', param=f"{param}.type"
        )
    return dict(parameters)


def _strict_input_schema(schema: dict[str, Any], param: str) -> dict[str, Any]:
    """``schema`` reshaped for the grammar; a ``$ref``, ``enum`` or ``const`` at the top
    stands without a ``type`` there, and Anthropic's tools take only an object schema."""
    out: dict[str, Any] = strict_schema(schema, param)
    for keyword in ("$ref", "enum", "const"):
        if keyword in out:
            raise invalid_request(
                f"A strict tool's function.parameters cannot use {keyword} at the top level "
                "(Anthropic's tools take one object schema).",
                param=f"{param}.{keyword}",
            )
    return out


def translate_tool_choice(
    payload: Mapping[str, Any], tools: list[dict[str, Any]]
) -> dict[str, Any] | None:
    parallel = optional_bool(payload, "parallel_tool_calls")
    choice = payload.get("tool_choice")
    names = [t["name"] for t in tools]
    if choice is None:
        result: dict[str, Any] | None = None
    elif choice in ("none", "auto"):
        result = {"type": choice}
    elif choice == "required":
        result = {"type": "any"}
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
    if not tools:
        if result is not None and result["type"] not in ("none", "auto"):
            raise invalid_request("tool_choice requires tools.", param="tool_choice")
        return None  # "none"/"auto" without tools mean what no tools mean
    if parallel is False:
        if result is None:
            result = {"type": "auto"}
        if result["type"] != "none":
            result["disable_parallel_tool_use"] = True
    return result


def _allowed_tools(
    choice: Mapping[str, Any], tools: list[dict[str, Any]], names: list[str]
) -> dict[str, Any]:
    """``allowed_tools`` restricts the callable tools: the tool list is cut down to them
    (Anthropic has no "offered but not callable" state), in place."""
    allowed = choice.get("allowed_tools")
    if not isinstance(allowed, Mapping) or allowed.get("mode") not in ("auto", "required"):
        raise invalid_request(
            'tool_choice.allowed_tools needs mode "auto" or "required" and tools.',
            param="tool_choice.allowed_tools",
        )
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
    tools[:] = [t for t in tools if t["name"] in keep]
    return {"type": "auto" if allowed["mode"] == "auto" else "any"}
