"""JSON Schemas reshaped into the subset Anthropic compiles into a grammar, or refused.

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
  compiler knows; a node with a plain ``enum`` or ``const`` keeps no ``type`` and so none of
  the keywords that need one;
- every other keyword moves into the node's ``description`` as JSON (``{"minimum": 0}``), so
  the model still reads the constraint even though the grammar cannot enforce it; the
  client's own validation (pydantic, zod) still does.

Where a kept keyword is malformed, the schema is refused instead, with a 400 whose ``param``
names the place (``tools[0].function.parameters.properties.x.type``): describing it would
drop a constraint the client meant, and sending it would be the upstream's 400. Refused:

- a subschema (of ``properties``, ``items``, ``anyOf``/``oneOf``/``allOf``,
  ``$defs``/``definitions``) that is neither an object nor a boolean, and ``false`` (no
  value is valid, which a grammar cannot say); ``true`` is sent as ``{}``, its equal;
- a ``type`` that is not one of the seven type names or a non-empty list of them;
- ``properties`` (of an object) that is not an object, ``required`` that is not a list of
  strings, an ``enum`` that is not a non-empty list, a combinator that is not a non-empty
  list, ``$defs``/``definitions`` that are not an object;
- a ``$ref`` that is not a local pointer (``#/$defs/...``) resolving to a schema in the
  reshaped document, or that makes the schema recursive;
- nesting deeper than ``_MAX_DEPTH`` schemas.

These mirror what the upstream refuses (the simulator's ``schema_subset`` says the same); a
keyword that moves into the description is only text, so it is never refused. A keyword set
to ``null`` counts as absent, as it does for ``type`` upstream (``const: null`` excepted:
there null is the value). A node the subset cannot express at all (``{}``: any value) is
sent as it is; a typeless node that says more (``{"minimum": 0}``: any value, and if a
number, at least 0) keeps only its description, the rest moved into it as above.

Pure: no I/O, the input is never modified. Recursion is bounded by ``_MAX_DEPTH``; the
check for recursive ``$ref`` chains walks with a stack of its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, Final, NoReturn, final

from ...errors import invalid_request

__all__ = ["strict_schema"]

TYPES: Final = ("string", "number", "integer", "boolean", "object", "array", "null")
STRING_FORMATS: Final = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "uri", "ipv4", "ipv6", "uuid"}
)
_DROPPED: Final = frozenset({"$schema", "$id", "$comment"})  # say nothing about the value
_COMBINATORS: Final = ("anyOf", "oneOf", "allOf")
_MAX_DEPTH: Final = 64


def strict_schema(schema: object, param: str) -> Any:
    """``schema`` in the compilable subset (see the module docstring).

    Args:
      schema: the client's schema (a strict tool's ``parameters``, a ``json_schema``'s
        ``schema``), never modified.
      param: where ``schema`` is in the request (``tools[0].function.parameters``); a
        refusal's ``param`` extends it to the offending node.

    Raises:
      ProxyError: a 400 ``invalid_request_error`` for a schema the module docstring
        refuses, before anything is sent.
    """
    refs: list[tuple[Mapping[str, Any], _At]] = []
    out = _node(schema, _At(param, "", 0, refs))
    if isinstance(out, Mapping):
        _check_refs(out, refs)
    return out


@final
class _At:
    """Where a node is: ``root``, the schema's own ``param`` in the request, and ``path``
    from there to the node (``.properties.x``); how deep the node is; the list of the
    ``$ref`` nodes met so far (one list for the whole walk)."""

    __slots__ = ("depth", "path", "refs", "root")

    def __init__(
        self, root: str, path: str, depth: int, refs: list[tuple[Mapping[str, Any], _At]]
    ) -> None:
        self.root, self.path, self.depth, self.refs = root, path, depth, refs

    def sub(self, *parts: str | int) -> _At:
        """A subschema, one level deeper."""
        return _At(self.root, _join(self.path, parts), self.depth + 1, self.refs)

    def fail(self, message: str, *parts: str | int) -> NoReturn:
        """Refuse the schema at this node (or at its keyword ``parts``). The message names
        the place inside the schema only, so that a caller who renames ``param`` (another
        dialect's field) need not rewrite the message."""
        path = _join(self.path, parts)
        where = f" at {path.removeprefix('.')}" if path else ""
        raise invalid_request(f"Invalid schema{where}: {message}.", param=self.root + path)


def _join(path: str, parts: tuple[str | int, ...]) -> str:
    return path + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def _node(schema: object, at: _At) -> Any:
    if schema is True:
        return {}  # any value, as {} says
    if schema is False:
        at.fail("false (no value is valid) cannot be compiled into a grammar")
    if not isinstance(schema, Mapping):
        at.fail(f"a schema must be an object or a boolean, not {_kind_of(schema)}")
    if at.depth > _MAX_DEPTH:
        at.fail(f"schemas nested more than {_MAX_DEPTH} deep are not supported")
    rest = {
        k: v for k, v in schema.items() if k not in _DROPPED and (v is not None or k == "const")
    }
    out: dict[str, Any] = {}
    for key in ("$defs", "definitions"):
        if key in rest:
            defs = rest.pop(key)
            if not isinstance(defs, Mapping):
                at.fail(f"{key} must be an object of schemas", key)
            out[key] = {name: _node(sub, at.sub(key, name)) for name, sub in defs.items()}
    if "$ref" in rest:
        ref = rest.pop("$ref")
        if not isinstance(ref, str):
            at.fail(f"$ref must be a string, not {_kind_of(ref)}", "$ref")
        if ref != "#" and not ref.startswith("#/"):
            at.fail(f"$ref {ref!r} is not a local reference (#/$defs/...)", "$ref")
        out["$ref"] = ref
        at.refs.append((out, at))
        return out  # a reference stands alone
    kind = rest.pop("type", None)
    if kind is not None:
        _check_type(kind, at)
    if isinstance(kind, list):
        if len(kind) != 1:
            return _split_types(out, rest, kind, at)
        kind = kind[0]

    literal = False
    if "enum" in rest:
        enum = rest["enum"]
        if not isinstance(enum, list) or not enum:
            at.fail("enum must be a non-empty array", "enum")
        if all(map(_plain, enum)):
            out["enum"] = rest.pop("enum")
            literal = True
    if "const" in rest and _plain(rest["const"]):
        out["const"] = rest.pop("const")
        literal = True
    combinator = next((key for key in _COMBINATORS if key in rest), None)
    if combinator is not None:  # the first one only; any other moves into the description
        branches = rest.pop(combinator)
        if not isinstance(branches, list) or not branches:
            at.fail(f"{combinator} must be a non-empty array of schemas", combinator)
        out["allOf" if combinator == "allOf" else "anyOf"] = [
            _node(b, at.sub(combinator, i)) for i, b in enumerate(branches)
        ]
    if kind is not None and not literal:
        out["type"] = kind
    for key in ("description", "title"):
        if isinstance(rest.get(key), str):
            out[key] = rest.pop(key)

    if literal:
        pass  # the values say it all, and without a type no keyword of one may stand
    elif kind == "object":
        _object(rest, out, at)
    elif kind == "string":
        fmt = rest.get("format")
        if isinstance(fmt, str) and fmt in STRING_FORMATS:
            out["format"] = rest.pop("format")
    elif kind == "array":
        if "items" in rest and not isinstance(rest["items"], list):  # a tuple form is described
            out["items"] = _node(rest.pop("items"), at.sub("items"))
        if rest.get("minItems") in (0, 1) and not isinstance(rest.get("minItems"), bool):
            out["minItems"] = rest.pop("minItems")

    if rest:
        note = json.dumps(rest, ensure_ascii=False, separators=(", ", ": "), default=str)
        described = out.get("description")
        out["description"] = note if described is None else f"{described}\n\n{note}"
    return out


def _check_type(kind: object, at: _At) -> None:
    names = kind if isinstance(kind, list) else [kind]
    if not names:
        at.fail("type must not be an empty array", "type")
    for i, name in enumerate(names):
        if not isinstance(name, str) or name not in TYPES:
            where = ("type", i) if isinstance(kind, list) else ("type",)
            at.fail(f"type {_show(name)} is not one of {', '.join(TYPES)}", *where)


def _object(rest: dict[str, Any], out: dict[str, Any], at: _At) -> None:
    properties = rest.pop("properties", {})
    if not isinstance(properties, Mapping):
        at.fail("properties must be an object of schemas", "properties")
    out["properties"] = {k: _node(v, at.sub("properties", k)) for k, v in properties.items()}
    if "required" in rest:
        required = rest.pop("required")
        if not isinstance(required, list):
            at.fail("required must be an array of property names", "required")
        for i, name in enumerate(required):
            if not isinstance(name, str):
                at.fail(
                    f"a required property name must be a string, not {_kind_of(name)}",
                    "required",
                    i,
                )
        out["required"] = required
    rest.pop("additionalProperties", None)  # a map's value schema cannot be compiled
    out["additionalProperties"] = False


def _split_types(
    out: dict[str, Any], rest: dict[str, Any], kinds: list[Any], at: _At
) -> dict[str, Any]:
    """``{"type": ["string", "null"], ...}`` as ``{"anyOf": [{"type": "string", ...},
    {"type": "null"}]}``, each branch keeping the keywords that apply to its type."""
    shared = {k: rest.pop(k) for k in ("description", "title") if isinstance(rest.get(k), str)}
    out.update(shared)
    # The client wrote no branches, so a branch's problem is the node's: no new path.
    branch = _At(at.root, at.path, at.depth + 1, at.refs)
    out["anyOf"] = [
        _node({"type": kind} if kind == "null" else {**rest, "type": kind}, branch)
        for kind in kinds
    ]
    return out


def _check_refs(root: Mapping[str, Any], refs: list[tuple[Mapping[str, Any], _At]]) -> None:
    """Every ``$ref`` resolves in the reshaped document, and none leads back into itself
    (the grammar would be infinite): a depth-first walk of the schema as the grammar
    expands it, each reference expanded once."""
    for node, at in refs:
        if not isinstance(_resolve(root, node["$ref"]), Mapping):
            at.fail(f"$ref {node['$ref']!r} does not resolve to a schema", "$ref")
    where = {id(node): at for node, at in refs}
    expanding: set[str] = set()
    done: set[str] = set()
    stack: list[object] = [root]
    while stack:
        item = stack.pop()
        if isinstance(item, _Leave):
            expanding.discard(item.ref)
            done.add(item.ref)
            continue
        if not isinstance(item, Mapping):
            continue
        stack.extend(_children(item))
        ref = item.get("$ref")
        if isinstance(ref, str) and ref not in done and id(item) in where:
            if ref in expanding:
                where[id(item)].fail(f"$ref {ref!r} makes the schema recursive", "$ref")
            expanding.add(ref)
            stack.append(_Leave(ref))  # popped once everything under the target is walked
            stack.append(_resolve(root, ref))


@final
class _Leave:
    """A marker on ``_check_refs``' stack: the walk under ``ref``'s target is over."""

    __slots__ = ("ref",)

    def __init__(self, ref: str) -> None:
        self.ref = ref


def _children(node: Mapping[str, Any]) -> Iterator[object]:
    for key in ("anyOf", "allOf"):
        if isinstance(node.get(key), list):
            yield from node[key]
    yield node.get("items")
    if isinstance(node.get("properties"), Mapping):
        yield from node["properties"].values()


def _resolve(root: Mapping[str, Any], ref: str) -> object:
    """The value a local JSON pointer names (through objects, as the upstream reads it)."""
    target: object = root
    for part in ref[2:].split("/") if ref != "#" else ():
        key = part.replace("~1", "/").replace("~0", "~")
        target = target.get(key) if isinstance(target, Mapping) else None
    return target


def _plain(value: object) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _kind_of(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _show(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 40 else text[:37] + "..."
