"""The top-level parameters both dialects spell alike: ``stop``, the end user's id and
``service_tier``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import invalid_request
from .fields import Ignored, optional_str

__all__ = ["FLEX_TIER", "metadata_user_id", "served_tier", "service_tier", "stop_sequences"]

FLEX_TIER = "flex"


def service_tier(
    payload: Mapping[str, Any], stream: bool, can_flex: bool
) -> tuple[str | None, bool]:
    """(the tier the client asked for, whether the request takes the flex path).

    Only ``"flex"`` on a request that is not a stream, on a gateway that can batch
    (``can_flex``), changes anything: the request then waits for a Message Batch at half
    price. Every other value (``auto``, ``default``, ``scale``, ``priority``, flex on a
    stream) is served realtime as before and stays in ``ignored_params``; a value that is
    not a string is ignored the same way (as it always was), and echoes nothing.
    """
    value = payload.get("service_tier")
    asked = value if isinstance(value, str) else None
    return asked, asked == FLEX_TIER and not stream and can_flex


def served_tier(message: Mapping[str, Any]) -> str:
    """The OpenAI tier that served an Anthropic reply: ``flex`` for a Message Batch's
    (Anthropic's ``usage.service_tier: "batch"``), ``default`` for anything realtime."""
    usage = message.get("usage")
    batch = isinstance(usage, Mapping) and usage.get("service_tier") == "batch"
    return FLEX_TIER if batch else "default"


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
