"""The plain top-level parameters only Chat has: the rejected ones, ``stream_options`` and
the token cap (``stop`` and the end user's id are ``_common.params``).

Each function validates one parameter (or a family of them) and returns its Anthropic
value, adding to ``Ignored`` what had to be dropped; those that cannot be honoured without
changing the reply (``n > 1``, logprobs, audio, the legacy ``functions``) are a 400 here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import invalid_request
from .._common.fields import Ignored, optional_bool, optional_int, present


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
