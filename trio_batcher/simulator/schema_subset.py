"""The JSON Schema subset that structured outputs and strict tools accept.

Anthropic compiles ``output_config.format.schema`` and a ``strict: true`` tool's
``input_schema`` into a grammar, and the compiler takes only part of JSON Schema. The
official SDK's ``transform_schema`` (``anthropic/lib/_parse/_transform.py``) rewrites any
schema into the core of it, moving everything else into ``description``; the structured
outputs documentation adds a few keywords the SDK never emits (``default``,
``definitions``, type lists, simple ``pattern``). Accepted, per node:

* any type: ``type`` (a name, or a list of names), ``enum`` / ``const`` of strings, numbers,
  booleans or null, ``anyOf``, ``allOf``, ``$ref`` (local, resolving, not recursive),
  ``$defs`` / ``definitions``, ``description``, ``title``, ``default``;
* ``object``: ``properties``, ``required``, and ``additionalProperties``, which must be
  present and ``false``;
* ``string``: ``format`` of ``date-time``, ``time``, ``date``, ``duration``, ``email``,
  ``hostname``, ``uri``, ``ipv4``, ``ipv6`` or ``uuid``; ``pattern`` without
  backreferences, lookaround or word boundaries;
* ``array``: ``items``, and ``minItems`` of 0 or 1.

Everything else (``minimum``, ``maxLength``, ``oneOf``, ``maxItems``...) is rejected. Where
the SDK's output is looser than the list above (a node may omit ``type``, an object
``required`` or ``properties``, the root may be any type), so is this check: whatever the
SDK sends is accepted. Messages start with the field's path, like the API's
(``output_config.format.schema: For 'integer' type, property 'minimum' is not supported``),
and name the node inside the schema as a JSON pointer when it is not the root.

Pure: no I/O. Recursion is bounded by the request body's nesting limit; following ``$ref``
visits each definition once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final, NoReturn

from .errors import SimulatorInvalidRequest

__all__ = ["STRING_FORMATS", "TYPES", "validate_schema_subset"]

TYPES: Final = frozenset({"object", "array", "string", "integer", "number", "boolean", "null"})
STRING_FORMATS: Final = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "uri", "ipv4", "ipv6", "uuid"}
)

_DEFS: Final = ("$defs", "definitions")
_COMMON: Final = frozenset(
    {"type", "enum", "const", "anyOf", "allOf", "$ref", *_DEFS, "description", "title", "default"}
)
_BY_TYPE: Final[Mapping[str, frozenset[str]]] = {
    "object": frozenset({"properties", "required", "additionalProperties"}),
    "string": frozenset({"format", "pattern"}),
    "array": frozenset({"items", "minItems"}),
}
# Regex features the grammar compiler refuses: backreferences (\1, \k<n>, (?P=n)),
# lookaround ((?=, (?!, (?<=, (?<!) and word boundaries (\b, \B).
_REGEX_REFUSED: Final = re.compile(
    r"\\(?:[1-9]|k<|[bB])|(?<!\\)\(\?(?:=|!|<=|<!|P=)",
)
_ESCAPED_BACKSLASH: Final = re.compile(r"\\\\")


def validate_schema_subset(schema: object, path: str) -> None:
    """Check ``schema`` uses only what the structured-output grammar supports.

    Args:
      schema: the decoded schema (``output_config.format.schema`` or a strict tool's
        ``input_schema``).
      path: the field's dotted path, which every message starts with.

    Raises:
      SimulatorInvalidRequest: the first unsupported construct found.
    """
    root = schema if isinstance(schema, dict) else {}
    _node(schema, _Where(path, root, "#"))
    _acyclic(schema, _Where(path, root, "#"), set(), set())


class _Where:
    """Where a node is: the request field, the schema's root (for ``$ref``), the pointer."""

    __slots__ = ("path", "pointer", "root")

    def __init__(self, path: str, root: Mapping[str, Any], pointer: str) -> None:
        self.path, self.root, self.pointer = path, root, pointer

    def child(self, *parts: str | int) -> _Where:
        escaped = (str(p).replace("~", "~0").replace("/", "~1") for p in parts)
        return _Where(self.path, self.root, "/".join((self.pointer, *escaped)))

    def fail(self, message: str) -> NoReturn:
        where = "" if self.pointer == "#" else f" (at {self.pointer})"
        raise SimulatorInvalidRequest(f"{self.path}: {message}{where}")


