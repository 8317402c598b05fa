"""The tools a request offers and its ``tool_choice``.

Custom tools (no ``type``, or ``custom``) are checked in depth: name pattern, an object
``input_schema`` without top-level combinators and, for ``strict`` tools whose schema is
compiled to a grammar, the JSON Schema subset (``schema_subset``). Server tools are
recognised by their dated ``type`` (``web_search_20250305``) and the beta API's undated
ones under any beta; their own fields vary and are not checked. Tool names must be unique,
and ``tool_choice`` may force only a tool that is offered.

Pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from .field_checks import (
    Walk,
    as_boolean,
    as_list,
    as_object,
    as_string,
    counted_cache_control,
    fail,
    is_set,
    join,
    only,
    required,
    tagged,
)
from .schema_subset import validate_schema_subset

CUSTOM_TOOL_KEYS: Final = frozenset(
    {
        "name",
        "description",
        "input_schema",
        "cache_control",
        "strict",
        "type",
        "allowed_callers",
        "defer_loading",
        "eager_input_streaming",
        "input_examples",
    }
)
TOOL_NAME: Final = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

# Server tools are versioned by date (``web_search_20250305``); their own fields vary.
_SERVER_TOOL_TYPE: Final = re.compile(r"^[a-z][a-z0-9_]*_\d{8}$")
# Beta tool types without a date; toolsets (``mcp_toolset``, ``*_toolset_YYYYMMDD``) have
# no ``name`` of their own.
_UNDATED_BETA_TOOLS: Final = frozenset(
    {"mcp_toolset", "tool_search_tool_bm25", "tool_search_tool_regex"}
)


def check_tools(body: Mapping[str, Any], walk: Walk, *, grammar: bool) -> frozenset[str]:
    if not is_set(body, "tools"):
        return frozenset()
    names: set[str] = set()
    for i, tool in enumerate(as_list(body["tools"], "tools")):
        path = f"tools.{i}"
        tool = as_object(tool, path)
        kind = tool.get("type")
        name: str | None = None
        if kind is not None and kind != "custom":
            if not isinstance(kind, str) or not (
                (walk.any_beta and kind in _UNDATED_BETA_TOOLS) or _SERVER_TOOL_TYPE.match(kind)
            ):
                fail(join(path, "type"), f"unknown tool type {kind!r}")
            if "toolset" not in kind or "name" in tool:  # a toolset names its server instead
                name = as_string(required(tool, "name", path), join(path, "name"), non_empty=True)
        else:
            only(tool, CUSTOM_TOOL_KEYS, path)
            name = as_string(required(tool, "name", path), join(path, "name"))
            if not TOOL_NAME.match(name):
                fail(join(path, "name"), "String should match pattern '^[a-zA-Z0-9_-]{1,64}$'")
            schema = as_object(required(tool, "input_schema", path), join(path, "input_schema"))
            if schema.get("type") != "object":
                fail(join(path, "input_schema.type"), "Input should be 'object'")
            if any(key in schema for key in ("oneOf", "allOf", "anyOf")):
                fail(
                    join(path, "input_schema"),
                    "input_schema does not support oneOf, allOf, or anyOf at the top level",
                )
            if is_set(tool, "description"):
                as_string(tool["description"], join(path, "description"))
            strict = is_set(tool, "strict") and as_boolean(tool["strict"], join(path, "strict"))
            if is_set(tool, "input_examples"):
                examples = as_list(tool["input_examples"], join(path, "input_examples"))
                for j, example in enumerate(examples):
                    as_object(example, join(path, f"input_examples.{j}"))
            if strict and grammar:  # compiled to a grammar: the JSON Schema subset only
                validate_schema_subset(schema, join(path, "input_schema"))
        counted_cache_control(tool, path, walk)
        if name is None:
            continue
        if name in names:
            fail("tools", "Tool names must be unique.")
        names.add(name)
    return frozenset(names)


def check_tool_choice(body: Mapping[str, Any], tool_names: frozenset[str]) -> bool:
    """Validate ``tool_choice``; True when it forces tool use (``any`` or ``tool``)."""
    if not is_set(body, "tool_choice"):
        return False
    choice, kind = tagged(body["tool_choice"], "tool_choice", ("auto", "any", "tool", "none"))
    if kind == "none":
        only(choice, frozenset({"type"}), "tool_choice")
        return False
    allowed = {"type", "disable_parallel_tool_use"} | ({"name"} if kind == "tool" else set())
    only(choice, frozenset(allowed), "tool_choice")
    if is_set(choice, "disable_parallel_tool_use"):
        as_boolean(choice["disable_parallel_tool_use"], "tool_choice.disable_parallel_tool_use")
    if kind == "auto":
        return False
    if not tool_names:
        fail("tool_choice", "tool_choice may only be specified while providing tools")
    if kind == "tool":
        name = as_string(required(choice, "name", "tool_choice"), "tool_choice.name")
        if name not in tool_names:
            fail("tool_choice.name", f"Tool '{name}' not found in tools")
    return True
