"""The top-level parameters both dialects spell alike: ``stop`` and the end user's id."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import invalid_request
from .fields import Ignored, optional_str

__all__ = ["metadata_user_id", "stop_sequences"]


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
