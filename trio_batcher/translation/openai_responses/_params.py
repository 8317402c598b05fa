"""The Responses parameters that have a Chat twin, translated through it; and the rest.

``text.format`` and ``reasoning.effort`` mean what Chat's ``response_format`` and
``reasoning_effort`` mean, so they are rewritten in Chat's shape and handed to the same
functions (``_structured_output.response_format``, ``_reasoning.thinking_for``): the two
dialects cannot drift apart. Errors and ignored names those report are renamed to the
Responses field (``text.format.schema``, ``reasoning.effort``).

The rest is validated here so that what is echoed in the response object is always valid
for the ``openai`` SDK's strict types: ``metadata`` (≤ 16 string pairs), ``include``,
``truncation``, ``reasoning.summary``, and the fields refused outright.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ...errors import ProxyError, invalid_request
from ..openai_chat import _structured_output as chat_structured
from ..openai_chat._fields import Ignored, optional_bool, optional_int, present

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
    if optional_bool(payload, "background"):
        raise invalid_request(
            "background responses are not supported; send the request without background.",
            param="background",
        )
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

    ``text.format`` becomes Chat's ``response_format`` (the flat json_schema fields nested
    under ``json_schema``) and goes through the Chat path; ``text.verbosity`` has no
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
    chat_format: dict[str, Any] = {"type": fmt.get("type")}
    if fmt.get("type") == "json_schema":
        if not isinstance(fmt.get("name"), str):
            raise invalid_request("text.format needs a name.", param="text.format.name")
        chat_format["json_schema"] = {
            k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt
        }
        strict = fmt.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise invalid_request(
                "text.format.strict must be a boolean.", param="text.format.strict"
            )
    try:
        return chat_structured.response_format({"response_format": chat_format}, body), echo
    except ProxyError as exc:
        exc.param = (
            (exc.param or "")
            .replace("response_format.json_schema", "text.format")
            .replace("response_format", "text.format")
        )
        exc.message = exc.message.replace("response_format.json_schema", "text.format").replace(
            "response_format", "text.format"
        )
        raise
