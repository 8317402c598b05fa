"""The Responses parameters that have a Chat twin, and the rest.

``text.format`` and ``reasoning.effort`` mean what Chat's ``response_format`` and
``reasoning_effort`` mean, so both dialects hand them to the same functions
(``_common.structured_output``, ``_common.reasoning``) with their own paths: the two
dialects cannot drift apart, and errors name the Responses field (``text.format.schema``,
``reasoning.effort``).

The rest is validated here so that what is echoed in the response object is always valid
for the ``openai`` SDK's strict types: ``metadata`` (≤ 16 string pairs), ``include``,
``truncation``, ``reasoning.summary``, and the fields refused outright.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ...errors import invalid_request
from .._common.fields import Ignored, optional_int, present
from .._common.structured_output import structured_output

__all__ = [
    "ENCRYPTED_REASONING",
    "include_list",
    "metadata",
    "reasoning",
    "reject_unsupported",
    "text_format",
    "truncation",
]

ENCRYPTED_REASONING: Final = "reasoning.encrypted_content"
_SUMMARIES: Final = ("auto", "concise", "detailed")
_VERBOSITY: Final = ("low", "medium", "high")
_MAX_METADATA: Final = 16


def reject_unsupported(payload: Mapping[str, Any]) -> None:
    """Fields whose effect this gateway cannot produce and whose absence would change the reply."""
    if present(payload, "conversation"):
        raise invalid_request(
            "Conversations are not supported by this gateway; chain responses with "
            "previous_response_id, or send the whole history as input.",
            param="conversation",
        )
    if present(payload, "prompt"):
        raise invalid_request(
            "Prompt templates (prompt) are not supported; send instructions and input.",
            param="prompt",
        )
    if optional_int(payload, "top_logprobs", minimum=0):
        raise invalid_request("logprobs are not supported by the upstream.", param="top_logprobs")


def include_list(payload: Mapping[str, Any], ignored: Ignored) -> tuple[str, ...]:
    """``include``: ``reasoning.encrypted_content`` is honoured; logprobs are a 400; the
    rest name outputs of built-in tools that never run here, and are ignored."""
    value = payload.get("include")
    if value is None:
        return ()
    if not isinstance(value, list):
        raise invalid_request("include must be an array of strings.", param="include")
    kept: list[str] = []
    for i, entry in enumerate(value):
        if not isinstance(entry, str):
            raise invalid_request("include must be an array of strings.", param=f"include[{i}]")
        if entry == "message.output_text.logprobs":
            raise invalid_request(
                "logprobs are not supported by the upstream.", param=f"include[{i}]"
            )
        if entry == ENCRYPTED_REASONING:
            kept.append(entry)
        else:
            ignored.add(f"include[{i}]")
    return tuple(kept)


def metadata(payload: Mapping[str, Any]) -> dict[str, str]:
    """``metadata``: kept with the response (it is echoed and stored, never sent upstream)."""
    value = payload.get("metadata")
    if value is None:
        return {}
    if (
        not isinstance(value, Mapping)
        or len(value) > _MAX_METADATA
        or not all(
            isinstance(k, str) and isinstance(v, str) and len(k) <= 64 and len(v) <= 512
            for k, v in value.items()
        )
    ):
        raise invalid_request(
            "metadata must be an object of at most 16 string values (keys ≤ 64 characters, "
            "values ≤ 512).",
            param="metadata",
        )
    return dict(value)


def truncation(payload: Mapping[str, Any], ignored: Ignored) -> str:
    """``truncation``: ``disabled`` is what happens anyway; ``auto`` (drop the oldest items
    when the context overflows) is not done here, so it is named as ignored -- an
    overflowing request fails as it would with ``disabled``."""
    value = payload.get("truncation")
    if value is None:
        return "disabled"
    if value not in ("auto", "disabled"):
        raise invalid_request('truncation must be "auto" or "disabled".', param="truncation")
    if value == "auto":
        ignored.add("truncation")
    return str(value)


def reasoning(payload: Mapping[str, Any], ignored: Ignored) -> tuple[object, dict[str, Any]]:
    """(``reasoning.effort`` for ``thinking_for``, the ``reasoning`` object to echo)."""
    value = payload.get("reasoning")
    if value is None:
        return None, {"effort": None, "summary": None}
    if not isinstance(value, Mapping):
        raise invalid_request("reasoning must be an object.", param="reasoning")
    summary = value.get("summary")
    if summary is None:
        summary = value.get("generate_summary")  # its deprecated name
    if summary is not None and summary not in _SUMMARIES:
        raise invalid_request(
            f"reasoning.summary must be one of {', '.join(_SUMMARIES)}.", param="reasoning.summary"
        )
    for key in value:
        if key not in ("effort", "summary", "generate_summary"):
            ignored.add(f"reasoning.{key}")
    effort = value.get("effort")
    return effort, {"effort": effort, "summary": summary}


def text_format(
    payload: Mapping[str, Any], body: dict[str, Any], ignored: Ignored
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(system blocks to append, the ``text`` object to echo) for ``text``.

    ``text.format`` is structured output, as Chat's ``response_format`` (its json_schema
    fields are flat here, nested under ``json_schema`` there); ``text.verbosity`` has no
    Anthropic equivalent and is ignored.
    """
    value = payload.get("text")
    if value is None:
        return [], {"format": {"type": "text"}, "verbosity": "medium"}
    if not isinstance(value, Mapping):
        raise invalid_request("text must be an object.", param="text")
    verbosity = value.get("verbosity")
    if verbosity is not None:
        if verbosity not in _VERBOSITY:
            raise invalid_request(
                f"text.verbosity must be one of {', '.join(_VERBOSITY)}.", param="text.verbosity"
            )
        ignored.add("text.verbosity")
    fmt = value.get("format")
    echo = {"format": {"type": "text"} if fmt is None else fmt, "verbosity": verbosity or "medium"}
    if fmt is None:
        return [], echo
    if not isinstance(fmt, Mapping):
        raise invalid_request("text.format must be an object.", param="text.format")
    if fmt.get("type") == "json_schema":
        if not isinstance(fmt.get("name"), str):
            raise invalid_request("text.format needs a name.", param="text.format.name")
        strict = fmt.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise invalid_request(
                "text.format.strict must be a boolean.", param="text.format.strict"
            )
    blocks = structured_output(
        fmt.get("type"), fmt, body, type_param="text.format.type", spec_param="text.format"
    )
    return blocks, echo
