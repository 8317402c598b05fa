"""Deterministic example values for a JSON Schema: tool inputs and structured outputs.

Covers what tool and structured-output schemas use in practice: ``type`` (or a list of
types), ``enum`` / ``const`` (first value), ``default``, ``anyOf`` / ``oneOf`` (first
branch), ``allOf`` (merged objects; only properties every closed branch -- one with
``additionalProperties: false`` -- lists), local ``$ref`` (``#/$defs/...``, ``#/definitions/...``),
objects (the ``required`` properties, or all properties when none are required),
arrays (``minItems`` items, at least one, ``prefixItems``), strings (``format``,
``pattern``, ``minLength``, ``maxLength``), numbers and integers (within ``minimum`` /
``maximum``). That includes all of the subset structured outputs and strict tools accept
(``schema_subset``), so their simulated values always validate.
Pure: the value depends only on the schema and property names.
"""

from __future__ import annotations

import importlib
import math
import re
from collections.abc import Mapping
from typing import Any, Final

# The regular-expression parser (``re._parser``, 3.11 on), to write an example a pattern
# matches; untyped in the stubs, and internal, so anything unexpected falls back.
_sre: Any = importlib.import_module("re._parser")

MAX_DEPTH: Final = 8

_FORMATS: Final[Mapping[str, str]] = {
    "date-time": "2026-01-01T12:00:00Z",
    "date": "2026-01-01",
    "time": "12:00:00",
    "duration": "P1D",
    "email": "user@example.com",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "hostname": "example.com",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
}


def example_value(schema: object, *, name: str = "value") -> Any:
    """A value valid for ``schema`` (best effort for unsupported keywords)."""
    root = schema if isinstance(schema, dict) else {}
    return _value(schema, root, name, 0)


