"""``strict_schema`` as data: the schemas it refuses (with the ``param`` and the message), the
ones it reshapes as before, and the property that ties it to the upstream: whatever it lets
through, the simulator's grammar subset (``schema_subset``, as strict as the real API) takes.
Then the same through the Chat translation, for strict tools, ``response_format`` and, for
contrast, non-strict tools, whose schemas go as the client wrote them.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Final

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trio_batcher.errors import ProxyError
from trio_batcher.simulator.errors import SimulatorInvalidRequest
from trio_batcher.simulator.schema_subset import validate_schema_subset
from trio_batcher.simulator.validation import validate_messages_request
from trio_batcher.translation._common.strict_schema import strict_schema
from trio_batcher.translation.openai_chat import TranslationOptions, translate_request

ROOT: Final = "tools[0].function.parameters"
OPTS: Final = TranslationOptions(
    default_model="claude-x", default_max_tokens=100, anthropic_version="2023-06-01"
)
KINDS: Final = "string, number, integer, boolean, object, array, null"


def obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def closed(**properties: Any) -> dict[str, Any]:
    """``obj`` as the reshaping writes it."""
    return {**obj(**properties), "additionalProperties": False}


def nested_arrays(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "array", "items": schema}
    return obj(x=schema)


NODE = {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}

REFUSED = [
    # (id, schema, param after ROOT, message)
    (
        "property_null",
        obj(x=None),
        ".properties.x",
        "Invalid schema at properties.x: a schema must be an object or a boolean, not null.",
    ),
    (
        "property_number",
        obj(x=3),
        ".properties.x",
        "Invalid schema at properties.x: a schema must be an object or a boolean, not a number.",
    ),
    (
        "property_string",
        obj(x="string"),
        ".properties.x",
        "Invalid schema at properties.x: a schema must be an object or a boolean, not a string.",
    ),
    (
        "property_array",
        obj(x=[{"type": "string"}]),
        ".properties.x",
        "Invalid schema at properties.x: a schema must be an object or a boolean, not an array.",
    ),
    (
        "property_false",
        obj(x=False),
        ".properties.x",
        "Invalid schema at properties.x: false (no value is valid) cannot be compiled into a "
        "grammar.",
    ),
    (
        "type_empty_list",
        {"type": [], "properties": {}},
        ".type",
        "Invalid schema at type: type must not be an empty array.",
    ),
    (
        "type_unknown_name",
        obj(x={"type": "text"}),
        ".properties.x.type",
        f'Invalid schema at properties.x.type: type "text" is not one of {KINDS}.',
    ),
    (
        "type_not_a_name",
        obj(x={"type": {"a": 1}}),
        ".properties.x.type",
        f'Invalid schema at properties.x.type: type {{"a": 1}} is not one of {KINDS}.',
    ),
    (
        "type_list_member_unknown",
        obj(x={"type": ["string", 5]}),
        ".properties.x.type[1]",
        f"Invalid schema at properties.x.type[1]: type 5 is not one of {KINDS}.",
    ),
    (
        "properties_not_object",
        {"type": "object", "properties": [{"a": {}}]},
        ".properties",
        "Invalid schema at properties: properties must be an object of schemas.",
    ),
    (
        "required_not_list",
        {"type": "object", "properties": {"x": {"type": "string"}}, "required": "x"},
        ".required",
        "Invalid schema at required: required must be an array of property names.",
    ),
    (
        "required_name_not_string",
        {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x", 1]},
        ".required[1]",
        "Invalid schema at required[1]: a required property name must be a string, not a number.",
    ),
    (
        "items_not_schema",
        obj(x={"type": "array", "items": "string"}),
        ".properties.x.items",
        "Invalid schema at properties.x.items: a schema must be an object or a boolean, not a "
        "string.",
    ),
    (
        "enum_empty",
        obj(x={"type": "string", "enum": []}),
        ".properties.x.enum",
        "Invalid schema at properties.x.enum: enum must be a non-empty array.",
    ),
    (
        "enum_not_list",
        obj(x={"type": "string", "enum": "a"}),
        ".properties.x.enum",
        "Invalid schema at properties.x.enum: enum must be a non-empty array.",
    ),
    (
        "any_of_empty",
        obj(x={"anyOf": []}),
        ".properties.x.anyOf",
        "Invalid schema at properties.x.anyOf: anyOf must be a non-empty array of schemas.",
    ),
    (
        "one_of_not_list",
        obj(x={"oneOf": {"type": "string"}}),
        ".properties.x.oneOf",
        "Invalid schema at properties.x.oneOf: oneOf must be a non-empty array of schemas.",
    ),
    (
        "all_of_branch_not_schema",
        obj(x={"allOf": [{"type": "string"}, 7]}),
        ".properties.x.allOf[1]",
        "Invalid schema at properties.x.allOf[1]: a schema must be an object or a boolean, not "
        "a number.",
    ),
    (
        "defs_not_object",
        {**obj(), "$defs": [{"type": "string"}]},
        ".$defs",
        "Invalid schema at $defs: $defs must be an object of schemas.",
    ),
    (
        "definition_not_schema",
        {**obj(), "definitions": {"D": "string"}},
        ".definitions.D",
        "Invalid schema at definitions.D: a schema must be an object or a boolean, not a string.",
    ),
    (
        "ref_not_string",
        obj(x={"$ref": ["#/$defs/D"]}),
        ".properties.x.$ref",
        "Invalid schema at properties.x.$ref: $ref must be a string, not an array.",
    ),
    (
        "ref_not_local",
        obj(x={"$ref": "https://example.com/s.json"}),
        ".properties.x.$ref",
        "Invalid schema at properties.x.$ref: $ref 'https://example.com/s.json' is not a local "
        "reference (#/$defs/...).",
    ),
    (
        "ref_unresolved",
        {**obj(x={"$ref": "#/$defs/Missing"}), "$defs": {"D": {"type": "string"}}},
        ".properties.x.$ref",
        "Invalid schema at properties.x.$ref: $ref '#/$defs/Missing' does not resolve to a schema.",
    ),
    (
        "ref_recursive",
        {**obj(x={"$ref": "#/$defs/Node"}), "$defs": {"Node": NODE}},
        ".$defs.Node.properties.next.$ref",
        "Invalid schema at $defs.Node.properties.next.$ref: $ref '#/$defs/Node' makes the "
        "schema recursive.",
    ),
    (
        "ref_to_the_root",
        obj(x={"$ref": "#"}),
        ".properties.x.$ref",
        "Invalid schema at properties.x.$ref: $ref '#' makes the schema recursive.",
    ),
    (
        "type_list_branch_reports_the_node",  # the anyOf is the gateway's, not the client's
        obj(x={"type": ["object", "null"], "properties": {"a": None}}),
        ".properties.x.properties.a",
        "Invalid schema at properties.x.properties.a: a schema must be an object or a boolean, "
        "not null.",
    ),
    (
        "nested_too_deep",
        nested_arrays(64),
        ".properties.x" + ".items" * 64,
        "Invalid schema at properties.x" + ".items" * 64 + ": schemas nested more than 64 deep "
        "are not supported.",
    ),
]


@pytest.mark.parametrize(
    ("schema", "suffix", "message"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED]
)
def test_a_schema_the_grammar_cannot_compile_is_a_400_naming_the_node(
    schema: dict[str, Any], suffix: str, message: str
) -> None:
    with pytest.raises(ProxyError) as caught:
        strict_schema(schema, ROOT)
    error = caught.value
    assert (error.status, error.type, error.param) == (400, "invalid_request_error", ROOT + suffix)
    assert error.message == message


def test_the_message_names_the_place_in_the_schema_and_param_the_place_in_the_request() -> None:
    """So a caller that renames ``param`` (the Responses door's ``text.format``) need not
    rewrite the message; a problem at the root itself has no place to name."""
    for root in (ROOT, "response_format.json_schema.schema"):
        with pytest.raises(ProxyError) as caught:
            strict_schema(obj(x={"type": "text"}), root)
        assert caught.value.param == f"{root}.properties.x.type"
        assert caught.value.message.startswith("Invalid schema at properties.x.type: ")
    with pytest.raises(ProxyError) as caught:
        strict_schema(None, ROOT)
    assert caught.value.param == ROOT
    assert caught.value.message == (
        "Invalid schema: a schema must be an object or a boolean, not null."
    )


KEPT = [
    # (id, schema, what is sent): the reshaping of valid schemas, as it always was
    (
        "object_closed",
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
        {**closed(a={"type": "string"}), "required": ["a"]},
    ),
    ("object_gets_properties", {"type": "object"}, closed()),
    (
        "type_list_becomes_any_of",
        obj(x={"type": ["string", "null"], "maxLength": 3}),
        closed(
            x={"anyOf": [{"type": "string", "description": '{"maxLength": 3}'}, {"type": "null"}]}
        ),
    ),
    (
        "one_of_becomes_any_of",
        obj(x={"oneOf": [{"type": "integer"}, {"type": "boolean"}]}),
        closed(x={"anyOf": [{"type": "integer"}, {"type": "boolean"}]}),
    ),
    (
        "unsupported_keywords_described",
        obj(n={"type": "integer", "minimum": 0, "description": "count"}),
        closed(n={"type": "integer", "description": 'count\n\n{"minimum": 0}'}),
    ),
    (
        "refs_and_defs",
        {**obj(x={"$ref": "#/$defs/D"}), "$defs": {"D": {"type": "string", "format": "date"}}},
        {
            "$defs": {"D": {"type": "string", "format": "date"}},
            **closed(x={"$ref": "#/$defs/D"}),
        },
    ),
    (
        "shared_definition_is_no_recursion",
        {
            **obj(a={"$ref": "#/definitions/D"}, b={"$ref": "#/definitions/D"}),
            "definitions": {"D": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
        },
        {
            "definitions": {"D": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
            **closed(a={"$ref": "#/definitions/D"}, b={"$ref": "#/definitions/D"}),
        },
    ),
    (
        "enum_and_const",
        obj(e={"type": "string", "enum": ["a", "b"]}, c={"const": 3}),
        closed(e={"enum": ["a", "b"]}, c={"const": 3}),
    ),
    (
        "enum_of_objects_described",
        obj(e={"enum": [{"a": 1}]}),
        closed(e={"description": '{"enum": [{"a": 1}]}'}),
    ),
    (
        "any_value_as_written",
        obj(x={}, y={"description": "d"}),
        closed(x={}, y={"description": "d"}),
    ),
    (
        "typeless_node_keeps_its_description",
        obj(x={"maxLength": 3}),
        closed(x={"description": '{"maxLength": 3}'}),
    ),
    (
        "array_tuple_items_described",
        obj(t={"type": "array", "items": [{"type": "string"}]}),
        closed(t={"type": "array", "description": '{"items": [{"type": "string"}]}'}),
    ),
    # Shapes that used to be sent in a form the upstream refuses, now sent in one it takes:
    ("true_is_any_value", obj(x=True), closed(x={})),
    (
        "null_keyword_is_absent",
        obj(x={"type": "string", "enum": None, "description": None}),
        closed(x={"type": "string"}),
    ),
    (
        "literal_keeps_no_keyword_that_needs_a_type",
        obj(d={"type": "string", "enum": ["2024-01-01"], "format": "date"}),
        closed(d={"enum": ["2024-01-01"], "description": '{"format": "date"}'}),
    ),
    (
        "annotations_dropped_from_any_value",
        obj(x={"$comment": "c", "description": "d"}),
        closed(x={"description": "d"}),
    ),
    (
        "description_not_a_string_described",
        obj(x={"title": 5}),
        closed(x={"description": '{"title": 5}'}),
    ),
]


@pytest.mark.parametrize(("schema", "sent"), [r[1:] for r in KEPT], ids=[r[0] for r in KEPT])
def test_a_valid_schema_is_reshaped_into_one_the_upstream_takes(
    schema: dict[str, Any], sent: dict[str, Any]
) -> None:
    before = copy.deepcopy(schema)
    out = strict_schema(schema, ROOT)
    assert out == sent
    assert schema == before  # never modified
    validate_schema_subset(out, "output_config.format.schema")


# -- the property: refused here, or taken upstream ------------------------------------------

_KEYS: Final = (
    "type", "properties", "items", "required", "enum", "const", "anyOf", "oneOf", "allOf",
    "$ref", "$defs", "definitions", "additionalProperties", "format", "minItems", "minimum",
    "description", "title", "$comment", "a",
)  # fmt: skip
_VALUES: Final = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 2),
    st.sampled_from(
        ["", "x", "#", "#/$defs/D", "#/properties/a", "date", "string", "object", "array", "null"]
    ),
)
_JUNK: Final = st.recursive(
    _VALUES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(_KEYS), inner),
    max_leaves=8,
)
_SCHEMAS: Final = st.recursive(
    _JUNK,
    lambda inner: st.dictionaries(
        st.sampled_from(_KEYS),
        inner | st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from(["a", "D"]), inner),
        max_size=4,
    ),
    max_leaves=12,
)


@settings(
    max_examples=400, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(prop=_SCHEMAS, defs=st.dictionaries(st.sampled_from(["D", "E"]), _SCHEMAS, max_size=2))
def test_whatever_is_not_refused_the_grammar_subset_takes(prop: object, defs: object) -> None:
    schema = {"type": "object", "properties": {"a": prop}, "$defs": defs}
    before = json.dumps(schema)
    try:
        out = strict_schema(schema, ROOT)
    except ProxyError as exc:
        assert (exc.status, exc.type) == (400, "invalid_request_error")
        assert exc.param is not None and exc.param.startswith(ROOT), exc.param
        assert exc.message.startswith("Invalid schema"), exc.message
    else:
        try:
            validate_schema_subset(out, "output_config.format.schema")
        except SimulatorInvalidRequest as exc:
            raise AssertionError(f"{schema} was sent as {out}: {exc}") from None
    assert json.dumps(schema) == before


# -- through the Chat translation ---------------------------------------------------------


def _request(**fields: Any) -> dict[str, Any]:
    return {"model": "claude-x", "messages": [{"role": "user", "content": "hi"}], **fields}


def _tool(parameters: object, name: str = "f", **function: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters, **function}}


def _json_schema(schema: object) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "a", "strict": True, "schema": schema}}


TRANSLATION_REFUSED = [
    # (id, payload, param)
    (
        "strict_tool_property_null",
        _request(tools=[_tool(obj(a=None), strict=True)]),
        "tools[0].function.parameters.properties.a",
    ),
    (
        "second_strict_tool_type_empty",
        _request(tools=[_tool(obj(), strict=True), _tool(obj(b={"type": []}), "g", strict=True)]),
        "tools[1].function.parameters.properties.b.type",
    ),
    (
        "json_schema_type_empty",
        _request(response_format=_json_schema({"type": [], "properties": {}})),
        "response_format.json_schema.schema.type",
    ),
    (
        "json_schema_items_null_in_a_definition",
        _request(
            response_format=_json_schema(
                {
                    **obj(x={"$ref": "#/$defs/L"}),
                    "$defs": {"L": {"type": "array", "items": 0}},
                }
            )
        ),
        "response_format.json_schema.schema.$defs.L.items",
    ),
    (
        "strict_tool_top_level_ref",
        _request(tools=[_tool({"$ref": "#/$defs/A", "$defs": {"A": obj()}}, strict=True)]),
        "tools[0].function.parameters.$ref",
    ),
    (
        "strict_tool_top_level_const",
        _request(tools=[_tool({"type": "object", "const": None}, strict=True)]),
        "tools[0].function.parameters.const",
    ),
]


@pytest.mark.parametrize(
    ("payload", "param"),
    [r[1:] for r in TRANSLATION_REFUSED],
    ids=[r[0] for r in TRANSLATION_REFUSED],
)
def test_the_translation_refuses_an_uncompilable_schema_naming_it(
    payload: dict[str, Any], param: str
) -> None:
    with pytest.raises(ProxyError) as caught:
        translate_request(payload, OPTS)
    error = caught.value
    assert (error.status, error.type, error.param) == (400, "invalid_request_error", param)


@pytest.mark.parametrize(
    "parameters",
    [obj(a=None), {"type": "object", "properties": {"a": {"type": []}}}, obj(a={"enum": []})],
    ids=["property_null", "type_empty", "enum_empty"],
)
def test_a_non_strict_tool_schema_goes_as_written(parameters: dict[str, Any]) -> None:
    """No grammar, no subset: the upstream takes any schema a non-strict tool carries (the
    simulator checks only its top level), so the gateway does not judge it either."""
    body = translate_request(_request(tools=[_tool(parameters)]), OPTS).body
    assert body["tools"] == [{"name": "f", "input_schema": parameters}]
    validate_messages_request(body, api_version=OPTS.anthropic_version)