def _node(node: object, where: _Where) -> None:
    if not isinstance(node, dict):
        where.fail("Each schema must be a JSON object")
    kind = node.get("type")
    kinds = kind if isinstance(kind, list) else [] if kind is None else [kind]
    if kind is not None and not kinds:
        where.fail("'type' must not be an empty list")
    for name in kinds:
        if not isinstance(name, str) or name not in TYPES:
            where.fail(f"Type {name!r} is not supported")
    allowed = _COMMON.union(*(_BY_TYPE.get(name, ()) for name in kinds))
    for key in node:
        if key not in allowed:
            if kind is None:
                where.fail(f"Property {key!r} is not supported without a 'type'")
            where.fail(f"For {kind!r} type, property {key!r} is not supported")

    for key in ("description", "title"):
        if key in node and not isinstance(node[key], str):
            where.child(key).fail(f"'{key}' must be a string")
    if "enum" in node:
        enum = node["enum"]
        if not isinstance(enum, list) or not enum or not all(map(_primitive, enum)):
            where.fail("'enum' must be a non-empty list of strings, numbers, booleans or null")
    if "const" in node and not _primitive(node["const"]):
        where.fail("'const' must be a string, number, boolean or null")
    for key in ("anyOf", "allOf"):
        if key in node:
            branches = node[key]
            if not isinstance(branches, list) or not branches:
                where.fail(f"'{key}' must be a non-empty list of schemas")
            for i, branch in enumerate(branches):
                _node(branch, where.child(key, i))
    for key in _DEFS:
        if key in node:
            defs = node[key]
            if not isinstance(defs, dict):
                where.fail(f"'{key}' must be an object of schemas")
            for name, definition in defs.items():
                _node(definition, where.child(key, name))
    if "$ref" in node:
        _resolve(node["$ref"], where)

    if "object" in kinds:
        _object(node, where)
    if "string" in kinds:
        fmt = node.get("format")
        if "format" in node and (not isinstance(fmt, str) or fmt not in STRING_FORMATS):
            where.fail(f"For 'string' type, format {node['format']!r} is not supported")
        if "pattern" in node:
            _pattern(node["pattern"], where)
    if "array" in kinds:
        if "items" in node:
            _node(node["items"], where.child("items"))
        if "minItems" in node and (
            isinstance(node["minItems"], bool) or node["minItems"] not in (0, 1)
        ):
            where.fail("For 'array' type, 'minItems' values other than 0 or 1 are not supported")


def _object(node: Mapping[str, Any], where: _Where) -> None:
    if node.get("additionalProperties", True) is not False:
        where.fail("For 'object' type, 'additionalProperties' must be explicitly set to false")
    properties = node.get("properties", {})
    if not isinstance(properties, dict):
        where.fail("'properties' must be an object of schemas")
    for name, schema in properties.items():
        _node(schema, where.child("properties", name))
    required = node.get("required", [])
    if not isinstance(required, list) or not all(isinstance(n, str) for n in required):
        where.fail("'required' must be a list of property names")


def _pattern(pattern: object, where: _Where) -> None:
    if not isinstance(pattern, str):
        where.fail("For 'string' type, 'pattern' must be a string")
    try:
        re.compile(pattern)
    except re.error:
        where.fail(f"For 'string' type, pattern {pattern!r} is not a valid regular expression")
    if _REGEX_REFUSED.search(_ESCAPED_BACKSLASH.sub("", pattern)):
        where.fail(
            f"For 'string' type, pattern {pattern!r} uses an unsupported regex feature "
            "(backreferences, lookaround and word boundaries are not supported)"
        )


def _resolve(ref: object, where: _Where) -> dict[str, Any]:
    """The schema a ``$ref`` names: a local JSON pointer into this document."""
    if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
        where.fail(f"$ref {ref!r} is not supported; only local references (#/$defs/...)")
    target: Any = where.root
    for part in ref[2:].split("/") if ref != "#" else ():
        key = part.replace("~1", "/").replace("~0", "~")
        target = target.get(key) if isinstance(target, dict) else None
    if not isinstance(target, dict):
        where.fail(f"$ref {ref!r} does not resolve to a schema")
    return target


def _acyclic(node: object, where: _Where, expanding: set[str], done: set[str]) -> None:
    """Reject a ``$ref`` that leads back into itself: a depth-first walk of the schema as
    the grammar would expand it, each reference expanded once. ``node`` has passed
    ``_node``, so its subschemas are well formed."""
    if not isinstance(node, dict):
        return
    ref = node.get("$ref")
    if isinstance(ref, str) and ref not in done:
        if ref in expanding:
            where.fail(f"Recursive schemas are not supported: $ref {ref!r} refers to itself")
        expanding.add(ref)
        _acyclic(_resolve(ref, where), where, expanding, done)
        expanding.discard(ref)
        done.add(ref)
    children = [*node.get("anyOf", ()), *node.get("allOf", ()), node.get("items")]
    children += node.get("properties", {}).values()
    for child in children:
        _acyclic(child, where, expanding, done)


def _primitive(value: object) -> bool:
    return value is None or isinstance(value, str | int | float | bool)
