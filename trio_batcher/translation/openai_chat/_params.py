"""The plain top-level parameters: the rejected ones, ``stream_options``, the token cap,
``stop`` and the end user's id.

Each function validates one parameter (or a family of them) and returns its Anthropic
value, adding to ``Ignored`` what had to be dropped; those that cannot be honoured without
changing the reply (``n > 1``, logprobs, audio, the legacy ``functions``) are a 400 here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import invalid_request
from ._fields import Ignored, optional_bool, optional_int, optional_str, present


def reject_unsupported(payload: Mapping[str, Any]) -> None:
    """Parameters whose effect we cannot produce and whose absence would change the reply."""
    n = optional_int(payload, "n", minimum=1)
    if n is not None and n > 1:
        raise invalid_request("n > 1 is not supported: the upstream returns one choice.", param="n")
    if optional_bool(payload, "logprobs"):
        raise invalid_request("logprobs are not supported by the upstream.", param="logprobs")
    top_logprobs = optional_int(payload, "top_logprobs", minimum=0)
    if top_logprobs:
        raise invalid_request("logprobs are not supported by the upstream.", param="top_logprobs")
    if present(payload, "audio"):
        raise invalid_request("Audio output is not supported.", param="audio")
    modalities = payload.get("modalities")
    if modalities is not None:
        if not isinstance(modalities, list) or not all(isinstance(m, str) for m in modalities):
            raise invalid_request("modalities must be an array of strings.", param="modalities")
        if any(m != "text" for m in modalities):
            raise invalid_request("Only the text modality is supported.", param="modalities")
    for legacy in ("functions", "function_call"):
        if present(payload, legacy):
            raise invalid_request(
                f"The deprecated `{legacy}` parameter is not supported; use tools and tool_choice.",
                param=legacy,
            )


def stream_include_usage(payload: Mapping[str, Any], stream: bool, ignored: Ignored) -> bool:
    options = payload.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, Mapping):
        raise invalid_request("stream_options must be an object.", param="stream_options")
    include = options.get("include_usage")
    if include is not None and not isinstance(include, bool):
        raise invalid_request(
            "stream_options.include_usage must be a boolean.", param="stream_options.include_usage"
        )
    if not stream:
        ignored.add("stream_options")
        return False
    return bool(include)


def max_tokens_cap(payload: Mapping[str, Any], ignored: Ignored) -> int | None:
    """The client's cap: ``max_completion_tokens`` › ``max_tokens``; None if neither."""
    completion = optional_int(payload, "max_completion_tokens", minimum=1)
    legacy = optional_int(payload, "max_tokens", minimum=1)
    if completion is not None and legacy is not None:
        ignored.add("max_tokens")
    return completion if completion is not None else legacy


def stop_sequences(value: object, ignored: Ignored) -> list[str]:
    """``stop`` as ``stop_sequences``.

    Lenient on length: OpenAI caps the list at 4, Anthropic has no small cap, so any number
    of strings is accepted. Empty and whitespace-only strings (``"\\n"`` is a common one) are
    dropped, because Anthropic rejects them, and named as ``stop[i]`` in ``ignored_params``
    so the client can see that the reply will not stop there; duplicates are sent once.
    """
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise invalid_request("stop must be a string or an array of strings.", param="stop")
    out: list[str] = []
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise invalid_request(
                "stop must be a string or an array of strings.", param=f"stop[{i}]"
            )
        if not item.strip():
            ignored.add(f"stop[{i}]")
        elif item not in out:
            out.append(item)
    return out


def metadata_user_id(payload: Mapping[str, Any], ignored: Ignored) -> str | None:
    """``safety_identifier`` (OpenAI's successor to ``user``), else ``user``."""
    safety = optional_str(payload, "safety_identifier")
    user = optional_str(payload, "user")
    if safety and user:
        ignored.add("user")
    return safety or user or None