def _resolve(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    for _ in range(MAX_DEPTH):
        ref = schema.get("$ref")
        if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
            return schema
        target: Any = root
        for part in ref[2:].split("/") if ref != "#" else ():
            key = part.replace("~1", "/").replace("~0", "~")
            target = target.get(key, {}) if isinstance(target, dict) else {}
        schema = target if isinstance(target, dict) else {}
    return schema


def _value(schema: object, root: Mapping[str, Any], name: str, depth: int) -> Any:
    if not isinstance(schema, dict):
        return f"{name} value"  # ``true`` / ``{}`` accept anything
    schema = _resolve(schema, root)
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    if "default" in schema:
        return schema["default"]
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return _value(_non_null_first(options, root), root, name, depth + 1)
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and all_of:
        return _value(_merge(all_of, root), root, name, depth + 1)
    kind = _type(schema)
    if depth >= MAX_DEPTH:
        return _shallow(kind, name)
    if kind == "object":
        return _object(schema, root, depth)
    if kind == "array":
        return _array(schema, root, name, depth)
    if kind == "string":
        return _string(schema, name)
    if kind == "integer":
        return _integer(schema)
    if kind == "number":
        return _number(schema)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return f"{name} value"


def _merge(parts: list[Any], root: Mapping[str, Any]) -> dict[str, Any]:
    """One schema for ``allOf``: a value must satisfy every part, so a closed part
    (``additionalProperties: false``) drops the properties it does not list."""
    merged: dict[str, Any] = {}
    closed: list[Mapping[str, Any]] = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        part = _resolve(part, root)
        if part.get("additionalProperties") is False:
            closed.append(part.get("properties") or {})
        for key, value in part.items():
            if key in ("properties", "required") and key in merged:
                merged[key] = (
                    {**merged[key], **value} if key == "properties" else merged[key] + value
                )
            else:
                merged[key] = value
    if closed and isinstance(merged.get("properties"), dict):
        merged["properties"] = {
            n: s for n, s in merged["properties"].items() if all(n in c for c in closed)
        }
    return merged


def _non_null_first(options: list[Any], root: Mapping[str, Any]) -> Any:
    for option in options:
        if not (isinstance(option, dict) and _resolve(option, root).get("type") == "null"):
            return option
    return options[0]


def _type(schema: Mapping[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if kinds else "null"
    if isinstance(kind, str):
        return kind
    if "properties" in schema:
        return "object"
    if "items" in schema or "prefixItems" in schema:
        return "array"
    return None


def _shallow(kind: str | None, name: str) -> Any:
    return {"object": {}, "array": [], "integer": 0, "number": 0, "boolean": False}.get(
        kind or "", f"{name} value" if kind == "string" or kind is None else None
    )


def _object(schema: Mapping[str, Any], root: Mapping[str, Any], depth: int) -> dict[str, Any]:
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return {}
    required = schema.get("required")
    if isinstance(required, list) and required:
        names = [n for n in required if n in properties]
    else:
        names = list(properties)
    return {n: _value(properties[n], root, n, depth + 1) for n in names}


def _array(schema: Mapping[str, Any], root: Mapping[str, Any], name: str, depth: int) -> list[Any]:
    prefix = schema.get("prefixItems")
    items = schema.get("items", {})
    out: list[Any] = []
    if isinstance(prefix, list):
        out = [_value(p, root, name, depth + 1) for p in prefix]
    low = schema.get("minItems")
    count = max(low if isinstance(low, int) else 1, len(out))
    high = schema.get("maxItems")
    if isinstance(high, int):
        count = min(count, high)
    if items is False:
        return out[:count]
    while len(out) < count:
        out.append(_value(items, root, name, depth + 1))
    return out[:count]


def _string(schema: Mapping[str, Any], name: str) -> str:
    fmt = schema.get("format")
    text = _FORMATS.get(fmt, f"{name} value") if isinstance(fmt, str) else f"{name} value"
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and not _matches(pattern, text):
        text = _example_of(pattern) or text
    low = schema.get("minLength")
    if isinstance(low, int) and len(text) < low:
        text = text + "x" * (low - len(text))
    high = schema.get("maxLength")
    if isinstance(high, int) and len(text) > high:
        text = text[:high]
    return text


def _matches(pattern: str, text: str) -> bool:
    try:
        return re.search(pattern, text) is not None
    except (re.error, RecursionError):
        return False


def _example_of(pattern: str) -> str | None:
    """A short string the pattern matches (as a model asked for it would write one), or
    None for a pattern this small generator cannot satisfy."""
    try:
        text = "".join(_emit(_sre.parse(pattern), {}))
    except (re.error, RecursionError, ValueError, TypeError):
        return None
    return text if _matches(pattern, text) else None


def _emit(items: Any, groups: dict[int, str]) -> list[str]:
    out: list[str] = []
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(arg))
        elif name == "NOT_LITERAL":
            out.append("a" if chr(arg) != "a" else "b")
        elif name == "ANY":
            out.append("a")
        elif name == "IN":
            out.append(_member(arg))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, _high, body = arg
            out += _emit(body, groups) * max(low, 0)
        elif name == "SUBPATTERN":
            group, _add, _remove, body = arg
            text = "".join(_emit(body, groups))
            if group is not None:
                groups[group] = text
            out.append(text)
        elif name == "BRANCH":
            out += _emit(arg[1][0], groups)
        elif name == "GROUPREF":
            out.append(groups.get(arg, ""))
        elif name in ("AT", "ASSERT", "ASSERT_NOT"):
            continue  # anchors and lookarounds consume nothing
        else:
            raise ValueError(name)
    return out


_CATEGORIES: Final = {"CATEGORY_DIGIT": "0", "CATEGORY_WORD": "a", "CATEGORY_SPACE": " "}


def _member(items: Any) -> str:
    """A character in a class like ``[A-Z0-9_]`` (the first one it names)."""
    if items and str(items[0][0]) == "NEGATE":
        excluded = {chr(arg) for op, arg in items[1:] if str(op) == "LITERAL"}
        return next(c for c in "aA0_-" if c not in excluded)
    op, arg = items[0]
    name = str(op)
    if name == "LITERAL":
        return chr(arg)
    if name == "RANGE":
        return chr(arg[0])
    if name == "CATEGORY" and str(arg) in _CATEGORIES:
        return _CATEGORIES[str(arg)]
    raise ValueError(name)


def _integer(schema: Mapping[str, Any]) -> int:
    low, high = -math.inf, math.inf
    if isinstance(schema.get("minimum"), int | float):
        low = math.ceil(schema["minimum"])
    if isinstance(schema.get("exclusiveMinimum"), int | float):
        low = max(low, math.floor(schema["exclusiveMinimum"]) + 1)
    if isinstance(schema.get("maximum"), int | float):
        high = math.floor(schema["maximum"])
    if isinstance(schema.get("exclusiveMaximum"), int | float):
        high = min(high, math.ceil(schema["exclusiveMaximum"]) - 1)
    value = 42
    if value > high:
        value = int(high)
    if value < low:
        value = int(low)
    return value


def _number(schema: Mapping[str, Any]) -> float:
    low, high = -math.inf, math.inf
    for key in ("minimum", "exclusiveMinimum"):
        if isinstance(schema.get(key), int | float):
            low = max(low, float(schema[key]))
    for key in ("maximum", "exclusiveMaximum"):
        if isinstance(schema.get(key), int | float):
            high = min(high, float(schema[key]))
    value = 4.2
    if low < value < high or (value == low and "exclusiveMinimum" not in schema):
        return value
    if low != -math.inf and high != math.inf:
        return (low + high) / 2
    return low + 1 if low != -math.inf else high - 1
