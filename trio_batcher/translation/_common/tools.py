"""Function tools and the tool choice as Anthropic's, for both dialects.

Only function tools exist upstream. Chat nests a tool's fields under ``function``
(``tools[i].function.name``), Responses writes them on the tool (``tools[i].name``, or
``tools[i].tools[k].name`` in a namespace); each dialect reads its own shape and hands the
fields here with the tool's path and the prefix its fields go by, so a bad tool is a 400
naming the client's own field. Strict tools have their schema cut to the subset Anthropic
compiles (``strict_schema``), which refuses, naming the node, a schema the grammar compiler
would refuse.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any, Final

from ...errors import invalid_request
from .content import cache_control
from .strict_schema import strict_schema

__all__ = [
    "check_allowed_mode",
    "function_tool",
    "keep_allowed",
    "named_choice",
    "settle_choice",
]

_TOOL_NAME: Final = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_NAMED_CHOICES: Final[Mapping[str, str]] = {"none": "none", "auto": "auto", "required": "any"}


def function_tool(
    tool: Mapping[str, Any],
    fields: Mapping[str, Any],
    param: str,
    prefix: str,
    names: set[str],
) -> dict[str, Any]:
    """The Anthropic tool for the function tool ``tool`` at ``param``, whose ``name``,
    ``description``, ``parameters`` and ``strict`` are in ``fields`` under ``prefix``
    (``"function."`` when nested, ``""`` when not); ``names`` are those taken so far.

    Raises:
      ProxyError: 400 naming ``{param}.{prefix}name`` (or the field at fault).
    """
    where = f"{param}.{prefix}"
    name = fields.get("name")
    if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
        raise invalid_request(
            f"{prefix}name must match ^[a-zA-Z0-9_-]{{1,64}}$.", param=f"{where}name"
        )
    if name in names:
        raise invalid_request(f"Duplicate tool name {name!r}.", param=f"{where}name")
    names.add(name)
    out: dict[str, Any] = {"name": name}
    description = fields.get("description")
    if description is not None and not isinstance(description, str):
        raise invalid_request(f"{prefix}description must be a string.", param=f"{where}description")
    if description:
        out["description"] = description
    out["input_schema"] = _input_schema(fields.get("parameters"), f"{where}parameters", prefix)
    strict = fields.get("strict")
    if strict is not None:
        if not isinstance(strict, bool):
            raise invalid_request(f"{prefix}strict must be a boolean.", param=f"{where}strict")
        out["strict"] = strict
        if strict:  # compiled into a grammar: only a subset of JSON Schema
            out["input_schema"] = _strict_input_schema(
                out["input_schema"], f"{where}parameters", prefix
            )
    control = cache_control(tool, param)
    if control is not None:
        out["cache_control"] = control
    return out


def _input_schema(parameters: object, param: str, prefix: str) -> dict[str, Any]:
    """``parameters`` as ``input_schema``; a missing or empty schema means "no arguments".

    Anthropic requires an object schema; OpenAI tolerates ``{"properties": …}`` without a
    ``type``, which is an object schema in all but name, so ``"type": "object"`` is added.
    """
    if parameters is None or parameters == {}:
        return {"type": "object", "properties": {}}
    if not isinstance(parameters, Mapping):
        raise invalid_request(f"{prefix}parameters must be a JSON Schema object.", param=param)
    for keyword in ("anyOf", "oneOf", "allOf"):
        if keyword in parameters:
            raise invalid_request(
                f"{prefix}parameters cannot use {keyword} at the top level (Anthropic's tools "
                "take one object schema); move the alternatives into a property.",
                param=f"{param}.{keyword}",
            )
    if "type" not in parameters:
        return {"type": "object", **parameters}
    if parameters["type"] != "object":
        raise invalid_request(
            f'{prefix}parameters must have "type": "object".', param=f"{param}.type"
        )
    return dict(parameters)


def _strict_input_schema(schema: dict[str, Any], param: str, prefix: str) -> dict[str, Any]:
    """``schema`` reshaped for the grammar; a ``$ref``, ``enum`` or ``const`` at the top
    stands without a ``type`` there, and Anthropic's tools take only an object schema."""
    out: dict[str, Any] = strict_schema(schema, param)
    for keyword in ("$ref", "enum", "const"):
        if keyword in out:
            raise invalid_request(
                f"A strict tool's {prefix}parameters cannot use {keyword} at the top level "
                "(Anthropic's tools take one object schema).",
                param=f"{param}.{keyword}",
            )
    return out


# -- the tool choice -----------------------------------------------------------------------


def named_choice(choice: object) -> dict[str, Any] | None:
    """``"none"``, ``"auto"`` or ``"required"`` as Anthropic's choice; None for anything else."""
    kind = _NAMED_CHOICES.get(choice) if isinstance(choice, str) else None
    return None if kind is None else {"type": kind}


def check_allowed_mode(mode: object, where: str, param: str) -> None:
    """An ``allowed_tools`` choice's ``mode`` (of the object the client knows as ``where``).

    Raises:
      ProxyError: 400 naming ``param`` for a mode other than ``auto`` or ``required``.
    """
    if mode not in ("auto", "required"):
        raise invalid_request(f'{where} needs mode "auto" or "required" and tools.', param=param)


def keep_allowed(mode: str, keep: Collection[str], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """An ``allowed_tools`` choice: the tool list is cut down to ``keep`` (Anthropic has no
    "offered but not callable" state), in place; ``mode`` is checked already."""
    tools[:] = [t for t in tools if t["name"] in keep]
    return {"type": "auto" if mode == "auto" else "any"}


def settle_choice(
    result: dict[str, Any] | None, tools: list[dict[str, Any]], parallel: bool | None
) -> dict[str, Any] | None:
    """The choice as sent, with the rules both dialects share: a choice that needs tools
    needs tools (``none`` and ``auto`` without tools mean what no tools mean), and
    ``parallel_tool_calls: false`` becomes ``disable_parallel_tool_use``."""
    if not tools:
        if result is not None and result["type"] not in ("none", "auto"):
            raise invalid_request("tool_choice requires tools.", param="tool_choice")
        return None
    if parallel is False:
        if result is None:
            result = {"type": "auto"}
        if result["type"] != "none":
            result["disable_parallel_tool_use"] = True
    return result
