"""A requested output format → Anthropic structured output (``output_config.format``).

Chat asks with ``response_format`` (the schema nested under ``json_schema``), Responses with
``text.format`` (the schema's fields beside ``type``); each hands ``structured_output`` the
format's type, the object that holds the schema and their parameter paths. A JSON schema
becomes a grammar (``strict_schema``); ``json_object``, and a schema that says no more than
"an object", become an instruction in the system prompt instead, since Anthropic has no
schema-less JSON mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ...errors import invalid_request
from .strict_schema import strict_schema

__all__ = ["JSON_OBJECT_INSTRUCTION", "structured_output"]

JSON_OBJECT_INSTRUCTION: Final = (
    "Respond only with a single valid JSON object. Do not wrap it in Markdown code fences "
    "and do not write anything before or after it."
)


def structured_output(
    kind: object, spec: object, body: dict[str, Any], *, type_param: str, spec_param: str
) -> list[dict[str, Any]]:
    """Structured output for a format of type ``kind`` whose schema (``name``, ``schema``)
    is in ``spec``, for ``json_schema``. Returns system blocks to append (for
    ``json_object``); a grammar goes into ``body``.

    Args:
      type_param: where the client wrote ``kind`` (``response_format.type``).
      spec_param: where the client wrote ``spec`` (``response_format.json_schema``).

    Raises:
      ProxyError: 400 naming the field under those paths.
    """
    if kind == "text":
        return []
    if kind == "json_object":
        # Best effort: Anthropic has no schema-less JSON mode; an instruction gets close.
        return [{"type": "text", "text": JSON_OBJECT_INSTRUCTION}]
    if kind == "json_schema":
        if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str):
            raise invalid_request(f"{spec_param} needs a name.", param=f"{spec_param}.name")
        schema = spec.get("schema")
        if schema is not None and not isinstance(schema, Mapping):
            raise invalid_request(
                f"{spec_param}.schema must be an object.", param=f"{spec_param}.schema"
            )
        if schema is None or _any_object(schema):
            # "Some JSON object" is no grammar (the subset would allow only {}): ask for one.
            return [{"type": "text", "text": JSON_OBJECT_INSTRUCTION}]
        # Always compiled into a grammar, strict or not: only a subset of JSON Schema.
        grammar = strict_schema(schema, f"{spec_param}.schema")
        body["output_config"] = {"format": {"type": "json_schema", "schema": grammar}}
        return []
    raise invalid_request(
        f'{type_param} must be "text", "json_object" or "json_schema".', param=type_param
    )


def _any_object(schema: Mapping[str, Any]) -> bool:
    """A schema that says only "an object" (no properties, no branches)."""
    shaping = ("properties", "anyOf", "oneOf", "allOf", "$ref", "enum", "const", "items")
    return schema.get("type", "object") == "object" and not any(k in schema for k in shaping)
