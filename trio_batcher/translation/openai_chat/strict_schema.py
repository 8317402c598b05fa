"""JSON Schemas reshaped into the subset Anthropic compiles into a grammar.

Anthropic enforces a structured output (``output_config.format``) and a strict tool's
``input_schema`` by compiling the schema into a grammar, and the compiler takes only part of
JSON Schema: every object must say ``additionalProperties: false``, a node has one ``type``,
and the bounds a grammar cannot count (``minimum``, ``maxLength``, ``pattern``...) are 400s.
OpenAI clients write full JSON Schema (pydantic's ``Field(ge=0)``, zod's ``.int()``, a
``["string", "null"]`` type), so the gateway reshapes it the way Anthropic's own SDK does
before it sends a schema:

- objects get ``additionalProperties: false`` (and ``properties``, if they had none);
- a list of types becomes an ``anyOf`` of one type each; ``oneOf`` becomes ``anyOf``;
- kept as they are: ``type``, ``anyOf``, ``allOf``, ``enum`` and ``const`` of plain values,
  ``description``, ``title``, ``$ref`` and ``$defs``/``definitions``, ``properties``,
  ``required``, ``items``, a ``minItems`` of 0 or 1, and the string ``format`` values the
  compiler knows;
- every other keyword moves into the node's ``description`` as JSON (``{"minimum": 0}``), so
  the model still reads the constraint even though the grammar cannot enforce it; the
  client's own validation (pydantic, zod) still does.

A node the subset cannot express at all (``{}``, ``true``: any value) is left as it was for
the upstream to judge; a typeless node that says more (``{"minimum": 0}``: any value, and if
a number, at least 0) keeps only its description, the rest moved into it as above. Pure: no I/O, the input is never modified.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["strict_schema"]

STRING_FORMATS: Final = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "uri", "ipv4", "ipv6", "uuid"}
)
_DROPPED: Final = frozenset({"$schema", "$id", "$comment"})  # say nothing about the value
_MAX_DEPTH: Final = 64


def strict_schema(schema: object) -> Any:
    """``schema`` in the compilable subset (see the module docstring)."""
    return _node(schema, 0)


def _node(schema: object, depth: int) -> Any:
    if not isinstance(schema, Mapping) or depth > _MAX_DEPTH:
        return schema
    rest = {k: v for k, v in schema.items() if k not in _DROPPED}
    out: dict[str, Any] = {}
    for key in ("$defs", "definitions"):
        defs = rest.pop(key, None)
        if isinstance(defs, Mapping):
            out[key] = {name: _node(sub, depth + 1) for name, sub in defs.items()}
        elif defs is not None:
            rest[key] = defs
    if "$ref" in rest:
        out["$ref"] = rest.pop("$ref")
        return out  # a reference stands alone
    kind = rest.pop("type", None)
    if isinstance(kind, list):
        if len(kind) != 1:
            return _split_types(out, rest, kind, depth)
        kind = kind[0]

    literal = False
    for key in ("enum", "const"):
        value = rest.get(key)
        plain = (
            all(map(_plain, value)) if key == "enum" and isinstance(value, list) else _plain(value)
        )
        if key in rest and plain and (key == "const" or value):
            out[key] = rest.pop(key)
            literal = True
    for key in ("anyOf", "oneOf", "allOf"):
        branches = rest.get(key)
        if isinstance(branches, list):
            rest.pop(key)
            out["allOf" if key == "allOf" else "anyOf"] = [_node(b, depth + 1) for b in branches]
            break
    else:
        if not literal and kind is None and not rest.keys() - {"description", "title"}:
            return schema  # any value, and nothing said of it that the subset refuses
    if kind is not None and not literal:
        out["type"] = kind
    for key in ("description", "title"):
        if isinstance(rest.get(key), str):
            out[key] = rest.pop(key)

    if kind == "object":
        properties = rest.pop("properties", None)
        if isinstance(properties, Mapping):
            out["properties"] = {k: _node(v, depth + 1) for k, v in properties.items()}
        else:
            out["properties"] = {}
            if properties is not None:
                rest["properties"] = properties
        if isinstance(rest.get("required"), list):
            out["required"] = rest.pop("required")
        rest.pop("additionalProperties", None)  # a map's value schema cannot be compiled
        out["additionalProperties"] = False
    elif kind == "string":
        fmt = rest.get("format")
        if isinstance(fmt, str) and fmt in STRING_FORMATS:
            out["format"] = rest.pop("format")
    elif kind == "array":
        if "items" in rest and isinstance(rest["items"], Mapping):
            out["items"] = _node(rest.pop("items"), depth + 1)
        if rest.get("minItems") in (0, 1) and not isinstance(rest.get("minItems"), bool):
            out["minItems"] = rest.pop("minItems")

    if rest:
        note = json.dumps(rest, ensure_ascii=False, separators=(", ", ": "), default=str)
        described = out.get("description")
        out["description"] = note if described is None else f"{described}\n\n{note}"
    return out


def _split_types(
    out: dict[str, Any], rest: dict[str, Any], kinds: list[Any], depth: int
) -> dict[str, Any]:
    """``{"type": ["string", "null"], ...}`` as ``{"anyOf": [{"type": "string", ...},
    {"type": "null"}]}``, each branch keeping the keywords that apply to its type."""
    shared = {k: rest.pop(k) for k in ("description", "title") if isinstance(rest.get(k), str)}
    out.update(shared)
    out["anyOf"] = [
        _node({"type": kind} if kind == "null" else {**rest, "type": kind}, depth + 1)
        for kind in kinds
    ]
    return out


def _plain(value: object) -> bool:
    return value is None or isinstance(value, str | int | float | bool)
