"""``temperature``, ``top_p`` and ``top_k``: sent, clamped, or dropped and named as ignored.

Whether they may be sent at all depends on the API version, the model and whether thinking
is on, so this runs after thinking has been decided.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ...errors import invalid_request
from .fields import Ignored, is_int, optional_number
from .model_traits import ModelTraits

API_2026: Final = "2026-10-21"


def _top_k(payload: Mapping[str, Any]) -> int | None:
    """``top_k`` (vLLM-style extension); 0 or negative means "no restriction", as in vLLM."""
    value = payload.get("top_k")
    if value is None:
        return None
    if not is_int(value):
        raise invalid_request("top_k must be an integer.", param="top_k")
    return int(value) if value > 0 else None


def sampling(
    payload: Mapping[str, Any],
    body: dict[str, Any],
    *,
    thinking_on: bool,
    traits: ModelTraits,
    anthropic_version: str,
    ignored: Ignored,
) -> None:
    """``temperature``, ``top_p``, ``top_k`` — or the reason they are not sent.

    ``temperature`` is clamped into Anthropic's [0, 1] (OpenAI allows up to 2; it is clamped,
    not rescaled, so 0.7 means 0.7 on both). Models from the 4.5 generation reject
    ``temperature`` and ``top_p`` together, so with both only ``temperature`` is sent.
    ``top_k`` is not OpenAI's but is accepted as an extension. None of them is sent under
    ``anthropic-version: 2026-10-21`` or to a model that refuses them (Opus 4.7 on,
    generation 5 on: ``model_traits``), which reject them, or with thinking on (which forbids
    changing them).
    """
    temperature = optional_number(payload, "temperature", 0, 2)
    top_p = optional_number(payload, "top_p", 0, 1)
    top_k = _top_k(payload)
    given = [
        (key, value)
        for key, value in (("temperature", temperature), ("top_p", top_p), ("top_k", top_k))
        if value is not None
    ]
    if anthropic_version == API_2026 or thinking_on or not traits.sampling:
        for key, _ in given:
            ignored.add(key)
        return
    if temperature is not None:
        body["temperature"] = min(temperature, 1)
        if top_p is not None:
            ignored.add("top_p")
    elif top_p is not None:
        body["top_p"] = top_p
    if top_k is not None:
        body["top_k"] = top_k
