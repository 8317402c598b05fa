"""Responses ``tools`` and ``tool_choice`` as Anthropic tools, by the rules Chat's follow.

The Responses API writes function tools flat (``{type: "function", name, parameters,
strict}``) and groups some under a ``namespace`` tool; Chat nests them under ``function``.
Each function tool goes through ``_common.tools`` with its Responses path
(``tools[2].tools[0]``), so both dialects get the same schema checks, strict-schema
reshaping and choice rules, and every error names the client's own field.

Decisions:

- ``strict`` defaults to **true** in this API (it is false in Chat): an absent ``strict``
  is sent as ``strict: true`` with the schema reshaped by ``strict_schema``, exactly as an
  explicit one. (OpenAI also requires every property to be listed in ``required`` then;
  Anthropic's grammar does not, so optional properties stay optional.) A schema that has
  no strict form is a 400 when the client *said* ``strict: true``; when strictness was only
  the default, the tool is sent without it and ``tools[i].strict`` is named as ignored.
- A namespaced tool becomes one Anthropic tool named ``<namespace>__<name>`` (Anthropic has
  no namespaces; its names match ``^[a-zA-Z0-9_-]{1,64}$``). When that is longer than 64
  characters or taken by a flat tool, it is cut to 55 and given an ``_`` and 8 hex digits of
  a digest of both parts. ``Tools.names`` maps every Anthropic name back to
  ``(namespace, name)``, which is how a call comes back as a ``function_call`` with
  ``namespace``. The namespace's description is appended to each of its tools'.
- ``web_search`` (and ``web_search_preview``) with ``external_web_access: false`` is inert
  here -- the model can search nothing -- and is dropped, named ``tools[i]`` in ignored
  params: Codex sends one on every request, and a 400 would shut it out. With live access
  (the default) it would change the answer, so it is a 400, as is every other built-in tool.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ...errors import ProxyError, invalid_request
from .._common.fields import optional_bool
from .._common.tools import (
    check_allowed_mode,
    function_tool,
    keep_allowed,
    named_choice,
    settle_choice,
)

__all__ = ["Tools", "anthropic_tool_name", "translate_tool_choice", "translate_tools"]

MAX_NAME: Final = 64  # Anthropic's (and the Chat path's) tool name limit
NAMESPACE_SEPARATOR: Final = "__"
_NAME_PART: Final = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_WEB_SEARCH: Final = frozenset(
    {"web_search", "web_search_2025_08_26", "web_search_preview", "web_search_preview_2025_03_11"}
)


@dataclass
class Tools:
    """The translated tools and the names needed to map calls both ways."""

    anthropic: list[dict[str, Any]] = field(default_factory=list)
    names: dict[str, tuple[str | None, str]] = field(default_factory=dict)  # upstream → client
    by_client: dict[tuple[str | None, str], str] = field(default_factory=dict)  # client → upstream


def anthropic_tool_name(namespace: str | None, name: str, taken: Collection[str] = ()) -> str:
    """The Anthropic name of ``name`` in ``namespace`` (see the module docstring).

    ``taken`` holds names already used by flat tools; a joined name among them gets the
    digest form instead.
    """
    if namespace is None:
        return name
    joined = f"{namespace}{NAMESPACE_SEPARATOR}{name}"
    if len(joined) <= MAX_NAME and joined not in taken:
        return joined
    digest = hashlib.blake2s(f"{namespace}\0{name}".encode()).hexdigest()[:8]
    return f"{joined[: MAX_NAME - 9]}_{digest}"


def translate_tools(value: object, ignored: list[str]) -> Tools:
    """``tools`` as Anthropic tools; inert tools named in ``ignored``.

    Raises:
      ProxyError: 400 naming ``tools[i]…`` for a tool that cannot be honoured.
    """
    if value is None:
        return Tools()
    if not isinstance(value, list):
        raise invalid_request("tools must be an array.", param="tools")
    entries: list[tuple[str | None, Mapping[str, Any], str, str | None]] = []
    for i, tool in enumerate(value):
        param = f"tools[{i}]"
        if not isinstance(tool, Mapping):
            raise invalid_request("A tool must be an object.", param=param)
        kind = tool.get("type")
        if kind == "function":
            entries.append((None, tool, param, None))
        elif kind == "namespace":
            entries.extend(_namespace(tool, param))
        elif isinstance(kind, str) and kind in _WEB_SEARCH:
            if tool.get("external_web_access") is not False:
                raise invalid_request(
                    "Web search with live access is not supported (the upstream model has "
                    "no search tool here); remove it, or set external_web_access to false.",
                    param=f"{param}.type",
                )
            ignored.append(param)
        else:
            raise invalid_request(
                f"Unsupported tool type {kind!r}; only function and namespace tools (and "
                "web_search without external access) are supported.",
                param=f"{param}.type",
            )
    flat = {str(t.get("name")) for ns, t, _, _ in entries if ns is None}
    result = Tools()
    taken: set[str] = set()
    for namespace, tool, param, note in entries:
        name = tool.get("name")
        upstream = anthropic_tool_name(namespace, name, flat) if isinstance(name, str) else name
        fields: dict[str, Any] = {"name": upstream, "parameters": tool.get("parameters")}
        description = tool.get("description")
        if note and (description is None or isinstance(description, str)):
            description = f"{description}\n\n{note}" if description else note
        fields["description"] = description
        strict = tool.get("strict")
        fields["strict"] = True if strict is None else strict
        try:
            result.anthropic.append(function_tool(tool, fields, param, "", taken))
        except ProxyError as exc:
            if strict is not None or not (exc.param or "").startswith(f"{param}.parameters"):
                raise
            # The schema has no strict form; the client never asked for one: send it loose.
            fields["strict"] = False
            taken.discard(str(upstream))  # taken by the failed attempt
            result.anthropic.append(function_tool(tool, fields, param, "", taken))
            ignored.append(f"{param}.strict")
        if isinstance(name, str) and isinstance(upstream, str):
            result.names[upstream] = (namespace, name)
            result.by_client[(namespace, name)] = upstream
    return result


def _namespace(
    tool: Mapping[str, Any], param: str
) -> list[tuple[str | None, Mapping[str, Any], str, str | None]]:
    name = tool.get("name")
    if not isinstance(name, str) or not _NAME_PART.fullmatch(name):
        raise invalid_request(
            "A namespace's name must match ^[a-zA-Z0-9_-]{1,64}$.", param=f"{param}.name"
        )
    description = tool.get("description")
    if description is not None and not isinstance(description, str):
        raise invalid_request("description must be a string.", param=f"{param}.description")
    inner = tool.get("tools")
    if not isinstance(inner, list):
        raise invalid_request("A namespace needs a tools array.", param=f"{param}.tools")
    note = f"(One of the `{name}` tools: {description})" if description else None
    out: list[tuple[str | None, Mapping[str, Any], str, str | None]] = []
    for k, member in enumerate(inner):
        where = f"{param}.tools[{k}]"
        if not isinstance(member, Mapping):
            raise invalid_request("A tool must be an object.", param=where)
        if member.get("type") != "function":
            raise invalid_request(
                f"Unsupported tool type {member.get('type')!r} in a namespace; only function "
                "tools are supported.",
                param=f"{where}.type",
            )
        member_name = member.get("name")
        if not isinstance(member_name, str) or not _NAME_PART.fullmatch(member_name):
            raise invalid_request("name must match ^[a-zA-Z0-9_-]{1,64}$.", param=f"{where}.name")
        out.append((name, member, where, note))
    return out


def translate_tool_choice(payload: Mapping[str, Any], tools: Tools) -> dict[str, Any] | None:
    """``tool_choice`` and ``parallel_tool_calls`` as Anthropic's ``tool_choice``.

    ``{type: "function", name}`` names a flat tool, or a namespaced one whose name is
    unique among the namespaces; ``allowed_tools`` cuts the tool list down to its entries,
    as on the Chat path. Choices of built-in tools are a 400.
    """
    choice = payload.get("tool_choice")
    result: dict[str, Any] | None
    if choice is None:
        result = None
    elif isinstance(choice, Mapping):
        kind = choice.get("type")
        if kind == "function":
            result = {"type": "tool", "name": _chosen(choice, tools, "tool_choice")}
        elif kind == "allowed_tools":
            entries = choice.get("tools")
            if not isinstance(entries, list):
                raise invalid_request(
                    "tool_choice.tools must be an array.", param="tool_choice.tools"
                )
            keep: set[str] = set()
            for i, entry in enumerate(entries):
                where = f"tool_choice.tools[{i}]"
                if not isinstance(entry, Mapping) or entry.get("type") != "function":
                    raise invalid_request(
                        "allowed_tools entries must be function tools from tools.", param=where
                    )
                keep.add(_chosen(entry, tools, where))
            mode = choice.get("mode")
            check_allowed_mode(mode, "tool_choice", "tool_choice.mode")
            result = keep_allowed(str(mode), keep, tools.anthropic)
        else:
            raise invalid_request(
                f"tool_choice of type {kind!r} is not supported; only function tools exist here.",
                param="tool_choice.type",
            )
    elif (named := named_choice(choice)) is not None:
        result = named
    else:
        raise invalid_request(
            'tool_choice must be "none", "auto", "required", a function or allowed_tools.',
            param="tool_choice",
        )
    return settle_choice(result, tools.anthropic, optional_bool(payload, "parallel_tool_calls"))


def _chosen(entry: Mapping[str, Any], tools: Tools, param: str) -> str:
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise invalid_request("A function choice needs a name.", param=f"{param}.name")
    namespace = entry.get("namespace")
    if isinstance(namespace, str) and (namespace, name) in tools.by_client:
        return tools.by_client[(namespace, name)]
    if (None, name) in tools.by_client:
        return tools.by_client[(None, name)]
    namespaced = [up for (ns, n), up in tools.by_client.items() if ns is not None and n == name]
    if len(namespaced) == 1:
        return namespaced[0]
    raise invalid_request(
        f"tool_choice names {name!r}, which is not "
        + ("unique among the namespaced tools." if namespaced else "in tools."),
        param=f"{param}.name",
    )
