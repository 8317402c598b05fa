"""``response_format`` → Anthropic structured output (``output_config.format``).

A JSON schema becomes a grammar (``strict_schema``); ``json_object``, and a schema that says
no more than "an object", become an instruction in the system prompt instead, since
Anthropic has no schema-less JSON mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ...errors import invalid_request
from .strict_schema import strict_schema

JSON_OBJECT_INSTRUCTION: Final = (
    "Respond only with a single valid JSON object. Do not wrap it in Markdown code fences "
    "and do not write anything before or after it."
)


def response_format(payload: Mapping[str, Any], body: dict[str, Any]) -> list[dict[str, Any]]:
    """Structured output. Returns system blocks to append (for ``json_object``)."""
    fmt = payload.get("response_format")
    if fmt is None:
        return []
    kind = fmt.get("type") if isinstance(fmt, Mapping) else None
    if kind == "text":
        return []
    if kind == "json_object":
        # Best effort: Anthropic has no schema-less JSON mode; an instruction gets close.
        return [{"type": "text", "text": JSON_OBJECT_INSTRUCTION}]
    if kind == "json_schema":
        assert isinstance(fmt, Mapping)
        spec = fmt.get("json_schema")
        if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str):
            raise invalid_request(
                "response_format.json_schema needs a name.",
                param="response_format.json_schema.name",
            )
        schema = spec.get("schema")
        if schema is not None and not isinstance(schema, Mapping):
            raise invalid_request(
                "response_format.json_schema.schema must be an object.",
                param="response_format.json_schema.schema",
            )
        if schema is None or _any_object(schema):
            # "Some JSON object" is no grammar (the subset would allow only {}): ask for one.
            return [{"type": "text", "text": JSON_OBJECT_INSTRUCTION}]
        # Always compiled into a grammar, strict or not: only a subset of JSON Schema.
        grammar = strict_schema(schema, "response_format.json_schema.schema")
        body["output_config"] = {"format": {"type": "json_schema", "schema": grammar}}
        return []
    raise invalid_request(
        'response_format.type must be "text", "json_object" or "json_schema".',
        param="response_format.type",
    )


def _any_object(schema: Mapping[str, Any]) -> bool:
    """A schema that says only "an object" (no properties, no branches)."""
    shaping = ("properties", "anyOf", "oneOf", "allOf", "$ref", "enum", "const", "items")
    return schema.get("type", "object") == "object" and not any(k in schema for k in shaping)
